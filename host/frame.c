/* Frame I/O with the runner: see frame.h. */
#include "frame.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

/* One send() when the socket has room. */
int frame_send_buf(struct frame_io *io, uint16_t type, const char *buf, size_t len, unsigned long long deadline,
		   struct nsbox_err *err)
{
	return frame_send_buf_fd(io, type, buf, len, -1, deadline, err);
}

static int wait_writable(struct frame_io *io, uint16_t type, unsigned long long deadline, struct nsbox_err *err)
{
	struct pollfd p[2] = { { io->sock, POLLOUT, 0 }, { io->cancel_req ? io->cancel_fd : -1, POLLIN, 0 } };

	for (;;) {
		uint64_t drain;
		int k = poll(p, 2, deadline_ms(deadline));

		if (k == 0)
			return err_set(err, ETIMEDOUT, "the runner stopped reading (sending %s)", proto_type_name(type));
		if (k < 0)
			return errno == EINTR ? 0 : err_sys(err, "poll");
		if (p[0].revents || !(p[1].revents & POLLIN))
			return 0;
		while (read(io->cancel_fd, &drain, sizeof(drain)) > 0)
			;
		if (atomic_exchange(io->cancel_req, false))
			return err_set(err, ECANCELED, "cancelled (nsbox_cancel) while sending %s", proto_type_name(type));
	}
}

void frame_io_release(struct frame_io *io)
{
	free(io->out);
	io->out = NULL;
	io->out_off = io->out_len = io->out_cap = 0;
}

int frame_flush(struct frame_io *io, struct nsbox_err *err)
{
	while (frame_queued(io)) {
		ssize_t n = send(io->sock, io->out + io->out_off, io->out_len - io->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n >= 0) {
			io->out_off += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 1;
		return err_sys(err, "send %s", proto_type_name(io->out_type));
	}
	io->out_off = io->out_len = 0;
	io->out_deadline = 0;
	/* An answer of many megabytes is not kept for the session's life. */
	if (io->out_cap > (1u << 20))
		frame_io_release(io);
	return 0;
}

int frame_queue_buf(struct frame_io *io, uint16_t type, const char *buf, size_t len, unsigned long long deadline,
		    struct nsbox_err *err)
{
	if (!frame_queued(io)) {
		/* Nothing waits: straight from buf, only the rest is copied. */
		while (len) {
			ssize_t n = send(io->sock, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;
			if (n < 0)
				return err_sys(err, "send %s", proto_type_name(type));
			buf += n;
			len -= (size_t)n;
		}
		if (!len)
			return 0;
		io->out_off = io->out_len = 0;
		io->out_type = type;
		io->out_deadline = deadline;
	} else if (deadline < io->out_deadline) {
		io->out_deadline = deadline;
	}
	if (io->out_len + len > io->out_cap) {
		size_t cap = io->out_len + len > 2 * io->out_cap ? io->out_len + len : 2 * io->out_cap;
		char *p = realloc(io->out, cap);

		if (!p)
			return err_set(err, ENOMEM, "queue %s", proto_type_name(type));
		io->out = p;
		io->out_cap = cap;
	}
	memcpy(io->out + io->out_len, buf, len);
	io->out_len += len;
	return frame_flush(io, err) < 0 ? -1 : 0;
}

int frame_queue_msg(struct frame_io *io, uint16_t type, uint32_t id, const json_t *msg,
		    unsigned long long deadline, struct nsbox_err *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;

	if (proto_encode(type, id, msg, io->max_frame, &buf, &len, err) < 0)
		return -1;
	return frame_queue_buf(io, type, buf, len, deadline, err);
}

bool frame_stalled(const struct frame_io *io, unsigned long long now, struct nsbox_err *err)
{
	if (!frame_queued(io) || !io->out_deadline || now < io->out_deadline)
		return false;
	err_set(err, ETIMEDOUT, "the runner stopped reading (sending %s)", proto_type_name(io->out_type));
	return true;
}

int frame_send_buf_fd(struct frame_io *io, uint16_t type, const char *buf, size_t len, int fd,
		      unsigned long long deadline, struct nsbox_err *err)
{
	size_t done = 0;

	/* What was queued goes first: frames never interleave. */
	for (;;) {
		int k = frame_flush(io, err);

		if (k <= 0) {
			if (k < 0)
				return -1;
			break;
		}
		if (wait_writable(io, io->out_type, deadline, err) < 0)
			return -1;
	}
	while (done < len) {
		struct iovec iov = { (void *)(buf + done), len - done };
		/* The fd travels with the frame's first bytes. */
		ssize_t n = done == 0 && fd >= 0 ? send_with_fds(io->sock, &iov, 1, &fd, 1)
						 : send(io->sock, buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n >= 0) {
			done += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return err_sys(err, "send %s", proto_type_name(type));
		if (wait_writable(io, type, deadline, err) < 0)
			return -1;
	}
	return 0;
}

int frame_send_msg(struct frame_io *io, uint16_t type, uint32_t id, const json_t *msg,
		   unsigned long long deadline, struct nsbox_err *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;

	if (proto_encode(type, id, msg, io->max_frame, &buf, &len, err) < 0)
		return -1;
	return frame_send_buf(io, type, buf, len, deadline, err);
}

bool frame_peer_gone(const struct frame_io *io, const struct nsbox_err *err)
{
	/* ECONNRESET: the runner died with our frame unread.  EPROTO at EOF:
	 * it ended in the middle of writing a frame (killed by the OOM killer
	 * or at the time limit's grace): how it ended says why, as when it
	 * ends between frames. */
	return (io->rd->eof && (err->code == EPIPE || err->code == EPROTO)) || err->code == ECONNRESET;
}

int frame_wait(struct frame_io *io, int pidfd, int cancel_fd, unsigned long long deadline, struct proto_frame *f,
	       struct nsbox_err *err)
{
	/* An answer is never there the moment we ask: poll first (one
	 * read() less per frame), unless bytes are already buffered. */
	bool try_read = io->rd->buf_start < io->rd->buf_end;

	for (;;) {
		struct pollfd p[3] = {
			{ io->sock, POLLIN, 0 },
			{ pidfd, POLLIN, 0 },
			{ cancel_fd, POLLIN, 0 },
		};
		int k = try_read ? proto_reader_read(io->rd, io->sock, f, err) : 0;

		try_read = true;
		if (k == 1)
			return W_FRAME;
		if (k < 0)
			return frame_peer_gone(io, err) ? W_DEAD : W_ERROR;
		k = spinwait_poll(&io->spin, p, 3, deadline);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return err_sys(err, "poll"), W_ERROR;
		}
		if (k == 0)
			return W_TIMEOUT;
		if (p[2].revents)
			return W_CANCEL;
		if (p[1].revents && !(p[0].revents & POLLIN)) {
			/* The sandbox's process ended; its socket may live on in a
			 * forked child, so do not wait for EOF. */
			return W_DEAD;
		}
	}
}

json_t *frame_parse(struct proto_frame *f, struct nsbox_err *err)
{
	json_t *m = NULL;

	if (proto_msg_parse(f, PROTO_TO_HOST, &m, err) < 0)
		return NULL;
	return m;
}
