/* The library's end of the egress audit (egress.h): the proxy writes one
 * JSON line per connection or DNS query to a pipe the session made; this
 * reads it without blocking, on the thread driving the session, and hands
 * each line over whole.
 *
 * The proxy runs on the host side and writes the lines itself (names the
 * sandbox chose in them are JSON-escaped there), but nothing here counts
 * on that beyond the framing: a line longer than EGRESS_AUDIT_LINE_MAX,
 * not a JSON object, or cut short at EOF is dropped and counted, never
 * passed on. */
#ifndef NSBOX_NETAUDIT_H
#define NSBOX_NETAUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress.h"
#include "error.h"

/* What the pipe is grown to (F_SETPIPE_SZ, where allowed): room for the
 * records of the tunnels a sandbox's end closes at once, written while
 * the session is stopping the sandbox and not reading. */
#define NETAUDIT_PIPE_SIZE (256 * 1024)
/* The most one netaudit_drain reads: a proxy writing as fast as the host
 * reads (a sandbox flooding the DNS responder: a record per query) must
 * not keep the thread driving the session in the drain, away from the
 * exec's time limit, the sandbox's end and the session's free. */
#define NETAUDIT_DRAIN_MAX NETAUDIT_PIPE_SIZE

struct netaudit {
	int fd; /* the pipe's read end, non-blocking; -1: none */
	void (*fn)(void *ctx, const char *record, size_t len);
	void *ctx;
	char line[EGRESS_AUDIT_LINE_MAX + 1];
	size_t have;   /* bytes of the current line in line[] */
	bool skipping; /* in an oversize line: dropped up to its newline */
	bool eof;
	bool unfinished; /* netaudit_finish gave up before EOF */
	bool unfinished_told;
	uint64_t delivered, dropped;
	uint64_t dropped_told; /* how many drops a warning has named */
};

/* Make the pipe: a->fd its read end (non-blocking), *wr its write end for
 * the proxy (jail_spec.net_audit_fds; the caller closes its copy once the
 * proxy has it, so that EOF means the proxy is gone).  Both CLOEXEC.
 * Returns 0, or -1 with err (nothing left open). */
int netaudit_open(struct netaudit *a, void (*fn)(void *ctx, const char *record, size_t len), void *ctx, int *wr,
		  struct nsbox_err *err);
/* Pure: take len bytes of the stream, calling fn for every whole line
 * that is a JSON object (without its newline, NUL-terminated). */
void netaudit_feed(struct netaudit *a, const char *data, size_t len);
/* Pure: the stream ended; a partial line is dropped. */
void netaudit_end(struct netaudit *a);
/* Read what the pipe holds now, NETAUDIT_DRAIN_MAX bytes at most (never
 * blocks), and feed it.  Returns 1 once the pipe is at EOF (the proxy is
 * gone), else 0 (more may be waiting: the pipe stays readable). */
int netaudit_drain(struct netaudit *a);
/* After the proxy was stopped: read to EOF, waiting until deadline
 * (CLOCK_MONOTONIC ns) at most, then close the pipe. */
void netaudit_finish(struct netaudit *a, unsigned long long deadline);
/* How long after the proxy's stop the library waits for EOF: only a copy
 * of the write end some fork of the caller's still holds keeps it open. */
#define NETAUDIT_FINISH_NS 1000000000ull
/* Drops, or a finish that gave up before EOF, not yet warned about: a
 * message for the session's warning callback in buf (size bytes), or
 * false. */
bool netaudit_warning(struct netaudit *a, char *buf, size_t size);
/* The same, handed to warn(ctx, message) when there is one (warn may be
 * NULL): what the session and nsbox_run do after each drain. */
void netaudit_warn(struct netaudit *a, void (*warn)(void *ctx, const char *msg), void *ctx);

#endif
