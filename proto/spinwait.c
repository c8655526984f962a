/* Spin briefly while it pays, then sleep (spinwait.h). */
#include "spinwait.h"

#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <unistd.h>

#include "util.h"

/* A spin can only pay when the other end can run meanwhile: not with one
 * CPU to run on (sched_getaffinity: a taskset or cpuset counts, where
 * _SC_NPROCESSORS_ONLN would not).  A busy host is left to the backoff: a
 * spin that finds nothing makes the next waits sleep at once.  Cached (the
 * host may call this from many threads: an atomic; a race stores the same
 * value twice). */
static bool spin_pays_here(void)
{
	static atomic_long ncpu;
	long n = atomic_load_explicit(&ncpu, memory_order_relaxed);

	if (!n) {
		cpu_set_t set;

		n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
		atomic_store_explicit(&ncpu, n > 0 ? n : 1, memory_order_relaxed);
	}
	return n >= 2;
}

int spinwait_spin(struct spinwait *w, int (*try_once)(void *ctx), void *ctx)
{
	unsigned long long t0;
	int k;

	if (!spin_pays_here() || w->skip) {
		w->skip -= w->skip > 0;
		return 0;
	}
	t0 = now_ns();
	do {
		k = try_once(ctx);
		if (k != 0) {
			w->backoff = 0;
			return k;
		}
	} while (now_ns() - t0 < SPINWAIT_US * 1000ULL);
	w->backoff = w->backoff ? (w->backoff < SPINWAIT_BACKOFF_MAX ? 2 * w->backoff : w->backoff) : 1;
	w->skip = w->backoff;
	return 0;
}

struct poll_args {
	struct pollfd *p;
	nfds_t n;
};

static int poll_now(void *ctx)
{
	struct poll_args *a = ctx;

	return poll(a->p, a->n, 0);
}

int spinwait_poll(struct spinwait *w, struct pollfd *p, nfds_t n, unsigned long long deadline)
{
	struct poll_args a = { p, n };
	int k = spinwait_spin(w, poll_now, &a);

	return k != 0 ? k : poll(p, n, deadline_ms(deadline));
}
