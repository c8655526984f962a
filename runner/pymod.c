/* The builtin module _nsbox, the runner's C half of the protocol: its
 * functions and its init.  The work is in io.c (the socket), capture.c
 * (output capture) and fastexec.c (the EXEC fast path); pymod.h says
 * what crosses those files, and how the socket is shared between threads
 * is told at the top of io.c. */
#include "pymod.h"

#include <signal.h>
#include <string.h>
#include <sys/resource.h>

static PyObject *frame_tuple(struct proto_frame *f)
{
	PyObject *r = Py_BuildValue("(iIy#)", (int)f->hdr.type, f->hdr.id, f->payload, (Py_ssize_t)f->hdr.len);

	proto_frame_free(f);
	return r;
}

/* recv() -> (type, id, payload: bytes), or None once the host has gone.
 * EXEC frames the fast path takes (fastexec_run) are run here and never
 * returned. */
static PyObject *py_recv(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	for (;;) {
		struct proto_frame f = { 0 };
		uint32_t id;
		int r;

		int got;

		Py_BEGIN_ALLOW_THREADS
		got = io_next_frame(&f);
		Py_END_ALLOW_THREADS
		if (!got)
			Py_RETURN_NONE;
		if (f.hdr.type != PROTO_EXEC || !(r = fastexec_run(&f)))
			return frame_tuple(&f);
		id = f.hdr.id;
		proto_frame_free(&f);
		/* -2: the RESULT could not be sent (OSError set). */
		if (r == -2 || (r < 0 && fastexec_failed(id) < 0))
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
	Py_buffer b, d = { .buf = NULL };
	int r;

	(void)self;
	if (!PyArg_ParseTuple(args, "iIy*|y*", &type, &id, &b, &d))
		return NULL;
	if (type < 1 || type > PROTO_TYPE_MAX || (size_t)b.len > NSBOX_PROTO_MAX_FRAME ||
	    (d.buf && (!proto_type_takes_data((unsigned)type) || (size_t)d.len > NSBOX_PROTO_MAX_FRAME - (size_t)b.len - 1))) {
		PyBuffer_Release(&b);
		if (d.buf)
			PyBuffer_Release(&d);
		PyErr_SetString(PyExc_ValueError, "bad frame type or size");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	if (d.buf)
		r = io_send_frame_data((uint16_t)type, id, b.buf, (size_t)b.len, d.buf, (size_t)d.len);
	else
		r = io_send_frame((uint16_t)type, id, b.buf, (size_t)b.len);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	if (d.buf)
		PyBuffer_Release(&d);
	if (r < 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	Py_RETURN_NONE;
}

/* take_fd() -> the descriptor that came with the last FILE_* request, or
 * -1; the caller closes it. */
static PyObject *py_take_fd(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	return PyLong_FromLong(io_take_fd());
}

/* call(payload: bytes) -> (type, payload: bytes): send a CALL and block,
 * with the GIL released, until the host answers this call's id (reading
 * the socket itself when nobody else does).  A CANCEL while the main
 * thread waits runs its signal handler here. */
static PyObject *py_call(PyObject *self, PyObject *args)
{
	struct io_call c = { 0 };
	Py_buffer b;
	bool is_main = io_on_main_thread();
	int r;

	(void)self;
	if (!PyArg_ParseTuple(args, "y*", &b))
		return NULL;
	if (io_call_start(&c) < 0) {
		PyBuffer_Release(&b);
		PyErr_SetString(PyExc_ConnectionError, "the host has gone away");
		return NULL;
	}

	Py_BEGIN_ALLOW_THREADS
	r = io_send_frame(PROTO_CALL, c.id, b.buf, (size_t)b.len);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);

	for (;;) {
		unsigned seq = atomic_load(&runner_exec.cancel_seq);
		enum io_call_res k;

		Py_BEGIN_ALLOW_THREADS
		k = io_call_wait(&c, seq, r == 0);
		Py_END_ALLOW_THREADS
		if (k == IO_CALL_DONE)
			return frame_tuple(&c.f);
		if (k == IO_CALL_GONE || r < 0) {
			if (k != IO_CALL_GONE)
				io_call_abandon(&c);
			PyErr_SetString(PyExc_ConnectionError, "the host has gone away");
			return NULL;
		}
		/* Cancelled (or a signal): let the main thread's handler raise;
		 * a late answer is dropped by the reader (no call with that id). */
		if (is_main && PyErr_CheckSignals() < 0) {
			io_call_abandon(&c);
			return NULL;
		}
	}
}

/* exec_begin(id, stream: bool, limit: int, stream_all: bool = False):
 * start capturing for an exec. */
static PyObject *py_exec_begin(PyObject *self, PyObject *args)
{
	unsigned int id;
	int stream, all = 0, r;
	Py_ssize_t limit;

	(void)self;
	if (!PyArg_ParseTuple(args, "Ipn|p", &id, &stream, &limit, &all))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = capture_begin(id, stream, all, limit < 2 ? 2 : (size_t)limit);
	Py_END_ALLOW_THREADS
	if (r < 0)
		return PyErr_Format(PyExc_OSError, "cannot start the output thread");
	Py_RETURN_NONE;
}

/* exec_end() -> ((head, tail, total) for stdout, same for stderr): collect
 * everything written so far (the caller flushed sys.stdout/err first). */
static PyObject *py_exec_end(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	return capture_end();
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
	return fastexec_compile(src, filename, mode[1] == 'x' ? Py_file_input : Py_eval_input);
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
	return PyLong_FromLong(atomic_exchange(&runner_exec.cancel_reason, 0));
}

/* fast_setup(globals, G, limits, sources, split_ast, fast_error,
 * fast_value, fast_failed): fastexec.c */
static PyObject *py_fast_setup(PyObject *self, PyObject *args)
{
	(void)self;
	return fastexec_setup(args);
}

static PyObject *py_rich_setup(PyObject *self, PyObject *args)
{
	(void)self;
	return fastexec_rich_setup(args);
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
	{ "send", py_send, METH_VARARGS, "send(type, id, payload[, data]): data makes a PROTO_FLAG_DATA frame" },
	{ "take_fd", py_take_fd, METH_NOARGS, "take_fd() -> the fd passed with the last FILE_* request, or -1" },
	{ "call", py_call, METH_VARARGS, "call(payload) -> (type, payload): one tool call round trip" },
	{ "exec_begin", py_exec_begin, METH_VARARGS, "exec_begin(id, stream, limit, stream_all=False)" },
	{ "exec_end", py_exec_end, METH_NOARGS, "exec_end() -> ((head, tail, total), (head, tail, total))" },
	{ "compile", py_compile, METH_VARARGS, "compile(source, filename, mode) -> code" },
	{ "usage", py_usage, METH_NOARGS, "usage() -> (cpu seconds, peak RSS in bytes)" },
	{ "take_cancel", py_take_cancel, METH_NOARGS, "take_cancel() -> 0, 1 (timeout) or 2 (cancel)" },
	{ "fast_setup", py_fast_setup, METH_VARARGS, "fast_setup(globals, G, limits, sources, split_ast, fast_error, "
						   "fast_value, fast_failed): run ordinary EXECs in C" },
	{ "rich_setup", py_rich_setup, METH_VARARGS, "rich_setup(displays, rich, rich_collect, fast_rich): rich results "
						     "in the fast path" },
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
	    PyModule_AddIntConstant(m, "CANCEL_SIGNAL", RUNNER_CANCEL_SIGNAL) < 0 ||
	    PyModule_AddIntConstant(m, "DISPLAY_MAX", NSBOX_PROTO_DISPLAY_MAX) < 0 ||
	    PyModule_AddIntConstant(m, "DISPLAY_MIMES", NSBOX_PROTO_DISPLAY_MIMES) < 0 ||
	    PyModule_AddIntConstant(m, "OUT_FILES_MAX", NSBOX_PROTO_OUT_FILES_MAX) < 0 ||
	    PyModule_AddIntConstant(m, "RICH_BYTES", NSBOX_PROTO_RICH_BYTES) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
