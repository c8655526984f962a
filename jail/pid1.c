/* pid 1 of the sandbox's pid namespace: the clone's child.  Its setup is an
 * ordered list of named steps (pid1_setup below: a new step is one line
 * there), run in the new user, mount, ipc, uts and cgroup namespaces while
 * the launcher writes the id maps and attaches the cgroups; then it starts
 * the payload (payload.c), drops what it no longer needs, and reaps and
 * forwards signals until the payload exits.  A failing step's error record
 * goes back to the launcher over the sync socket (crun's sync socket). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pid1.h"
#include "seccomp-load.h"
#include "steps.h"
#include "sync.h"
#include "util.h"

/* A step's return value when the launcher is gone: nobody to report to. */
#define PID1_LAUNCHER_GONE (-2)

struct pid1 {
	struct child_ctx *c;
	struct netns_job nj;
	unsigned long long start_ticks;	/* our start (boot clock), clock ticks: /proc/self/stat */
};

/* A string of the caller's that lies in the argument area: its place in
 * the copy. */
static const char *rebase(const char *p, unsigned long start, unsigned long end, const char *copy)
{
	uintptr_t a = (uintptr_t)p;

	return p && a >= start && a < end ? copy + (a - start) : p;
}

/* A pid 1 cloned from an in-process caller (nsbox run, nsbox python,
 * nsbox mcp's first session) still holds the caller's argv, and
 * /proc/1/cmdline is readable by the payload: the host's command line,
 * with whatever it carries (an --mcp-server command's credentials,
 * --setenv values).  Blank our copy of it (the clone has its own memory;
 * the area is found in /proc/self/stat, fields 48 and 49, proc(5)), after
 * moving what the payload's exec needs from it (a command's argv, which
 * nsbox run borrows from its own) to the heap.  The same read gives our
 * start time (field 22), where the time namespace's clocks begin. */
static int pid1_hide_cmdline(struct pid1 *s, struct nsbox_err *err)
{
	char buf[2048], *p, *save = NULL, *copy;
	unsigned long start = 0, end = 0;
	struct jail_spec *spec;
	ssize_t n;
	int fd, field = 3;

	fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, "open /proc/self/stat");
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return err_sys(err, "read /proc/self/stat");
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
	if (!p)
		return err_set(err, EINVAL, "/proc/self/stat: no command name");
	for (p = strtok_r(p + 1, " ", &save); p; p = strtok_r(NULL, " ", &save), field++) {
		if (field == 22)
			s->start_ticks = strtoull(p, NULL, 10);
		else if (field == 48)
			start = strtoul(p, NULL, 10);
		else if (field == 49)
			end = strtoul(p, NULL, 10);
	}
	if (!start || end <= start || end - start > (64ul << 20))
		return err_set(err, EINVAL, "/proc/self/stat: no argument area (%lu-%lu)", start, end);
	copy = malloc(end - start);
	spec = malloc(sizeof(*spec));
	if (!copy || !spec)
		return err_set(err, ENOMEM, "pid 1");
	memcpy(copy, (void *)start, end - start);
	*spec = *s->c->spec;
	spec->exec_file = rebase(spec->exec_file, start, end, copy);
	if (spec->argv) {
		size_t k = 0;
		char **argv;

		while (spec->argv[k])
			k++;
		argv = calloc(k + 1, sizeof(*argv));
		if (!argv)
			return err_set(err, ENOMEM, "pid 1");
		for (size_t i = 0; i < k; i++)
			argv[i] = (char *)rebase(spec->argv[i], start, end, copy);
		spec->argv = argv;
	}
	s->c->spec = spec; /* pid 1's own memory: freed when it exits */
	memset((void *)start, 0, end - start);
	memcpy((void *)start, "nsbox-pid1", end - start > 10 ? 10 : end - start - 1);
	/* The command name too (comm: an embedding program's own name). */
	if (prctl(PR_GET_NAME, s->c->comm) < 0)
		s->c->comm[0] = '\0';
	(void)prctl(PR_SET_NAME, "nsbox-pid1");
	return 0;
}

/* The launcher's CPUs back (launch.c, spread_decide): first thing, so that
 * the network thread's are worked out from them, and again after GO, which
 * the launcher sends only once its sched_setaffinity has returned (we may
 * have run before it did), so that the payload inherits them.  It can only
 * fail if those CPUs all went offline meanwhile: then the sandbox runs on
 * the ones it has, which the launcher was allowed too. */
static int pid1_cpus(struct pid1 *s, struct nsbox_err *err)
{
	(void)err;
	if (s->c->spread)
		(void)sched_setaffinity(0, sizeof(s->c->cpus), &s->c->cpus);
	return 0;
}

