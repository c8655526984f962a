/* Watching a running sandbox from the host: the wall-clock limit, reaping
 * pid 1, final accounting, teardown. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "egress.h"
#include "jail.h"
#include "steps.h"
#include "sync.h"
#include "util.h"
#include "wsync.h"


static void read_sync(struct jail *j)
{
	struct sync_msg m;
	ssize_t n = recv(j->sync_fd, &m, sizeof(m), MSG_DONTWAIT);

	if (n == (ssize_t)sizeof(m) && m.type == SYNC_STATUS) {
		j->have_payload_status = true;
		j->payload_status = m.arg;
	} else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		close(j->sync_fd);
		j->sync_fd = -1;
	}
}

static void finish(struct jail *j, int pid1_status, const struct rusage *ru)
{
	struct jail_status *st = &j->status;
	int ws = j->have_payload_status ? j->payload_status : pid1_status;
	double cpu_usec;
	bool tl = st->time_limit, setup_failed = st->setup_failed;
	int exec_errno = st->exec_errno;

	memset(st, 0, sizeof(*st));
	st->time_limit = tl;
	st->setup_failed = setup_failed;
	st->exec_errno = exec_errno;
	st->wall = (double)(now_ns() - j->start_ns) / 1e9;
	st->exited = WIFEXITED(ws);
	st->exit_code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
	st->term_signal = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
	st->cpu_user = (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec / 1e6;
	st->cpu_system = (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec / 1e6;
	cgroup_stats(j->cg, &st->peak_memory, &st->oom_killed, &cpu_usec);
	if (!st->peak_memory)
		st->peak_memory = (uint64_t)ru->ru_maxrss * 1024;
	j->reaped = true;
}

static int reap(struct jail *j, int flags)
{
	struct rusage ru;
	int ws;
	pid_t w;

	do
		w = wait4(j->pid, &ws, flags, &ru);
	while (w < 0 && errno == EINTR);
	if (w <= 0)
		return w;
	/* The payload's status may still sit in the socket. */
	if (j->sync_fd >= 0)
		read_sync(j);
	finish(j, ws, &ru);
	return 1;
}

int jail_try_reap(struct jail *j, struct nsbox_err *err)
{
	int r;

	if (j->reaped)
		return 1;
	if (j->sync_fd >= 0)
		read_sync(j);
	r = reap(j, WNOHANG);
	if (r < 0)
		return err_sys(err, "wait for the sandbox");
	return r;
}

/* A lazy proxy (jail_spec.egress_lazy) not forked yet: its pair and pid
 * 1's sockets are let go. */
static void egress_release(struct jail *j)
{
	if (!j->egress_pending)
		return;
	egress_prep_close(&j->egress_prep);
	for (int i = 0; i < EGRESS_NS_SOCKETS; i++)
		close(j->egress_socks[i]);
	j->egress_pending = false;
}

/* The sandbox's first connection or DNS query is queued on one of the
 * sockets: fork the proxy with them; it takes the queued ones first. */
static int egress_start(struct jail *j, struct nsbox_err *err)
{
	int r = egress_fork(j->egress_policy, &j->egress_prep, j->egress_socks, confine_proxy, &j->egress_pid,
			    err);

	if (r < 0) {
		/* Its network would hang: the sandbox ends instead, with
		 * NSBOX_EXIT_SETUP (jail_exit_code).  The sockets are closed
		 * only once it is dead: a closed DNS socket answers the query
		 * with a port-unreachable, and the program would go on. */
		j->status.setup_failed = true;
		jail_kill(j);
		(void)reap(j, 0);
	}
	for (int i = 0; i < EGRESS_NS_SOCKETS; i++)
		close(j->egress_socks[i]);
	j->egress_pending = false;
	return r;
}

int jail_wait(struct jail *j, struct jail_status *st, struct nsbox_err *err)
{
	return jail_wait_with(j, st, -1, NULL, NULL, err);
}

int jail_wait_with(struct jail *j, struct jail_status *st, int fd, bool (*on_fd)(void *ctx), void *ctx,
		   struct nsbox_err *err)
{
	unsigned long long deadline = j->time_limit > 0 ? j->start_ns + (unsigned long long)(j->time_limit * 1e9) : 0;

