/* The launcher <-> pid 1 messages (sync.h): crun's sync socket. */
#include "sync.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util.h"

void sync_msg_init(struct sync_msg *m, int type, int arg, const struct nsbox_err *e)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->arg = arg;
	err_copy(&m->err, e);
}

int sync_send(int fd, int type, int arg, const struct nsbox_err *e)
{
	struct sync_msg m;

	sync_msg_init(&m, type, arg, e);
	return send(fd, &m, sizeof(m), MSG_NOSIGNAL) == (ssize_t)sizeof(m) ? 0 : -1;
}

int sync_send_fd(int fd, int type, int arg, const struct nsbox_err *e, int passfd)
{
	struct sync_msg m;
	struct iovec iov = { &m, sizeof(m) };

	if (passfd < 0)
		return sync_send(fd, type, arg, e);
	sync_msg_init(&m, type, arg, e);
	return send_with_fds(fd, &iov, 1, &passfd, 1) == (ssize_t)sizeof(m) ? 0 : -1;
}

/* The first fd of an SCM_RIGHTS message to *passed (when wanted and still
 * -1), every other one closed. */
static void take_fds(struct msghdr *mh, int *passed)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int f;

			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (passed && *passed < 0)
				*passed = f;
			else
				close(f);
		}
	}
}

int sync_recv(int fd, struct sync_msg *m, int flags)
{
	return sync_recv_fd(fd, m, flags, NULL);
}

int sync_recv_fd(int fd, struct sync_msg *m, int flags, int *passed)
{
	bool reset_seen = false;
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	ssize_t n;

	for (;;) {
		struct iovec iov = { m, sizeof(*m) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
				     .msg_controllen = sizeof(u.buf) };

		n = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);
		if (n >= 0)
			take_fds(&mh, passed);
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		/* A peer that died with one of our messages unread leaves
		 * ECONNRESET pending, and the kernel reports it before the
		 * messages it sent first (its ERROR saying why it died).  The
		 * error is cleared by reporting it: read once more. */
		if (errno == ECONNRESET && !reset_seen) {
			reset_seen = true;
			continue;
		}
		return -1;
	}
	if (n == 0)
		return 0;
	if (n != (ssize_t)sizeof(*m)) {
		errno = EPROTO;
		return -1;
	}
	err_copy(&m->err, &m->err);
	return 1;
}
