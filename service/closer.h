/* Closing the descriptors clients send, off the event loop (closer.c).
 * The last close of some objects waits: a TCP socket with unsent data and
 * SO_LINGER waits for the data to go, up to the linger time the client
 * chose; a file of a FUSE file system waits for its server's FLUSH answer;
 * a socket with such descriptors in flight waits for theirs.  A client that
 * sent one and closed its own copy had nsboxd's event loop wait that long,
 * every other client with it.  The loop hands them here instead, and stops
 * reading a uid's connections while CLOSER_UID_MAX of its descriptors wait
 * (closer_pending), so a closer held up by one client's descriptor does not
 * make nsboxd collect that client's descriptors without end. */
#pragma once

#include <sys/types.h>

#define CLOSER_UID_MAX 64

/* Start the thread.  0, or -errno.  Before it (or once it failed) fds
 * are closed by the caller's thread. */
int closer_start(void);
/* Close fd, received from uid's client, on the closer thread; a socket
 * first has SO_LINGER set to 0 (its close then resets the connection
 * instead of waiting).  Any thread may call it; fd is the closer's from
 * here. */
void closer_close(int fd, uid_t uid);
/* uid's descriptors handed over and not yet closed. */
unsigned closer_pending(uid_t uid);
/* An eventfd, readable after a close (a throttled uid may be read again). */
int closer_fd(void);
/* Reset closer_fd's readiness. */
void closer_drain(void);
