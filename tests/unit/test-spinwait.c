/* Unit tests of the spin-then-sleep wait (proto/spinwait.c): it returns
 * when data arrives from another thread, keeps to its deadline, and
 * spins only while spinning pays (the backoff after fruitless spins, the
 * reset after a spin that found something). */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "spinwait.h"
#include "tap.h"
#include "util.h"

/* tap.h's ok() evaluates its condition twice: evaluate once here. */
#define CHECK(cond, ...)                 \
	do {                             \
		bool c_ = (cond);        \
		ok(c_, __VA_ARGS__);     \
	} while (0)

#define MS 1000000ULL

static bool multi_cpu;

struct writer {
	int fd;
	unsigned long long delay_ns;
};

static void *write_later(void *arg)
{
	struct writer *w = arg;
	struct timespec ts = { (time_t)(w->delay_ns / 1000000000ULL), (long)(w->delay_ns % 1000000000ULL) };

	nanosleep(&ts, NULL);
	if (write(w->fd, "x", 1) != 1)
		return (void *)1;
	return NULL;
}

static void drain(int fd)
{
	char c[16];

	while (recv(fd, c, sizeof(c), MSG_DONTWAIT) > 0)
		;
}

/* spinwait_poll wakes for data written by another thread, with and
 * without a deadline, well before that deadline. */
static void test_wakes(int sv[2], unsigned long long deadline_in, const char *what)
{
	struct spinwait w = { 0 };
	struct writer wr = { sv[1], 20 * MS };
	struct pollfd p = { sv[0], POLLIN, 0 };
	pthread_t t;
	unsigned long long t0, el;
	int k;

	if (pthread_create(&t, NULL, write_later, &wr)) {
		ok(0, "pthread_create");
		return;
	}
	t0 = now_ns();
	k = spinwait_poll(&w, &p, 1, deadline_in ? t0 + deadline_in : 0);
	el = now_ns() - t0;
	pthread_join(t, NULL);
	CHECK(k == 1 && (p.revents & POLLIN), "%s: returns 1 with POLLIN when another thread writes (k=%d)", what, k);
	CHECK(el >= 15 * MS, "%s: slept until the write (%llu us)", what, el / 1000);
	CHECK(el < 4000 * MS, "%s: woke at the write, not at the deadline (%llu us)", what, el / 1000);
	/* The spin found nothing (the write came 20 ms later): back off. */
	if (multi_cpu)
		CHECK(w.backoff == 1 && w.skip == 1, "%s: a fruitless spin backs off (backoff %u, skip %u)", what,
		      w.backoff, w.skip);
	drain(sv[0]);
}

static void test_deadline(int sv[2])
{
	struct spinwait w = { 0 };
	struct pollfd p = { sv[0], POLLIN, 0 };
	unsigned long long t0 = now_ns(), el;
	int k = spinwait_poll(&w, &p, 1, t0 + 50 * MS);

	el = now_ns() - t0;
	CHECK(k == 0, "nothing written: 0 at the deadline (k=%d)", k);
	CHECK(el >= 50 * MS, "kept to the deadline, not earlier (%llu us)", el / 1000);
	CHECK(el < 2000 * MS, "returned near the deadline (%llu us)", el / 1000);

	t0 = now_ns();
	k = spinwait_poll(&w, &p, 1, t0);
	el = now_ns() - t0;
	CHECK(k == 0 && el < 100 * MS, "a deadline already passed: 0 at once (k=%d, %llu us)", k, el / 1000);
}

static void test_ready(int sv[2])
{
	struct spinwait w = { .skip = 0, .backoff = 8 };
	struct pollfd p = { sv[0], POLLIN, 0 };
	int k;

	if (write(sv[1], "x", 1) != 1) {
		ok(0, "write");
		return;
	}
	k = spinwait_poll(&w, &p, 1, now_ns() + 5000 * MS);
	CHECK(k == 1 && (p.revents & POLLIN), "data already there: 1 (k=%d)", k);
	if (multi_cpu)
		CHECK(w.backoff == 0 && w.skip == 0, "a spin that finds something starts over (backoff %u, skip %u)",
		      w.backoff, w.skip);
	drain(sv[0]);
}

struct counter {
	unsigned calls;
	int answer;		/* what try_once returns */
};

static int count_try(void *ctx)
{
	struct counter *c = ctx;

	c->calls++;
	return c->answer;
}

/* After each fruitless spin, the next 1, 2, 4 ... 256 waits sleep at
 * once: spins come 2, 3, 5, 9 ... 257 waits apart, then every 257. */
static void test_backoff(void)
{
	static const unsigned want[] = { 2, 3, 5, 9, 17, 33, 65, 129, 257, 257, 257 };
	struct spinwait w = { 0 };
	struct counter c = { 0, 0 };
	unsigned last = 0, nspins = 0, bad = 0, short_spins = 0;
	const unsigned n = 1 + 2 + 3 + 5 + 9 + 17 + 33 + 65 + 129 + 257 + 257 + 257;

	for (unsigned i = 1; i <= n; i++) {
		unsigned before = c.calls;
		unsigned long long t0 = now_ns(), el;
		int k = spinwait_spin(&w, count_try, &c);

		el = now_ns() - t0;
		if (k != 0)
			bad++;
		if (c.calls == before)
			continue;
		if (el < SPINWAIT_US * 1000ULL)
			short_spins++;
		if (nspins > 0 && (nspins - 1 >= sizeof(want) / sizeof(want[0]) || i - last != want[nspins - 1]))
			bad++;
		nspins++;
		last = i;
	}
	CHECK(bad == 0, "fruitless spins: 0, and spins 2, 3, 5 ... 257 waits apart (%u wrong)", bad);
	CHECK(nspins == sizeof(want) / sizeof(want[0]) + 1, "%u spins in %u waits", nspins, n);
	CHECK(short_spins == 0, "each fruitless spin lasts SPINWAIT_US (%u shorter)", short_spins);
	CHECK(w.backoff == SPINWAIT_BACKOFF_MAX, "backoff capped at %u (%u)", SPINWAIT_BACKOFF_MAX, w.backoff);

	/* A spin that finds something: its result, and spinning resumes. */
	w.skip = 0;
	c.answer = -1;
	c.calls = 0;
	CHECK(spinwait_spin(&w, count_try, &c) == -1 && c.calls == 1, "try's result is returned at once (%u tries)",
	      c.calls);
	CHECK(w.backoff == 0 && w.skip == 0, "and the backoff starts over (backoff %u, skip %u)", w.backoff, w.skip);
	c.calls = 0;
	c.answer = 0;
	spinwait_spin(&w, count_try, &c);
	CHECK(c.calls > 0, "the next wait spins again");
}

int main(void)
{
	int sv[2];

	multi_cpu = sysconf(_SC_NPROCESSORS_ONLN) >= 2;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		ok(0, "socketpair");
		tap_done();
	}
	test_wakes(sv, 5000 * MS, "deadline 5 s");
	test_wakes(sv, 0, "no deadline");
	test_deadline(sv);
	test_ready(sv);
	if (multi_cpu) {
		test_backoff();
	} else {
		struct spinwait w = { 0 };
		struct counter c = { 0, 0 };

		/* One CPU online: a spin would only keep the other end from running. */
		for (int i = 0; i < 10; i++)
			spinwait_spin(&w, count_try, &c);
		CHECK(c.calls == 0 && w.backoff == 0, "one CPU: never spins (%u tries)", c.calls);
		ok(1, "# SKIP backoff sequence: one CPU online");
	}
	close(sv[0]);
	close(sv[1]);
	tap_done();
}
