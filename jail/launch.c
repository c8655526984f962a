/* The launcher: the ordered setup pipeline.
 *
 *   parent                        child = pid 1 of the new pid namespace
 *   ------                        ---------------------------------------
 *   policy -> seccomp BPF
 *   cgroup create + limits
 *   clone3(NEW* but NET,          thread: unshare(NEWNET), lo up
 *          INTO_CGROUP) -------->  wait for "go"
 *   uid_map, setgroups, gid_map
 *   "go" ----------------------->  ids, mounts, pivot_root, hostname
 *   v1 cgroup create + attach      join the thread: setns(net)
 *   "attached" ----------------->  no_new_privs + seccomp (inherited below)
 *                                  fork the payload:
 *                                    setsid, rlimits, env, fds, caps,
 *                                    Landlock, exec
 *                                  pid 1: caps, its own tiny filter too,
 *                                    reap, forward signals
 *   <- READY / ERROR(step, errno, message) / STATUS(wait status)
 *
 * Errors from inside travel back over a SOCK_SEQPACKET socketpair so the
 * parent can name the failing step (crun's sync socket). */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "budget.h"
#include "cgroup.h"
#include "jail.h"
#include "landlock.h"
#include "seccomp-prebuilt.h"
#include "seccomp-rules.h"
#include "seccomp-load.h"
#include "steps.h"
#include "sync.h"
#include "util.h"


extern char **environ;

static int send_msg(int fd, int type, int code, const struct nsbox_err *e)
{
	struct sync_msg m = { .type = type, .code = code };

	if (e) {
		snprintf(m.step, sizeof(m.step), "%s", e->step);
		snprintf(m.msg, sizeof(m.msg), "%s", e->msg);
	}
	return send(fd, &m, sizeof(m), MSG_NOSIGNAL) == (ssize_t)sizeof(m) ? 0 : -1;
}

static int recv_msg(int fd, struct sync_msg *m)
{
	bool reset_seen = false;
	ssize_t n;

	for (;;) {
		n = recv(fd, m, sizeof(*m), 0);
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		/* A peer that died with one of our messages unread leaves
		 * ECONNRESET pending, and the kernel reports it before the
		 * messages it sent first (its ERROR saying why it died).  The
		 * error is cleared by reporting it: read once more. */
		if (errno == ECONNRESET && !reset_seen) {
			reset_seen = true;
			continue;
		}
		return -1;
	}
	if (n == 0)
		return 0;
	if (n != (ssize_t)sizeof(*m)) {
		errno = EPROTO;
		return -1;
	}
	m->step[sizeof(m->step) - 1] = '\0';
	m->msg[sizeof(m->msg) - 1] = '\0';
	return 1;
}

/* ---- inside: the payload ---------------------------------------------- */

