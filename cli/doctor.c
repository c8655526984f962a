/* nsbox doctor: is this host fit to run nsbox?  Checks the host
 * (nsbox_host_info), then runs escape probes inside a real sandbox
 * (nsbox_selftest) and says plainly what to fix. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"

static void print_probe(void *ud, const char *probe, bool escaped, const char *detail)
{
	(void)ud;
	printf("%s %-22s %s\n", escaped ? "FAIL" : "ok  ", probe, detail);
}

/* nsbox python and the SDK's sessions: the runner starts in a sandbox of
 * the default policy and answers.  Returns 0, or -1 with why (printed). */
static int check_runner_starts(void)
{
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .in_process = true };
	struct nsbox_exec_opts eo = { .struct_size = sizeof(eo), .repl = true };
	nsbox_session_t *s = NULL;
	nsbox_policy_t *p = NULL;
	nsbox_result_t *res = NULL;
	nsbox_error_t *e = NULL;
	int r = -1;

	if (nsbox_policy_new(NULL, &p, &e) < 0 || nsbox_session_new(p, &so, &s, &e) < 0 ||
	    nsbox_exec(s, "6 * 7", &eo, &res, &e) < 0) {
		printf("FIX  the runner does not start: %s\n     -> nsbox python and sessions fail (status 125)\n",
		       nsbox_error_message(e));
	} else if (nsbox_result_status(res) != NSBOX_OK || strcmp(nsbox_result_value(res) ?: "", "42") != 0) {
		printf("FIX  the runner started but 6 * 7 gave %s (%s)\n", nsbox_result_value(res) ?: "nothing",
		       nsbox_result_error_message(res) ?: "no error");
	} else {
		printf("ok   the runner starts in a sandbox and runs Python\n");
		r = 0;
	}
	nsbox_result_free(res);
	nsbox_session_free(s);
	nsbox_policy_free(p);
	nsbox_error_free(e);
	return r;
}

/* C programs and the Python SDK load libnsbox.so.0: from the loader's
 * path, or (a build tree) next to this nsbox. */
static int check_library(void)
{
	char self[PATH_MAX], path[PATH_MAX + 32] = "libnsbox.so.0";
	const char *(*version)(void);
	void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	ssize_t n;
	int r = -1;

	if (!h && (n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		snprintf(path, sizeof(path), "%s/libnsbox.so.0", self);
		h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	}
	if (!h) {
		printf("FIX  libnsbox.so.0 not found (%s)\n     -> the Python SDK and C programs can't load it; "
		       "make install, or set NSBOX_LIB for the SDK\n",
		       dlerror());
		return -1;
	}
	*(void **)&version = dlsym(h, "nsbox_version");
	if (!version)
		printf("FIX  %s has no nsbox_version(): not libnsbox\n", path);
	else if (strcmp(version(), nsbox_version()) != 0)
		printf("FIX  %s is libnsbox %s, this nsbox is %s\n     -> reinstall one or the other\n", path,
		       version(), nsbox_version());
	else
		r = 0;
	if (r == 0)
		printf("ok   library %s (%s)\n", path, version());
	dlclose(h);
	return r;
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
	int problems = 0, warnings = 0, r;

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
		else if (++warnings)
			printf("WARN cgroup %s unusable: %s\n     -> limits fall back to rlimits; run nsbox under a delegated "
			       "cgroup (systemd-run --user -p Delegate=yes --scope ...) to enforce them\n",
			       ctrls[k].name, c->why);
	}
	if (strcmp(h.cgroup_migration, "slow") == 0) {
		warnings++;
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
	else if (++warnings)
		printf("WARN Landlock not available (lsm= lacks landlock)\n     -> one layer fewer: mounts, seccomp "
		       "and namespaces still confine writes\n");
	if (h.landlock_abi < 6)
		printf("note no Landlock ABI 6: with --share-net a sandbox gets no AF_UNIX socket() and only stream "
		       "socketpair()s\n     (a second seccomp filter), so that the host's abstract sockets stay out of "
		       "reach\n");
	if (h.runner[0]) {
		printf("ok   runner %s\n", h.runner);
		fflush(stdout);
		if (check_runner_starts() < 0)
			problems++;
	} else {
		printf("FIX  no runner: %s\n     -> nsbox python and sessions can't start\n", h.runner_error);
		problems++;
	}
	if (check_library() < 0)
		problems++;

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
	/* FIT only when every face works: nsbox run, nsbox python and the
	 * SDK's sessions, the library.  nsbox(1) lists the verdicts. */
	if (escapes) {
		printf("\nNOT FIT: a probe got out of the sandbox; do not run untrusted code here.\n");
		return 1;
	}
	if (problems) {
		printf("\nNOT FIT: sandboxes are isolated, but what is marked FIX above won't work until fixed.\n");
		return 2;
	}
	if (warnings)
		printf("\nFIT, WITH %d WARNING%s: every face works and isolates; what is marked WARN is weaker "
		       "than it could be.\n",
		       warnings, warnings == 1 ? "" : "S");
	else
		printf("\nFIT: this host isolates nsbox sandboxes as designed, and every face works.\n");
	return 0;
}
