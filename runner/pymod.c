/* The builtin module _nsbox: the runner's C half of the protocol.
 *
 * Who reads the socket: whichever thread needs a frame.  Between execs the
 * main thread reads it itself in recv() (no thread hop on the way to an
 * EXEC); a thread waiting for a tool call's answer reads it itself too.
 * Only one thread reads at a time (S.reading).  The io thread, started at
 * the first exec (a template starts none, an unused session has none):
 *  - empties the stdout/stderr capture pipes (fds 1 and 2 point at them,
 *    so C extensions and subprocesses are captured too), keeps head and
 *    tail within the cap and streams OUTPUT frames;
 *  - while an exec runs and nobody else has read the socket for
 *    WATCH_DELAY, reads it too, so that CANCEL interrupts user code that
 *    makes no tool calls; it gives the socket up as soon as another thread
 *    wants it (eventfd poke).
 * Whoever reads answers PING at once, turns CANCEL into a signal to the
 * main thread, hands RETURN/RAISE to the waiting tool call by id, and
 * queues everything else for the serve loop.
 * Lock order: cap_lock before send_lock; S.lock is never held with either. */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "proto.h"
#include "util.h"

/* How long an exec may go without anyone reading the socket before the
 * io thread watches it (the latency of a CANCEL that finds no reader). */
#define WATCH_DELAY_NS 1000000ull

struct qitem {
	struct proto_frame f;
	struct qitem *next;
};

struct waiter {
	uint32_t id;
	bool done;
	struct proto_frame f;
	struct waiter *next;
};

/* Output of one stream during one exec: the first head_cap bytes, then a
 * ring of the last ring_cap bytes. */
struct capture {
	char *head;
	size_t head_len, head_cap;
	char *ring;
	size_t ring_len, ring_pos, ring_cap;
	uint64_t total;
	uint64_t streamed;	/* bytes sent in OUTPUT frames (at most head_cap) */
	char pend[4];		/* incomplete UTF-8 sequence held back from streaming */
	size_t npend;
};

static struct {
	int fd;
	pthread_t main_thread;

	pthread_mutex_t send_lock;

	pthread_mutex_t lock;	/* queue, waiters, dead, reading, wanting */
	pthread_cond_t cond;	/* any of those changed, or a cancel */
	struct qitem *qhead, *qtail;
	struct waiter *waiters;
	uint32_t next_call_id;
	bool dead;
	bool reading;		/* a thread owns S.rd and reads the socket */
	bool io_reading;	/* ... and it is the io thread */
	bool spin_next;		/* the next blocking read may spin first (py_recv, py_call) */
	unsigned wanting;	/* threads waiting to read */
	unsigned long long last_read;	/* when a reader last let go */
	struct proto_reader *rd;

	int efd;		/* eventfd: wakes the io thread */
	int tfd;		/* timerfd: wakes it WATCH_DELAY into an exec */
	unsigned long long timer_until;	/* when tfd fires, if armed (main thread) */
	bool io_started;

	atomic_int cancel_reason;	/* 0 none, 1 timeout, 2 cancel */
	atomic_uint cancel_seq;
	atomic_bool exec_active;

	pthread_mutex_t cap_lock;
	int pipe_rd[2];		/* read ends of the stdout / stderr pipes */
	struct capture cap[2];
	size_t cap_limit;
	bool streaming;
	uint32_t exec_id;
} S = {
	.fd = -1,
	.send_lock = PTHREAD_MUTEX_INITIALIZER,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.cap_lock = PTHREAD_MUTEX_INITIALIZER,
	.efd = -1,
	.tfd = -1,
	.pipe_rd = { -1, -1 },
	.cap_limit = 1 << 20,
};

static const char *const stream_names[2] = { "stdout", "stderr" };

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
static int send_frame(uint16_t type, uint32_t id, const char *payload, size_t len)
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
	if (!atomic_load(&S.exec_active))
		return;
	atomic_store(&S.cancel_reason, code);
	atomic_fetch_add(&S.cancel_seq, 1);
	pthread_kill(S.main_thread, RUNNER_CANCEL_SIGNAL);
	pthread_mutex_lock(&S.lock);
	pthread_cond_broadcast(&S.cond);
	pthread_mutex_unlock(&S.lock);
}

/* Spin on a non-blocking recv() for up to SPIN_US microseconds (with more
 * than one CPU): the host's next EXEC often follows within microseconds of
 * a RESULT (and a tool call's answer within microseconds of the CALL), and
 * a cross-CPU wake-up costs tens of them.  Only a reader no other thread
 * waits for spins (py_recv, py_call): the io thread is never poked out of
 * a spin.  -1 with EAGAIN when nothing came.
 *
 * Only while spinning pays (spin_skip, spin_backoff): when the host shares
 * our CPU (the scheduler puts the two ends of a socket together), a spin
 * keeps it from running and every round trip pays the whole spin; when
 * the host is slow to answer, the spin is wasted.  After a spin that found
 * nothing we sleep at once for the next 1, 2, 4 ... 256 waits. */
#define SPIN_US 60
#define SPIN_BACKOFF_MAX 256
static unsigned spin_skip, spin_backoff;
static ssize_t spin_recv(int fd, void *buf, size_t len)
{
	static long ncpu;
	unsigned long long t0;
	ssize_t n;

	if (!ncpu)
		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 2 || spin_skip) {
		spin_skip -= spin_skip > 0;
		errno = EAGAIN;
		return -1;
	}
	t0 = now_ns();
	do {
		n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
			spin_backoff = 0;
			return n;
		}
	} while (now_ns() - t0 < SPIN_US * 1000ULL);
	spin_backoff = spin_backoff ? (spin_backoff < SPIN_BACKOFF_MAX ? 2 * spin_backoff : spin_backoff) : 1;
	spin_skip = spin_backoff;
	errno = EAGAIN;
	return -1;
}

/* As the socket's reader: the next frame.  1 = *f, 0 = none yet (EAGAIN
 * when !block, or a signal), -1 = the connection is gone or broken. */
