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
	bool spin_next;		/* the next blocking read may spin first (py_recv) */
	unsigned wanting;	/* threads waiting to read */
	unsigned long long last_read;	/* when a reader last let go */
	struct proto_reader *rd;

	int efd;		/* eventfd: wakes the io thread */
	int tfd;		/* timerfd: wakes it WATCH_DELAY into an exec */
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
 * a RESULT, and a cross-CPU wake-up costs tens of them.  Only the main
 * thread between execs spins (py_recv): no other thread then waits to be
 * poked out of a read.  -1 with EAGAIN when nothing came. */
#define SPIN_US 60
static ssize_t spin_recv(int fd, void *buf, size_t len)
{
	static long ncpu;
	unsigned long long t0 = now_ns();
	ssize_t n;

	if (!ncpu)
		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 2) {
		errno = EAGAIN;
		return -1;
	}
	do {
		n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return n;
	} while (now_ns() - t0 < SPIN_US * 1000ULL);
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

/* recv() -> (type, id, payload: bytes), or None once the host has gone. */
static PyObject *py_recv(PyObject *self, PyObject *args)
{
	struct qitem *q = NULL;
	struct proto_frame f = { 0 };
	bool got = false;

	(void)self;
	(void)args;
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
			if (read_as_owner(&f, true)) {
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
		PyObject *r = frame_tuple(&q->f);

		free(q);
		return r;
	}
	if (got)
		return frame_tuple(&f);
	Py_RETURN_NONE;
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

/* exec_begin(id, stream: bool, limit: int): start capturing for an exec. */
static PyObject *py_exec_begin(PyObject *self, PyObject *args)
{
	unsigned int id;
	int stream;
	Py_ssize_t limit;

	(void)self;
	if (!PyArg_ParseTuple(args, "Ipn", &id, &stream, &limit))
		return NULL;
	if (limit < 2)
		limit = 2;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&S.cap_lock);
	/* Drop leftovers written between execs. */
	atomic_store(&S.exec_active, false);
	drain_ready();
	S.cap_limit = (size_t)limit;
	cap_reset(&S.cap[0], S.cap_limit);
	cap_reset(&S.cap[1], S.cap_limit);
	S.streaming = stream;
	S.exec_id = id;
	atomic_store(&S.cancel_reason, 0);
	atomic_store(&S.exec_active, true);
	pthread_mutex_unlock(&S.cap_lock);
	pthread_mutex_lock(&S.lock);
	S.last_read = now_ns();
	pthread_mutex_unlock(&S.lock);
	/* The io thread starts with the first exec.  It needs to hear of an
	 * exec only once it has run for WATCH_DELAY (most are over by then):
	 * a timer, not a wake-up now. */
	{
		struct itimerspec it = { .it_value = { 0, (long)WATCH_DELAY_NS } };

		timerfd_settime(S.tfd, 0, &it, NULL);
	}
	if (!S.io_started)
		start_io_thread();
	Py_END_ALLOW_THREADS
	if (!S.io_started)
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

/* exec_end() -> ((head, tail, total) for stdout, same for stderr): collect
 * everything written so far (the caller flushed sys.stdout/err first). */
static PyObject *py_exec_end(PyObject *self, PyObject *args)
{
	PyObject *o, *e;

	(void)self;
	(void)args;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&S.cap_lock);
	drain_ready();
	for (int s = 0; s < 2; s++)
		if (S.cap[s].npend)
			cap_stream(s, "", 0, true);
	atomic_store(&S.exec_active, false);
	atomic_store(&S.cancel_reason, 0);
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
	return Py_CompileStringObject(src, filename, mode[1] == 'x' ? Py_file_input : Py_eval_input, NULL, -1);
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

static PyMethodDef methods[] = {
	{ "recv", py_recv, METH_NOARGS, "recv() -> (type, id, payload) or None when the host is gone" },
	{ "send", py_send, METH_VARARGS, "send(type, id, payload)" },
	{ "call", py_call, METH_VARARGS, "call(payload) -> (type, payload): one tool call round trip" },
	{ "exec_begin", py_exec_begin, METH_VARARGS, "exec_begin(id, stream, limit)" },
	{ "exec_end", py_exec_end, METH_NOARGS, "exec_end() -> ((head, tail, total), (head, tail, total))" },
	{ "compile", py_compile, METH_VARARGS, "compile(source, filename, mode) -> code" },
	{ "usage", py_usage, METH_NOARGS, "usage() -> (cpu seconds, peak RSS in bytes)" },
	{ "take_cancel", py_take_cancel, METH_NOARGS, "take_cancel() -> 0, 1 (timeout) or 2 (cancel)" },
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
