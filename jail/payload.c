/* The payload: the process pid 1 starts to run the command (or child_fn),
 * and what it sees: its hostname, rlimits, environment and fds, then its
 * own capabilities dropped, no_new_privs, Landlock, and exec.  The seccomp
 * filter and the bounding set come from pid 1 with the fork.  A failing
 * step sends its error record to pid 1 over a pipe, and pid 1 passes it on
 * to the launcher. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "egress.h"
#include "landlock.h"
#include "pid1.h"
#include "rootfs-table.h"
#include "seccomp-load.h"
#include "steps.h"
#include "sync.h"
#include "util.h"

extern char **environ;

int uts_setup(const struct nsbox_policy *p, struct nsbox_err *err)
{
	const char *hn = p->hostname ? p->hostname : "nsbox";

	if (sethostname(hn, strlen(hn)) < 0 || setdomainname("", 0) < 0) {
		err_sys(err, "sethostname");
		return err_step(err, "uts");
	}
	return 0;
}

/* ns / 1e9, rounded towards minus infinity. */
static long long floor_div(long long ns)
{
	return ns >= 0 ? ns / 1000000000LL : -((-ns + 999999999LL) / 1000000000LL);
}

/* The sandbox's clocks start at zero: CLOCK_MONOTONIC and CLOCK_BOOTTIME
 * (and their _RAW, _COARSE and _ALARM kinds) read the host's uptime, and so
 * do /proc/uptime, /proc/stat's btime and the start times in
 * /proc/PID/stat, which the kernel shifts by the reader's time namespace
 * (time_namespaces(7)).  Offsets can only be written before a process
 * enters, so pid 1 unshares one for its children and writes them, and
 * stays in the host's itself; the payload enters at its exec (or fork).
 * Zero is pid 1's start (start_ns, rounded down to a clock tick), not
 * now: pid 1's start time, shifted, must not fall below zero (the kernel
 * would show it wrapped, as 58 million years).  The monotonic clock gets
 * the same reading.  A kernel without CONFIG_TIME_NS (EINVAL), or a host
 * that set user.max_time_namespaces to 0 (ENOSPC), keeps the host's
 * clocks (README). */
