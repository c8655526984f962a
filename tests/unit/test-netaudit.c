/* Unit tests of the egress audit pipe's reader (host/netaudit.c): lines
 * split anywhere by the reads come out whole and in order; an oversize
 * line, one that is not a JSON object, one with a NUL and one cut short
 * at EOF are dropped and counted, never passed on; a warning names the
 * drops once.  Then the same through a real pipe, to EOF. */
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "netaudit.h"
#include "tap.h"
#include "util.h"

#define CHECK(cond, ...)             \
	do {                         \
		bool c_ = (cond);    \
		ok(c_, __VA_ARGS__); \
	} while (0)

struct got {
	char lines[8][EGRESS_AUDIT_LINE_MAX + 1];
	size_t n;
	bool bad_len;
};

static void take(void *ctx, const char *record, size_t len)
{
	struct got *g = ctx;

	if (strlen(record) != len)
		g->bad_len = true;
	if (g->n < 8)
		memcpy(g->lines[g->n], record, len + 1);
	g->n++;
}

static void test_framing(void)
{
	static const char stream[] = "{\"kind\":\"dns\",\"n\":1}\n{\"kind\":\"http\",\"n\":2}\n{\"n\":3}\n";
	struct got g = { 0 };
	struct netaudit a = { .fd = -1, .fn = take, .ctx = &g };

	/* One byte at a time: every split point. */
	for (size_t i = 0; i < sizeof(stream) - 1; i++)
		netaudit_feed(&a, stream + i, 1);
	CHECK(g.n == 3 && !g.bad_len, "three lines, fed a byte at a time (%zu)", g.n);
	CHECK(!strcmp(g.lines[0], "{\"kind\":\"dns\",\"n\":1}") && !strcmp(g.lines[2], "{\"n\":3}"),
	      "whole and in order, without the newline");
	CHECK(a.dropped == 0 && a.delivered == 3, "nothing dropped");
}

static void test_drops(void)
{
	static char big[EGRESS_AUDIT_LINE_MAX + 100];
	struct got g = { 0 };
	struct netaudit a = { .fd = -1, .fn = take, .ctx = &g };
	char msg[200];
	size_t at;

	/* A line of EGRESS_AUDIT_LINE_MAX - 1 bytes (the cap with its newline) passes. */
	big[0] = '{';
	memcpy(big + 1, "\"k\":\"", 5);
	at = 6;
	while (at < EGRESS_AUDIT_LINE_MAX - 3)
		big[at++] = 'x';
	big[at++] = '"';
	big[at++] = '}';
	netaudit_feed(&a, big, at);
	netaudit_feed(&a, "\n", 1);
	CHECK(g.n == 1 && strlen(g.lines[0]) == EGRESS_AUDIT_LINE_MAX - 1, "a line at the cap passes (%zu)", g.n);
	/* One byte more is dropped whole, in whatever pieces it comes, and
	 * the next line is read as usual. */
	memmove(big + 2, big + 1, at);
	big[1] = ' ';
	netaudit_feed(&a, big, 1000);
	netaudit_feed(&a, big + 1000, at + 1 - 1000);
	netaudit_feed(&a, "\n{\"after\":1}\n", 13);
	CHECK(g.n == 2 && !strcmp(g.lines[1], "{\"after\":1}"), "an oversize line is dropped, the next one kept");
	CHECK(a.dropped == 1, "and counted (%llu)", (unsigned long long)a.dropped);
	netaudit_feed(&a, "[1,2]\nnot json\n\n{\"a\":1}{\"b\":2}\n", 31);
	netaudit_feed(&a, "{\"nul\":\"a\0b\"}\n", 14);
	CHECK(g.n == 2 && a.dropped == 6, "an array, not JSON, empty, two objects, a NUL: dropped (%llu)",
	      (unsigned long long)a.dropped);
	netaudit_feed(&a, "{\"cut\":", 7);
	netaudit_end(&a);
	CHECK(g.n == 2 && a.dropped == 7 && a.eof, "a line cut short at EOF is dropped");
	CHECK(netaudit_warning(&a, msg, sizeof(msg)) && strstr(msg, "dropped 7 ") != NULL, "a warning: %s", msg);
	CHECK(!netaudit_warning(&a, msg, sizeof(msg)), "once");
}

static void test_pipe(void)
{
	struct got g = { 0 };
	struct netaudit a = { .fn = take, .ctx = &g };
	int p[2];

	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		ok(0, "pipe2");
		return;
	}
	a.fd = p[0];
	CHECK(netaudit_drain(&a) == 0 && g.n == 0, "an empty pipe: nothing, no wait");
	CHECK(write(p[1], "{\"x\":1}\n{\"x\"", 12) == 12, "write");
	CHECK(netaudit_drain(&a) == 0 && g.n == 1, "what is there is taken; the partial line waits");
	CHECK(write(p[1], ":2}\n", 4) == 4, "write");
	close(p[1]);
	netaudit_finish(&a, now_ns() + 1000000000ull);
	CHECK(g.n == 2 && !strcmp(g.lines[1], "{\"x\":2}") && a.eof && a.fd == -1, "finish reads to EOF and closes");
}

int main(void)
{
	test_framing();
	test_drops();
	test_pipe();
	tap_done();
}
