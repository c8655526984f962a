/* Run a command in a new sandbox and wait for it (host/run.h). */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helper.h"
#include "netaudit.h"
#include "ttyrelay.h"
#include "util.h"

int process_threads(void)
{
	char buf[1024], *p;
	ssize_t n = read_file("/proc/self/stat", buf, sizeof(buf));
	int field = 2;

	if (n <= 0)
		return -1;
	/* comm, field 2, may hold spaces and parentheses: count from its end. */
	p = strrchr(buf, ')');
	if (!p)
		return -1;
	while (*p && field < 20)
		if (*p++ == ' ')
			field++;
	return field == 20 ? atoi(p) : -1;
}

/* ---- signal forwarding: one run at a time per process ----
 *
 * The handlers go in at the claim, before the sandbox is built: a Ctrl-C
 * while it is being made (tens of ms, more on a busy host) must stop the
 * command, not wait for it to run to its end.  Until the sandbox's pid is
 * known the handler only records the signal in fwd_pending; forward_start
 * publishes the pid, then takes what was recorded and sends it.  The two
 * sides pair up without a lock (the handler may run on any thread of the
 * caller): the handler records, then reads the pid; forward_start writes
 * the pid, then takes the record.  Both sequentially consistent, so at
 * least one of them sees the other's write, and the exchange hands each
 * recorded signal to exactly one of them.  A signal recorded and never
 * sent (no sandbox came of it) is raised again once the caller's own
 * handlers are back. */

static const int fwd_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
static atomic_bool fwd_busy;
static atomic_int fwd_pidfd = -1;
static atomic_int fwd_pid;
static atomic_uint fwd_pending; /* 1u << sig for each signal not sent yet */
static struct sigaction fwd_old[ARRAY_SIZE(fwd_sigs)];
static bool fwd_installed[ARRAY_SIZE(fwd_sigs)];

/* The handler uses these: they must not take a lock. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "lock-free atomic int");

static void fwd_send(int sig)
{
	int pidfd = atomic_load(&fwd_pidfd);
	pid_t pid = atomic_load(&fwd_pid);

	if (pidfd < 0 || syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0)
		if (pid > 0)
			kill(pid, sig);
}

static void fwd_send_pending(void)
{
	unsigned int pend = atomic_exchange(&fwd_pending, 0);

	for (size_t i = 0; i < ARRAY_SIZE(fwd_sigs); i++)
		if (pend & (1u << fwd_sigs[i]))
			fwd_send(fwd_sigs[i]);
}

static void on_forward(int sig)
{
	int saved = errno;

	if (atomic_load(&fwd_pid) > 0) {
		fwd_send(sig);
	} else {
		atomic_fetch_or(&fwd_pending, 1u << sig);
		if (atomic_load(&fwd_pid) > 0)
			fwd_send_pending();
	}
	errno = saved;
}

/* Claim forwarding before anything is built (EBUSY then costs nothing) and
 * catch the signals from here on. */
static int forward_claim(struct nsbox_err *err)
{
	struct sigaction sa = { .sa_handler = on_forward, .sa_flags = SA_RESTART };

	if (atomic_exchange(&fwd_busy, true))
		return err_set(err, EBUSY, "another run in this process is already forwarding signals");
	atomic_store(&fwd_pid, 0);
	atomic_store(&fwd_pidfd, -1);
	atomic_store(&fwd_pending, 0);
	/* SA_RESTART: the setup's own reads and writes go on; the wait loops
	 * need no EINTR, the handler sends the signal itself.  A signal the
	 * caller ignores (nohup, a shell's background job) stays ignored: it
	 * was not meant for anyone. */
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ARRAY_SIZE(fwd_sigs); i++) {
		fwd_installed[i] = false;
		if (sigaction(fwd_sigs[i], NULL, &fwd_old[i]) < 0 || fwd_old[i].sa_handler == SIG_IGN)
			continue;
		fwd_installed[i] = sigaction(fwd_sigs[i], &sa, NULL) == 0;
	}
	return 0;
}

