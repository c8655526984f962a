/* Frame I/O on a session's socket to the runner (nsbox-protocol(7)): whole
 * frames out with a deadline, frames in through a proto_reader, and the
 * wait that watches the sandbox's pidfd and a cancel fd beside the socket.
 * Everything read is hostile: proto_reader caps sizes before allocating,
 * frame_parse() schema-checks the message. */
#ifndef NSBOX_FRAME_H
#define NSBOX_FRAME_H

#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "proto.h"
#include "spinwait.h"

struct frame_io {
	int sock;			/* non-blocking; owned by the session */
	struct proto_reader *rd;
	uint32_t max_frame;		/* payload cap for what we send */
	struct spinwait spin;		/* the adaptive spin before sleeping (proto/spinwait.h) */
	/* Frames queued for the runner (frame_queue_buf): an exec's EXEC,
	 * answers and CANCELs wait here, not in a send() on the thread that
	 * drives the exec, when the runner stops reading. */
	char *out;
	size_t out_off, out_len, out_cap;
	uint16_t out_type;		   /* the first frame still waiting, for messages */
	unsigned long long out_deadline; /* when it must be gone (ns) */
	/* Set around a control request's send: a wait for room ends with
	 * ECANCELED when the eventfd wakes it with the flag set (it is
	 * emptied first, then the flag taken: session.c's cancel_take). */
	int cancel_fd;			/* -1: none */
	atomic_bool *cancel_req;
};


/* Send one whole frame (header and payload in buf), polling so that a
 * runner that stops reading cannot block us past the deadline (ETIMEDOUT). */
int frame_send_buf(struct frame_io *io, uint16_t type, const char *buf, size_t len, unsigned long long deadline,
		   struct nsbox_err *err);
/* The same with fd (-1: none) passed along with its first bytes
 * (SCM_RIGHTS): the memfd of a FILE_* request (files.c). */
int frame_send_buf_fd(struct frame_io *io, uint16_t type, const char *buf, size_t len, int fd,
		      unsigned long long deadline, struct nsbox_err *err);
/* Encode msg (borrowed) as a frame of type and id, and send it.  The
 * sends above first drain the queue below, within the same deadline. */
int frame_send_msg(struct frame_io *io, uint16_t type, uint32_t id, const json_t *msg,
		   unsigned long long deadline, struct nsbox_err *err);

/* Queue one whole frame and send what the socket takes now, never
 * waiting: the rest goes with frame_flush() (or the next blocking send).
 * deadline: by when the runner must have taken it (frame_stalled()).
 * 0, or -1 with err (EMSGSIZE: too big for a frame, nothing queued; the
 * socket's errors). */
int frame_queue_buf(struct frame_io *io, uint16_t type, const char *buf, size_t len, unsigned long long deadline,
		    struct nsbox_err *err);
int frame_queue_msg(struct frame_io *io, uint16_t type, uint32_t id, const json_t *msg,
		    unsigned long long deadline, struct nsbox_err *err);
/* Send what the socket takes of the queue now: 0 when it is empty, 1 when
 * bytes are left, -1 with err. */
int frame_flush(struct frame_io *io, struct nsbox_err *err);
/* Whether frames wait in the queue; while they do, the session reads no
 * frame (a runner that does not read gets nothing more answered). */
static inline bool frame_queued(const struct frame_io *io)
{
	return io->out_off < io->out_len;
}
/* The queue's deadline has passed with bytes still waiting: err says so. */
bool frame_stalled(const struct frame_io *io, unsigned long long now, struct nsbox_err *err);
void frame_io_release(struct frame_io *io);

enum frame_wait_res {
	W_FRAME = 1,
	W_TIMEOUT = 0,
	W_ERROR = -1,	/* protocol error or I/O error: err set */
	W_DEAD = -2,	/* the runner ended (EOF or process exit) */
	W_CANCEL = -3,	/* cancel_fd became readable */
};

/* The bytes read from the socket were the runner's last: its end closed
 * or reset (err from proto_reader_read). */
bool frame_peer_gone(const struct frame_io *io, const struct nsbox_err *err);

/* Wait for one frame until deadline (0: none), watching pidfd (the
 * sandbox's exit; -1: none) and cancel_fd (-1: none; the caller drains
 * it).  *f is owned by the caller on W_FRAME (proto_frame_free). */
int frame_wait(struct frame_io *io, int pidfd, int cancel_fd, unsigned long long deadline, struct proto_frame *f,
	       struct nsbox_err *err);

/* Parse and schema-check a frame from the runner: a new reference, or
 * NULL with err. */
json_t *frame_parse(struct proto_frame *f, struct nsbox_err *err);

static inline void frame_freep(struct proto_frame *f)
{
	proto_frame_free(f);
}
/* A struct proto_frame (zero-initialised) freed at scope exit. */
#define _cleanup_frame_ __attribute__((cleanup(frame_freep)))

#endif