struct child_ctx {
	const struct jail_spec *spec;
	const struct nsbox_policy *p;
	const struct seccomp_prog *prog;
	/* Whether a cgroup enforces the memory and pids limits (from the
	 * launcher's ATTACHED message; otherwise rlimits stand in). */
	bool cg_mem, cg_pids;
	bool host_root;
	int sync_fd;
	int exec_src_fd;	/* spec->exec_file, opened by the launcher, or -1 */
	struct mount_srcs *srcs;	/* binds and workspace, opened by the launcher */
	int bound_exec_fd;	/* in pid 1: the file to execute, or -1 */
	struct budget_host budget;	/* the launcher's per-user limits */
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

static int payload_limits(const struct child_ctx *c, struct nsbox_err *err)
{
	const struct nsbox_policy *p = c->p;
	bool mem = c->cg_mem, pids = c->cg_pids;

	err_step(err, "rlimits");
	if (set_rlimit(RLIMIT_CORE, "RLIMIT_CORE", 0, err) < 0)
		return -1;
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
	static char *envp[POLICY_MAX_ENV + 8];
	static char term[256], home[64];
	const char *t = getenv("TERM");
	size_t n = 0;

	envp[n++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	snprintf(home, sizeof(home), "HOME=%s", p->workspace ? "/workspace" : "/tmp");
	envp[n++] = home;
	envp[n++] = "LANG=C.UTF-8";
	if (t) {
		snprintf(term, sizeof(term), "TERM=%s", t);
		envp[n++] = term;
	}
	for (size_t i = 0; i < p->n_env; i++) {
		size_t klen = strcspn(p->env[i], "=");
		/* Later settings override earlier ones. */
		for (size_t j = 0; j < n; j++)
			if (strncmp(envp[j], p->env[i], klen + 1) == 0) {
				envp[j] = envp[--n];
				break;
			}
		envp[n++] = p->env[i];
	}
	envp[n] = NULL;
	return envp;
}

/* Renumber spec->pass_fds to 3.., keep exec_fd and the error pipe above
 * them, close everything else (fd leaks: nsjail contain.cc). */
static int payload_fds(const struct jail_spec *s, int *exec_fd, int *err_fd, struct nsbox_err *err)
{
	int hi[64];
	size_t n = s->n_pass_fds;

	err_step(err, "fds");
	if (n > 32)
		return err_set(err, EINVAL, "too many fds to pass (%zu)", n);
	for (size_t i = 0; i < n; i++)
		if ((hi[i] = fcntl(s->pass_fds[i], F_DUPFD_CLOEXEC, 100)) < 0)
			return err_sys(err, "dup fd %d", s->pass_fds[i]);
	if (*exec_fd >= 0 && (*exec_fd = fcntl(*exec_fd, F_DUPFD_CLOEXEC, 100)) < 0)
		return err_sys(err, "dup exec fd");
	if ((*err_fd = fcntl(*err_fd, F_DUPFD_CLOEXEC, 100)) < 0)
		return err_sys(err, "dup error pipe");
	for (size_t i = 0; i < n; i++)
		if (dup2(hi[i], 3 + (int)i) < 0)
			return err_sys(err, "dup2 to fd %zu", 3 + i);
	int keep[2] = { *err_fd, *exec_fd };
	if (close_fds_except(3 + (int)n, keep, *exec_fd >= 0 ? 2 : 1) < 0)
		return err_sys(err, "close inherited fds");
	/* Re-create the sequence after closing, so higher fds are gone. */
	if (*exec_fd >= 0) {
		int fd = fcntl(*exec_fd, F_DUPFD_CLOEXEC, 3 + (int)n);
		if (fd < 0)
			return err_sys(err, "dup exec fd");
		close(*exec_fd);
		*exec_fd = fd;
	}
	int fd = fcntl(*err_fd, F_DUPFD_CLOEXEC, 3 + (int)n);
	if (fd < 0)
		return err_sys(err, "dup error pipe");
	close(*err_fd);
	*err_fd = fd;
	return 0;
}

static void payload_fail(int err_fd, int type, int code, struct nsbox_err *e, int status)
{
	struct sync_msg m = { .type = type, .code = code };

	snprintf(m.step, sizeof(m.step), "%s", e->step);
	snprintf(m.msg, sizeof(m.msg), "%s", e->msg);
	/* A pipe to pid 1, not a socket: write(), and one write is atomic
	 * only up to PIPE_BUF, so pid 1 reads until it has it all. */
	(void)write_full(err_fd, &m, sizeof(m));
	_exit(status);
}

static __attribute__((noreturn)) void payload_main(const struct child_ctx *c, int err_fd)
{
	const struct jail_spec *s = c->spec;
	const struct nsbox_policy *p = c->p;
	struct nsbox_err e = { 0 };
	const char *rw[POLICY_MAX_MOUNTS + 4];
	int exec_fd = s->exec_fd >= 0 ? s->exec_fd : c->bound_exec_fd, abi = 0;
	sigset_t none;
	char **envp;

	/* No controlling terminal: TIOCSTI injection (CVE-2017-5226). */
	if (setsid() < 0) {
		err_sys(&e, "setsid");
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
		err_sys(&e, "prctl(PR_SET_PDEATHSIG)");
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	}
	/* pid 1 is not dumpable; the payload is: its exec resets the flag for
	 * its new mm, and a template session (which does not exec) has an mm
	 * of its own, forked.  Not before an exec: a vfork child shares pid
	 * 1's mm, and with it the flag. */
	if (s->child_fn && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0) {
		err_sys(&e, "prctl(PR_SET_DUMPABLE)");
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	}
	if (payload_fds(s, &exec_fd, &err_fd, &e) < 0)
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	if (payload_limits(c, &e) < 0)
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	envp = build_env(p);
	/* Securebits and the empty bounding set came with the fork. */
	if (caps_clear(&e) < 0)
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		err_sys(&e, "prctl(PR_SET_NO_NEW_PRIVS)");
		err_step(&e, "no_new_privs");
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	}
	size_t nrw = mount_rw_paths(p, rw, ARRAY_SIZE(rw));
	if (landlock_apply(rw, nrw, p->landlock, &abi, &e) < 0) {
		err_step(&e, "landlock");
		payload_fail(err_fd, SYNC_ERROR, e.code, &e, NSBOX_EXIT_SETUP);
	}
	if (s->child_fn) {
		close(err_fd);
		environ = envp;
		_exit(s->child_fn(s->child_arg));
	}
	if (exec_fd >= 0)
		syscall(SYS_execveat, exec_fd, "", s->argv, envp, AT_EMPTY_PATH);
	else
		execvpe(s->argv[0], s->argv, envp);
	int code = errno;
	err_set(&e, code, "exec %s", s->argv[0]);
	err_step(&e, "exec");
	payload_fail(err_fd, SYNC_EXEC_ERROR, code, &e,
		     code == ENOENT || code == ENOTDIR ? NSBOX_EXIT_NOTFOUND : NSBOX_EXIT_NOEXEC);
	_exit(NSBOX_EXIT_SETUP);
}

/* ---- inside: pid 1 ---------------------------------------------------- */

struct payload_arg {
	const struct child_ctx *c;
	const int *pipefd;
};

static int payload_entry(void *arg)
{
	const struct payload_arg *a = arg;

	close(a->pipefd[0]);
	close(a->c->sync_fd);
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

/* Start the payload.  A command to exec shares pid 1's memory until its
 * execve (CLONE_VM | CLONE_VFORK, as posix_spawn does): copying pid 1's
 * page tables for a fork, then dropping the copy at the exec, cost
 * ~0.15 ms of every start.  pid 1 is suspended meanwhile and has one
 * thread, so nothing else touches the memory the two share; the child
 * runs on a stack of its own and has its own file table, signal handlers
 * and credentials (no CLONE_FILES, CLONE_SIGHAND or CLONE_THREAD), so what
 * it closes, resets and drops stays its own.  child_fn (a template
 * session: Python goes on running there) gets a real fork, and so does a
 * sanitizer build (ASan does not follow a stack switch). */
static pid_t start_payload(const struct child_ctx *c, const int pipefd[2])
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
	return pid;
}

/* pid 1 of the namespace: reap everything, forward the signals the host
 * sends, report the payload's wait status, and exit when it exits (the
 * kernel then kills whatever is left; pid_namespaces(7)). */
static void pid1_noop(int sig)
{
	(void)sig;
}

static __attribute__((noreturn)) void pid1_loop(int sync_fd, pid_t payload)
{
	sigset_t set;
	int status = 0;

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
				status = st;
				(void)send_msg(sync_fd, SYNC_STATUS, status, NULL);
				_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			}
		}
	}
}

