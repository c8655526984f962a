/* The launcher <-> pid 1 messages (sync.h): crun's sync socket. */
#include "sync.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

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

int sync_recv(int fd, struct sync_msg *m, int flags)
{
	bool reset_seen = false;
	ssize_t n;

	for (;;) {
		n = recv(fd, m, sizeof(*m), flags);
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
