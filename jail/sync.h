/* Messages between the launcher and pid 1 over their SOCK_SEQPACKET pair
 * (and from the payload to pid 1 over a pipe, for a failed setup or exec). */
#ifndef NSBOX_SYNC_H
#define NSBOX_SYNC_H

#include "error.h"

/* In order: the launcher sends GO (id maps written), then ATTACHED (pid 1
 * is in every cgroup; arg = SYNC_CG_* bits of the limits a cgroup
 * enforces); pid 1 answers READY, ERROR or EXEC_ERROR, and STATUS when the
 * payload ends. */
enum sync_type { SYNC_GO = 1, SYNC_READY, SYNC_ERROR, SYNC_EXEC_ERROR, SYNC_STATUS, SYNC_ATTACHED };

#define SYNC_CG_MEMORY 1
#define SYNC_CG_PIDS 2
#define SYNC_CG_MOVED 4		/* moved after the clone: its cgroup namespace's root is the cgroup above */

struct sync_msg {
	int type;
	int arg;		/* SYNC_STATUS: the payload's wait status; SYNC_ATTACHED: SYNC_CG_* */
	struct nsbox_err err;	/* SYNC_ERROR, SYNC_EXEC_ERROR: errno, step and message */
};

/* Fill *m; e (NULL: none) is copied with err_copy. */
void sync_msg_init(struct sync_msg *m, int type, int arg, const struct nsbox_err *e);
/* Send one message (MSG_NOSIGNAL).  Returns 0 or -1 with errno. */
int sync_send(int fd, int type, int arg, const struct nsbox_err *e);
/* Receive one message (flags: for recv(2), e.g. MSG_DONTWAIT), its error
 * record bounded.  Returns 1, 0 at EOF, or -1 with errno (EPROTO: a
 * message of the wrong size). */
int sync_recv(int fd, struct sync_msg *m, int flags);
/* The same with an fd passed along (SCM_RIGHTS): pid 1's READY carries the
 * workspace's upper layer (wsync.h).  sync_send_fd with passfd < 0 is
 * sync_send; sync_recv_fd stores a received fd in *passed (close-on-exec;
 * left alone when none came) and closes any other. */
int sync_send_fd(int fd, int type, int arg, const struct nsbox_err *e, int passfd);
int sync_recv_fd(int fd, struct sync_msg *m, int flags, int *passed);

#endif