static __attribute__((noreturn)) void child_main(struct child_ctx *c)
{
	const struct nsbox_policy *p = c->p;
	struct nsbox_err e = { 0 };
	struct netns_job nj;
	struct sync_msg m;
	int pipefd[2];
	sigset_t all;
	pid_t payload;

	/* Die with the launcher.  If it is already gone the "go" read below
	 * sees EOF. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		_exit(NSBOX_EXIT_SETUP);
	/* The network namespace is made on a thread of its own while the
	 * launcher writes our id maps and we build the root (net.c); the
	 * capabilities the clone gave us in the new user namespace are
	 * enough. */
	if (!p->share_net && netns_start(&nj, &e) < 0)
		goto fail;
	if (recv_msg(c->sync_fd, &m) != 1 || m.type != SYNC_GO)
		_exit(NSBOX_EXIT_SETUP);
	/* Our id maps are written.  From now on the payload can't reach us
	 * through /proc/1: our exe and stdio are the host's files, on the
	 * host's mounts, where Landlock is not there to stop a write (runc
	 * keeps its init non-dumpable the same way, CVE-2016-9962). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		err_sys(&e, "prctl(PR_SET_DUMPABLE)");
		err_step(&e, "pid1");
		goto fail;
	}

	if (budget_apply(p, &c->budget, &e) < 0)
		goto fail;
	if (ids_switch(p->uid, p->gid, c->host_root, &e) < 0)
		goto fail;
	if (mount_setup(p, c->srcs, c->host_root, c->spec->exec_file, c->exec_src_fd, &c->bound_exec_fd, &e) < 0)
		goto fail;
	if (c->exec_src_fd >= 0) {
		close(c->exec_src_fd);
		c->exec_src_fd = -1;
	}
	const char *hn = p->hostname ? p->hostname : "nsbox";
	if (sethostname(hn, strlen(hn)) < 0 || setdomainname("", 0) < 0) {
		err_sys(&e, "sethostname");
		err_step(&e, "uts");
		goto fail;
	}


	/* Into the new network namespace before anything of the sandbox runs
	 * and before the filter (it denies setns). */
	if (!p->share_net && netns_join(&nj, &e) < 0)
		goto fail;

	/* Block everything in pid 1 before the fork so no signal is lost;
	 * the payload unblocks.  The forwarded signals need a handler: the
	 * kernel drops SIG_DFL signals sent to a namespace's init
	 * (sig_task_ignored, SIGNAL_UNKILLABLE), even from the host. */
	static const int fwd[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
	struct sigaction sa = { .sa_handler = pid1_noop };
	sigemptyset(&sa.sa_mask);
	for (size_t k = 0; k < ARRAY_SIZE(fwd); k++)
		sigaction(fwd[k], &sa, NULL);
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	/* Securebits and the bounding set, once, for pid 1 and the payload
	 * (inherited across fork). */
	if (caps_lock_bounding(&e) < 0)
		goto fail;
	/* The allowlist goes on here, once, and the payload inherits it with
	 * the fork: loading (and JIT-compiling) it costs ~0.3 ms a time, spent
	 * while the launcher still attaches the cgroups and brings lo up.
	 * Nothing pid 1 and the payload still do before exec (recv, fork,
	 * setsid, fds, rlimits, capabilities, Landlock) is outside the
	 * allowlist, and the mounts are done. */
	if (seccomp_apply(c->prog, &e) < 0)
		goto fail;
	/* The payload is forked only once the launcher has moved pid 1 into
	 * every cgroup, so it starts inside them. */
	if (recv_msg(c->sync_fd, &m) != 1 || m.type != SYNC_ATTACHED)
		_exit(NSBOX_EXIT_SETUP);
	c->cg_mem = m.code & SYNC_CG_MEMORY;
	c->cg_pids = m.code & SYNC_CG_PIDS;
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		err_sys(&e, "pipe");
		err_step(&e, "pid1");
		goto fail;
	}
	payload = start_payload(c, pipefd);
	if (payload < 0) {
		err_sys(&e, "fork the payload");
		err_step(&e, "pid1");
		goto fail;
	}
	close(pipefd[1]);
	ssize_t n = read_full(pipefd[0], &m, sizeof(m));
	close(pipefd[0]);
	if (n == (ssize_t)sizeof(m)) {
		m.step[sizeof(m.step) - 1] = '\0';
		m.msg[sizeof(m.msg) - 1] = '\0';
		(void)send(c->sync_fd, &m, sizeof(m), MSG_NOSIGNAL);
		int st;
		waitpid(payload, &st, 0);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : NSBOX_EXIT_SETUP);
	}
	/* The payload runs: tell the host first, then pid 1 keeps nothing it
	 * does not need either (no inherited fds, no capabilities, the
	 * filter).  The payload can't reach pid 1 meanwhile: it has no
	 * ptrace, and signals to pid 1 are only forwarded back to it. */
	(void)send_msg(c->sync_fd, SYNC_READY, 0, NULL);
	if (close_fds_except(3, &c->sync_fd, 1) < 0 || caps_clear(&e) < 0 || seccomp_apply_pid1(&e) < 0) {
		kill(payload, SIGKILL);
		_exit(NSBOX_EXIT_SETUP);
	}
	pid1_loop(c->sync_fd, payload);
