/* The _nsbox module's socket (pymod.h): who reads it, the io thread,
 * frames out, the serve loop's next frame and tool-call waits.
 *
 * Who reads the socket: whichever thread needs a frame.  Between execs the
 * main thread reads it itself in recv() (no thread hop on the way to an
 * EXEC); a thread waiting for a tool call's answer reads it itself too.
 * Only one thread reads at a time (S.reading).  The io thread, started at
 * the first exec (a template starts none, an unused session has none):
 *  - empties the stdout/stderr capture pipes (capture.c: fds 1 and 2 point
 *    at them, so C extensions and subprocesses are captured too);
 *  - while an exec runs and nobody else has read the socket for
 *    WATCH_DELAY, reads it too, so that CANCEL interrupts user code that
 *    makes no tool calls; it gives the socket up as soon as another thread
 *    wants it (eventfd poke).
 * Whoever reads answers PING at once, turns CANCEL into a signal to the
 * main thread, hands RETURN/RAISE to the waiting tool call by id, and
 * queues everything else for the serve loop. */
#include "pymod.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "spinwait.h"
#include "util.h"

/* How long an exec may go without anyone reading the socket before the
 * io thread watches it (the latency of a CANCEL that finds no reader). */
#define WATCH_DELAY_NS 1000000ull

struct qitem {
	struct proto_frame f;
	struct qitem *next;
};

struct runner_exec runner_exec;

static struct {
	int fd;
	pthread_t main_thread;

	pthread_mutex_t send_lock;

	pthread_mutex_t lock;	/* queue, calls, dead, reading, wanting */
	pthread_cond_t cond;	/* any of those changed, or a cancel */
	struct qitem *qhead, *qtail;
	struct io_call *calls;
	uint32_t next_call_id;
	bool dead;
	bool reading;		/* a thread owns S.rd and reads the socket */
	bool io_reading;	/* ... and it is the io thread */
	bool spin_next;		/* the next blocking read may spin first (io_next_frame, io_call_wait) */
	struct spinwait spin;	/* the reader's (one at a time) */
	unsigned wanting;	/* threads waiting to read */
	unsigned long long last_read;	/* when a reader last let go */
	struct proto_reader *rd;

	int efd;		/* eventfd: wakes the io thread */
	int tfd;		/* timerfd: wakes it WATCH_DELAY into an exec */
	unsigned long long timer_until;	/* when tfd fires, if armed (main thread) */
	bool io_started;
	/* The descriptor that came with the last FILE_* request (the host's
	 * memfd, capability "files-fd"), until io_take_fd(); -1 none.
	 * Only the reader sets it (one at a time), under lock. */
	int passed_fd;
} S = {
	.fd = -1,
	.passed_fd = -1,
	.send_lock = PTHREAD_MUTEX_INITIALIZER,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.efd = -1,
	.tfd = -1,
};

static void mark_dead_locked(void)
{
	S.dead = true;
	pthread_cond_broadcast(&S.cond);
}

static void mark_dead(void)
{
	pthread_mutex_lock(&S.lock);
	mark_dead_locked();
	pthread_mutex_unlock(&S.lock);
}

/* Blocking write of one frame (the socket itself is blocking: user code's
 * subprocesses never see it, CLOEXEC). */
int io_send_frame(uint16_t type, uint32_t id, const char *payload, size_t len)
{
	struct nsbox_err err;
	int r;

	pthread_mutex_lock(&S.send_lock);
	r = proto_write_frame(S.fd, type, id, payload, len, &err);
	pthread_mutex_unlock(&S.send_lock);
	if (r < 0)
		mark_dead();
	return r;
}

int io_send_frame_data(uint16_t type, uint32_t id, const char *payload, size_t len, const void *data, size_t dlen)
{
	struct nsbox_err err;
	int r;

	pthread_mutex_lock(&S.send_lock);
	r = proto_write_frame_data(S.fd, type, id, payload, len, data, dlen, &err);
	pthread_mutex_unlock(&S.send_lock);
	if (r < 0 && err.code != EINVAL && err.code != EMSGSIZE)
		mark_dead();
	if (r < 0)
		errno = err.code;
	return r;
}

static void poke_io(void)
{
	uint64_t one = 1;

	if (S.efd >= 0 && write(S.efd, &one, sizeof(one)) < 0) {
		/* Counter saturated: a wake-up is pending anyway. */
	}
}

