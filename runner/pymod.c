/* The builtin module _nsbox: the runner's C half of the protocol.
 *
 * Threads of a session (all started by runner_io_start, none in a template):
 *  - the main thread runs Python: the serve loop in runner.py and user code;
 *  - the reader thread owns reads from the socket: it answers PING at once
 *    (even while user code runs), turns CANCEL into a signal to the main
 *    thread, hands RETURN/RAISE to the waiting tool call by id, and queues
 *    everything else for the serve loop;
 *  - the drain thread empties the stdout/stderr capture pipes (fds 1 and 2
 *    point at them, so C extensions and subprocesses are captured too),
 *    keeps head and tail within the cap and streams OUTPUT frames.
 * Lock order: cap_lock before send_lock; S.lock is never held with either. */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "proto.h"
#include "util.h"

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
	bool started;
	pthread_t main_thread;

	pthread_mutex_t send_lock;

	pthread_mutex_t lock;	/* queue, waiters, dead */
	pthread_cond_t cond;	/* queue or dead changed */
	pthread_cond_t call_cond;	/* a waiter was answered, dead, or cancel */
	struct qitem *qhead, *qtail;
	struct waiter *waiters;
	uint32_t next_call_id;
	bool dead;

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
	.call_cond = PTHREAD_COND_INITIALIZER,
	.cap_lock = PTHREAD_MUTEX_INITIALIZER,
	.pipe_rd = { -1, -1 },
	.cap_limit = 1 << 20,
};

static const char *const stream_names[2] = { "stdout", "stderr" };

static void mark_dead(void)
{
	pthread_mutex_lock(&S.lock);
	S.dead = true;
	pthread_cond_broadcast(&S.cond);
	pthread_cond_broadcast(&S.call_cond);
	pthread_mutex_unlock(&S.lock);
}

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
	pthread_cond_broadcast(&S.call_cond);
	pthread_mutex_unlock(&S.lock);
}

static void *reader_main(void *arg)
{
	/* static: the reader carries a 64 KiB buffer. */
	static struct proto_reader r;
	struct nsbox_err err;

	(void)arg;
	block_signals();
	proto_reader_init(&r, NSBOX_PROTO_MAX_FRAME);
	for (;;) {
		struct proto_frame f = { 0 };
		struct waiter *w;
		struct qitem *q;

		if (proto_reader_read(&r, S.fd, &f, &err) <= 0)
			break;
		switch (f.hdr.type) {
		case PROTO_PING:
			send_frame(PROTO_PONG, f.hdr.id, "{}", 2);
			proto_frame_free(&f);
			break;
		case PROTO_CANCEL:
			handle_cancel(&f);
			proto_frame_free(&f);
			break;
		case PROTO_RETURN:
		case PROTO_RAISE:
			pthread_mutex_lock(&S.lock);
			for (w = S.waiters; w; w = w->next)
				if (w->id == f.hdr.id && !w->done)
					break;
			if (w) {
				w->f = f;
				w->done = true;
				pthread_cond_broadcast(&S.call_cond);
			}
			pthread_mutex_unlock(&S.lock);
			/* No waiter: an answer to a call abandoned on cancel. */
			if (!w)
				proto_frame_free(&f);
			break;
		default:
			q = calloc(1, sizeof(*q));
			if (!q) {
				proto_frame_free(&f);
				goto out;
			}
			q->f = f;
			pthread_mutex_lock(&S.lock);
			if (S.qtail)
				S.qtail->next = q;
			else
				S.qhead = q;
			S.qtail = q;
			pthread_cond_signal(&S.cond);
			pthread_mutex_unlock(&S.lock);
		}
	}
out:
	proto_reader_free(&r);
	mark_dead();
	return NULL;
}

/* ---- output capture ---- */

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

static void *drain_main(void *arg)
{
	(void)arg;
	block_signals();
	for (;;) {
		struct pollfd p[2] = { { S.pipe_rd[0], POLLIN, 0 }, { S.pipe_rd[1], POLLIN, 0 } };
		int k = poll(p, 2, -1);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		for (int s = 0; s < 2; s++) {
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
		if (S.pipe_rd[0] < 0 && S.pipe_rd[1] < 0)
			return NULL;
	}
}

int runner_io_start(int fd, struct nsbox_err *err)
{
	pthread_t t;
	int p_in[2], p_out[2], p_err[2];
	int r;

	S.fd = fd;
	S.main_thread = pthread_self();
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
	r = pthread_create(&t, NULL, reader_main, NULL);
	if (r)
		return err_set(err, r, "start reader thread");
	pthread_detach(t);
	r = pthread_create(&t, NULL, drain_main, NULL);
	if (r)
		return err_set(err, r, "start output thread");
	pthread_detach(t);
	S.started = true;
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

	(void)self;
	(void)args;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&S.lock);
	while (!S.qhead && !S.dead)
		pthread_cond_wait(&S.cond, &S.lock);
	q = S.qhead;
	if (q) {
		S.qhead = q->next;
		if (!S.qhead)
			S.qtail = NULL;
	}
	pthread_mutex_unlock(&S.lock);
	Py_END_ALLOW_THREADS
	if (!q)
		Py_RETURN_NONE;
	{
		PyObject *r = frame_tuple(&q->f);

		free(q);
		return r;
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
 * with the GIL released, until the host answers this call's id.  A CANCEL
 * while the main thread waits runs its signal handler here. */
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
		while (!w.done && !S.dead && atomic_load(&S.cancel_seq) == seq)
			pthread_cond_wait(&S.call_cond, &S.lock);
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
		/* Cancelled: let the main thread's handler raise; the late answer
		 * is dropped by the reader (no waiter with that id). */
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
	for (int s = 0; s < 2; s++)
		while (drain_once(s) > 0)
			;
	S.cap_limit = (size_t)limit;
	cap_reset(&S.cap[0], S.cap_limit);
	cap_reset(&S.cap[1], S.cap_limit);
	S.streaming = stream;
	S.exec_id = id;
	atomic_store(&S.cancel_reason, 0);
	atomic_store(&S.exec_active, true);
	pthread_mutex_unlock(&S.cap_lock);
	Py_END_ALLOW_THREADS
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
	for (int s = 0; s < 2; s++) {
		while (drain_once(s) > 0)
			;
		cap_stream(s, "", 0, true);
	}
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