fail:
	(void)send_msg(c->sync_fd, SYNC_ERROR, e.code, &e);
	_exit(NSBOX_EXIT_SETUP);
}

/* ---- outside ---------------------------------------------------------- */

static pid_t do_clone(unsigned long long flags, int cgroup_fd, int *pidfd)
{
	struct clone_args ca = {
		.flags = flags | CLONE_PIDFD | (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
		.pidfd = (unsigned long long)(uintptr_t)pidfd,
		.exit_signal = SIGCHLD,
		.cgroup = cgroup_fd >= 0 ? (unsigned long long)cgroup_fd : 0,
	};

	return (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
}

static void warn_none(void *ctx, const char *msg)
{
	(void)ctx;
	(void)msg;
}

int jail_start(struct jail *j, const struct jail_spec *spec, struct nsbox_err *err)
{
	const struct nsbox_policy *p = spec->policy;
	void (*warn)(void *, const char *) = spec->warn ? spec->warn : warn_none;
	struct seccomp_prog prog = { 0 };
	struct cgroup_handle *cg = NULL;
	struct child_ctx c = { .spec = spec, .p = p, .prog = &prog, .exec_src_fd = -1, .bound_exec_fd = -1 };
	/* No CLONE_NEWNET: pid 1 makes its network namespace itself, beside
	 * its other setup (net.c, netns_start). */
	unsigned long long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
				   CLONE_NEWCGROUP;
	int sv[2] = { -1, -1 }, pidfd = -1, r;
	_cleanup_close_ int exec_src = -1;
	struct mount_srcs srcs __attribute__((cleanup(mount_srcs_close))) = { .workspace = -1 };
	bool v2_attached = false, cg_early = cgroup_host_v2();
	struct sync_msg m;
	pid_t pid;

	memset(j, 0, sizeof(*j));
	j->pidfd = -1;
	j->sync_fd = -1;
	j->time_limit = p->time_limit;
	err_clear(err);
	if ((!spec->argv) == (!spec->child_fn))
		return err_set(err, EINVAL, "jail: exactly one of argv and child_fn");
	if (spec->argv && !spec->argv[0])
		return err_set(err, EINVAL, "jail: empty command");
	if (policy_validate(p, err) < 0)
		return err_step(err, "policy");
	/* Precompiled at build time from the same rule table (test-seccomp-prebuilt). */
	seccomp_prog_prebuilt(p->seccomp, &prog);
	/* On cgroup v2 the child is cloned straight into its cgroup
	 * (CLONE_INTO_CGROUP), so that comes first.  Elsewhere pid 1 is
	 * moved in later anyway, and the cgroups are made while it builds
	 * its root. */
	if (cg_early && cgroup_create(p, &cg, warn, spec->warn_ctx, err) < 0)
		goto fail;
	c.host_root = geteuid() == 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		err_sys(err, "socketpair");
		err_step(err, "launch");
		goto fail;
	}
	c.sync_fd = sv[1];
	if (spec->argv && spec->exec_fd < 0 && spec->exec_file) {
		exec_src = open(spec->exec_file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (exec_src < 0) {
			err_sys(err, "open %s", spec->exec_file);
			err_step(err, "launch");
			goto fail;
		}
		c.exec_src_fd = exec_src;
	}
	if (mount_open_sources(p, &srcs, err) < 0)
		goto fail;
	c.srcs = &srcs;

	budget_probe(&c.budget);
	j->start_ns = now_ns();
	pid = do_clone(flags, cg ? cg->v2_fd : -1, &pidfd);
	if (pid < 0 && (errno == ENOSYS || errno == EINVAL) && cg && cg->v2_fd >= 0) {
		pid = do_clone(flags, -1, &pidfd);
		v2_attached = true;
	}
	if (pid < 0) {
		int e = errno;
		err_set(err, e, "clone into new user, mount, pid, ipc, uts and cgroup namespaces");
		if (e == EPERM || e == ENOSPC || e == EINVAL)
			err_wrap(err, "%s", "hint: check sysctl user.max_user_namespaces, "
				 "kernel.unprivileged_userns_clone and kernel.apparmor_restrict_unprivileged_userns");
		err_step(err, "namespaces");
		goto fail;
	}
	if (pid == 0) {
		close(sv[0]);
		child_main(&c);
	}
	close(sv[1]);
	sv[1] = -1;
	j->pid = pid;
	j->pidfd = pidfd;
	j->cg = cg;

	/* pid 1 works (lo up) before GO: if it failed and died meanwhile, the
	 * maps or GO fail, and its own ERROR, already queued, says why. */
	if (userns_write_maps(pid, p, !c.host_root, err) < 0 ||
	    send_msg(sv[0], SYNC_GO, 0, NULL) < 0) {
		struct sync_msg early;
		int saved_errno = errno;

		ssize_t got = recv(sv[0], &early, sizeof(early), MSG_DONTWAIT);

		if (got < 0 && errno == ECONNRESET)	/* see recv_msg() */
			got = recv(sv[0], &early, sizeof(early), MSG_DONTWAIT);
		if (got == (ssize_t)sizeof(early) && early.type == SYNC_ERROR) {
			early.step[sizeof(early.step) - 1] = '\0';
			early.msg[sizeof(early.msg) - 1] = '\0';
			err->code = early.code;
			snprintf(err->step, sizeof(err->step), "%s", early.step);
			snprintf(err->msg, sizeof(err->msg), "%s", early.msg);
		} else if (!err->msg[0]) {
			errno = saved_errno;
			err_sys(err, "release the child");
			err_step(err, "launch");
		}
		goto fail_child;
	}
	/* From here on pid 1 mounts its root in parallel. */
	if (!cg_early) {
		if (cgroup_create(p, &cg, warn, spec->warn_ctx, err) < 0)
			goto fail_child;
		j->cg = cg;
	}
	if (cg) {
		j->cg_mode = cg->probe.mode;
		for (int k = 0; k < CTRL__N; k++)
			j->cg_enforced[k] = cg->enforced[k];
	}
	/* Moving a task into a v1 cgroup waits for an RCU grace period (a few
	 * ms, unless the host mounts cgroup2 with favordynmods: `nsbox info`);
	 * the child builds its root meanwhile and forks the payload only
	 * after ATTACHED, so the payload starts inside every cgroup. */
	if (cg && cgroup_attach(cg, pid, v2_attached, err) < 0)
		goto fail_child;
	/* If this fails the child has died; its ERROR is read below. */
	(void)send_msg(sv[0], SYNC_ATTACHED,
		       (j->cg_enforced[CTRL_MEMORY] ? SYNC_CG_MEMORY : 0) | (j->cg_enforced[CTRL_PIDS] ? SYNC_CG_PIDS : 0),
		       NULL);
	r = recv_msg(sv[0], &m);
	if (r == 1 && m.type == SYNC_READY) {
		/* prog is static */
		j->sync_fd = sv[0];
		return 0;
	}
	if (r == 1 && (m.type == SYNC_ERROR || m.type == SYNC_EXEC_ERROR)) {
		err->code = m.code;
		snprintf(err->step, sizeof(err->step), "%s", m.step);
		snprintf(err->msg, sizeof(err->msg), "%s", m.msg);
		if (m.type == SYNC_EXEC_ERROR) {
			/* The command itself is the problem: report like a shell. */
			j->sync_fd = sv[0];
			sv[0] = -1;
			jail_wait(j, &j->status, NULL);
			j->status.exec_errno = m.code ? m.code : ENOEXEC;
			jail_destroy(j);
			/* prog is static */
			return -2;
		}
	} else {
		err_set(err, r < 0 ? errno : 0, "the sandbox died during setup");
		err_step(err, "launch");
	}
fail_child:
	jail_destroy(j);	/* closes the pidfd and removes the cgroups */
	cg = NULL;
	pidfd = -1;
fail:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	if (pidfd >= 0)
		close(pidfd);
	cgroup_destroy(cg);
	/* prog is static */
	j->pidfd = -1;
	return -1;
}
