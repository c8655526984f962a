/* The _nsbox module's output capture (pymod.h).  fds 1 and 2 point at
 * two pipes, so that C extensions and subprocesses are captured too; the
 * io thread (io.c) empties them, keeps head and tail within the cap and
 * streams OUTPUT frames; an exec's end takes what is written so far. */
#include "pymod.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <jansson.h>

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
	pthread_mutex_t lock;	/* all of this but pipe_rd's reads by the io thread */
	int pipe_rd[2];		/* read ends of the stdout / stderr pipes; -1 once closed */
	struct capture cap[2];
	size_t limit;
	bool streaming;
	/* Stream all of the output, not only the head (EXEC's stream_all:
	 * the host's caller shows it as produced, e.g. nsbox python writing
	 * to a file).  The capture kept for RESULT is capped all the same. */
	bool stream_all;
	uint32_t exec_id;
} C = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.pipe_rd = { -1, -1 },
	.limit = 1 << 20,
};

static const char *const stream_names[2] = { "stdout", "stderr" };

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
 * C.lock held. */
static void cap_stream(int s, const char *data, size_t len, bool final)
{
	struct capture *c = &C.cap[s];
	char *joined = NULL, *clean = NULL;
	const char *in = data;
	struct proto_buf pb = { 0 };
	size_t n, clean_len, pend = 0;

	if (!C.streaming || (!C.stream_all && c->streamed >= c->head_cap))
		return;
	n = len;
	if (!C.stream_all && n > c->head_cap - c->streamed)
		n = (size_t)(c->head_cap - c->streamed);
	c->streamed += n;
	/* A character cut at the last chunk's end goes first (no copy when
	 * there is none, the usual case). */
	if (c->npend) {
		joined = malloc(c->npend + n + 1);
		if (!joined)
			return;
		memcpy(joined, c->pend, c->npend);
		memcpy(joined + c->npend, data, n);
		n += c->npend;
		c->npend = 0;
		in = joined;
	}
	if (proto_utf8_sanitize(in, n, &clean, &clean_len, final ? NULL : &pend) < 0)
		goto out;
	memcpy(c->pend, in + n - pend, pend);
	c->npend = pend;
	if (!clean_len)
		goto out;
	/* By hand, not json_pack + json_dumps: two copies less per 64 KiB
	 * of output (nsbox python's printing speed). */
	proto_buf_puts(&pb, "{\"stream\":\"");
	proto_buf_puts(&pb, stream_names[s]);
	proto_buf_puts(&pb, "\",\"data\":");
	proto_buf_json_str(&pb, clean, clean_len);
	proto_buf_put(&pb, "}", 1);
	if (!pb.bad)
		io_send_frame(PROTO_OUTPUT, C.exec_id, pb.p, pb.len);
out:
	free(pb.p);
	free(clean);
	free(joined);
}

/* Read what is available on stream s without blocking.  C.lock held.
 * Returns bytes read, 0 at EAGAIN, -1 at EOF or error. */
static ssize_t drain_once(int s)
{
	static char buf[65536];
	ssize_t n;

	if (C.pipe_rd[s] < 0)
		return -1;
	n = read(C.pipe_rd[s], buf, sizeof(buf));
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	/* Output between execs (a background subprocess) is dropped. */
	if (atomic_load(&runner_exec.active)) {
		cap_append(&C.cap[s], buf, (size_t)n);
		cap_stream(s, buf, (size_t)n, false);
	}
	return n;
}

/* Empty both pipes of what is in them now.  C.lock held.  One poll for
 * the common case of nothing written. */
static void drain_ready(void)
{
	struct pollfd p[2] = { { C.pipe_rd[0], POLLIN, 0 }, { C.pipe_rd[1], POLLIN, 0 } };

	if (poll(p, 2, 0) <= 0)
		return;
	for (int s = 0; s < 2; s++)
		if (p[s].revents)
			while (drain_once(s) > 0)
				;
}

bool runner_keep_stdin;