/* Die with the launcher.  If it is already gone the "go" read below sees
 * EOF. */
static int pid1_deathsig(struct pid1 *s, struct nsbox_err *err)
{
	(void)s;
	(void)err;
	return prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ? PID1_LAUNCHER_GONE : 0;
}

/* The network namespace is made on a thread of its own while the launcher
 * writes our id maps and we build the root (net.c), and the per-user
 * budgets are lowered there too; the capabilities the clone gave us in the
 * new user namespace are enough. */
static int pid1_netns_start(struct pid1 *s, struct nsbox_err *err)
{
	s->nj.egress_fd = s->c->egress_fd;
	s->nj.p = s->c->p;
	s->nj.budget = &s->c->budget;
	s->nj.idle_cpu = s->c->spread;
	s->nj.cpus = s->c->cpus;
	return s->c->p->share_net ? 0 : netns_start(&s->nj, err);
}

/* A root launcher that cloned us with a HostUid='s euid (launch.c,
 * owner_begin) left its memory, and so ours, not dumpable (the kernel does
 * that to a changed euid): /proc/self would be host root's, not ours to
 * write (the time step).  Dumpable again until pid1_not_dumpable; nothing
 * of the sandbox runs yet, and our real and saved uid are still the
 * launcher's 0, which ptrace would have to match. */
static int pid1_own_proc(struct pid1 *s, struct nsbox_err *err)
{
	if (s->c->owned_by_host_uid && prctl(PR_SET_DUMPABLE, 1) < 0)
		return err_sys(err, "prctl(PR_SET_DUMPABLE)");
	return 0;
}

/* Before the id maps, while the launcher is busy writing them, and before
 * the network thread, which under Seccomp=log lowers
 * user.max_time_namespaces to 0 (budget.c). */
static int pid1_timens(struct pid1 *s, struct nsbox_err *err)
{
	long hz = sysconf(_SC_CLK_TCK);

	return timens_setup(s->start_ticks * (1000000000ull / (unsigned long long)(hz > 0 ? hz : 100)), err);
}

static int pid1_wait_go(struct pid1 *s, struct nsbox_err *err)
{
	struct sync_msg m;

	(void)err;
	if (sync_recv(s->c->sync_fd, &m, 0) != 1 || m.type != SYNC_GO)
		return PID1_LAUNCHER_GONE;
	return 0;
}

/* Our id maps are written.  From now on the payload can't reach us through
 * /proc/1: our exe and stdio are the host's files, on the host's mounts,
 * where Landlock is not there to stop a write (runc keeps its init
 * non-dumpable the same way, CVE-2016-9962). */
static int pid1_not_dumpable(struct pid1 *s, struct nsbox_err *err)
{
	(void)s;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return err_sys(err, "prctl(PR_SET_DUMPABLE)");
	return 0;
}

/* The user namespace's own budgets, lowered while pid 1 still holds its
 * capabilities there (budget.c): here, unless the network thread took them
 * (its credentials are its own, so ids below does not take its
 * capabilities; it is joined before the payload is forked). */
static int pid1_budget(struct pid1 *s, struct nsbox_err *err)
{
	return s->nj.threaded ? 0 : budget_apply(s->c->p, &s->c->budget, -1, err);
}

static int pid1_ids(struct pid1 *s, struct nsbox_err *err)
{
	return ids_switch(s->c->p->uid, s->c->p->gid, s->c->host_root, err);
}

static int pid1_mount(struct pid1 *s, struct nsbox_err *err)
{
	struct child_ctx *c = s->c;

	return mount_setup(c->p, c->srcs, c->host_root, &c->ws_upper_fd, err);
}

static int pid1_exec(struct pid1 *s, struct nsbox_err *err)
{
	struct child_ctx *c = s->c;
	int r;

	if (c->exec_src_fd < 0)
		return 0;
	r = mount_exec(c->spec->exec_file, c->exec_src_fd, &c->bound_exec_fd, err);
	close(c->exec_src_fd);
	c->exec_src_fd = -1;
	return r;
}

static int pid1_uts(struct pid1 *s, struct nsbox_err *err)
{
	return uts_setup(s->c->p, err);
}

/* Into the new network namespace before anything of the sandbox runs and
 * before the filter (it denies setns). */
static int pid1_netns_join(struct pid1 *s, struct nsbox_err *err)
{
	if (!s->c->p->share_net && netns_join(&s->nj, err) < 0)
		return -1;
	/* The egress sockets went to the proxy from the network thread. */
	if (s->c->egress_fd >= 0) {
		close(s->c->egress_fd);
		s->c->egress_fd = -1;
	}
	return 0;
}