static void block_signals(void)
{
	sigset_t all;

	/* Only the main thread takes signals: CANCEL's signal must land there. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
}

static void handle_cancel(const struct proto_frame *f)
{
	json_t *m = json_loadb(f->payload, f->hdr.len, 0, NULL);
	const char *reason = json_string_value(json_object_get(m, "reason"));
	int code = reason && !strcmp(reason, "timeout") ? 1 : 2;

	json_decref(m);
	if (!atomic_load(&runner_exec.active))
		return;
	atomic_store(&runner_exec.cancel_reason, code);
	atomic_fetch_add(&runner_exec.cancel_seq, 1);
	pthread_kill(S.main_thread, RUNNER_CANCEL_SIGNAL);
	pthread_mutex_lock(&S.lock);
	pthread_cond_broadcast(&S.cond);
	pthread_mutex_unlock(&S.lock);
}

/* The reader's spin (spinwait.h): the host's next EXEC often follows
 * within microseconds of a RESULT, and a tool call's answer within
 * microseconds of the CALL.  Only a reader no other thread waits for
 * spins (io_next_frame, io_call_wait): the io thread is never poked out
 * of a spin. */
struct recv_try {
	int fd;
	void *buf;
	size_t len;
	ssize_t n;
};

/* recv() that keeps a descriptor the host passed (SCM_RIGHTS) for
 * io_take_fd(): the host sends one only with a FILE_* request that asks
 * for it, and nothing else sends on this socket; a newer one replaces an
 * older one not taken. */
static ssize_t sock_recv(int fd, void *buf, size_t len, int flags)
{
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	ssize_t n = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);

	if (n < 0 || !mh.msg_controllen)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int got, old;

			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			pthread_mutex_lock(&S.lock);
			old = S.passed_fd;
			S.passed_fd = got;
			pthread_mutex_unlock(&S.lock);
			if (old >= 0)
				close(old);
		}
	}
	return n;
}

int io_take_fd(void)
{
	int fd;

	pthread_mutex_lock(&S.lock);
	fd = S.passed_fd;
	S.passed_fd = -1;
	pthread_mutex_unlock(&S.lock);
	return fd;
}