static int read_frame(struct proto_frame *f, bool block)
{
	struct proto_reader *r = S.rd;
	struct nsbox_err err;

	for (;;) {
		ssize_t n;

		if (r->buf_start < r->buf_end) {
			size_t used;
			int k = proto_reader_feed(r, r->buf + r->buf_start, r->buf_end - r->buf_start, &used, f, &err);

			r->buf_start += used;
			if (k != 0)
				return k;
		}
		r->buf_start = r->buf_end = 0;
		/* The socket is blocking: a reader that may wait just recv()s. */
		if (block && S.spin_next) {
			S.spin_next = false;
			n = spin_recv(S.fd, r->buf, sizeof(r->buf));
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				n = recv(S.fd, r->buf, sizeof(r->buf), 0);
		} else {
			n = recv(S.fd, r->buf, sizeof(r->buf), block ? 0 : MSG_DONTWAIT);
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
	struct waiter *w;
	struct qitem *q;

	switch (f->hdr.type) {
	case PROTO_PING:
		send_frame(PROTO_PONG, f->hdr.id, "{}", 2);
		proto_frame_free(f);
		return ROUTED;
	case PROTO_CANCEL:
		handle_cancel(f);
		proto_frame_free(f);
		return ROUTED;
	case PROTO_RETURN:
	case PROTO_RAISE:
		pthread_mutex_lock(&S.lock);
		for (w = S.waiters; w; w = w->next)
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

static void cap_reset(struct capture *c, size_t limit)
{
	c->head_cap = limit / 2;
	c->ring_cap = limit - c->head_cap;
	c->head_len = c->ring_len = c->ring_pos = 0;
	c->total = c->streamed = 0;
	c->npend = 0;
	/* Buffers grow on demand: most execs print little. */
}

static int grow(char **buf, size_t want)
{
	char *n = realloc(*buf, want ? want : 1);

	if (!n)
		return -1;
	*buf = n;
	return 0;
}

static void cap_append(struct capture *c, const char *data, size_t len)
{
	c->total += len;
	if (c->head_len < c->head_cap) {
		size_t n = c->head_cap - c->head_len;

		if (n > len)
			n = len;
		if (grow(&c->head, c->head_len + n) == 0) {
			memcpy(c->head + c->head_len, data, n);
			c->head_len += n;
		}
		data += n;
		len -= n;
	}
	if (!len || !c->ring_cap)
		return;
	if (!c->ring && grow(&c->ring, c->ring_cap) < 0)
		return;
	if (len >= c->ring_cap) {
		memcpy(c->ring, data + len - c->ring_cap, c->ring_cap);
		c->ring_len = c->ring_cap;
		c->ring_pos = 0;
		return;
	}
	while (len) {
		size_t n = c->ring_cap - c->ring_pos;

		if (n > len)
			n = len;
		memcpy(c->ring + c->ring_pos, data, n);
		c->ring_pos = (c->ring_pos + n) % c->ring_cap;
		if (c->ring_len < c->ring_cap)
			c->ring_len = c->ring_len + n > c->ring_cap ? c->ring_cap : c->ring_len + n;
		data += n;
		len -= n;
	}
}

/* Stream part of a chunk as OUTPUT, within the head budget.  Called with
 * cap_lock held. */
static void cap_stream(int s, const char *data, size_t len, bool final)
{
	struct capture *c = &S.cap[s];
	char *joined = NULL, *clean = NULL, *payload = NULL;
	size_t n, clean_len, pend = 0;
	json_t *m;

	if (!S.streaming || c->streamed >= c->head_cap)
		return;
	n = len;
	if (n > c->head_cap - c->streamed)
		n = (size_t)(c->head_cap - c->streamed);
	c->streamed += n;
	joined = malloc(c->npend + n + 1);
	if (!joined)
		return;
	memcpy(joined, c->pend, c->npend);
	memcpy(joined + c->npend, data, n);
	n += c->npend;
	c->npend = 0;
	if (proto_utf8_sanitize(joined, n, &clean, &clean_len, final ? NULL : &pend) < 0)
		goto out;
	memcpy(c->pend, joined + n - pend, pend);
	c->npend = pend;
	if (!clean_len)
		goto out;
	m = json_pack("{s:s,s:s%}", "stream", stream_names[s], "data", clean, clean_len);
	if (m) {
		payload = json_dumps(m, JSON_COMPACT);
		json_decref(m);
	}
	if (payload)
		send_frame(PROTO_OUTPUT, S.exec_id, payload, strlen(payload));
out:
	free(payload);
	free(clean);
	free(joined);
}

/* Read what is available on stream s without blocking.  cap_lock held.
 * Returns bytes read, 0 at EAGAIN, -1 at EOF or error. */
static ssize_t drain_once(int s)
{
	static char buf[65536];
	ssize_t n;

	if (S.pipe_rd[s] < 0)
		return -1;
	n = read(S.pipe_rd[s], buf, sizeof(buf));
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	/* Output between execs (a background subprocess) is dropped. */
	if (atomic_load(&S.exec_active)) {
		cap_append(&S.cap[s], buf, (size_t)n);
		cap_stream(s, buf, (size_t)n, false);
	}
	return n;
}

/* The io thread: capture pipes always, the socket while an exec runs
 * and no one else reads it. */
/* Empty both pipes of what is in them now.  cap_lock held.  One poll for
 * the common case of nothing written. */
static void drain_ready(void)
{
	struct pollfd p[2] = { { S.pipe_rd[0], POLLIN, 0 }, { S.pipe_rd[1], POLLIN, 0 } };

	if (poll(p, 2, 0) <= 0)
		return;
	for (int s = 0; s < 2; s++)
		if (p[s].revents)
			while (drain_once(s) > 0)
				;
}

static void *io_main(void *arg)
{
	(void)arg;
	block_signals();
	for (;;) {
		struct pollfd p[5] = { { S.pipe_rd[0], POLLIN, 0 }, { S.pipe_rd[1], POLLIN, 0 },
				       { S.efd, POLLIN, 0 }, { -1, POLLIN, 0 }, { S.tfd, POLLIN, 0 } };
		bool take = false;
		int timeout = -1, k;

		pthread_mutex_lock(&S.lock);
		if (atomic_load(&S.exec_active) && !S.dead) {
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
		for (int s = 0; k > 0 && s < 2; s++) {
			if (!p[s].revents)
				continue;
			pthread_mutex_lock(&S.cap_lock);
			if (drain_once(s) < 0 && (p[s].revents & (POLLHUP | POLLERR | POLLNVAL)) &&
			    !(p[s].revents & POLLIN)) {
				/* Nobody can write any more (fd closed by user code): stop polling it. */
				S.pipe_rd[s] = -1;
			}
			pthread_mutex_unlock(&S.cap_lock);
		}
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
	int p_in[2], p_out[2], p_err[2];

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
	/* stdin: an empty pipe (EOF at once); the runner never reads the
	 * host's terminal. */
	if (pipe2(p_in, O_CLOEXEC) < 0 || pipe2(p_out, O_CLOEXEC) < 0 || pipe2(p_err, O_CLOEXEC) < 0)
		return err_sys(err, "pipe2");
	close(p_in[1]);
	/* dup2 clears FD_CLOEXEC: subprocesses inherit 0, 1 and 2. */
	if (dup2(p_in[0], 0) < 0 || dup2(p_out[1], 1) < 0 || dup2(p_err[1], 2) < 0)
		return err_sys(err, "dup2 stdio");
	close(p_in[0]);
	close(p_out[1]);
	close(p_err[1]);
	S.pipe_rd[0] = p_out[0];
	S.pipe_rd[1] = p_err[0];
	if (fcntl(S.pipe_rd[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(S.pipe_rd[1], F_SETFL, O_NONBLOCK) < 0)
		return err_sys(err, "fcntl O_NONBLOCK");
	cap_reset(&S.cap[0], S.cap_limit);
	cap_reset(&S.cap[1], S.cap_limit);
	return 0;
}

/* ---- Python functions ---- */

static PyObject *frame_tuple(struct proto_frame *f)
{
	PyObject *r = Py_BuildValue("(iIy#)", (int)f->hdr.type, f->hdr.id, f->payload, (Py_ssize_t)f->hdr.len);

	proto_frame_free(f);
	return r;
}

/* The serve loop's next frame, queued or read (GIL held; released while
 * waiting).  1 with *f filled, 0 once the host has gone. */
static int next_frame(struct proto_frame *f)
{
	struct qitem *q = NULL;
	bool got = false;

	Py_BEGIN_ALLOW_THREADS
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
	Py_END_ALLOW_THREADS
	if (q) {
		*f = q->f;
		free(q);
		return 1;
	}
	return got;
}

static int fast_exec(const struct proto_frame *f);
static int fast_failed(uint32_t id);

/* recv() -> (type, id, payload: bytes), or None once the host has gone.
 * EXEC frames the fast path takes (fast_exec) are run here and never
 * returned. */
static PyObject *py_recv(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	for (;;) {
		struct proto_frame f = { 0 };
		uint32_t id;
		int r;

		if (!next_frame(&f))
			Py_RETURN_NONE;
		if (f.hdr.type != PROTO_EXEC || !(r = fast_exec(&f)))
			return frame_tuple(&f);
		id = f.hdr.id;
		proto_frame_free(&f);
		/* -2: the RESULT could not be sent (OSError set). */
		if (r == -2 || (r < 0 && fast_failed(id) < 0))
			return NULL;
		/* A cancel signal that came too late for its exec is taken
		 * here, out of user code (the handler ignores it then), as the
		 * Python serve loop would between two frames. */
		if (PyErr_CheckSignals() < 0)
			return NULL;
	}
}

/* send(type, id, payload: bytes) */
static PyObject *py_send(PyObject *self, PyObject *args)
{
	int type;
	unsigned int id;
	Py_buffer b;
	int r;

	(void)self;
	if (!PyArg_ParseTuple(args, "iIy*", &type, &id, &b))
		return NULL;
	if (type < 1 || type > PROTO_TYPE_MAX || (size_t)b.len > NSBOX_PROTO_MAX_FRAME) {
		PyBuffer_Release(&b);
		PyErr_SetString(PyExc_ValueError, "bad frame type or size");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	r = send_frame((uint16_t)type, id, b.buf, (size_t)b.len);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	if (r < 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	Py_RETURN_NONE;
}

static void unlink_waiter(struct waiter *w)
{
	for (struct waiter **pp = &S.waiters; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
}

/* call(payload: bytes) -> (type, payload: bytes): send a CALL and block,
 * with the GIL released, until the host answers this call's id (reading
 * the socket itself when nobody else does).  A CANCEL while the main
 * thread waits runs its signal handler here. */
static PyObject *py_call(PyObject *self, PyObject *args)
{
	struct waiter w = { 0 };
	Py_buffer b;
	bool is_main = pthread_equal(pthread_self(), S.main_thread);
	int r;

	(void)self;
	if (!PyArg_ParseTuple(args, "y*", &b))
		return NULL;
	pthread_mutex_lock(&S.lock);
	if (S.dead) {
		pthread_mutex_unlock(&S.lock);
		PyBuffer_Release(&b);
		PyErr_SetString(PyExc_ConnectionError, "the host has gone away");
		return NULL;
	}
	w.id = ++S.next_call_id;
	if (w.id == 0)
		w.id = ++S.next_call_id;
	w.next = S.waiters;
	S.waiters = &w;
	pthread_mutex_unlock(&S.lock);

	Py_BEGIN_ALLOW_THREADS
	r = send_frame(PROTO_CALL, w.id, b.buf, (size_t)b.len);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);

	for (;;) {
		unsigned seq = atomic_load(&S.cancel_seq);
		bool done, dead;

		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&S.lock);
		while (!w.done && !S.dead && r == 0 && atomic_load(&S.cancel_seq) == seq) {
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
		done = w.done;
		dead = S.dead;
		if (done || dead)
			unlink_waiter(&w);
		pthread_mutex_unlock(&S.lock);
		Py_END_ALLOW_THREADS
		if (done)
			return frame_tuple(&w.f);
		if (dead || r < 0) {
			if (!dead) {
				pthread_mutex_lock(&S.lock);
				unlink_waiter(&w);
				pthread_mutex_unlock(&S.lock);
			}
			PyErr_SetString(PyExc_ConnectionError, "the host has gone away");
			return NULL;
		}
		/* Cancelled (or a signal): let the main thread's handler raise;
		 * a late answer is dropped by the reader (no waiter with that id). */
		if (is_main && PyErr_CheckSignals() < 0) {
			pthread_mutex_lock(&S.lock);
			unlink_waiter(&w);
			pthread_mutex_unlock(&S.lock);
			return NULL;
		}
	}
}

/* Start capturing for exec id (GIL released).  -1: no io thread. */
static int exec_begin(uint32_t id, bool stream, size_t limit)
{
	unsigned long long now;

	if (limit < 2)
		limit = 2;
	pthread_mutex_lock(&S.cap_lock);
	/* Drop leftovers written between execs. */
	atomic_store(&S.exec_active, false);
	drain_ready();
	S.cap_limit = limit;
	cap_reset(&S.cap[0], S.cap_limit);
	cap_reset(&S.cap[1], S.cap_limit);
	S.streaming = stream;
	S.exec_id = id;
	atomic_store(&S.cancel_reason, 0);
	atomic_store(&S.exec_active, true);
	pthread_mutex_unlock(&S.cap_lock);
	now = now_ns();
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

/* exec_begin(id, stream: bool, limit: int): start capturing for an exec. */
static PyObject *py_exec_begin(PyObject *self, PyObject *args)
{
	unsigned int id;
	int stream, r;
	Py_ssize_t limit;

	(void)self;
	if (!PyArg_ParseTuple(args, "Ipn", &id, &stream, &limit))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = exec_begin(id, stream, limit < 2 ? 2 : (size_t)limit);
	Py_END_ALLOW_THREADS
	if (r < 0)
		return PyErr_Format(PyExc_OSError, "cannot start the output thread");
	Py_RETURN_NONE;
}

static PyObject *cap_result(struct capture *c)
{
	PyObject *head, *tail;
	size_t tail_len = c->ring_len;
	char *lin = malloc(tail_len ? tail_len : 1);

	if (!lin)
		return PyErr_NoMemory();
	if (c->ring_len == c->ring_cap && c->ring_cap) {
		memcpy(lin, c->ring + c->ring_pos, c->ring_cap - c->ring_pos);
		memcpy(lin + c->ring_cap - c->ring_pos, c->ring, c->ring_pos);
	} else if (tail_len) {
		memcpy(lin, c->ring, tail_len);
	}
	head = PyBytes_FromStringAndSize(c->head ? c->head : "", (Py_ssize_t)c->head_len);
	tail = PyBytes_FromStringAndSize(lin, (Py_ssize_t)tail_len);
	free(lin);
	if (!head || !tail) {
		Py_XDECREF(head);
		Py_XDECREF(tail);
		return NULL;
	}
	return Py_BuildValue("(NNK)", head, tail, (unsigned long long)c->total);
}

/* End the exec's capture: take what is written so far.  cap_lock held
 * (and kept: the caller reads S.cap, then unlocks). */
static void exec_end_locked(void)
{
	drain_ready();
	for (int s = 0; s < 2; s++)
		if (S.cap[s].npend)
			cap_stream(s, "", 0, true);
	atomic_store(&S.exec_active, false);
	atomic_store(&S.cancel_reason, 0);
}

/* exec_end() -> ((head, tail, total) for stdout, same for stderr): collect
 * everything written so far (the caller flushed sys.stdout/err first). */
static PyObject *py_exec_end(PyObject *self, PyObject *args)
{
	PyObject *o, *e;

	(void)self;
	(void)args;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&S.cap_lock);
	exec_end_locked();
	Py_END_ALLOW_THREADS
	o = cap_result(&S.cap[0]);
	e = cap_result(&S.cap[1]);
	pthread_mutex_unlock(&S.cap_lock);
	if (!o || !e) {
		Py_XDECREF(o);
		Py_XDECREF(e);
		return NULL;
	}
	return Py_BuildValue("(NN)", o, e);
}

/* Compile as the builtin compile() of a str does: the source is UTF-8
 * whatever a coding cookie in it says; no inherited __future__ flags.
 * Fresh flags each time: the compiler adds the source's own __future__
 * imports to them. */
static PyObject *compile_str(const char *src, PyObject *filename, int start)
{
	PyCompilerFlags flags = { .cf_flags = PyCF_IGNORE_COOKIE, .cf_feature_version = PY_MINOR_VERSION };

	return Py_CompileStringObject(src, filename, start, &flags, -1);
}

/* compile(source: str, filename: str, mode: "exec" | "eval") -> code.  The
 * builtin compile() first checks whether source is an AST object, which
 * creates every AST type (~1-2 ms in a fresh interpreter); this does not. */
static PyObject *py_compile(PyObject *self, PyObject *args)
{
	const char *src, *mode;
	PyObject *filename;

	(void)self;
	if (!PyArg_ParseTuple(args, "sUs", &src, &filename, &mode))
		return NULL;
	if (strcmp(mode, "exec") && strcmp(mode, "eval")) {
		PyErr_SetString(PyExc_ValueError, "compile(): mode must be 'exec' or 'eval'");
		return NULL;
	}
	return compile_str(src, filename, mode[1] == 'x' ? Py_file_input : Py_eval_input);
}

/* usage() -> (cpu seconds, peak resident set in bytes) of this process:
 * one getrusage(). */
static PyObject *py_usage(PyObject *self, PyObject *args)
{
	struct rusage ru;

	(void)self;
	(void)args;
	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return Py_BuildValue("(di)", 0.0, 0);
	return Py_BuildValue("(dL)",
			     (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
				     (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
			     (long long)ru.ru_maxrss * 1024);
}

/* take_cancel() -> 0 none, 1 timeout, 2 cancel; clears it. */
static PyObject *py_take_cancel(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	return PyLong_FromLong(atomic_exchange(&S.cancel_reason, 0));
}

/* ---- the EXEC fast path ----
 *
 * An ordinary EXEC (no REPL display, no completeness check) is run here
 * in C, from recv(): decode, compile, run, capture and answer without
 * the Python serve loop (runner.py's do_exec, which this follows step by
 * step and which stays the reference: what runs everything declined
 * here).  The rare parts call back into runner.py: splitting multi-line
 * REPL code (_split_ast), formatting an exception (_fast_error), encoding
 * a value that is not a plain scalar (_fast_value) and reporting a
 * failure of the runner itself (_fast_failed).  Saves ~15 us of
 * interpreted Python per exec. */

/* Compiled code of recent execs, by source, filename and mode: a REPL
 * host sends the same small snippets again and again, and compiling even
 * "1+1" costs more than the rest of an exec.  Code objects are immutable.
 * Code whose compilation printed anything (a SyntaxWarning) is not kept,
 * so that the warning comes again with every exec, as before. */
#define CODE_CACHE_N 16
#define CODE_CACHE_MAX_SRC 16384
struct code_entry {
	char *src, *filename;	/* NULL: a free slot */
	size_t src_len;
	bool repl;		/* body/last split (want_value), or one exec body */
	PyObject *body, *last;	/* either may be NULL */
	unsigned long long used;
};

static struct {
	bool ready;
	PyObject *globals;	/* runner.py's module dict (its _in_user flag) */
	PyObject *G, *limits, *sources;
	PyObject *split_ast, *fast_error, *fast_value, *fast_failed;
	PyObject *sysdict;
	PyObject *k_in_user, *k_output, *k_max_frame, *k_builtins, *k_flush, *k_cache, *k_linecache, *k_update;
	PyObject *k_code, *k_filename, *k_want_value, *k_stream, *k_display, *k_check_complete;
	PyObject *k_stdout, *k_stderr, *k_modules;
	struct code_entry cache[CODE_CACHE_N];
	unsigned long long cache_clock;
} F;

/* RESULT frames are written with proto_buf (proto/proto.h); on
 * allocation failure the buffer stays bad and the caller raises MemoryError. */

/* v / 10**dec as an exact decimal ("0.000012"): what float(v / 10**dec)
 * reads back as, without the cost of a shortest-repr conversion. */
static void jb_fixed(struct proto_buf *b, unsigned long long v, int dec)
{
	unsigned long long p = 1;
	char n[48];
	int len;

	for (int i = 0; i < dec; i++)
		p *= 10;
	len = snprintf(n, sizeof(n), "%llu.%0*llu", v / p, dec, v % p);
	while (len > 2 && n[len - 1] == '0' && n[len - 2] != '.')
		len--;
	proto_buf_put(b, n, (size_t)len);
}

/* A float as float.__repr__ writes it (what json.dumps uses). */
static void jb_double(struct proto_buf *b, double d)
{
	char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);

	if (!s) {
		PyErr_Clear();
		b->bad = true;
		return;
	}
	proto_buf_puts(b, s);
	PyMem_Free(s);
}

static void jb_ull(struct proto_buf *b, unsigned long long v)
{
	char n[24];

	proto_buf_put(b, n, (size_t)snprintf(n, sizeof(n), "%llu", v));
}

/* fast_setup(module globals, G, _limits, _sources, _split_ast,
 * _fast_error, _fast_value, _fast_failed): runner.py's serve() turns the
 * fast path on. */
static PyObject *py_fast_setup(PyObject *self, PyObject *args)
{
	PyObject *globals, *G, *limits, *sources, *split_ast, *fast_error, *fast_value, *fast_failed, *sys;

	(void)self;
	if (!PyArg_ParseTuple(args, "O!O!O!O!OOOO", &PyDict_Type, &globals, &PyDict_Type, &G, &PyDict_Type, &limits,
			      &PyDict_Type, &sources, &split_ast, &fast_error, &fast_value, &fast_failed))
		return NULL;
	if (F.ready)
		Py_RETURN_NONE;
	/* sys's dict (the one PySys_GetObject reads), for lookups by
	 * interned key. */
	sys = PyImport_AddModule("sys");
	if (!sys || !(F.sysdict = PyModule_GetDict(sys)))
		return NULL;
	Py_INCREF(F.sysdict);
#define KEY(k, s) if (!(F.k = PyUnicode_InternFromString(s))) return NULL
	KEY(k_in_user, "_in_user");
	KEY(k_output, "output");
	KEY(k_max_frame, "max_frame");
	KEY(k_builtins, "__builtins__");
	KEY(k_flush, "flush");
	KEY(k_cache, "cache");
	KEY(k_linecache, "linecache");
	KEY(k_update, "update");
	KEY(k_code, "code");
	KEY(k_filename, "filename");
	KEY(k_want_value, "want_value");
	KEY(k_stream, "stream");
	KEY(k_display, "display");
	KEY(k_check_complete, "check_complete");
	KEY(k_stdout, "stdout");
	KEY(k_stderr, "stderr");
	KEY(k_modules, "modules");
#undef KEY
	F.globals = Py_NewRef(globals);
	F.G = Py_NewRef(G);
	F.limits = Py_NewRef(limits);
	F.sources = Py_NewRef(sources);
	F.split_ast = Py_NewRef(split_ast);
	F.fast_error = Py_NewRef(fast_error);
	F.fast_value = Py_NewRef(fast_value);
	F.fast_failed = Py_NewRef(fast_failed);
	F.ready = true;
	Py_RETURN_NONE;
}

/* bool(msg.get(key)) for None, True, False or absent; false for
 * anything else (the Python path judges it). */
static bool msg_flag(PyObject *m, PyObject *key, bool *out)
{
	PyObject *v = PyDict_GetItemWithError(m, key);

	*out = v == Py_True;
	return !v || v == Py_None || v == Py_True || v == Py_False;
}

/* msg.get(key) as a str without NUL characters, UTF-8 in *s (owned by
 * the str).  NULL if absent or anything else. */
static PyObject *msg_str(PyObject *m, PyObject *key, const char **s, Py_ssize_t *len)
{
	PyObject *v = PyDict_GetItemWithError(m, key);

	if (!v || !PyUnicode_CheckExact(v) || !(*s = PyUnicode_AsUTF8AndSize(v, len)) ||
	    strlen(*s) != (size_t)*len) {
		PyErr_Clear();
		return NULL;
	}
	return v;
}

/* The EXEC message, parsed as runner.py's _loads does: a new dict, or
 * NULL (no exception) for anything unusual. */
static PyObject *parse_exec(const struct proto_frame *f)
{
	PyObject *r;

	if (!f->hdr.len || f->payload[0] != '{')
		return NULL;
	r = pyjson_loads(f->payload, f->hdr.len);
	if (r && !PyDict_CheckExact(r))
		Py_CLEAR(r);
	PyErr_Clear();
	return r;
}

/* Bytes written to stderr so far in this exec, captured or still in the
 * pipe; (uint64)-1 if unknown. */
static uint64_t stderr_mark(void)
{
	uint64_t r = (uint64_t)-1;
	int n;

	pthread_mutex_lock(&S.cap_lock);
	if (S.pipe_rd[1] >= 0 && ioctl(S.pipe_rd[1], FIONREAD, &n) == 0)
		r = S.cap[1].total + (uint64_t)n;
	pthread_mutex_unlock(&S.cap_lock);
	return r;
}

/* A (first, second) pair from one of runner.py's helpers (consumed): new
 * references to its items, NULL for None; a TypeError naming who returned
 * something else. */
static void take_pair(PyObject *pair, const char *who, PyObject **first, PyObject **second)
{
	if (pair && PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
		if (PyTuple_GET_ITEM(pair, 0) != Py_None)
			*first = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
		if (PyTuple_GET_ITEM(pair, 1) != Py_None)
			*second = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
	} else if (pair) {
		PyErr_Format(PyExc_TypeError, "%s: not a pair", who);
	}
	Py_XDECREF(pair);
}

static struct code_entry *cache_find(const char *src, size_t len, const char *filename, bool repl)
{
	for (int i = 0; i < CODE_CACHE_N; i++) {
		struct code_entry *e = &F.cache[i];

		if (e->src && e->repl == repl && e->src_len == len && !memcmp(e->src, src, len) &&
		    !strcmp(e->filename, filename)) {
			e->used = ++F.cache_clock;
			return e;
		}
	}
	return NULL;
}

static void cache_put(const char *src, size_t len, const char *filename, bool repl, PyObject *body, PyObject *last)
{
	struct code_entry *e = &F.cache[0];
	char *s, *fn;

	if (len > CODE_CACHE_MAX_SRC)
		return;
	for (int i = 1; i < CODE_CACHE_N && e->src; i++)
		if (!F.cache[i].src || F.cache[i].used < e->used)
			e = &F.cache[i];
	s = malloc(len + 1);
	fn = strdup(filename);
	if (!s || !fn) {
		free(s);
		free(fn);
		return;
	}
	memcpy(s, src, len);
	s[len] = '\0';
	free(e->src);
	free(e->filename);
	Py_XDECREF(e->body);
	Py_XDECREF(e->last);
	e->src = s;
	e->src_len = len;
	e->filename = fn;
	e->repl = repl;
	e->body = Py_XNewRef(body);
	e->last = Py_XNewRef(last);
	e->used = ++F.cache_clock;
}

/* _limits[key] as a size, or 0 if it is not a positive int. */
static size_t limit_of(PyObject *key)
{
	PyObject *v = PyDict_GetItemWithError(F.limits, key);
	Py_ssize_t n;

	if (!v || !PyLong_CheckExact(v)) {
		PyErr_Clear();
		return 0;
	}
	n = PyLong_AsSsize_t(v);
	if (n <= 0) {
		PyErr_Clear();
		return 0;
	}
	return (size_t)n;
}

/* CPU time of this process in microseconds (and its peak RSS). */
static unsigned long long cpu_us(unsigned long long *max_rss)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0) {
		if (max_rss)
			*max_rss = 0;
		return 0;
	}
	if (max_rss)
		*max_rss = (unsigned long long)ru.ru_maxrss * 1024;
	return (unsigned long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ull +
	       (unsigned long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* As do_exec: the exec's source for tracebacks, in linecache's cache or,
 * until linecache is imported, in _sources.  Best effort: a user who
 * broke linecache gets tracebacks without source lines. */
static void remember_source(PyObject *code, PyObject *filename)
{
	PyObject *lines = PyUnicode_Splitlines(code, 1), *entry = NULL, *modules, *lc, *cache = NULL;

	if (!lines)
		goto out;
	entry = Py_BuildValue("(nOOO)", PyUnicode_GET_LENGTH(code), Py_None, lines, filename);
	if (!entry)
		goto out;
	modules = PyDict_GetItemWithError(F.sysdict, F.k_modules);
	lc = modules && PyDict_Check(modules) ? PyDict_GetItemWithError(modules, F.k_linecache) : NULL;
	if (!lc || lc == Py_None) {
		if (!PyErr_Occurred())
			PyDict_SetItem(F.sources, filename, entry);
		goto out;
	}
	cache = PyObject_GetAttr(lc, F.k_cache);
	if (!cache)
		goto out;
	if (PyDict_GET_SIZE(F.sources)) {
		PyObject *r = PyObject_CallMethodOneArg(cache, F.k_update, F.sources);

		if (!r)
			goto out;
		Py_DECREF(r);
		PyDict_Clear(F.sources);
	}
	PyObject_SetItem(cache, filename, entry);
out:
	PyErr_Clear();
	Py_XDECREF(cache);
	Py_XDECREF(entry);
	Py_XDECREF(lines);
}

/* "\n" not in code.rstrip() (ASCII whitespace only: code ending in other
 * whitespace takes the AST path, which gives the same result). */
static bool one_line(const char *code, size_t len)
{
	while (len && (code[len - 1] == ' ' || (code[len - 1] >= '\t' && code[len - 1] <= '\r') ||
		       (code[len - 1] >= 0x1c && code[len - 1] <= 0x1f)))
		len--;
	return !memchr(code, '\n', len);
}

/* exec(co, G) / eval(co, G): the builtins put back if user code removed
 * them, as those builtins do. */
static PyObject *run_code(PyObject *co)
{
	if (!PyCode_Check(co)) {
		PyErr_SetString(PyExc_TypeError, "not a code object");
		return NULL;
	}
	if (!PyDict_GetItemWithError(F.G, F.k_builtins)) {
		if (PyErr_Occurred() || PyDict_SetItem(F.G, F.k_builtins, PyEval_GetBuiltins()) < 0)
			return NULL;
	}
	return PyEval_EvalCode(co, F.G, F.G);
}

/* do_exec's _text() for one stream, into the result as
 * "NAME":...,  (and the tail kept for NAME_tail when truncated).
 * cap_lock held.  -1 with a Python exception. */
static int cap_json(struct capture *c, size_t limit, struct proto_buf *out, struct proto_buf *tail_out, bool *trunc)
{
	PyObject *h = NULL, *t = NULL, *s = NULL;
	char *lin = NULL;
	const char *u;
	Py_ssize_t ulen;
	int r = -1;

	*trunc = false;
	if (!c->total) {
		proto_buf_put(out, "\"\"", 2);
		return 0;
	}
	lin = malloc(c->ring_len ? c->ring_len : 1);
	if (!lin) {
		PyErr_NoMemory();
		return -1;
	}
	if (c->ring_len == c->ring_cap && c->ring_cap) {
		memcpy(lin, c->ring + c->ring_pos, c->ring_cap - c->ring_pos);
		memcpy(lin + c->ring_cap - c->ring_pos, c->ring, c->ring_pos);
	} else if (c->ring_len) {
		memcpy(lin, c->ring, c->ring_len);
	}
	h = PyUnicode_DecodeUTF8(c->head ? c->head : "", (Py_ssize_t)c->head_len, "replace");
	t = PyUnicode_DecodeUTF8(lin, (Py_ssize_t)c->ring_len, "replace");
	if (!h || !t)
		goto out;
	if (c->total <= limit) {
		s = PyUnicode_Concat(h, t);
	} else {
		unsigned long long omitted = c->total - c->head_len - c->ring_len;

		s = PyUnicode_FromFormat("%U\n[... %llu bytes truncated ...]\n%U", h, omitted, t);
		*trunc = true;
		u = PyUnicode_AsUTF8AndSize(t, &ulen);
		if (!u)
			goto out;
		proto_buf_json_str(tail_out, u, (size_t)ulen);
	}
	if (!s || !(u = PyUnicode_AsUTF8AndSize(s, &ulen)))
		goto out;
	proto_buf_json_str(out, u, (size_t)ulen);
	r = 0;
out:
	Py_XDECREF(s);
	Py_XDECREF(t);
	Py_XDECREF(h);
	free(lin);
	return r;
}

/* encode(v) as JSON: plain scalars here, the rest by runner.py. */
static int value_json(PyObject *v, struct proto_buf *b)
{
	PyObject *r;

	if (v == Py_None) {
		proto_buf_puts(b, "null");
		return 0;
	}
	if (v == Py_True || v == Py_False) {
		proto_buf_puts(b, v == Py_True ? "true" : "false");
		return 0;
	}
	if (PyLong_CheckExact(v)) {
		int over;
		long long n = PyLong_AsLongLongAndOverflow(v, &over);

		/* INT_EXACT: beyond 2**53 ints travel as {"$int": ...}. */
		if (!over && n >= -(1LL << 53) && n <= (1LL << 53)) {
			char s[24];

			proto_buf_put(b, s, (size_t)snprintf(s, sizeof(s), "%lld", n));
			return 0;
		}
		PyErr_Clear();
	} else if (PyFloat_CheckExact(v)) {
		double d = PyFloat_AS_DOUBLE(v);

		if (d == d && d - d == 0.0) {
			jb_double(b, d);
			return 0;
		}
	} else if (PyUnicode_CheckExact(v)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(v, &n);

		if (s) {
			proto_buf_json_str(b, s, (size_t)n);
			return 0;
		}
		PyErr_Clear();	/* lone surrogates: encode() says so */
	}
	r = PyObject_CallOneArg(F.fast_value, v);
	if (!r)
		return -1;
	if (!PyBytes_Check(r)) {
		Py_DECREF(r);
		PyErr_SetString(PyExc_TypeError, "_fast_value did not return bytes");
		return -1;
	}
	proto_buf_put(b, PyBytes_AS_STRING(r), (size_t)PyBytes_GET_SIZE(r));
	Py_DECREF(r);
	return 0;
}

/* Run one EXEC the way do_exec does.  0: declined (not touched; the
 * Python path runs it), 1: done and answered, -1: the runner failed
 * (Python exception set; the serve loop reports it), -2: the RESULT could
 * not be sent (OSError set). */
static int fast_exec(const struct proto_frame *f)
{
	PyObject *m, *code, *filename, *fv;
	const char *src, *fname = "<exec>";
	Py_ssize_t clen, flen;
	bool want, stream, flag;
	size_t limit, max_frame;
	PyObject *body = NULL, *lastc = NULL, *value = NULL, *err = NULL, *exit_code = NULL;
	struct proto_buf res = { 0 }, val = { 0 }, tails[2] = { { 0 } };
	bool trunc[2] = { false, false };
	unsigned long long t0, c0, cpu, max_rss;
	int r = 0, k;

	if (!F.ready || !(m = parse_exec(f)))
		return 0;
	/* A NUL in the code: the builtin compile()'s error, from Python. */
	if (!msg_flag(m, F.k_want_value, &want) || !msg_flag(m, F.k_stream, &stream) ||
	    !msg_flag(m, F.k_display, &flag) || flag || !msg_flag(m, F.k_check_complete, &flag) || flag ||
	    !(code = msg_str(m, F.k_code, &src, &clen)))
		goto decline;
	fv = PyDict_GetItemWithError(m, F.k_filename);
	filename = fv ? msg_str(m, F.k_filename, &fname, &flen) : NULL;
	if (fv && fv != Py_None && !filename)
		goto decline;
	if (!filename || !flen) {
		fname = "<exec>";
		filename = NULL;
	}
	limit = limit_of(F.k_output);
	max_frame = limit_of(F.k_max_frame);
	if (!limit || !max_frame)
		goto decline;
	if (!filename && !(filename = PyUnicode_FromString(fname))) {
		PyErr_Clear();
		goto decline;
	} else if (fv == filename) {
		Py_INCREF(filename);
	}
	Py_INCREF(code);

	Py_BEGIN_ALLOW_THREADS
	k = exec_begin(f->hdr.id, stream, limit);
	Py_END_ALLOW_THREADS
	t0 = now_ns();
	c0 = cpu_us(NULL);
	if (k < 0) {
		PyErr_SetString(PyExc_OSError, "cannot start the output thread");
	} else {
		struct code_entry *ce = cache_find(src, (size_t)clen, fname, want);
		uint64_t mark = ce ? 0 : stderr_mark();

		remember_source(code, filename);
		if (ce) {
			body = Py_XNewRef(ce->body);
			lastc = Py_XNewRef(ce->last);
		} else if (want) {
			if (one_line(src, (size_t)clen)) {
				lastc = compile_str(src, filename, Py_eval_input);
				if (!lastc && (PyErr_ExceptionMatches(PyExc_SyntaxError) ||
					       PyErr_ExceptionMatches(PyExc_ValueError)))
					PyErr_Clear();
			}
			if (!lastc && !PyErr_Occurred()) {
				take_pair(PyObject_CallFunctionObjArgs(F.split_ast, code, filename, NULL), "_split_ast",
					  &body, &lastc);
			}
		} else {
			body = compile_str(src, filename, Py_file_input);
		}
		if (!ce && !PyErr_Occurred() && mark != (uint64_t)-1 && stderr_mark() == mark)
			cache_put(src, (size_t)clen, fname, want, body, lastc);
		if (!PyErr_Occurred() && PyDict_SetItem(F.globals, F.k_in_user, Py_True) == 0) {
			PyObject *x = body ? run_code(body) : Py_NewRef(Py_None);

			if (x && lastc)
				value = run_code(lastc);
			Py_XDECREF(x);
			/* Keep the exception of user code across this. */
			{
				PyObject *et, *ev, *etb;

				PyErr_Fetch(&et, &ev, &etb);
				PyDict_SetItem(F.globals, F.k_in_user, Py_False);
				PyErr_Clear();
				PyErr_Restore(et, ev, etb);
			}
		}
	}
	if (PyErr_Occurred()) {
		PyObject *et, *ev, *etb, *pair;

		PyErr_Fetch(&et, &ev, &etb);
		PyErr_NormalizeException(&et, &ev, &etb);
		if (etb && ev)
			PyException_SetTraceback(ev, etb);
		pair = ev ? PyObject_CallOneArg(F.fast_error, ev) : NULL;
		Py_XDECREF(et);
		Py_XDECREF(ev);
		Py_XDECREF(etb);
		bool answered = pair != NULL;

		take_pair(pair, "_fast_error", &err, &exit_code);
		if (answered && !PyErr_Occurred() &&
		    (!err || !PyBytes_Check(err) || (exit_code && !PyLong_Check(exit_code)))) {
			PyErr_SetString(PyExc_TypeError, "_fast_error: not (bytes, int|None)");
			Py_CLEAR(err);
			Py_CLEAR(exit_code);
		}
		if (!err)
			r = -1;	/* formatting failed: the runner's failure */
	}
	/* do_exec's finally: flush, then collect the output. */
	{
		PyObject *et, *ev, *etb;

		PyErr_Fetch(&et, &ev, &etb);
		for (int s = 0; s < 2; s++) {
			PyObject *fo = PyDict_GetItemWithError(F.sysdict, s ? F.k_stderr : F.k_stdout), *x;

			x = fo ? PyObject_CallMethodNoArgs(fo, F.k_flush) : NULL;
			Py_XDECREF(x);
			PyErr_Clear();
		}
		PyErr_Restore(et, ev, etb);
	}
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&S.cap_lock);
	exec_end_locked();
	Py_END_ALLOW_THREADS
	if (r == 0) {
		proto_buf_puts(&res, "{\"error\":");
		if (err)
			proto_buf_put(&res, PyBytes_AS_STRING(err), (size_t)PyBytes_GET_SIZE(err));
		else
			proto_buf_puts(&res, "null");
		for (int s = 0; s < 2 && r == 0; s++) {
			proto_buf_puts(&res, s ? ",\"stderr\":" : ",\"stdout\":");
			r = cap_json(&S.cap[s], limit, &res, &tails[s], &trunc[s]);
		}
	}
	pthread_mutex_unlock(&S.cap_lock);
	if (r < 0)
		goto out;
	for (int s = 0; s < 2; s++) {
		proto_buf_puts(&res, s ? ",\"stderr_truncated\":" : ",\"stdout_truncated\":");
		proto_buf_puts(&res, trunc[s] ? "true" : "false");
	}
	for (int s = 0; s < 2; s++) {
		proto_buf_puts(&res, s ? ",\"stderr_bytes\":" : ",\"stdout_bytes\":");
		jb_ull(&res, S.cap[s].total);
	}
	for (int s = 0; s < 2; s++)
		if (trunc[s]) {
			proto_buf_puts(&res, s ? ",\"stderr_tail\":" : ",\"stdout_tail\":");
			proto_buf_put(&res, tails[s].p ? tails[s].p : "", tails[s].len);
		}
	if (exit_code) {
		long ec = PyLong_AsLong(exit_code);

		if (ec == -1 && PyErr_Occurred()) {
			r = -1;
			goto out;
		}
		proto_buf_puts(&res, ",\"exit_code\":");
		jb_ull(&res, (unsigned long long)ec);
	}
	proto_buf_puts(&res, ",\"duration\":");
	jb_fixed(&res, now_ns() - t0, 9);
	cpu = cpu_us(&max_rss);
	proto_buf_puts(&res, ",\"usage\":{\"cpu\":");
	jb_fixed(&res, cpu >= c0 ? cpu - c0 : 0, 6);
	proto_buf_puts(&res, ",\"max_rss\":");
	jb_ull(&res, max_rss);
	proto_buf_puts(&res, "}");
	if (value) {
		size_t before = res.len;

		if (value_json(value, &val) < 0) {
			r = -1;
			goto out;
		}
		proto_buf_puts(&res, ",\"value\":");
		proto_buf_put(&res, val.p ? val.p : "", val.len);
		proto_buf_puts(&res, "}");
		/* send_result: a value too large for a frame is named, not sent. */
		if (!res.bad && res.len > max_frame) {
			char repr[160];

			snprintf(repr, sizeof(repr),
				 ",\"value\":{\"$repr\":\"<value too large to send: %zu bytes>\","
				 "\"$type\":\"builtins.object\",\"$why\":\"too large\"}}",
				 res.len);
			res.len = before;
			proto_buf_puts(&res, repr);
		}
	} else {
		proto_buf_puts(&res, "}");
	}
	if (res.bad) {
		PyErr_NoMemory();
		r = -1;
		goto out;
	}
	if (res.len > NSBOX_PROTO_MAX_FRAME) {
		PyErr_SetString(PyExc_ValueError, "bad frame type or size");
		r = -1;
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	k = send_frame(PROTO_RESULT, f->hdr.id, res.p, res.len);
	Py_END_ALLOW_THREADS
	if (k < 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		r = -2;
	} else {
		r = 1;
	}
out:
	Py_XDECREF(value);
	Py_XDECREF(body);
	Py_XDECREF(lastc);
	Py_XDECREF(err);
	Py_XDECREF(exit_code);
	Py_XDECREF(code);
	Py_XDECREF(filename);
	free(res.p);
	free(val.p);
	free(tails[0].p);
	free(tails[1].p);
	Py_DECREF(m);
	return r;
decline:
	PyErr_Clear();
	Py_DECREF(m);
	return 0;
}

/* The fast path failed after running (or trying to run) the code: what
 * the serve loop does when do_exec raises.  -1 if that fails too. */
static int fast_failed(uint32_t id)
{
	PyObject *et, *ev, *etb, *r = NULL;

	PyErr_Fetch(&et, &ev, &etb);
	PyErr_NormalizeException(&et, &ev, &etb);
	if (etb && ev)
		PyException_SetTraceback(ev, etb);
	if (ev)
		r = PyObject_CallFunction(F.fast_failed, "IO", id, ev);
	Py_XDECREF(et);
	Py_XDECREF(ev);
	Py_XDECREF(etb);
	if (!r)
		return -1;
	Py_DECREF(r);
	return 0;
}

static PyObject *py_dumps(PyObject *self, PyObject *o)
{
	(void)self;
	return pyjson_dumps(o);
}

static PyObject *py_loads(PyObject *self, PyObject *o)
{
	Py_buffer view;
	PyObject *r;

	(void)self;
	if (PyUnicode_Check(o)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(o, &n);

		return s ? pyjson_loads(s, (size_t)n) : NULL;
	}
	if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) < 0)
		return NULL;
	r = pyjson_loads(view.buf, (size_t)view.len);
	PyBuffer_Release(&view);
	return r;
}

static PyMethodDef methods[] = {
	{ "recv", py_recv, METH_NOARGS, "recv() -> (type, id, payload) or None when the host is gone" },
	{ "dumps", py_dumps, METH_O, "dumps(obj) -> bytes: compact JSON, UTF-8 (pyjson.c)" },
	{ "loads", py_loads, METH_O, "loads(bytes or str) -> obj (pyjson.c)" },
	{ "send", py_send, METH_VARARGS, "send(type, id, payload)" },
	{ "call", py_call, METH_VARARGS, "call(payload) -> (type, payload): one tool call round trip" },
	{ "exec_begin", py_exec_begin, METH_VARARGS, "exec_begin(id, stream, limit)" },
	{ "exec_end", py_exec_end, METH_NOARGS, "exec_end() -> ((head, tail, total), (head, tail, total))" },
	{ "compile", py_compile, METH_VARARGS, "compile(source, filename, mode) -> code" },
	{ "usage", py_usage, METH_NOARGS, "usage() -> (cpu seconds, peak RSS in bytes)" },
	{ "take_cancel", py_take_cancel, METH_NOARGS, "take_cancel() -> 0, 1 (timeout) or 2 (cancel)" },
	{ "fast_setup", py_fast_setup, METH_VARARGS, "fast_setup(globals, G, limits, sources, split_ast, fast_error, "
						   "fast_value, fast_failed): run ordinary EXECs in C" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef moddef = {
	PyModuleDef_HEAD_INIT, "_nsbox", "nsbox runner internals (protocol I/O).", -1, methods,
	NULL, NULL, NULL, NULL,
};

PyObject *runner_pymod_init(void)
{
	PyObject *m = PyModule_Create(&moddef);

	if (!m)
		return NULL;
	if (PyModule_AddIntConstant(m, "PROTO_VERSION", NSBOX_PROTO_VERSION) < 0 ||
	    PyModule_AddIntConstant(m, "MAX_FRAME", NSBOX_PROTO_MAX_FRAME) < 0 ||
	    PyModule_AddIntConstant(m, "CANCEL_SIGNAL", RUNNER_CANCEL_SIGNAL) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
