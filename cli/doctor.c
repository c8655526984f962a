/* nsbox doctor: is this host fit to run nsbox?  Checks the host, then runs
 * a short self-test of escape probes inside a real sandbox (a function run
 * after every setup step, seccomp included) and says plainly what to fix. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"
#include "commands.h"
#include "landlock.h"
#include "util.h"

struct probe_result {
	char name[48];
	int escaped;		/* 1: the probe got out */
	char detail[80];
};

#define MAX_PROBES 32

static int n_res;
static struct probe_result res[MAX_PROBES];

static void report(const char *name, int escaped, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(const char *name, int escaped, const char *fmt, ...)
{
	va_list ap;

	if (n_res >= MAX_PROBES)
		return;
	snprintf(res[n_res].name, sizeof(res[n_res].name), "%s", name);
	res[n_res].escaped = escaped;
	va_start(ap, fmt);
	vsnprintf(res[n_res].detail, sizeof(res[n_res].detail), fmt, ap);
	va_end(ap);
	n_res++;
}

static void expect_fail(const char *name, long r)
{
	if (r >= 0)
		report(name, 1, "succeeded");
	else
		report(name, 0, "%s", strerrorname_np(errno) ? strerrorname_np(errno) : "failed");
}

static int status_is(const char *field, const char *want)
{
	char buf[4096], *p;

	if (read_file("/proc/self/status", buf, sizeof(buf)) < 0 || !(p = strstr(buf, field)))
		return 0;
	p += strlen(field);
	while (*p == ' ' || *p == '\t' || *p == ':')
		p++;
	return strncmp(p, want, strlen(want)) == 0;
}

/* Runs inside the sandbox; fd 3 is the pipe back to the host. */
static int self_test(void *arg)
{
	struct if_nameindex *ifs = if_nameindex();
	int n_if = 0, only_lo = 1;
	(void)arg;

	report("uid 1000 inside", getuid() != 1000, "uid %u", getuid());
	report("no capabilities", !status_is("CapEff", "0000000000000000") || !status_is("CapBnd", "0000000000000000"),
	       "effective and bounding sets");
	report("no_new_privs", !status_is("NoNewPrivs", "1"), "NoNewPrivs");
	report("seccomp filter", !status_is("Seccomp", "2"), "Seccomp mode");
	for (struct if_nameindex *i = ifs; i && i->if_name; i++, n_if++)
		only_lo &= strcmp(i->if_name, "lo") == 0;
	if (ifs)
		if_freenameindex(ifs);
	report("network: only lo", !only_lo || n_if != 1, "%d interface(s)", n_if);
	report("/etc/shadow hidden", access("/etc/shadow", F_OK) == 0, "absent");
	report("host homes hidden", access("/home", F_OK) == 0 || access("/root", F_OK) == 0, "absent");
	expect_fail("write /usr", open("/usr/.nsbox-doctor", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
	expect_fail("write /proc/sys", open("/proc/sys/kernel/hostname", O_WRONLY | O_CLOEXEC));
	expect_fail("unshare user ns", unshare(CLONE_NEWUSER));
	expect_fail("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, 0));
	expect_fail("ptrace", syscall(SYS_ptrace, 16, 1, 0, 0));
	expect_fail("bpf", syscall(SYS_bpf, 0, 0, 0));
	expect_fail("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
	expect_fail("io_uring", syscall(SYS_io_uring_setup, 1, 0));
	expect_fail("TIOCSTI", syscall(SYS_ioctl, 0, 0x5412, "x"));
	expect_fail("mknod", mknod("/tmp/.null", S_IFCHR | 0600, 0x103));
	if (write_full(3, res, sizeof(res[0]) * (size_t)n_res) < 0)
		return 1;
	return 0;
}

int cmd_doctor(int argc, char **argv)
{
	struct cgroup_probe pr;
	struct cgroup_migration_info mi;
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	struct jail j;
	int fds[2], problems = 0, escapes = 0;
	long maxns = -1;
	char buf[64];

	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "usage: nsbox doctor\n");
		return NSBOX_EXIT_USAGE;
	}
	printf("nsbox doctor (uid %u)\n\n", (unsigned)geteuid());
	if (read_file("/proc/sys/user/max_user_namespaces", buf, sizeof(buf)) >= 0)
		maxns = strtol(buf, NULL, 10);
	if (maxns <= 0) {
		printf("FIX  user namespaces are off: sysctl -w user.max_user_namespaces=15000\n");
		problems++;
	} else {
		printf("ok   user namespaces (max %ld)\n", maxns);
	}
	if (read_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", buf, sizeof(buf)) >= 0 &&
	    buf[0] == '1' && geteuid() != 0) {
		printf("FIX  AppArmor restricts unprivileged user namespaces: "
		       "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for nsbox\n");
		problems++;
	}
	cgroup_probe_host(&pr);
	for (int c = 0; c < CTRL__N; c++) {
		if (pr.ctrl_ok[c])
			printf("ok   cgroup %s (%s, %s)\n", cgroup_ctrl_name(c), pr.ctrl_v1[c] ? "v1" : "v2", pr.ctrl_dir[c]);
		else
			printf("WARN cgroup %s unusable: %s\n     -> limits fall back to rlimits; run nsbox under a delegated "
			       "cgroup (systemd-run --user -p Delegate=yes --scope ...) to enforce them\n",
			       cgroup_ctrl_name(c), pr.why[c]);
	}
	cgroup_migration_probe(&pr, &mi);
	if (mi.state == CG_MIGRATE_SLOW) {
		char hint[512];
		cgroup_migration_hint(&mi, hint, sizeof(hint));
		printf("WARN cgroup migration can be slow: each sandbox start moves pid 1 into the v1 cgroups, which "
		       "can wait for an RCU grace period (milliseconds), as no cgroup mount has favordynmods\n");
		for (char *l = hint, *nl; *l; l = nl + 1) {
			nl = strchrnul(l, '\n');
			printf("     %.*s\n", (int)(nl - l), l);
			if (!*nl)
				break;
		}
	} else if (mi.state == CG_MIGRATE_FAST) {
		printf("ok   cgroup migration into v1 cgroups is fast (favordynmods)\n");
	} else if (pr.mode == CG_V2) {
		printf("ok   no cgroup migration: sandboxes are cloned straight into their cgroup (CLONE_INTO_CGROUP)\n");
	}
	int abi = landlock_abi();
	printf("%s Landlock%s", abi > 0 ? "ok  " : "WARN", abi > 0 ? " ABI " : " not available (lsm= lacks landlock)\n");
	if (abi > 0)
		printf("%d\n", abi);

	if (policy_init_builtin(&p, "default", &err) < 0 || pipe2(fds, O_CLOEXEC) < 0) {
		fprintf(stderr, "nsbox doctor: %s\n", err.msg[0] ? err.msg : strerror(errno));
		return NSBOX_EXIT_SETUP;
	}
	p.time_limit = 20;
	struct jail_spec spec = { .policy = &p, .child_fn = self_test, .pass_fds = &fds[1], .n_pass_fds = 1,
				  .exec_fd = -1 };
	printf("\nself-test inside a sandbox (default policy):\n");
	int r = jail_start(&j, &spec, &err);
	close(fds[1]);
	if (r < 0) {
		printf("FAIL the sandbox could not start: %s%s%s\n", err.step[0] ? err.step : "", err.step[0] ? ": " : "",
		       err.msg);
		close(fds[0]);
		policy_free(&p);
		return NSBOX_EXIT_SETUP;
	}
	ssize_t n = read_full(fds[0], res, sizeof(res));
	close(fds[0]);
	jail_wait(&j, NULL, &err);
	jail_destroy(&j);
	n_res = n > 0 ? (int)(n / (ssize_t)sizeof(res[0])) : 0;
	for (int i = 0; i < n_res; i++) {
		res[i].name[sizeof(res[i].name) - 1] = res[i].detail[sizeof(res[i].detail) - 1] = '\0';
		printf("%s %-22s %s\n", res[i].escaped ? "FAIL" : "ok  ", res[i].name, res[i].detail);
		escapes += res[i].escaped;
	}
	if (n_res == 0 || jail_exit_code(&j.status) != 0) {
		printf("FAIL the self-test did not complete (status %d)\n", jail_exit_code(&j.status));
		escapes++;
	}
	policy_free(&p);
	printf("\n%s\n", escapes ? "NOT FIT: a probe got out of the sandbox; do not run untrusted code here."
		: problems ? "FIT WITH PROBLEMS: sandboxes are isolated, but fix the items marked FIX above."
			   : "FIT: this host isolates nsbox sandboxes as designed.");
	return escapes ? 1 : 0;
}