/* The command's sandbox exists: send what came meanwhile, and what comes
 * from now on. */
static void forward_start(pid_t pid, int pidfd)
{
	atomic_store(&fwd_pidfd, pidfd);
	atomic_store(&fwd_pid, pid);
	fwd_send_pending();
}

static void forward_stop(void)
{
	unsigned int pend;

	for (size_t i = 0; i < ARRAY_SIZE(fwd_sigs); i++)
		if (fwd_installed[i])
			(void)sigaction(fwd_sigs[i], &fwd_old[i], NULL);
	atomic_store(&fwd_pid, 0);
	atomic_store(&fwd_pidfd, -1);
	/* Caught while there was no command to send it to: the caller's own
	 * disposition has it now (a Ctrl-C during a failed setup still
	 * interrupts the caller). */
	pend = atomic_exchange(&fwd_pending, 0);
	for (size_t i = 0; i < ARRAY_SIZE(fwd_sigs); i++)
		if (pend & (1u << fwd_sigs[i]))
			kill(getpid(), fwd_sigs[i]);
	atomic_store(&fwd_busy, false);
}

/* ---- the egress audit's callback (netaudit.h) ----
 *
 * A pipe the proxy writes to and the waiting thread reads: drained
 * whenever it is readable while the command runs (so a full pipe never
 * holds the sandbox's network back for long), once more before the
 * sandbox is destroyed (room for the lines of the tunnels its end
 * closes), and to EOF after (the proxy is gone). */

struct run_audit {
	struct netaudit a;
	const struct run_opts *o;
};

/* Deliver what is waiting; false at EOF (stop watching the pipe). */
static bool audit_drain(void *ctx)
{
	struct run_audit *ra = ctx;
	bool more = ra->a.fd >= 0 && !netaudit_drain(&ra->a);

	netaudit_warn(&ra->a, ra->o->warn, ra->o->warn_ctx);
	return more;
}

static void audit_finish(struct run_audit *ra)
{
	if (ra->a.fd < 0)
		return;
	netaudit_finish(&ra->a, now_ns() + NETAUDIT_FINISH_NS);
	netaudit_warn(&ra->a, ra->o->warn, ra->o->warn_ctx);
}

/* ---- the two ways ---- */

