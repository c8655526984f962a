/* The library's end of the helper processes (helper/helper.h): start them,
 * talk to each under its own mutex, restart one after it died or after a
 * fork.  A helper makes one sandbox at a time; a host that makes sandboxes
 * from several threads at once (nsboxd's workers) may run up to
 * HELPER_MAX of them (helper_set_count): each request goes to one that is
 * free, and a sandbox's later requests to the one that made it. */
#include "helper.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "locate.h"
#include "util.h"
#include "wsync.h"

/* A request that takes longer than this means the helper is stuck: it is
 * killed, and the next session starts a new one. */
#define HELPER_TIMEOUT_MS 60000

struct helper {
	pthread_mutex_t lock;
	int fd;			/* control socket, -1 when no helper */
	pid_t pid;
	int pidfd;
	uint64_t gen;		/* unique to each helper started (gen_last) */
};

#define HELPER_INIT { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .pidfd = -1 }
static struct helper HS[HELPER_MAX] = { HELPER_INIT, HELPER_INIT, HELPER_INIT, HELPER_INIT };
_Static_assert(HELPER_MAX == 4, "HS's initialisers");
static unsigned n_helpers = 1;	/* how many may run: helper_set_count */
static uint64_t gen_last;	/* atomic */
static unsigned rr;		/* atomic: where a request that finds every helper busy waits */

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* fork() while another thread talks to the helper would copy a held mutex
 * into the child; taking it around fork() makes the copy consistent.  The
 * child must not share the parent's helper (its requests would interleave
 * with the parent's), so it forgets it and starts its own on first use. */
static void atfork_prepare(void)
{
	for (int i = 0; i < HELPER_MAX; i++)
		pthread_mutex_lock(&HS[i].lock);
}

static void atfork_parent(void)
{
	for (int i = HELPER_MAX - 1; i >= 0; i--)
		pthread_mutex_unlock(&HS[i].lock);
}

static void atfork_child(void)
{
	for (int i = HELPER_MAX - 1; i >= 0; i--) {
		struct helper *h = &HS[i];

		if (h->fd >= 0)
			close(h->fd);
		if (h->pidfd >= 0)
			close(h->pidfd);
		h->fd = h->pidfd = -1;
		h->pid = 0;
		h->gen = 0;	/* no sandbox of the parent's names it */
		pthread_mutex_unlock(&h->lock);
	}
}

