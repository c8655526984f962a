/* Closing the descriptors clients send, off the event loop (closer.c).
 * The last close of some objects waits: a TCP socket with unsent data and
 * SO_LINGER waits for the data to go, up to the linger time the client
 * chose; a file of a FUSE file system waits for its server's FLUSH answer;
 * a socket with such descriptors in flight waits for theirs.  A client that
 * sent one and closed its own copy had nsboxd's event loop wait that long,
 * every other client with it.  The loop hands them here instead: each uid
 * has a queue and, while it has any, a thread of its own, so a close that
 * waits for good holds up that uid's closes alone.  The loop stops reading a
 * uid's connections while CLOSER_UID_MAX of its descriptors wait
 * (closer_pending), and stops accepting connections while CLOSER_TOTAL_MAX
 * wait in all (refused connections' sockets too), so that nsboxd never
 * collects descriptors without end. */
#pragma once

#include <sys/types.h>

#define CLOSER_UID_MAX 64
#define CLOSER_TOTAL_MAX 1024

/* Get ready.  0, or -errno.  Before it, and when no thread can be made
 * for a uid, fds are closed by the caller's thread. */
int closer_start(void);
/* Close fd, received from uid's client, on uid's closer thread; a socket
 * first has SO_LINGER set to 0 (its close then resets the connection
 * instead of waiting).  Any thread may call it; fd is the closer's from
 * here. */
void closer_close(int fd, uid_t uid);
/* uid's descriptors handed over and not yet closed. */
unsigned closer_pending(uid_t uid);
/* Every uid's. */
unsigned closer_total(void);
/* An eventfd, readable after a close (a throttled uid may be read again). */
int closer_fd(void);
/* Reset closer_fd's readiness. */
void closer_drain(void);
