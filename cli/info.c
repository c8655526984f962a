/* nsbox info: what this host supports and what nsbox will do about it, from
 * nsbox_host_info(). */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static void print_lines(const char *text, const char *indent)
{
	for (const char *l = text, *nl; *l; l = nl + 1) {
		nl = strchrnul(l, '\n');
		printf("%s%.*s\n", indent, (int)(nl - l), l);
		if (!*nl)
			break;
	}
}

int cmd_info(int argc, char **argv)
{
	struct nsbox_host_info h = { .struct_size = sizeof(h) };
	const struct {
		const char *name;
		const struct nsbox_host_cgroup_ctrl *c;
		const char *fallback;
	} ctrls[] = {
		{ "memory", &h.memory, "RLIMIT_AS fallback with a warning; Cgroups=require refuses" },
		{ "pids", &h.pids, "RLIMIT_NPROC fallback with a warning; Cgroups=require refuses" },
		{ "cpu", &h.cpu, "not enforced, with a warning; Cgroups=require refuses" },
	};
	nsbox_error_t *e = NULL;

	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: nsbox info\n  what this host supports and what nsbox will do about it; see nsbox(1)\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "nsbox info: unexpected argument '%s' (see nsbox info --help)\n", argv[1]);
		return NSBOX_EXIT_USAGE;
	}
	if (nsbox_host_info(&h, &e) < 0) {
		fprintf(stderr, "nsbox info: %s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		return NSBOX_EXIT_SETUP;
	}
	printf("nsbox %s host report (uid %u)\n\n", nsbox_version(), (unsigned)h.euid);
	printf("user namespaces: max_user_namespaces=%ld", h.max_user_namespaces);
	if (h.unprivileged_userns_clone >= 0)
		printf(", unprivileged_userns_clone=%ld", h.unprivileged_userns_clone);
	if (h.apparmor_restrict_unprivileged_userns >= 0)
		printf(", apparmor_restrict_unprivileged_userns=%ld", h.apparmor_restrict_unprivileged_userns);
	printf("\n  -> %s\n", h.userns ? "usable: every sandbox gets its own user namespace"
				       : "NOT usable: nsbox cannot start sandboxes here (raise the sysctls above)");

	printf("cgroups: mode %s", h.cgroup_mode);
	if (h.cgroup_v2_root[0])
		printf(", v2 at %s, own cgroup %s%s", h.cgroup_v2_root, h.cgroup_v2_self,
		       h.cgroup_v2_kill ? ", cgroup.kill" : "");
	printf("\n");
	if (h.cgroup_v2_parent[0])
		printf("  sandbox cgroups (v2) go under %s\n", h.cgroup_v2_parent);
	for (size_t k = 0; k < ARRAY_SIZE(ctrls); k++) {
		const struct nsbox_host_cgroup_ctrl *c = ctrls[k].c;

		if (c->enforced)
			printf("  %-6s: enforced through cgroup %s under %s\n", ctrls[k].name, c->v1 ? "v1" : "v2",
			       c->dir);
		else
			printf("  %-6s: NOT available (%s) -> %s\n", ctrls[k].name, c->why, ctrls[k].fallback);
	}
	if (strcmp(h.cgroup_migration, "fast") == 0) {
		printf("cgroup migration: fast (v1 controllers, a cgroup mount has favordynmods)\n");
	} else if (strcmp(h.cgroup_migration, "slow") == 0) {
		printf("cgroup migration: slow (v1 controllers, no cgroup mount has favordynmods)\n"
		       "  -> each start moves pid 1 into the v1 cgroups, which can wait for an RCU grace period\n"
		       "     (milliseconds, unless another move happened within the last one)\n");
		print_lines(h.cgroup_migration_hint, "  ");
	} else {
		printf("cgroup migration: none -> %s\n",
		       strcmp(h.cgroup_mode, "v2") == 0
			       ? "sandboxes are cloned straight into their cgroup (CLONE_INTO_CGROUP)"
			       : "no v1 cgroup is used, nothing is moved");
	}
	if (h.landlock_abi > 0)
		printf("landlock: ABI %d -> second layer: writes only to /tmp, /dev/shm, /workspace and rw binds\n",
		       h.landlock_abi);
	else
		printf("landlock: not supported -> skipped (Landlock=require refuses)\n");
	printf("abstract unix sockets (--share-net): %s\n",
	       h.landlock_abi >= 6 ? "scoped to the sandbox by Landlock (ABI 6)"
				   : "no Landlock scope (ABI 6) -> a second seccomp filter refuses AF_UNIX socket() "
				     "and non-stream socketpair()");
	printf("seccomp: actions %s\n", h.seccomp_actions[0] ? h.seccomp_actions : "unknown");
	printf("  -> default-deny allowlist (ENOSYS for unknown syscalls, EPERM for dangerous ones, "
	       "kill for i386/x32)\n");
	if (h.runner[0])
		printf("runner: %s\n", h.runner);
	else
		printf("runner: NOT found (%s) -> nsbox python and sessions can't start; nsbox run can\n",
		       h.runner_error);
	return h.userns ? 0 : NSBOX_EXIT_SETUP;
}