static int recv_now(void *ctx)
{
	struct recv_try *t = ctx;

	t->n = sock_recv(t->fd, t->buf, t->len, MSG_DONTWAIT);
	return t->n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/* As the socket's reader: the next frame.  1 = *f, 0 = none yet (EAGAIN
 * when !block, or a signal), -1 = the connection is gone or broken. */
static int read_frame(struct proto_frame *f, bool block)
{
	struct proto_reader *r = S.rd;
	struct nsbox_err err;

	for (;;) {
		size_t room;
		char *direct;
		ssize_t n;

		if (r->buf_start < r->buf_end || proto_reader_pending(r)) {
			size_t used;
			int k = proto_reader_feed(r, r->buf + r->buf_start, r->buf_end - r->buf_start, &used, f, &err);

			r->buf_start += used;
			if (k != 0)
				return k;
		}
		r->buf_start = r->buf_end = 0;
		/* A large frame's payload (file data) straight into place. */
		direct = proto_reader_direct(r, &room);
		if (direct) {
			n = sock_recv(S.fd, direct, room, block ? 0 : MSG_DONTWAIT);
			if (n > 0) {
				proto_reader_got(r, (size_t)n);
				continue;
			}
		} else if (block && S.spin_next) {
			struct recv_try t = { S.fd, r->buf, sizeof(r->buf), -1 };

			S.spin_next = false;
			n = spinwait_spin(&S.spin, recv_now, &t) ? t.n : sock_recv(S.fd, r->buf, sizeof(r->buf), 0);
		} else {
			n = sock_recv(S.fd, r->buf, sizeof(r->buf), block ? 0 : MSG_DONTWAIT);
		}
		if (n > 0) {
			r->buf_end = (size_t)n;
			continue;
		}
		if (n == 0)
			return -1;
		/* EINTR: a signal for the main thread (maybe a cancel): let
		 * the caller look. */
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -1;
	}
}

/* What became of a frame handed to route(). */
enum { ROUTED, ROUTE_MINE };

/* Deal with a frame just read (no lock held).  A frame for the serve loop
 * is returned to the caller (ROUTE_MINE) when mine, else queued. */
static int route(struct proto_frame *f, bool mine)
{
	struct io_call *w;
	struct qitem *q;

	switch (f->hdr.type) {
	case PROTO_PING:
		io_send_frame(PROTO_PONG, f->hdr.id, "{}", 2);
		proto_frame_free(f);
		return ROUTED;
	case PROTO_CANCEL:
		handle_cancel(f);
		proto_frame_free(f);
		return ROUTED;
	case PROTO_RETURN:
	case PROTO_RAISE:
		pthread_mutex_lock(&S.lock);
		for (w = S.calls; w; w = w->next)
			if (w->id == f->hdr.id && !w->done)
				break;
		if (w) {
			w->f = *f;
			w->done = true;
			pthread_cond_broadcast(&S.cond);
		}
		pthread_mutex_unlock(&S.lock);
		/* No waiter: an answer to a call abandoned on cancel. */
		if (!w)
			proto_frame_free(f);
		return ROUTED;
	}
	if (mine)
		return ROUTE_MINE;
	q = calloc(1, sizeof(*q));
	if (!q) {
		proto_frame_free(f);
		mark_dead();
		return ROUTED;
	}
	q->f = *f;
	pthread_mutex_lock(&S.lock);
	if (S.qtail)
		S.qtail->next = q;
	else
		S.qhead = q;
	S.qtail = q;
	pthread_cond_broadcast(&S.cond);
	pthread_mutex_unlock(&S.lock);
	return ROUTED;
}

/* With S.lock held and !S.reading: become the reader, read one frame
 * (blocking, lock dropped meanwhile) and route it.  Returns with S.lock
 * held again; 1 and *mine filled when the frame is for the serve loop
 * (want_mine), else 0. */
static int read_as_owner(struct proto_frame *mine, bool want_mine)
{
	struct proto_frame f = { 0 };
	int k, r = 0;

	S.reading = true;
	pthread_mutex_unlock(&S.lock);
	k = read_frame(&f, true);
	/* Route before giving up the reader role: a thread that saw its call
	 * not yet answered must not become the next reader and block in
	 * recv() while the answer it waits for sits, read but unrouted, here
	 * (a lost wake-up: nothing more may ever arrive). */
	if (k == 1 && route(&f, want_mine) == ROUTE_MINE) {
		*mine = f;
		r = 1;
	}
	pthread_mutex_lock(&S.lock);
	S.reading = false;
	S.last_read = now_ns();
	if (S.wanting)
		pthread_cond_broadcast(&S.cond);
	if (k < 0)
		mark_dead_locked();
	return r;
}

/* With S.lock held and another thread reading: wait for a change. */
static void wait_turn(void)
{
	S.wanting++;
	if (S.io_reading)
		poke_io();
	pthread_cond_wait(&S.cond, &S.lock);
	S.wanting--;
}

/* The io thread: capture pipes always, the socket while an exec runs
 * and no one else reads it. */
static void *io_main(void *arg)
{
	(void)arg;
	block_signals();
	for (;;) {
		int pipes[2];
		struct pollfd p[5] = { { -1, POLLIN, 0 }, { -1, POLLIN, 0 },
				       { S.efd, POLLIN, 0 }, { -1, POLLIN, 0 }, { S.tfd, POLLIN, 0 } };
		bool take = false;
		int timeout = -1, k;

		capture_fds(pipes);
		p[0].fd = pipes[0];
		p[1].fd = pipes[1];

		pthread_mutex_lock(&S.lock);
		if (atomic_load(&runner_exec.active) && !S.dead) {
			unsigned long long now = now_ns();

			if (!S.reading && !S.wanting && now - S.last_read >= WATCH_DELAY_NS) {
				take = true;
				S.reading = S.io_reading = true;
				p[3].fd = S.fd;
			} else {
				unsigned long long left = now - S.last_read >= WATCH_DELAY_NS ? WATCH_DELAY_NS
									: WATCH_DELAY_NS - (now - S.last_read);

				timeout = (int)(left / 1000000) + 1;
			}
		}
		pthread_mutex_unlock(&S.lock);
		k = poll(p, 5, timeout);
		if (k < 0 && errno != EINTR)
			return NULL;
		for (int i = 2; k > 0 && i < 5; i += 2)
			if (p[i].revents) {
				uint64_t v;

				if (read(p[i].fd, &v, sizeof(v)) < 0) {
					/* EAGAIN: nothing left to count. */
				}
			}
		for (int s = 0; k > 0 && s < 2; s++)
			if (p[s].revents)
				capture_ready(s, p[s].revents);
		if (take) {
			struct proto_frame f = { 0 };
			int r = 0;

			while (k > 0 && p[3].revents && (r = read_frame(&f, false)) == 1) {
				route(&f, false);
				memset(&f, 0, sizeof(f));
			}
			pthread_mutex_lock(&S.lock);
			S.reading = S.io_reading = false;
			S.last_read = now_ns();
			if (r < 0)
				mark_dead_locked();
			else if (S.wanting)
				pthread_cond_broadcast(&S.cond);
			pthread_mutex_unlock(&S.lock);
		}
	}
}

static int start_io_thread(void)
{
	pthread_attr_t a;
	pthread_t t;
	int r;

	/* A small stack: the thread keeps its buffers in static memory. */
	if (pthread_attr_init(&a))
		return -1;
	pthread_attr_setstacksize(&a, 64 << 10);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &a, io_main, NULL);
	pthread_attr_destroy(&a);
	if (r)
		return -1;
	S.io_started = true;
	return 0;
}