	while (!j->reaped) {
		bool lazy = j->egress_pending;
		/* A negative fd is ignored by poll(2). */
		struct pollfd pfd[3 + EGRESS_NS_SOCKETS] = {
			{ .fd = j->pidfd, .events = POLLIN },
			{ .fd = j->sync_fd, .events = POLLIN },
			{ .fd = on_fd ? fd : -1, .events = POLLIN },
			{ .fd = lazy ? j->egress_socks[EGRESS_NS_HTTP] : -1, .events = POLLIN },
			{ .fd = lazy ? j->egress_socks[EGRESS_NS_SOCKS] : -1, .events = POLLIN },
			{ .fd = lazy ? j->egress_socks[EGRESS_NS_DNS] : -1, .events = POLLIN },
		};
		int timeout = -1;

		if (deadline && !j->status.time_limit) {
			unsigned long long now = now_ns();
			if (now >= deadline) {
				j->status.time_limit = true;
				jail_kill(j);
				continue;
			}
			unsigned long long ms = (deadline - now + 999999) / 1000000;
			timeout = ms > 1000000000ULL ? 1000000000 : (int)ms;
		}
		int n = poll(pfd, ARRAY_SIZE(pfd), timeout);
		if (n < 0 && errno != EINTR)
			return err_sys(err, "poll");
		if (n <= 0)
			continue;
		if (lazy && (pfd[3].revents || pfd[4].revents || pfd[5].revents) && egress_start(j, err) < 0)
			return -1;
		if (pfd[2].revents && !on_fd(ctx))
			fd = -1;
		if (pfd[1].revents)
			read_sync(j);
		if (pfd[0].revents && reap(j, 0) < 0)
			return err_sys(err, "wait for the sandbox");
	}
	if (st && st != &j->status)
		*st = j->status;
	return 0;
}

void jail_kill(struct jail *j)
{
	if (j->pid > 0 && !j->reaped) {
		/* Through the pidfd: no pid reuse race.  Killing pid 1 of the
		 * namespace kills every process in it. */
		if (j->pidfd < 0 || syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0) < 0)
			kill(j->pid, SIGKILL);
	}
	cgroup_kill(j->cg);
}

int jail_sync_workspace(struct jail *j, struct nsbox_err *err)
{
	int r = 0;

	if (j->ws_synced || j->ws_host_fd < 0 || j->ws_upper_fd < 0)
		return 0;
	/* Only a dead sandbox: nothing inside may change the upper layer
	 * while it is copied. */
	if (j->pid > 0 && !j->reaped) {
		jail_kill(j);
		(void)reap(j, 0);
	}
	j->ws_synced = true;
	if (j->reaped || j->pid <= 0)
		r = wsync_apply(j->ws_upper_fd, j->ws_host_fd, j->ws_uid, j->ws_gid, j->ws_size, err);
	close(j->ws_upper_fd);
	j->ws_upper_fd = -1;
	return r;
}

int jail_take_workspace(struct jail *j, struct wsync_job *out)
{
	if (j->ws_synced || j->ws_host_fd < 0 || j->ws_upper_fd < 0)
		return 0;
	if (j->pid > 0 && !j->reaped) {
		jail_kill(j);
		(void)reap(j, 0);
	}
	if (!j->reaped && j->pid > 0)
		return 0; /* not dead: nothing may be copied (jail_destroy closes them) */
	j->ws_synced = true;
	*out = (struct wsync_job){ .pending = true, .upper = j->ws_upper_fd, .host = j->ws_host_fd,
				   .uid = j->ws_uid, .gid = j->ws_gid, .size = j->ws_size };
	j->ws_upper_fd = j->ws_host_fd = -1;
	return 1;
}

void jail_destroy(struct jail *j)
{
	if (j->pid > 0 && !j->reaped) {
		jail_kill(j);
		(void)reap(j, 0);
	}
	/* An unaudited proxy is killed now and reaped last: its exit (~0.15
	 * ms to the reap, here) runs beside the cgroups' removal. */
	egress_stop_begin(j->egress_pid, j->egress_audited);
	egress_release(j);
	(void)jail_sync_workspace(j, NULL);
	if (j->ws_upper_fd >= 0)
		close(j->ws_upper_fd);
	if (j->ws_host_fd >= 0)
		close(j->ws_host_fd);
	j->ws_upper_fd = j->ws_host_fd = -1;
	if (j->pidfd >= 0)
		close(j->pidfd);
	if (j->sync_fd >= 0)
		close(j->sync_fd);
	j->pidfd = j->sync_fd = -1;
	cgroup_destroy(j->cg);
	j->cg = NULL;
	/* The proxy ends with its sandbox (egress.h). */
	egress_stop(j->egress_pid, j->egress_audited);
	j->egress_pid = 0;
}

int jail_exit_code(const struct jail_status *st)
{
	if (st->setup_failed)
		return NSBOX_EXIT_SETUP;
	if (st->time_limit)
		return NSBOX_EXIT_TIMEOUT;
	if (st->oom_killed && !st->exited)
		return NSBOX_EXIT_MEMORY;
	if (st->exited)
		return st->exit_code;
	return 128 + st->term_signal;
}