static int run_here(const struct nsbox_policy *p, char *const argv[], const struct run_opts *o, struct run_audit *ra,
		    int audit_wr, struct run_result *res, struct nsbox_err *err)
{
	/* The audit pipe's write end: ours until the proxy has it. */
	_cleanup_close_ int wr = audit_wr;
	struct jail j;
	struct jail_spec spec = { .policy = p,
				  .argv = argv,
				  .exec_fd = -1,
				  .warn = o->warn,
				  .warn_ctx = o->warn_ctx,
				  .controlling_tty = o->controlling_tty,
				  /* jail_wait_with below forks the proxy at first use. */
				  .egress_lazy = true };
	/* The audit descriptor, copied above 2 first: the caller's may be
	 * one of 0-2, which the stdio shuffle below replaces. */
	_cleanup_close_ int log_fd = -1;
	/* saved[i]: our fd i, copied (>= 0), closed before (-1), or not
	 * touched yet (-2: nothing to restore). */
	int saved[3] = { -2, -2, -2 }, src[3] = { -1, -1, -1 }, audit_fds[EGRESS_AUDIT_FDS];
	int n, r = 0;

	n = process_threads();
	if (n != 1)
		return err_set(err, EINVAL, "in_process needs a single-threaded caller (this process has %d threads)",
			       n);
	spec.net_audit_fds = audit_fds;
	if (o->net_log_fd >= 0) {
		log_fd = fcntl(o->net_log_fd, F_DUPFD_CLOEXEC, 3);
		if (log_fd < 0)
			return err_sys(err, "net_log_fd %d", o->net_log_fd);
		audit_fds[spec.n_net_audit_fds++] = log_fd;
	}
	if (wr >= 0)
		audit_fds[spec.n_net_audit_fds++] = wr;
	if (o->forward_signals && forward_claim(err) < 0)
		return -1;
	/* The sandbox inherits 0-2: put the requested fds there for the clone
	 * (through copies above 2, so that any permutation works), and ours
	 * back afterwards. */
	if (o->stdio) {
		for (int i = 0; i < 3 && r == 0; i++) {
			src[i] = fcntl(o->stdio[i], F_DUPFD_CLOEXEC, 3);
			if (src[i] < 0) {
				r = err_sys(err, "stdio fd %d", o->stdio[i]);
				break;
			}
			saved[i] = fcntl(i, F_DUPFD_CLOEXEC, 3);
			if (saved[i] < 0 && errno != EBADF) {
				saved[i] = -2;
				r = err_sys(err, "save fd %d", i);
			}
		}
		for (int i = 0; i < 3 && r == 0; i++)
			if (dup2(src[i], i) < 0)
				r = err_sys(err, "stdio");
	}
	if (r == 0)
		r = jail_start(&j, &spec, err);
	/* Only the proxy keeps the write end: EOF once it is gone. */
	closep(&wr);
	wr = -1;
	for (int i = 0; i < 3; i++) {
		if (saved[i] >= 0) {
			(void)dup2(saved[i], i);
			close(saved[i]);
		} else if (saved[i] == -1) {
			close(i);
		}
		if (src[i] >= 0)
			close(src[i]);
	}
	if (r == -1) {
		if (o->forward_signals)
			forward_stop();
		return -1;
	}
	if (r == 0) {
		if (o->forward_signals)
			forward_start(j.pid, j.pidfd);
		struct nsbox_err we = { 0 };

		if (jail_wait_with(&j, NULL, ra->a.fd, audit_drain, ra, err) < 0 && o->warn)
			o->warn(o->warn_ctx, err->msg);
		if (o->forward_signals)
			forward_stop();
		if (jail_sync_workspace(&j, &we) < 0 && o->warn)
			o->warn(o->warn_ctx, we.msg);
		(void)audit_drain(ra);
		jail_destroy(&j);
	} else if (o->forward_signals) {
		forward_stop();
	}
	res->st = j.status;
	res->cg_mode = j.cg_mode;
	for (int i = 0; i < 3; i++)
		res->cg_enforced[i] = j.cg_enforced[i];
	return 0;
}