/* A process group of its own, out of the caller's terminal's foreground
 * group: Ctrl-C at a terminal is the host's to act on (nsbox python's
 * KeyboardInterrupt by a CANCEL, nsbox run's forwarding), never a SIGINT
 * the kernel sends pid 1 directly, which it would forward and which
 * killed nsbox python's runner at its REPL prompt. */
static int pid1_own_pgrp(struct pid1 *s, struct nsbox_err *err)
{
	(void)s;
	if (setpgid(0, 0) < 0)
		return err_sys(err, "setpgid");
	return 0;
}

static void pid1_noop(int sig)
{
	(void)sig;
}

/* Block everything in pid 1 before the fork so no signal is lost; the
 * payload unblocks.  The forwarded signals need a handler: the kernel
 * drops SIG_DFL signals sent to a namespace's init (sig_task_ignored,
 * SIGNAL_UNKILLABLE), even from the host. */
static int pid1_signals(struct pid1 *s, struct nsbox_err *err)
{
	static const int fwd[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
	struct sigaction sa = { .sa_handler = pid1_noop };
	sigset_t all;

	(void)s;
	(void)err;
	sigemptyset(&sa.sa_mask);
	for (size_t k = 0; k < ARRAY_SIZE(fwd); k++)
		sigaction(fwd[k], &sa, NULL);
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	return 0;
}

/* Securebits and the bounding set, once, for pid 1 and the payload
 * (inherited across fork). */
static int pid1_lock_caps(struct pid1 *s, struct nsbox_err *err)
{
	(void)s;
	return caps_lock_bounding(err);
}

/* RLIMIT_CORE 1, not 0, for pid 1 and the payload (inherited across
 * fork): no core file (1 byte is less than the ELF dumper's minimum), and
 * no dump to a core_pattern pipe either, which 0 does not stop: the kernel
 * skips the pipe's helper only at 1 (fs/coredump.c, coredump_pipe), and
 * that helper (systemd-coredump, apport) runs as root outside the
 * sandbox's namespaces and cgroup and stores the dump on the host's disk,
 * at every crash inside.  The filter, loaded next, refuses to change it.
 * A launcher whose hard limit is 0 can't raise it: 0 then. */
static int pid1_no_core(struct pid1 *s, struct nsbox_err *err)
{
	struct rlimit rl;

	(void)s;
	if (getrlimit(RLIMIT_CORE, &rl) < 0)
		return err_sys(err, "getrlimit(RLIMIT_CORE)");
	rl.rlim_cur = rl.rlim_max = rl.rlim_max ? 1 : 0;
	if (setrlimit(RLIMIT_CORE, &rl) < 0)
		return err_sys(err, "setrlimit(RLIMIT_CORE, %llu)", (unsigned long long)rl.rlim_max);
	return 0;
}

/* The allowlist goes on here, once, and the payload inherits it with the
 * fork: loading (and JIT-compiling) it costs ~0.3 ms a time, spent while
 * the launcher still attaches the cgroups and brings lo up.  Nothing pid 1
 * and the payload still do before exec (recv, fork, setsid, fds, rlimits,
 * capabilities, Landlock) is outside the allowlist, and the mounts are
 * done. */
static int pid1_seccomp(struct pid1 *s, struct nsbox_err *err)
{
	return seccomp_apply(s->c->prog, err);
}

/* The payload is forked only once the launcher has moved pid 1 into every
 * cgroup, so it starts inside them. */
static int pid1_wait_attached(struct pid1 *s, struct nsbox_err *err)
{
	struct sync_msg m;

	(void)err;
	if (sync_recv(s->c->sync_fd, &m, 0) != 1 || m.type != SYNC_ATTACHED)
		return PID1_LAUNCHER_GONE;
	s->c->cg_mem = m.arg & SYNC_CG_MEMORY;
	s->c->cg_pids = m.arg & SYNC_CG_PIDS;
	/* Moved into its cgroups after the clone (cgroup v1, or v2 without
	 * CLONE_INTO_CGROUP), pid 1's cgroup namespace, made at the clone, is
	 * rooted at the cgroup above them: /proc/self/cgroup would name
	 * nsbox-PID-N, the launcher's host pid.  A new one is rooted at the
	 * sandbox's own (the payload, forked next, takes it).  The seccomp
	 * filter lets unshare(CLONE_NEWCGROUP) reach the kernel, which
	 * refuses it to everything in the sandbox but pid 1: the only one
	 * with CAP_SYS_ADMIN. */
	if ((m.arg & SYNC_CG_MOVED) && unshare(CLONE_NEWCGROUP) < 0)
		return err_sys(err, "unshare the cgroup namespace");
	return 0;
}

/* pid 1's setup, in order (STYLE.md 4; the diagram in launch.c).  A
 * failing step's error carries its name unless the step names a finer one;
 * the launcher reports it verbatim. */
struct pid1_step {
	const char *name;
	int (*run)(struct pid1 *s, struct nsbox_err *err);
};

static const struct pid1_step pid1_setup[] = {
	{ "pid1", pid1_cpus },
	{ "pid1", pid1_hide_cmdline },
	{ "pid1", pid1_deathsig },
	{ "pid1", pid1_own_proc },
	{ "pid1", pid1_own_pgrp },
	{ "time", pid1_timens },
	{ "network", pid1_netns_start },
	{ "pid1", pid1_wait_go },
	{ "pid1", pid1_cpus },
	{ "pid1", pid1_not_dumpable },
	{ "exec", pid1_exec },
	{ "budget", pid1_budget },
	{ "ids", pid1_ids },
	{ "mount", pid1_mount },
	{ "uts", pid1_uts },
	{ "network", pid1_netns_join },
	{ "pid1", pid1_signals },
	{ "capabilities", pid1_lock_caps },
	{ "rlimits", pid1_no_core },
	{ "seccomp", pid1_seccomp },
	{ "pid1", pid1_wait_attached },
};

/* Reap everything, forward the signals the host sends, report the
 * payload's wait status, and exit when it exits (the kernel then kills
 * whatever is left; pid_namespaces(7)). */
static __attribute__((noreturn)) void pid1_loop(int sync_fd, pid_t payload)
{
	sigset_t set;

	sigfillset(&set);
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&set, &si);
		if (sig < 0)
			continue;
		if (sig != SIGCHLD) {
			kill(payload, sig);
			continue;
		}
		for (;;) {
			int st;
			pid_t w = waitpid(-1, &st, WNOHANG);
			if (w <= 0)
				break;
			if (w == payload) {
				(void)sync_send(sync_fd, SYNC_STATUS, st, NULL);
				_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			}
		}
	}
}