int runner_io_start(int fd, struct nsbox_err *err)
{
	S.fd = fd;
	S.main_thread = pthread_self();
	/* static-sized: the reader carries a 64 KiB buffer. */
	S.rd = malloc(sizeof(*S.rd));
	if (!S.rd)
		return err_set(err, ENOMEM, "frame reader");
	proto_reader_init(S.rd, NSBOX_PROTO_MAX_FRAME);
	S.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (S.efd < 0)
		return err_sys(err, "eventfd");
	S.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (S.tfd < 0)
		return err_sys(err, "timerfd_create");
	return capture_start(err);
}

int io_next_frame(struct proto_frame *f)
{
	struct qitem *q = NULL;
	bool got = false;

	pthread_mutex_lock(&S.lock);
	for (;;) {
		q = S.qhead;
		if (q) {
			S.qhead = q->next;
			if (!S.qhead)
				S.qtail = NULL;
			break;
		}
		if (S.dead)
			break;
		if (!S.reading) {
			S.spin_next = !S.io_reading && !S.wanting;
			if (read_as_owner(f, true)) {
				got = true;
				break;
			}
			continue;
		}
		wait_turn();
	}
	pthread_mutex_unlock(&S.lock);
	if (q) {
		*f = q->f;
		free(q);
		return 1;
	}
	return got;
}

int io_exec_watch(void)
{
	unsigned long long now = now_ns();

	pthread_mutex_lock(&S.lock);
	S.last_read = now;
	pthread_mutex_unlock(&S.lock);
	/* The io thread starts with the first exec.  It needs to hear of an
	 * exec only once it has run for WATCH_DELAY (most are over by then):
	 * a timer, not a wake-up now.  A timer still pending from an earlier
	 * exec does as well (the io thread then waits out the rest of
	 * WATCH_DELAY from last_read): one syscall less per short exec. */
	if (now >= S.timer_until) {
		struct itimerspec it = { .it_value = { 0, (long)WATCH_DELAY_NS } };

		if (timerfd_settime(S.tfd, 0, &it, NULL) == 0)
			S.timer_until = now + WATCH_DELAY_NS;
	}
	if (!S.io_started)
		start_io_thread();
	return S.io_started ? 0 : -1;
}

bool io_on_main_thread(void)
{
	return pthread_equal(pthread_self(), S.main_thread);
}

int io_call_start(struct io_call *c)
{
	pthread_mutex_lock(&S.lock);
	if (S.dead) {
		pthread_mutex_unlock(&S.lock);
		return -1;
	}
	c->id = ++S.next_call_id;
	if (c->id == 0)
		c->id = ++S.next_call_id;
	c->next = S.calls;
	S.calls = c;
	pthread_mutex_unlock(&S.lock);
	return 0;
}

static void unlink_call(struct io_call *c)
{
	for (struct io_call **pp = &S.calls; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
}

enum io_call_res io_call_wait(struct io_call *c, unsigned seq, bool sent)
{
	bool done, dead;

	pthread_mutex_lock(&S.lock);
	while (!c->done && !S.dead && sent && atomic_load(&runner_exec.cancel_seq) == seq) {
		if (!S.reading) {
			struct proto_frame none;

			/* The answer often comes within microseconds:
			 * spin for it too, as between execs, when no
			 * other thread waits to read. */
			S.spin_next = !S.io_reading && !S.wanting;
			read_as_owner(&none, false);
			continue;
		}
		wait_turn();
	}
	done = c->done;
	dead = S.dead;
	if (done || dead)
		unlink_call(c);
	pthread_mutex_unlock(&S.lock);
	return done ? IO_CALL_DONE : dead ? IO_CALL_GONE : IO_CALL_INTERRUPTED;
}

void io_call_abandon(struct io_call *c)
{
	pthread_mutex_lock(&S.lock);
	unlink_call(c);
	pthread_mutex_unlock(&S.lock);
}
