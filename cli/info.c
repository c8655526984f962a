/* nsbox info: what this host supports and what nsbox will do about it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cgroup.h"
#include "commands.h"
#include "landlock.h"
#include "util.h"

static void print_hint(const struct cgroup_migration_info *mi, const char *indent)
{
	char hint[512];

	cgroup_migration_hint(mi, hint, sizeof(hint));
	for (char *l = hint, *nl; *l; l = nl + 1) {
		nl = strchrnul(l, '\n');
		printf("%s%.*s\n", indent, (int)(nl - l), l);
		if (!*nl)
			break;
	}
}

static long read_long(const char *path)
{
	char buf[64];

	if (read_file(path, buf, sizeof(buf)) < 0)
		return -1;
	return strtol(buf, NULL, 10);
}

int cmd_info(int argc, char **argv)
{
	struct cgroup_probe pr;
	struct cgroup_migration_info mi;
	long maxns = read_long("/proc/sys/user/max_user_namespaces");
	long unpriv = read_long("/proc/sys/kernel/unprivileged_userns_clone");
	long aa = read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
	int abi = landlock_abi();
	char actions[256] = "";

	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "usage: nsbox info\n");
		return NSBOX_EXIT_USAGE;
	}
	printf("nsbox host report (uid %u)\n\n", (unsigned)geteuid());
	printf("user namespaces: max_user_namespaces=%ld", maxns);
	if (unpriv >= 0)
		printf(", unprivileged_userns_clone=%ld", unpriv);
	if (aa >= 0)
		printf(", apparmor_restrict_unprivileged_userns=%ld", aa);
	bool userns_ok = maxns > 0 && unpriv != 0 && (aa <= 0 || geteuid() == 0);
	printf("\n  -> %s\n", userns_ok ? "usable: every sandbox gets its own user namespace"
				      : "NOT usable: nsbox cannot start sandboxes here (raise the sysctls above)");

	cgroup_probe_host(&pr);
	printf("cgroups: mode %s", cgroup_mode_name(pr.mode));
	if (pr.v2_root[0])
		printf(", v2 at %s, own cgroup %s%s", pr.v2_root, pr.v2_self, pr.v2_kill ? ", cgroup.kill" : "");
	printf("\n");
	if (pr.v2_writable)
		printf("  sandbox cgroups (v2) go under %s\n", pr.v2_parent_used);
	for (int c = 0; c < CTRL__N; c++) {
		if (pr.ctrl_ok[c])
			printf("  %-6s: enforced through cgroup %s under %s\n", cgroup_ctrl_name(c),
			       pr.ctrl_v1[c] ? "v1" : "v2", pr.ctrl_dir[c]);
		else
			printf("  %-6s: NOT available (%s) -> %s\n", cgroup_ctrl_name(c), pr.why[c],
			       c == CTRL_MEMORY ? "RLIMIT_AS fallback with a warning; Cgroups=require refuses"
			       : c == CTRL_PIDS ? "RLIMIT_NPROC fallback with a warning; Cgroups=require refuses"
						: "not enforced, with a warning; Cgroups=require refuses");
	}
	cgroup_migration_probe(&pr, &mi);
	switch (mi.state) {
	case CG_MIGRATE_NONE:
		printf("cgroup migration: none -> %s\n",
		       pr.mode == CG_V2 ? "sandboxes are cloned straight into their cgroup (CLONE_INTO_CGROUP)"
					: "no v1 cgroup is used, nothing is moved");
		break;
	case CG_MIGRATE_FAST:
		printf("cgroup migration: fast (v1 controllers, a cgroup mount has favordynmods)\n");
		break;
	case CG_MIGRATE_SLOW:
		printf("cgroup migration: slow (v1 controllers, no cgroup mount has favordynmods)\n"
		       "  -> each start moves pid 1 into the v1 cgroups, which can wait for an RCU grace period\n"
		       "     (milliseconds, unless another move happened within the last one)\n");
		print_hint(&mi, "  ");
		break;
	}
	printf("landlock: %s", abi > 0 ? "ABI " : "not supported");
	if (abi > 0)
		printf("%d -> second layer: writes only to /tmp, /dev/shm, /workspace and rw binds\n", abi);
	else
		printf(" -> skipped (Landlock=require refuses)\n");
	if (read_file("/proc/sys/kernel/seccomp/actions_avail", actions, sizeof(actions)) < 0)
		snprintf(actions, sizeof(actions), "unknown (%s)\n", strerror(errno));
	printf("seccomp: actions %s", actions);
	printf("  -> default-deny allowlist (ENOSYS for unknown syscalls, EPERM for dangerous ones, "
	       "kill for i386/x32)\n");
	return userns_ok ? 0 : NSBOX_EXIT_SETUP;
}