int timens_setup(unsigned long long start_ns, struct nsbox_err *err)
{
	struct timespec mono, boot;
	long long since;
	char buf[128];
	int fd, len;

	if (unshare(CLONE_NEWTIME) < 0)
		return errno == EINVAL || errno == ENOSPC ? 0 : err_sys(err, "unshare(CLONE_NEWTIME)");
	if (clock_gettime(CLOCK_MONOTONIC, &mono) < 0 || clock_gettime(CLOCK_BOOTTIME, &boot) < 0)
		return err_sys(err, "clock_gettime");
	since = (long long)boot.tv_sec * 1000000000LL + boot.tv_nsec - (long long)start_ns;
	if (since < 0)
		since = 0;
	/* offset = since - now, as seconds and 0 <= nanoseconds < 1e9 */
	long long off_mono = since - ((long long)mono.tv_sec * 1000000000LL + mono.tv_nsec);
	long long off_boot = since - ((long long)boot.tv_sec * 1000000000LL + boot.tv_nsec);
	len = snprintf(buf, sizeof(buf), "%d %lld %lld\n%d %lld %lld\n", CLOCK_MONOTONIC, floor_div(off_mono),
		       off_mono - floor_div(off_mono) * 1000000000LL, CLOCK_BOOTTIME, floor_div(off_boot),
		       off_boot - floor_div(off_boot) * 1000000000LL);
	fd = open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, "open /proc/self/timens_offsets");
	if (write(fd, buf, (size_t)len) != (ssize_t)len) {
		err_sys(err, "write /proc/self/timens_offsets");
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* The payload's state while its steps run. */
struct payload {
	const struct child_ctx *c;
	int exec_fd;		/* what to execveat, or -1: a PATH search */
	int err_fd;		/* the pipe to pid 1 */
	char **envp;
};

/* Set soft and hard limit to v (clamped to the hard limit we have).  A
 * limit that silently failed to apply would be a sandbox without it. */
static int set_rlimit(int res, const char *name, rlim_t v, struct nsbox_err *err)
{
	struct rlimit rl;

	if (getrlimit(res, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && v > rl.rlim_max)
		v = rl.rlim_max;
	rl.rlim_cur = rl.rlim_max = v;
	if (setrlimit(res, &rl) < 0)
		return err_sys(err, "setrlimit(%s, %llu)", name, (unsigned long long)v);
	return 0;
}

static int payload_rlimits(struct payload *pl, struct nsbox_err *err)
{
	const struct nsbox_policy *p = pl->c->p;
	bool mem = pl->c->cg_mem, pids = pl->c->cg_pids;

	/* RLIMIT_CORE is pid 1's (pid1_no_core), set before the filter. */
	if (p->file_size && set_rlimit(RLIMIT_FSIZE, "RLIMIT_FSIZE", p->file_size, err) < 0)
		return -1;
	if (p->nofile && set_rlimit(RLIMIT_NOFILE, "RLIMIT_NOFILE", p->nofile, err) < 0)
		return -1;
	/* Fallbacks where no cgroup enforces the limit (the parent warned). */
	if (p->memory && !mem && set_rlimit(RLIMIT_AS, "RLIMIT_AS", p->memory, err) < 0)
		return -1;
	/* RLIMIT_NPROC counts per user per user namespace (ucounts, 5.14+). */
	if (p->pids && !pids && set_rlimit(RLIMIT_NPROC, "RLIMIT_NPROC", p->pids, err) < 0)
		return -1;
	return 0;
}

static char **build_env(const struct nsbox_policy *p)
{
	static char *envp[POLICY_MAX_ENV + 24];
	static char term[256], home[64], threads[3][48];
	static const char *const thread_vars[3] = { "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS" };
	const char *t = getenv("TERM");
	size_t n = 0;

	envp[n++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	snprintf(home, sizeof(home), "HOME=%s", rootfs_home(p));
	envp[n++] = home;
	envp[n++] = "LANG=C.UTF-8";
	if (t) {
		snprintf(term, sizeof(term), "TERM=%s", t);
		envp[n++] = term;
	}
	/* numpy's BLAS starts a thread per CPU it sees, each with its own
	 * buffers: as many as the CPU limit allows (its ceiling); Set= may
	 * override. */
	if (p->cpus > 0) {
		unsigned long c = (unsigned long)p->cpus;
		if ((double)c < p->cpus)
			c++;
		for (size_t i = 0; i < 3; i++) {
			snprintf(threads[i], sizeof(threads[i]), "%s=%lu", thread_vars[i], c ? c : 1);
			envp[n++] = threads[i];
		}
	}
	/* Through the egress proxy (egress.h); Set= may override. */
	for (size_t i = 0; p->n_net_allow && egress_env[i]; i++)
		envp[n++] = (char *)egress_env[i];
	for (size_t i = 0; i < p->n_env; i++) {
		size_t klen = strcspn(p->env[i], "=");
		/* Later settings override earlier ones; Unset= (NAME alone)
		 * only removes. */
		for (size_t j = 0; j < n; j++)
			if (strncmp(envp[j], p->env[i], klen) == 0 && envp[j][klen] == '=') {
				envp[j] = envp[--n];
				break;
			}
		if (p->env[i][klen] == '=')
			envp[n++] = p->env[i];
	}
	envp[n] = NULL;
	return envp;
}

static int payload_env(struct payload *pl, struct nsbox_err *err)
{
	(void)err;
	pl->envp = build_env(pl->c->p);
	return 0;
}

/* No controlling terminal (TIOCSTI injection, CVE-2017-5226), pid 1's
 * blocked signals and handlers undone, and death with pid 1. */
static int payload_session(struct payload *pl, struct nsbox_err *err)
{
	sigset_t none;

	if (setsid() < 0)
		return err_sys(err, "setsid");
	/* Only on a pty made for this run (nsbox_run_opts.controlling_tty):
	 * TIOCSCTTY with 0 does not steal a terminal that controls another
	 * session, and TIOCSTI stays denied by seccomp either way. */
	if (pl->c->spec->controlling_tty && ioctl(0, TIOCSCTTY, 0) < 0)
		return err_sys(err, "TIOCSCTTY on stdin");
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		return err_sys(err, "prctl(PR_SET_PDEATHSIG)");
	/* pid 1 is not dumpable; the payload is: its exec resets the flag for
	 * its new mm, and a template session (which does not exec) has an mm
	 * of its own, forked.  Not before an exec: a vfork child shares pid
	 * 1's mm, and with it the flag. */
	if (pl->c->spec->child_fn && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
		return err_sys(err, "prctl(PR_SET_DUMPABLE)");
	return 0;
}

/* Renumber spec->pass_fds to 3.., keep exec_fd and the error pipe above
 * them, close everything else (fd leaks: nsjail contain.cc). */
static int payload_fds(struct payload *pl, struct nsbox_err *err)
{
	const struct jail_spec *s = pl->c->spec;
	int hi[64];
	size_t n = s->n_pass_fds;

	if (n > 32)
		return err_set(err, EINVAL, "too many fds to pass (%zu)", n);
	/* Parked at 3 + n and up, above every target of the dup2s below (so
	 * none has fd == newfd, nor overwrites a parked copy).  Not at a fixed
	 * 100: F_DUPFD fails with EINVAL at or past RLIMIT_NOFILE, which a host
	 * started with `ulimit -n 64` passes on, and no sandbox could start. */
	for (size_t i = 0; i < n; i++)
		if ((hi[i] = fcntl(s->pass_fds[i], F_DUPFD_CLOEXEC, 3 + (int)n)) < 0)
			return err_sys(err, "dup fd %d", s->pass_fds[i]);
	if (pl->exec_fd >= 0 && (pl->exec_fd = fcntl(pl->exec_fd, F_DUPFD_CLOEXEC, 3 + (int)n)) < 0)
		return err_sys(err, "dup exec fd");
	if ((pl->err_fd = fcntl(pl->err_fd, F_DUPFD_CLOEXEC, 3 + (int)n)) < 0)
		return err_sys(err, "dup error pipe");
	for (size_t i = 0; i < n; i++)
		if (dup2(hi[i], 3 + (int)i) < 0)
			return err_sys(err, "dup2 to fd %zu", 3 + i);
	int keep[2] = { pl->err_fd, pl->exec_fd };
	if (close_fds_except(3 + (int)n, keep, pl->exec_fd >= 0 ? 2 : 1) < 0)
		return err_sys(err, "close inherited fds");
	/* Re-create the sequence after closing, so higher fds are gone. */
	if (pl->exec_fd >= 0) {
		int fd = fcntl(pl->exec_fd, F_DUPFD_CLOEXEC, 3 + (int)n);
		if (fd < 0)
			return err_sys(err, "dup exec fd");
		close(pl->exec_fd);
		pl->exec_fd = fd;
	}
	int fd = fcntl(pl->err_fd, F_DUPFD_CLOEXEC, 3 + (int)n);
	if (fd < 0)
		return err_sys(err, "dup error pipe");
	close(pl->err_fd);
	pl->err_fd = fd;
	return 0;
}

/* Securebits and the empty bounding set came with the fork. */
static int payload_caps(struct payload *pl, struct nsbox_err *err)
{
	(void)pl;
	return caps_clear(err);
}

static int payload_no_new_privs(struct payload *pl, struct nsbox_err *err)
{
	(void)pl;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return err_sys(err, "prctl(PR_SET_NO_NEW_PRIVS)");
	return 0;
}

static int payload_landlock(struct payload *pl, struct nsbox_err *err)
{
	const char *rw[POLICY_MAX_MOUNTS + 5];
	size_t nrw = rootfs_rw_paths(pl->c->p, rw, ARRAY_SIZE(rw));
	int abi = 0;

	if (landlock_apply(rw, nrw, pl->exec_fd, pl->c->p->landlock, &abi, err) < 0)
		return -1;
	/* ABI 6 scopes abstract unix sockets to the sandbox; without it, and
	 * in the host's network namespace, only stream socket pairs. */
	return seccomp_apply_socket_rules(pl->c->p->share_net, pl->c->p->share_net && abi < 6, err);
}

/* The payload's setup, in order; a failing step's error carries its name
 * (the first has none: its failures never named one). */
struct payload_step {
	const char *name;
	int (*run)(struct payload *pl, struct nsbox_err *err);
};

static const struct payload_step payload_steps[] = {
	{ "", payload_session },
	{ "fds", payload_fds },
	{ "rlimits", payload_rlimits },
	{ "env", payload_env },
	{ "capabilities", payload_caps },
	{ "no_new_privs", payload_no_new_privs },
	{ "landlock", payload_landlock },
};

static __attribute__((noreturn)) void payload_fail(const struct payload *pl, int type, const struct nsbox_err *e,
						     int status)
{
	struct sync_msg m;

	sync_msg_init(&m, type, 0, e);
	/* A pipe to pid 1, not a socket: write(), and one write is atomic
	 * only up to PIPE_BUF, so pid 1 reads until it has it all. */
	(void)write_full(pl->err_fd, &m, sizeof(m));
	_exit(status);
}

static __attribute__((noreturn)) void payload_main(const struct child_ctx *c, int err_fd)
{
	const struct jail_spec *s = c->spec;
	struct payload pl = { .c = c, .exec_fd = s->exec_fd >= 0 ? s->exec_fd : c->bound_exec_fd, .err_fd = err_fd };
	struct nsbox_err e = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(payload_steps); i++) {
		err_step(&e, payload_steps[i].name);
		if (payload_steps[i].run(&pl, &e) < 0)
			payload_fail(&pl, SYNC_ERROR, &e, NSBOX_EXIT_SETUP);
	}
	if (s->child_fn) {
		close(pl.err_fd);
		environ = pl.envp;
		_exit(s->child_fn(s->child_arg));
	}
	if (pl.exec_fd >= 0)
		syscall(SYS_execveat, pl.exec_fd, "", s->argv, pl.envp, AT_EMPTY_PATH);
	else
		execvpe(s->argv[0], s->argv, pl.envp);
	int code = errno;
	err_set(&e, code, "exec %s", s->argv[0]);
	err_step(&e, "exec");
	payload_fail(&pl, SYNC_EXEC_ERROR, &e, code == ENOENT || code == ENOTDIR ? NSBOX_EXIT_NOTFOUND : NSBOX_EXIT_NOEXEC);
}

struct payload_arg {
	const struct child_ctx *c;
	const int *pipefd;
};

static int payload_entry(void *arg)
{
	const struct payload_arg *a = arg;

	close(a->pipefd[0]);
	close(a->c->sync_fd);
	/* pid 1's name is not ours (an exec names us anyway). */
	if (a->c->comm[0])
		(void)prctl(PR_SET_NAME, a->c->comm);
	payload_main(a->c, a->pipefd[1]);
}

#if defined(__SANITIZE_ADDRESS__)
#define NSBOX_VFORK_PAYLOAD 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NSBOX_VFORK_PAYLOAD 0
#endif
#endif
#ifndef NSBOX_VFORK_PAYLOAD
#define NSBOX_VFORK_PAYLOAD 1
#endif

/* A command to exec shares pid 1's memory until its execve (CLONE_VM |
 * CLONE_VFORK, as posix_spawn does): copying pid 1's page tables for a
 * fork, then dropping the copy at the exec, cost ~0.15 ms of every start.
 * pid 1 is suspended meanwhile and has one thread, so nothing else touches
 * the memory the two share; the child runs on a stack of its own and has
 * its own file table, signal handlers and credentials (no CLONE_FILES,
 * CLONE_SIGHAND or CLONE_THREAD), so what it closes, resets and drops
 * stays its own.  child_fn (a template session: Python goes on running
 * there) gets a real fork, and so does a sanitizer build (ASan does not
 * follow a stack switch). */
pid_t payload_start(const struct child_ctx *c, const int pipefd[2])
{
	struct payload_arg a = { .c = c, .pipefd = pipefd };
	size_t page = (size_t)sysconf(_SC_PAGESIZE), argc = 0, stack_size;
	char *stack;
	pid_t pid;

	if (!NSBOX_VFORK_PAYLOAD || c->spec->child_fn) {
		pid = fork();
		if (pid == 0)
			payload_entry(&a);
		return pid;
	}
	/* execvpe runs a script without #! through /bin/sh with a copy of
	 * argv on the stack (glibc's maybe_script_execute): room for that
	 * (as posix_spawn sizes it) on top of 256 KiB, and a guard page
	 * below, since an overflow here would land in pid 1's memory. */
	while (c->spec->argv[argc])
		argc++;
	stack_size = 256 * 1024 + (argc + 2) * sizeof(char *);
	stack_size = (stack_size + page - 1) / page * page + page;
	stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return -1;
	if (mprotect(stack, page, PROT_NONE) < 0) {
		munmap(stack, stack_size);
		return -1;
	}
	pid = clone(payload_entry, stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
	/* Back here once the payload has exec'd or died: its stack is free
	 * (a failed munmap only leaves it mapped). */
	(void)munmap(stack, stack_size);
	/* Older kernels (6.1 does) refuse CLONE_VM into another time namespace
	 * (timens_setup: our children's is not ours) with EINVAL, where
	 * later ones move the child at its exec: a real fork there. */
	if (pid < 0 && errno == EINVAL) {
		pid = fork();
		if (pid == 0)
			payload_entry(&a);
	}
	return pid;
}