int capture_start(struct nsbox_err *err)
{
	int p_in[2], p_out[2], p_err[2];
	/* A terminal is never kept: a sandbox with the host's terminal could
	 * push input into it (TIOCSTI, CVE-2017-5226). */
	bool keep = runner_keep_stdin && fcntl(0, F_GETFD) >= 0 && !isatty(0);

	/* stdin: an empty pipe (EOF at once), unless the caller passed its
	 * own (keep). */
	if (pipe2(p_in, O_CLOEXEC) < 0 || pipe2(p_out, O_CLOEXEC) < 0 || pipe2(p_err, O_CLOEXEC) < 0)
		return err_sys(err, "pipe2");
	close(p_in[1]);
	/* dup2 clears FD_CLOEXEC: subprocesses inherit 0, 1 and 2. */
	if ((!keep && dup2(p_in[0], 0) < 0) || dup2(p_out[1], 1) < 0 || dup2(p_err[1], 2) < 0)
		return err_sys(err, "dup2 stdio");
	close(p_in[0]);
	close(p_out[1]);
	close(p_err[1]);
	/* The pipes keep the default 16 pages: the seccomp filter refuses
	 * F_SETPIPE_SZ, whose pages are charged to the host user
	 * (policy/seccomp-rules.c). */
	C.pipe_rd[0] = p_out[0];
	C.pipe_rd[1] = p_err[0];
	if (fcntl(C.pipe_rd[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(C.pipe_rd[1], F_SETFL, O_NONBLOCK) < 0)
		return err_sys(err, "fcntl O_NONBLOCK");
	cap_reset(&C.cap[0], C.limit);
	cap_reset(&C.cap[1], C.limit);
	return 0;
}

/* Read by the io thread without the lock: only the io thread itself
 * changes them after capture_start (capture_ready). */
void capture_fds(int fds[2])
{
	fds[0] = C.pipe_rd[0];
	fds[1] = C.pipe_rd[1];
}

void capture_ready(int s, short revents)
{
	pthread_mutex_lock(&C.lock);
	if (drain_once(s) < 0 && (revents & (POLLHUP | POLLERR | POLLNVAL)) && !(revents & POLLIN)) {
		/* Nobody can write any more (fd closed by user code): stop polling it. */
		C.pipe_rd[s] = -1;
	}
	pthread_mutex_unlock(&C.lock);
}

int capture_begin(uint32_t id, bool stream, bool stream_all, size_t limit)
{
	if (limit < 2)
		limit = 2;
	pthread_mutex_lock(&C.lock);
	/* Drop leftovers written between execs. */
	atomic_store(&runner_exec.active, false);
	drain_ready();
	C.limit = limit;
	cap_reset(&C.cap[0], C.limit);
	cap_reset(&C.cap[1], C.limit);
	C.streaming = stream;
	C.stream_all = stream && stream_all;
	C.exec_id = id;
	atomic_store(&runner_exec.cancel_reason, 0);
	atomic_store(&runner_exec.active, true);
	pthread_mutex_unlock(&C.lock);
	return io_exec_watch();
}

/* End the exec's capture: take what is written so far.  C.lock held
 * (and kept: the caller reads C.cap, then unlocks). */
static void exec_end_locked(void)
{
	drain_ready();
	for (int s = 0; s < 2; s++)
		if (C.cap[s].npend)
			cap_stream(s, "", 0, true);
	atomic_store(&runner_exec.active, false);
	atomic_store(&runner_exec.cancel_reason, 0);
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

/* exec_end()'s result: ((head, tail, total) for stdout, the same for
 * stderr), everything written so far (the caller flushed sys.stdout/err
 * first). */
PyObject *capture_end(void)
{
	PyObject *o, *e;

	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&C.lock);
	exec_end_locked();
	Py_END_ALLOW_THREADS
	o = cap_result(&C.cap[0]);
	e = cap_result(&C.cap[1]);
	pthread_mutex_unlock(&C.lock);
	if (!o || !e) {
		Py_XDECREF(o);
		Py_XDECREF(e);
		return NULL;
	}
	return Py_BuildValue("(NN)", o, e);
}

/* do_exec's _text() for one stream, into the result as
 * "NAME":...,  (and the tail kept for NAME_tail when truncated).
 * C.lock held.  -1 with a Python exception. */
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

int capture_end_json(struct proto_buf *out, size_t limit, struct proto_buf tail[2], bool trunc[2],
		     uint64_t total[2])
{
	int r = 0;

	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&C.lock);
	exec_end_locked();
	Py_END_ALLOW_THREADS
	for (int s = 0; out && s < 2 && r == 0; s++) {
		proto_buf_puts(out, s ? ",\"stderr\":" : ",\"stdout\":");
		r = cap_json(&C.cap[s], limit, out, &tail[s], &trunc[s]);
	}
	total[0] = C.cap[0].total;
	total[1] = C.cap[1].total;
	pthread_mutex_unlock(&C.lock);
	return r;
}

/* Bytes written to stderr so far in this exec, captured or still in the
 * pipe; (uint64)-1 if unknown. */
uint64_t capture_stderr_mark(void)
{
	uint64_t r = (uint64_t)-1;
	int n;

	pthread_mutex_lock(&C.lock);
	if (C.pipe_rd[1] >= 0 && ioctl(C.pipe_rd[1], FIONREAD, &n) == 0)
		r = C.cap[1].total + (uint64_t)n;
	pthread_mutex_unlock(&C.lock);
	return r;
}