static void register_atfork(void)
{
	(void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Forget a helper that died or got stuck: kill it and reap it.  Its
 * sandboxes die with it (their pid 1 has PR_SET_PDEATHSIG from the
 * single-threaded helper). */
static void drop_helper(struct helper *h)
{
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	if (h->pidfd >= 0) {
		close(h->pidfd);
		h->pidfd = -1;
	}
	/* Not reaped before, so the pid is still the helper's.  The host may
	 * reap children itself (or ignore SIGCHLD): ECHILD is fine. */
	kill_reap(&h->pid);
}

static int start_helper(struct helper *h, struct nsbox_err *err)
{
	char path[PATH_MAX], exe[64];
	_cleanup_close_ int mfd = -1, ctl = -1, peer = -1;
	int sv[2];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	char *argv[] = { "nsbox-runner", "--helper", env_switch("NSBOX_SPARE") == 1 ? "--spare" : NULL, NULL };
	char *envp[] = { NULL };
	/* Ours until it is the helper (h->pid), below. */
	_cleanup_pid_ pid_t pid = 0;
	int r;

	if (runner_locate(path, sizeof(path), err) < 0)
		return -1;
	mfd = runner_sealed_copy(path, err);
	if (mfd < 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(err, "socketpair");
	ctl = sv[0];
	peer = sv[1];
	/* Above 10 so that the dup2s below never have fd == newfd (which
	 * would leave FD_CLOEXEC set). */
	{
		int a = fcntl(peer, F_DUPFD_CLOEXEC, 10), b = fcntl(mfd, F_DUPFD_CLOEXEC, 10);

		if (a < 0 || b < 0) {
			if (a >= 0)
				close(a);
			if (b >= 0)
				close(b);
			return err_sys(err, "dup");
		}
		close(peer);
		close(mfd);
		peer = a;
		mfd = b;
	}
	snprintf(exe, sizeof(exe), "/proc/self/fd/%d", mfd);
	sigemptyset(&none);
	sigfillset(&all);
	if (posix_spawn_file_actions_init(&fa) != 0)
		return err_set(err, ENOMEM, "posix_spawn_file_actions_init");
	if (posix_spawnattr_init(&at) != 0) {
		posix_spawn_file_actions_destroy(&fa);
		return err_set(err, ENOMEM, "posix_spawnattr_init");
	}
	/* Nothing from the host: /dev/null for stdio, no environment, default
	 * signal dispositions, no signal mask, its own session (a ^C on the
	 * host's terminal is for the host to handle, not the helper). */
	r = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (!r)
		r = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (!r)
		r = posix_spawn_file_actions_adddup2(&fa, 1, 2);
	if (!r)
		r = posix_spawn_file_actions_adddup2(&fa, peer, HELPER_CTL_FD);
	if (!r)
		r = posix_spawn_file_actions_adddup2(&fa, mfd, HELPER_EXEC_FD);
	if (!r)
		r = posix_spawnattr_setsigmask(&at, &none);
	if (!r)
		r = posix_spawnattr_setsigdefault(&at, &all);
	if (!r)
		r = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
	/* The memfd's path: the kernel opens it before closing CLOEXEC fds. */
	if (!r)
		r = posix_spawn(&pid, exe, &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (r)
		return err_set(err, r, "start the helper (%s)", path);
	h->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	h->pid = take_pid(&pid);
	h->fd = take_fd(&ctl);
	h->gen = __atomic_add_fetch(&gen_last, 1, __ATOMIC_RELAXED);
	return 0;
}

static bool helper_usable(struct helper *h)
{
	if (h->fd < 0)
		return false;
	if (h->pidfd >= 0) {
		struct pollfd p = { h->pidfd, POLLIN, 0 };

		if (poll(&p, 1, 0) == 1) {
			drop_helper(h);
			return false;
		}
	}
	return true;
}

static int transact(struct helper *h, const struct helper_req *req, const void *payload, const int *fds_in, size_t n_in,
		    struct helper_rep *rep, int *fd_out, int *fd_out2, struct nsbox_err *err);

/* Kill and destroy the sandbox the helper made for req (its answer rep)
 * when this process could not take its descriptors. */
static void forget_made(struct helper *h, const struct helper_req *req, const struct helper_rep *rep)
{
	struct helper_rep *r;
	struct nsbox_err e = { 0 };

	if (rep->failed || !rep->id || (req->op != HELPER_SPAWN && req->op != HELPER_RUN) || rep->exec_failed)
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	for (uint32_t op = HELPER_KILL; op <= HELPER_DESTROY; op++) {
		struct helper_req k = { .magic = HELPER_MAGIC, .op = op, .id = rep->id };

		if (transact(h, &k, NULL, NULL, 0, r, NULL, NULL, &e) < 0)
			break;
	}
	free(r);
}

/* One request, one answer, with the lock held.  fds_in[0..n_in) are sent
 * along (SCM_RIGHTS); *fd_out and *fd_out2 receive passed fds when not
 * NULL.  On a broken connection the helper is dropped (errno ECONNRESET). */
static int transact(struct helper *h, const struct helper_req *req, const void *payload, const int *fds_in, size_t n_in,
		    struct helper_rep *rep, int *fd_out, int *fd_out2, struct nsbox_err *err)
{
	struct iovec iov[2] = { { (void *)req, sizeof(*req) }, { (void *)payload, req->len } };
	union {
		char buf[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr mh;
	struct pollfd p[2];
	ssize_t n;
	int k;

	if (n_in > HELPER_MAX_FDS)
		return err_set(err, EINVAL, "too many fds for the nsbox helper");
	n = send_with_fds(h->fd, iov, req->len ? 2 : 1, fds_in, n_in);
	if (n < 0) {
		int e = errno;

		/* Only a broken connection means the helper is gone; a bad fd
		 * or an oversize message is the request's fault, and the
		 * helper's other sandboxes must live on. */
		if (e == EPIPE || e == ECONNRESET || e == ENOTCONN) {
			drop_helper(h);
			return err_set(err, ECONNRESET, "send to the nsbox helper");
		}
		if (e == ETOOMANYREFS)
			return err_set(err, e,
				       "send to the nsbox helper: this process's user has more descriptors in flight over "
				       "unix sockets than its soft RLIMIT_NOFILE (a sandbox of the same user can hold "
				       "them); raise the limit");
		return err_set(err, e, "send to the nsbox helper");
	}
	for (;;) {
		p[0] = (struct pollfd){ h->fd, POLLIN, 0 };
		p[1] = (struct pollfd){ h->pidfd, POLLIN, 0 };
		k = poll(p, 2, HELPER_TIMEOUT_MS);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0) {
			drop_helper(h);
			return err_set(err, ETIMEDOUT, "the nsbox helper did not answer within %d s; restarted",
				       HELPER_TIMEOUT_MS / 1000);
		}
		if (k < 0)
			return err_sys(err, "poll");
		if (p[0].revents)
			break;
		if (p[1].revents) {
			drop_helper(h);
			return err_set(err, ECONNRESET, "the nsbox helper died");
		}
	}
	iov[0] = (struct iovec){ rep, sizeof(*rep) };
	mh = (struct msghdr){ .msg_iov = iov, .msg_iovlen = 1, .msg_control = cm.buf,
			      .msg_controllen = sizeof(cm.buf) };
	do
		n = recvmsg(h->fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	{
		struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
		int got = -1, got2 = -1;

		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
			memcpy(&got, CMSG_DATA(c), sizeof(int));
			if (c->cmsg_len >= CMSG_LEN(2 * sizeof(int)))
				memcpy(&got2, CMSG_DATA(c) + sizeof(int), sizeof(int));
		}
		if (n == (ssize_t)sizeof(*rep) && rep->magic == HELPER_MAGIC && (mh.msg_flags & MSG_CTRUNC)) {
			/* A sound answer whose descriptors did not fit: this
			 * process is out of fds (RLIMIT_NOFILE), the helper is
			 * fine.  Dropping it, as for a broken answer, killed
			 * every other sandbox it held.  What it made for this
			 * request is ended instead. */
			if (got >= 0)
				close(got);
			if (got2 >= 0)
				close(got2);
			forget_made(h, req, rep);
			return err_set(err, EMFILE,
				       "the nsbox helper's answer carries descriptors this process has no room for "
				       "(RLIMIT_NOFILE reached)");
		}
		if (n != (ssize_t)sizeof(*rep) || rep->magic != HELPER_MAGIC || (mh.msg_flags & MSG_CTRUNC)) {
			if (got >= 0)
				close(got);
			if (got2 >= 0)
				close(got2);
			drop_helper(h);
			return err_set(err, ECONNRESET, "the nsbox helper %s",
				       n == 0 ? "exited" : "sent a malformed answer");
		}
		err_copy(&rep->err, &rep->err);
		rep->warnings[sizeof(rep->warnings) - 1] = '\0';
		rep->cgroup[sizeof(rep->cgroup) - 1] = '\0';
		if (fd_out)
			*fd_out = got;
		else if (got >= 0)
			close(got);
		if (fd_out2)
			*fd_out2 = got2;
		else if (got2 >= 0)
			close(got2);
	}
	return 0;
}

static int policy_text(const struct nsbox_policy *p, char **text, size_t *len, struct nsbox_err *err)
{
	FILE *f = open_memstream(text, len);

	if (!f)
		return err_sys(err, "open_memstream");
	policy_print(p, f);
	if (fclose(f) != 0)
		return err_set(err, ENOMEM, "policy text");
	if (*len > HELPER_MAX_POLICY) {
		free(*text);
		return err_set(err, E2BIG, "the policy is too large (%zu bytes)", *len);
	}
	return 0;
}

/* Pass the helper's warnings (one per line in rep->warnings) on. */
static void pass_warnings(struct helper_rep *rep, void (*warn)(void *ctx, const char *msg), void *ctx)
{
	char *line = rep->warnings, *nl;

	if (!warn)
		return;
	while (*line) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (*line)
			warn(ctx, line);
		if (!nl)
			break;
		line = nl + 1;
	}
}

static void fill_sandbox(struct helper *h, struct helper_sandbox *sb, const struct helper_rep *rep, int pidfd)
{
	sb->id = rep->id;
	sb->gen = h->gen;
	sb->slot = (unsigned)(h - HS);
	sb->pid = rep->pid;
	sb->pidfd = pidfd;
	snprintf(sb->cgroup, sizeof(sb->cgroup), "%s", rep->cgroup);
	sb->cg_mode = rep->cg_mode;
	for (int i = 0; i < 3; i++)
		sb->cg_enforced[i] = rep->cg_enforced[i] != 0;
}

/* Send one request carrying the policy (and maybe more) with the lock
 * held, restarting a helper that died since the last request, once.  On
 * success rep holds the answer; a failure the helper reported becomes -1
 * with err. */
static int request(struct helper *h, struct helper_req *req, const char *payload, const int *fds, size_t n_fds,
		   struct helper_rep *rep, int *pidfd, int *psock, struct nsbox_err *err)
{
	int r = -1;

	pthread_once(&atfork_once, register_atfork);
	for (int attempt = 0; attempt < 2; attempt++) {
		if (!helper_usable(h) && start_helper(h, err) < 0)
			break;
		r = transact(h, req, payload, fds, n_fds, rep, pidfd, psock, err);
		if (r == 0 || err->code != ECONNRESET)
			break;
	}
	if (r == 0 && rep->failed) {
		err_copy(err, &rep->err);
		r = -1;
	}
	if (r < 0) {
		if (*pidfd >= 0)
			close(*pidfd);
		if (psock && *psock >= 0)
			close(*psock);
		*pidfd = -1;
		if (psock)
			*psock = -1;
	}
	return r;
}

/* A helper for a new sandbox, locked: the first free one, else wait for
 * one in turn. */
static struct helper *helper_pick(void)
{
	unsigned n = __atomic_load_n(&n_helpers, __ATOMIC_RELAXED);
	struct helper *h;

	for (unsigned i = 0; i < n; i++)
		if (pthread_mutex_trylock(&HS[i].lock) == 0)
			return &HS[i];
	h = &HS[__atomic_fetch_add(&rr, 1, __ATOMIC_RELAXED) % n];
	pthread_mutex_lock(&h->lock);
	return h;
}

/* The helper that made sb, locked, or NULL when it is gone.  Only its own
 * lock is taken: going through every helper's waited on each busy one (a
 * workspace's write-back, a cold start) before reaching the right one. */
static struct helper *helper_of(const struct helper_sandbox *sb)
{
	struct helper *h;

	if (!sb->gen || sb->slot >= HELPER_MAX)
		return NULL;
	h = &HS[sb->slot];
	pthread_mutex_lock(&h->lock);
	if (h->gen == sb->gen && helper_usable(h))
		return h;
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

int helper_set_count(unsigned n)
{
	if (n < 1 || n > HELPER_MAX)
		return -EINVAL;
	__atomic_store_n(&n_helpers, n, __ATOMIC_RELAXED);
	return 0;
}

int helper_spawn(const struct nsbox_policy *p, int sock, const struct helper_spawn_opts *o,
		 struct helper_sandbox *sb, int *sock_out, struct nsbox_err *err)
{
	struct helper_req req = { .magic = HELPER_MAGIC, .op = HELPER_SPAWN,
				  .flags = (o->cold ? HELPER_COLD : 0) | (o->spare ? HELPER_SPARE : 0) };
	struct helper_rep *rep;
	char *text = NULL;
	size_t len = 0;
	struct helper *h;
	int pidfd = -1, psock = -1, r, fds[1 + EGRESS_AUDIT_FDS] = { sock };
	size_t n_fds = 1;

	*sock_out = -1;
	if (o->n_net_audit_fds > EGRESS_AUDIT_FDS)
		return err_set(err, EINVAL, "too many network audit descriptors");
	for (size_t i = 0; i < o->n_net_audit_fds; i++)
		fds[n_fds++] = o->net_audit_fds[i];
	if (n_fds > 1) {
		/* A spare was made without them, and one made now would be too. */
		req.flags |= HELPER_NET_AUDIT;
		req.flags &= ~HELPER_SPARE;
	}
	if (policy_text(p, &text, &len, err) < 0)
		return -1;
	rep = calloc(1, sizeof(*rep));
	if (!rep) {
		explicit_bzero(text, len);
		free(text);
		return err_set(err, ENOMEM, "helper answer");
	}
	req.len = (uint32_t)len;
	req.text_len = (uint32_t)len;
	h = helper_pick();
	r = request(h, &req, text, fds, n_fds, rep, &pidfd, &psock, err);
	if (r == 0 && (pidfd < 0 || (rep->has_sock != 0) != (psock >= 0))) {
		err_set(err, EPROTO, "the nsbox helper sent no pidfd or a stray socket");
		r = -1;
	}
	if (r == 0) {
		*sock_out = psock;
		psock = -1;
		fill_sandbox(h, sb, rep, pidfd);
		pidfd = -1;
	}
	pthread_mutex_unlock(&h->lock);
	if (pidfd >= 0)
		close(pidfd);
	if (psock >= 0)
		close(psock);
	if (r == 0)
		pass_warnings(rep, o->warn, o->warn_ctx);
	/* The policy may carry secrets (Set=): do not leave them in freed memory. */
	explicit_bzero(text, len);
	free(text);
	free(rep);
	return r;
}

int helper_run(const struct nsbox_policy *p, char *const argv[], const int stdio[3], const int *audit_fds,
	       size_t n_audit_fds, void (*warn)(void *ctx, const char *msg), void *warn_ctx, struct helper_sandbox *sb,
	       struct jail_status *st, struct nsbox_err *err)
{
	struct helper_req req = { .magic = HELPER_MAGIC, .op = HELPER_RUN,
				  .flags = n_audit_fds ? HELPER_NET_AUDIT : 0 };
	struct helper_rep *rep = NULL;
	char *text = NULL, *buf = NULL;
	size_t len = 0, alen = 0;
	struct helper *h;
	int pidfd = -1, r, fds[HELPER_MAX_FDS] = { stdio[0], stdio[1], stdio[2] };

	if (n_audit_fds > EGRESS_AUDIT_FDS)
		return err_set(err, EINVAL, "too many network audit descriptors");
	for (size_t i = 0; i < n_audit_fds; i++)
		fds[3 + i] = audit_fds[i];

	for (size_t i = 0; argv[i]; i++) {
		alen += strlen(argv[i]) + 1;
		req.argc++;
		if (alen > HELPER_MAX_ARGV)
			return err_set(err, E2BIG, "the command line is too long (over %u bytes)", HELPER_MAX_ARGV);
	}
	if (req.argc == 0)
		return err_set(err, EINVAL, "no command given");
	if (policy_text(p, &text, &len, err) < 0)
		return -1;
	/* One SEQPACKET message: it must fit the socket's default send buffer
	 * (net.core.wmem_default, 208 KiB on most hosts). */
	if (sizeof(req) + len + alen > HELPER_MAX_RUN) {
		explicit_bzero(text, len);
		free(text);
		return err_set(err, E2BIG, "the policy and the command line together are too large (%zu bytes, at most %u)",
			       len + alen, HELPER_MAX_RUN);
	}
	buf = malloc(len + alen);
	rep = calloc(1, sizeof(*rep));
	if (!buf || !rep) {
		r = err_set(err, ENOMEM, "helper request");
		goto out;
	}
	memcpy(buf, text, len);
	for (size_t i = 0, at = len; argv[i]; i++) {
		size_t n = strlen(argv[i]) + 1;

		memcpy(buf + at, argv[i], n);
		at += n;
	}
	req.len = (uint32_t)(len + alen);
	req.text_len = (uint32_t)len;
	h = helper_pick();
	r = request(h, &req, buf, fds, 3 + n_audit_fds, rep, &pidfd, NULL, err);
	if (r == 0 && rep->exec_failed) {
		*st = rep->st;
		fill_sandbox(h, sb, rep, -1);	/* not running: only the cgroup facts */
		if (pidfd >= 0)
			close(pidfd);
		pidfd = -1;
	} else if (r == 0 && pidfd < 0) {
		err_set(err, EPROTO, "the nsbox helper sent no pidfd");
		r = -1;
	} else if (r == 0) {
		fill_sandbox(h, sb, rep, pidfd);
		pidfd = -1;
		r = 1;
	}
	pthread_mutex_unlock(&h->lock);
	if (pidfd >= 0)
		close(pidfd);
	if (r >= 0)
		pass_warnings(rep, warn, warn_ctx);
out:
	if (text)
		explicit_bzero(text, len);
	if (buf)
		explicit_bzero(buf, len);
	free(text);
	free(buf);
	free(rep);
	return r;
}

void helper_kill(const struct helper_sandbox *sb)
{
	/* kill(pid) is no race either: the helper reaps the sandbox only on
	 * our DESTROY, so its pid cannot be reused before. */
	if (sb->pidfd < 0 || syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0) < 0)
		if (sb->pid > 0)
			kill(sb->pid, SIGKILL);
}

static int simple_fds(const struct helper_sandbox *sb, uint32_t op, struct helper_rep *rep, int *fd_out,
		      int *fd_out2, struct nsbox_err *err)
{
	struct helper_req req = { .magic = HELPER_MAGIC, .op = op, .id = sb->id };
	struct helper *h = helper_of(sb);
	int r;

	if (!h)
		return err_set(err, ESRCH, "the nsbox helper that made this sandbox is gone");
	r = transact(h, &req, NULL, NULL, 0, rep, fd_out, fd_out2, err);
	pthread_mutex_unlock(&h->lock);
	if (r == 0 && rep->failed) {
		err_copy(err, &rep->err);
		r = -1;
	}
	return r;
}

int helper_destroy(struct helper_sandbox *sb, struct jail_status *st, struct nsbox_err *err)
{
	struct helper_rep *rep = calloc(1, sizeof(*rep));
	int r, upper = -1, host = -1;
	bool sound;

	helper_kill(sb);
	wsync_job_drop(&sb->ws);
	if (!rep) {
		r = err_set(err, ENOMEM, "helper answer");
	} else {
		r = simple_fds(sb, HELPER_DESTROY, rep, &upper, &host, err);
		/* A sound answer whose descriptors this process had no room
		 * for (RLIMIT_NOFILE): the sandbox's end is as the helper says;
		 * only the write-back is lost, and said so. */
		if (r < 0 && err->code == EMFILE && rep->magic == HELPER_MAGIC) {
			r = 0;
			if (rep->has_ws) {
				rep->has_ws = 0;
				r = err_set(err, 0,
					    "copy /workspace back: not done: this process has no room for its "
					    "descriptors (RLIMIT_NOFILE reached)");
			}
		}
	}
	/* A failure with code 0 is a warning: the answer stands. */
	sound = r == 0 || err->code == 0;
	if (st) {
		if (sound) {
			*st = rep->st;
		} else {
			memset(st, 0, sizeof(*st));
			st->term_signal = SIGKILL;
		}
	}
	if (r == 0 && rep->warnings[0])
		r = err_set(err, 0, "%.*s", (int)sizeof(rep->warnings) - 1, rep->warnings);
	/* The bounded workspace's write-back is ours to run, with the
	 * helper's lock released, when the caller says (wsync_job_run):
	 * the helper's other sandboxes (their starts, their kills at a time
	 * limit) never wait for it, nor does this session's own end. */
	if (sound && rep->has_ws && upper >= 0 && host >= 0) {
		sb->ws = (struct wsync_job){ .pending = true, .upper = upper, .host = host, .uid = (uid_t)rep->ws_uid,
					     .gid = (gid_t)rep->ws_gid, .size = rep->ws_size };
		upper = host = -1;
	} else if (sound && rep->has_ws && r == 0) {
		r = err_set(err, 0, "copy /workspace back: the helper's descriptors for it did not come");
	}
	if (upper >= 0)
		close(upper);
	if (host >= 0)
		close(host);
	free(rep);
	if (sb->pidfd >= 0)
		close(sb->pidfd);
	sb->pidfd = -1;
	return r;
}

/* A cgroup's counter, or false when the file is not there. */
static bool read_counter(const char *dir, const char *file, uint64_t *v)
{
	char path[sizeof(((struct helper_sandbox *)0)->cgroup) + 32], buf[64];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	*v = strtoull(buf, NULL, 10);
	return true;
}

int helper_info(const struct helper_sandbox *sb, uint64_t *current, uint64_t *peak, struct nsbox_err *err)
{
	(void)err;
	/* The memory cgroup's own counters, read here (the helper made the
	 * cgroup and named it; it is ours to read): asking the helper waited
	 * behind its lock for whatever it was doing, a write-back of seconds,
	 * and nsboxd asks on its event loop's thread.  0 where there are none
	 * to read (no cgroup; v2 without the memory controller), as the helper
	 * answered. */
	*current = *peak = 0;
	if (!sb->cgroup[0])
		return 0;
	if (read_counter(sb->cgroup, "memory.current", current))
		(void)read_counter(sb->cgroup, "memory.peak", peak);	/* Linux 5.19 on */
	else if (read_counter(sb->cgroup, "memory.usage_in_bytes", current))	/* v1 */
		(void)read_counter(sb->cgroup, "memory.max_usage_in_bytes", peak);
	return 0;
}

pid_t helper_pid(void)
{
	pid_t p;

	pthread_mutex_lock(&HS[0].lock);
	p = HS[0].fd >= 0 ? HS[0].pid : 0;
	pthread_mutex_unlock(&HS[0].lock);
	return p;
}
