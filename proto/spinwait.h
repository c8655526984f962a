/* Waiting for the other end's next frame: spin briefly while that pays,
 * then sleep in poll().  Both ends of a session wait this way (the runner
 * in runner/io.c, the host in host/session.c), one implementation.
 *
 * Why spin: the host's next EXEC often follows within microseconds of a
 * RESULT, and a tool call's answer within microseconds of its CALL, while
 * a cross-CPU wake-up costs tens of them.  Why only while it pays: when the
 * other end shares our CPU (the scheduler puts the two ends of a socket
 * together), a spin keeps it from running and every round trip pays the
 * whole spin; when the other end is slow to answer, the spin is wasted.
 * So: spin up to SPINWAIT_US, only with more than one CPU online; after a
 * spin that found nothing, sleep at once for the next 1, 2, 4 ...
 * SPINWAIT_BACKOFF_MAX waits; a spin that finds something starts over.
 *
 * Not thread-safe per struct spinwait: one per waiter (a session, the
 * runner's reader role), used by one thread at a time. */
#ifndef NSBOX_SPINWAIT_H
#define NSBOX_SPINWAIT_H

#include <poll.h>

#define SPINWAIT_US 60
#define SPINWAIT_BACKOFF_MAX 256

/* Zero-initialised is ready to use (no init or free). */
struct spinwait {
	unsigned skip;		/* waits left that sleep at once, without spinning */
	unsigned backoff;	/* the last skip set after a fruitless spin (0: the last spin found something) */
};

/* The spin alone, for a wait that sleeps its own way (the runner's
 * blocking recv()): call try_once(ctx) until it returns non-zero, for up
 * to SPINWAIT_US, if spinning pays now.  Returns try_once's non-zero
 * result (errno as try_once left it), or 0: nothing came, or this wait
 * does not spin; the caller then sleeps. */
int spinwait_spin(struct spinwait *w, int (*try_once)(void *ctx), void *ctx);

/* poll(p, n, ...) until deadline (now_ns(), CLOCK_MONOTONIC; 0: none),
 * spinning first with poll(p, n, 0) while that pays.  Returns as poll():
 * > 0 with revents filled, 0 once the deadline has passed (a timeout
 * rounded up to whole milliseconds), -1 with errno (EINTR included). */
int spinwait_poll(struct spinwait *w, struct pollfd *p, nfds_t n, unsigned long long deadline);

#endif
