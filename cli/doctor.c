/* nsbox doctor: is this host fit to run nsbox?  Checks the host
 * (nsbox_host_info), then runs escape probes inside a real sandbox
 * (nsbox_selftest) and says plainly what to fix. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"

static void print_probe(void *ud, const char *probe, bool escaped, const char *detail)
{
	(void)ud;
	printf("%s %-22s %s\n", escaped ? "FAIL" : "ok  ", probe, detail);
}

int cmd_doctor(int argc, char **argv)
{
	struct nsbox_host_info h = { .struct_size = sizeof(h) };
	const struct {
		const char *name;
		const struct nsbox_host_cgroup_ctrl *c;
	} ctrls[] = { { "memory", &h.memory }, { "pids", &h.pids }, { "cpu", &h.cpu } };
	/* The CLI is single-threaded: the sandbox is made here, as for nsbox run. */
	struct nsbox_selftest_opts so = {
		.struct_size = sizeof(so), .probe = print_probe, .warn = cli_warn, .in_process = true
	};
	nsbox_error_t *e = NULL;
	unsigned escapes = 0;
	int problems = 0, r;

	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: nsbox doctor\n  is this host fit to run nsbox? (checks, then escape probes in a sandbox); see nsbox(1)\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "nsbox doctor: unexpected argument '%s' (see nsbox doctor --help)\n", argv[1]);
		return NSBOX_EXIT_USAGE;
	}
	if (nsbox_host_info(&h, &e) < 0) {
		fprintf(stderr, "nsbox doctor: %s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		return NSBOX_EXIT_SETUP;
	}
	printf("nsbox %s doctor (uid %u)\n\n", nsbox_version(), (unsigned)h.euid);
	if (h.max_user_namespaces <= 0) {
		printf("FIX  user namespaces are off: sysctl -w user.max_user_namespaces=15000\n");
		problems++;
	} else {
		printf("ok   user namespaces (max %ld)\n", h.max_user_namespaces);
	}
	if (h.apparmor_restrict_unprivileged_userns == 1 && h.euid != 0) {
		printf("FIX  AppArmor restricts unprivileged user namespaces: "
		       "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for nsbox\n");
		problems++;
	}
	for (size_t k = 0; k < ARRAY_SIZE(ctrls); k++) {
		const struct nsbox_host_cgroup_ctrl *c = ctrls[k].c;

		if (c->enforced)
			printf("ok   cgroup %s (%s, %s)\n", ctrls[k].name, c->v1 ? "v1" : "v2", c->dir);
		else
			printf("WARN cgroup %s unusable: %s\n     -> limits fall back to rlimits; run nsbox under a delegated "
			       "cgroup (systemd-run --user -p Delegate=yes --scope ...) to enforce them\n",
			       ctrls[k].name, c->why);
	}
	if (strcmp(h.cgroup_migration, "slow") == 0) {
		printf("WARN cgroup migration can be slow: each sandbox start moves pid 1 into the v1 cgroups, which "
		       "can wait for an RCU grace period (milliseconds), as no cgroup mount has favordynmods\n");
		for (const char *l = h.cgroup_migration_hint, *nl; *l; l = nl + 1) {
			nl = strchrnul(l, '\n');
			printf("     %.*s\n", (int)(nl - l), l);
			if (!*nl)
				break;
		}
	} else if (strcmp(h.cgroup_migration, "fast") == 0) {
		printf("ok   cgroup migration into v1 cgroups is fast (favordynmods)\n");
	} else if (strcmp(h.cgroup_mode, "v2") == 0) {
		printf("ok   no cgroup migration: sandboxes are cloned straight into their cgroup (CLONE_INTO_CGROUP)\n");
	}
	if (h.landlock_abi > 0)
		printf("ok   Landlock ABI %d\n", h.landlock_abi);
	else
		printf("WARN Landlock not available (lsm= lacks landlock)\n");
	if (h.runner[0]) {
		printf("ok   runner %s\n", h.runner);
	} else {
		printf("FIX  no runner: %s\n     -> nsbox python and sessions can't start\n", h.runner_error);
		problems++;
	}

	printf("\nself-test inside a sandbox (default policy):\n");
	fflush(stdout);
	r = nsbox_selftest(&so, &escapes, &e);
	if (r == -EPROTO) {
		printf("FAIL %s\n", nsbox_error_message(e));
		escapes++;
	} else if (r < 0) {
		printf("FAIL the sandbox could not start: %s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		return NSBOX_EXIT_SETUP;
	}
	nsbox_error_free(e);
	printf("\n%s\n", escapes    ? "NOT FIT: a probe got out of the sandbox; do not run untrusted code here."
			 : problems ? "FIT WITH PROBLEMS: sandboxes are isolated, but fix the items marked FIX above."
				    : "FIT: this host isolates nsbox sandboxes as designed.");
	return escapes ? 1 : 0;
}
