/* The builtin module _nsbox, the runner's C half of the protocol: what
 * crosses its files.
 *	io.c		the socket: who reads it, the io thread, frames out,
 *			the serve loop's next frame, tool-call waits
 *	capture.c	output capture: the stdio pipes, head and tail within
 *			the cap, OUTPUT frames, an exec's begin and end
 *	fastexec.c	the EXEC fast path in C
 *	pymod.c		the module's functions and its init
 * Each file's own state is static in it; what the files share is the
 * exec in progress (struct runner_exec).
 * Lock order: capture.c's lock before io.c's send_lock (OUTPUT frames
 * are sent under it); io.c's state lock is never held with either.
 * No function here takes the GIL or needs it unless it says so. */
#ifndef NSBOX_RUNNER_PYMOD_H
#define NSBOX_RUNNER_PYMOD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "proto.h"
#include "runner.h"

/* The exec in progress, shared by the main thread, the io thread and
 * threads in tool calls: atomics, no lock.  Defined in io.c. */
struct runner_exec {
	atomic_bool active;		/* set and cleared by capture.c around an exec */
	atomic_int cancel_reason;	/* 0 none, 1 timeout, 2 cancel: set by the socket's
					 * reader (io.c) during an exec, cleared when one
					 * begins or ends, taken by take_cancel() */
	atomic_uint cancel_seq;		/* +1 per cancel: a waiting tool call stops waiting */
};
extern struct runner_exec runner_exec;

/* ---- io.c ---- */

/* Blocking write of one frame (serialised; a failure marks the
 * connection dead).  0 or -1 with errno. */
int io_send_frame(uint16_t type, uint32_t id, const char *payload, size_t len);
/* A PROTO_FLAG_DATA frame: payload, a NUL, data (proto_write_frame_data).
 * -1 with errno: EINVAL or EMSGSIZE for a frame that cannot be made, else
 * the socket failed and the session is dead. */
/* The descriptor passed with the last FILE_* request (-1: none); the
 * caller owns it. */
int io_take_fd(void);
int io_send_frame_data(uint16_t type, uint32_t id, const char *payload, size_t len, const void *data, size_t dlen);
/* The serve loop's next frame, queued or read (reading the socket itself
 * when nobody else does, after a brief spin).  1 with *f filled (the
 * caller frees it), 0 once the host has gone.  Blocks: GIL released. */
int io_next_frame(struct proto_frame *f);
/* An exec has begun (capture_begin): the io thread, started at the first
 * exec, watches the socket once nobody else has read it for a while, so
 * that CANCEL reaches user code that makes no tool calls.  -1: no io thread. */
int io_exec_watch(void);
/* Whether the caller is the thread CANCEL's signal is sent to. */
bool io_on_main_thread(void);

/* A tool call waiting for its answer (on the waiting thread's stack). */
struct io_call {
	uint32_t id;
	bool done;
	struct proto_frame f;		/* the RETURN or RAISE, once done */
	struct io_call *next;
};
/* Register c under a new call id (c->id).  -1 if the host has gone. */
int io_call_start(struct io_call *c);
enum io_call_res { IO_CALL_DONE, IO_CALL_GONE, IO_CALL_INTERRUPTED };
/* Wait for c's answer (reading the socket when nobody else does) until it
 * comes (DONE, c->f filled), the host has gone (GONE), or a cancel after
 * seq (runner_exec.cancel_seq when the caller last looked) or a signal
 * (INTERRUPTED); at once when !sent (c's CALL could not be sent).  After DONE and GONE c is unregistered, after
 * INTERRUPTED it is not (wait again or io_call_abandon).  Blocks: GIL
 * released. */
enum io_call_res io_call_wait(struct io_call *c, unsigned seq, bool sent);
/* Unregister c: a late answer is then dropped. */
void io_call_abandon(struct io_call *c);

/* ---- capture.c ---- */

/* Point fds 0, 1 and 2 at an empty pipe and the two capture pipes
 * (runner_io_start).  0 or -1 with err. */
int capture_start(struct nsbox_err *err);
/* For the io thread: the capture pipes' read ends to poll (-1: no longer). */
void capture_fds(int fds[2]);
/* For the io thread: stream s (0 stdout, 1 stderr) polled as revents. */
void capture_ready(int s, short revents);
/* Start capturing for exec id; then io_exec_watch().  stream_all: stream
 * all of the output, not only the head (EXEC's stream_all).  -1: no io
 * thread. */
int capture_begin(uint32_t id, bool stream, bool stream_all, size_t limit);
/* End the exec's capture: ((head, tail, total) for stdout, the same for
 * stderr), as bytes.  GIL held (released while waiting for the lock). */
PyObject *capture_end(void);
/* End the exec's capture and, unless out is NULL, append
 * ,"stdout":...,"stderr":... to out as runner.py's do_exec does (the
 * tails, when truncated, in tail[]).  total[]: bytes written per stream.
 * GIL held (released while waiting for the lock).  0, or -1 with a
 * Python exception. */
int capture_end_json(struct proto_buf *out, size_t limit, struct proto_buf tail[2], bool trunc[2],
		     uint64_t total[2]);
/* Bytes written to stderr so far in this exec, captured or still in the
 * pipe; (uint64_t)-1 if unknown. */
uint64_t capture_stderr_mark(void);

/* ---- fastexec.c (GIL held) ---- */

/* Run one EXEC as runner.py's do_exec does.  0: declined (the Python path
 * runs it), 1: done and answered, -1: the runner failed (Python exception
 * set), -2: the RESULT could not be sent (OSError set). */
int fastexec_run(const struct proto_frame *f);
/* After fastexec_run's -1: what the serve loop does when do_exec raises.
 * -1 if that fails too. */
int fastexec_failed(uint32_t id);
/* fast_setup(): runner.py's serve() turns the fast path on. */
PyObject *fastexec_setup(PyObject *args);
/* Compile as the builtin compile() of a str does (fastexec.c). */
PyObject *fastexec_compile(const char *src, PyObject *filename, int start);

#endif