/* Start the payload and wait for its setup: an error record on the pipe
 * means it failed (then it is reaped and we exit as it did); EOF means it
 * exec'd (or child_fn runs).  Returns its pid, or -1 with err. */
static pid_t pid1_start_payload(struct child_ctx *c, struct nsbox_err *err)
{
	struct sync_msg m;
	int pipefd[2];
	pid_t payload;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return err_sys(err, "pipe");
	payload = payload_start(c, pipefd);
	if (payload < 0) {
		err_sys(err, "fork the payload");
		close(pipefd[0]);
		close(pipefd[1]);
		return -1;
	}
	close(pipefd[1]);
	ssize_t n = read_full(pipefd[0], &m, sizeof(m));
	close(pipefd[0]);
	if (n == (ssize_t)sizeof(m)) {
		int st;

		err_copy(&m.err, &m.err);
		(void)send(c->sync_fd, &m, sizeof(m), MSG_NOSIGNAL);
		waitpid(payload, &st, 0);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : NSBOX_EXIT_SETUP);
	}
	return payload;
}

void pid1_main(struct child_ctx *c)
{
	struct pid1 s = { .c = c };
	struct nsbox_err e = { 0 };
	pid_t payload;

	for (size_t i = 0; i < ARRAY_SIZE(pid1_setup); i++) {
		int r;

		err_step(&e, pid1_setup[i].name);
		r = pid1_setup[i].run(&s, &e);
		if (r == PID1_LAUNCHER_GONE)
			_exit(NSBOX_EXIT_SETUP);
		if (r < 0)
			goto fail;
	}
	err_step(&e, "pid1");
	payload = pid1_start_payload(c, &e);
	if (payload < 0)
		goto fail;
	/* The payload runs: tell the host first, then pid 1 keeps nothing it
	 * does not need either (no inherited fds, no capabilities, the
	 * filter).  The payload can't reach pid 1 meanwhile: it has no
	 * ptrace, and signals to pid 1 are only forwarded back to it. */
	(void)sync_send_fd(c->sync_fd, SYNC_READY, 0, NULL, c->ws_upper_fd);
	int keep[2] = { c->sync_fd, c->rootfs_lock };
	if (close_fds_except(3, keep, c->rootfs_lock >= 0 ? 2 : 1) < 0 || caps_clear(&e) < 0 ||
	    seccomp_apply_pid1(&e) < 0) {
		kill_reap(&payload);
		_exit(NSBOX_EXIT_SETUP);
	}
	pid1_loop(c->sync_fd, payload);
fail:
	(void)sync_send(c->sync_fd, SYNC_ERROR, 0, &e);
	_exit(NSBOX_EXIT_SETUP);
}