static int run_helper(const struct nsbox_policy *p, char *const argv[], const struct run_opts *o, struct run_audit *ra,
		      int audit_wr, struct run_result *res, struct nsbox_err *err)
{
	/* The audit pipe's write end: ours until the proxy has it. */
	_cleanup_close_ int wr = audit_wr;
	struct helper_sandbox sb = { .pidfd = -1 };
	struct nsbox_err e2 = { 0 };
	unsigned long long deadline = 0;
	bool timed_out = false;
	int r, audit_fds[EGRESS_AUDIT_FDS];
	size_t n_audit = 0;

	if (o->net_log_fd >= 0)
		audit_fds[n_audit++] = o->net_log_fd;
	if (wr >= 0)
		audit_fds[n_audit++] = wr;
	if (o->forward_signals && forward_claim(err) < 0)
		return -1;
	r = helper_run(p, argv, o->stdio, audit_fds, n_audit, o->warn, o->warn_ctx, &sb, &res->st, err);
	/* Only the proxy keeps the write end: EOF once it is gone. */
	closep(&wr);
	wr = -1;
	if (r <= 0 && o->forward_signals)
		forward_stop();
	if (r < 0)
		return -1;
	res->cg_mode = sb.cg_mode;
	for (int i = 0; i < 3; i++)
		res->cg_enforced[i] = sb.cg_enforced[i];
	if (r == 0)
		return 0; /* could not be executed: res->st is final */
	if (o->forward_signals)
		forward_start(sb.pid, sb.pidfd);
	if (p->time_limit > 0)
		deadline = now_ns() + (unsigned long long)(p->time_limit * 1e9);
	for (;;) {
		struct pollfd pf[2] = { { sb.pidfd, POLLIN, 0 }, { ra->a.fd >= 0 && !ra->a.eof ? ra->a.fd : -1, POLLIN, 0 } };
		int ms = -1, k;

		if (deadline) {
			unsigned long long now = now_ns();

			if (now >= deadline) {
				timed_out = true;
				helper_kill(&sb);
				break;
			}
			/* Clamped: a limit of weeks must not overflow into "forever". */
			ms = deadline - now > 1000000000ull * 1000000ull ? 1000000000
									 : (int)((deadline - now + 999999) / 1000000);
		}
		k = poll(pf, 2, ms);
		if (k > 0 && pf[1].revents)
			(void)audit_drain(ra);
		if (k > 0 && pf[0].revents)
			break;
		if (k < 0 && errno != EINTR) {
			if (o->warn)
				o->warn(o->warn_ctx, "poll on the sandbox failed; killing it");
			helper_kill(&sb);
			break;
		}
	}
	if (o->forward_signals)
		forward_stop();
	(void)audit_drain(ra);
	if (helper_destroy(&sb, &res->st, &e2) < 0 && o->warn)
		o->warn(o->warn_ctx, e2.msg);
	if (wsync_job_run(&sb.ws, &e2) < 0 && o->warn)
		o->warn(o->warn_ctx, e2.msg);
	if (timed_out)
		res->st.time_limit = true;
	return 0;
}

int run_command(const struct nsbox_policy *p, char *const argv[], const struct run_opts *o, struct run_result *res,
		struct nsbox_err *err)
{
	struct run_audit ra = { .a.fd = -1, .o = o };
	struct ttyrelay tty = { .slave = -1, .in_rd = -1, .ctl = -1 };
	struct run_opts with = *o;
	_cleanup_close_ int devnull = -1;
	int r, audit_wr = -1, std[3] = { 0, 1, 2 };

	memset(res, 0, sizeof(*res));
	if (!argv || !argv[0])
		return err_set(err, EINVAL, "no command given");
	if (policy_validate(p, err) < 0)
		return -1;
	/* The caller's 0-2 by default; one the caller has closed (a daemon)
	 * becomes /dev/null, as it would be for a fresh process. */
	if (!o->stdio)
		for (int i = 0; i < 3; i++)
			if (fcntl(i, F_GETFD) < 0) {
				if (devnull < 0 && (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
					return err_sys(err, "open /dev/null");
				std[i] = devnull;
			}
	with.stdio = o->stdio ? o->stdio : std;
	/* A terminal is never handed over (host/ttyrelay.c), but for the
	 * caller's own pseudo-terminal made to be the controlling one. */
	if (!o->controlling_tty) {
		if (ttyrelay_start(&tty, with.stdio, err) < 0)
			return err_step(err, "stdio");
		with.stdio = tty.stdio;
	}
	if (o->net_audit && p->n_net_allow && !p->share_net) {
		if (netaudit_open(&ra.a, o->net_audit, o->net_audit_ctx, &audit_wr, err) < 0) {
			ttyrelay_stop(&tty, false);
			return err_step(err, "egress");
		}
	}
	r = o->in_process ? run_here(p, argv, &with, &ra, audit_wr, res, err)
			  : run_helper(p, argv, &with, &ra, audit_wr, res, err);
	/* Every record before we return (the proxy is gone by now). */
	audit_finish(&ra);
	/* And every byte of the output (within a second, past a time limit). */
	ttyrelay_stop(&tty, r == 0 && res->st.time_limit);
	if (r < 0)
		return -1;
	res->exit_code = jail_exit_code(&res->st);
	return 0;
}
