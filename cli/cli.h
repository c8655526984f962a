/* What the front end's files share that is no business of libnsbox: its
 * own error (a message to print) and a few cleanup helpers.  cli/ includes
 * nothing of the tree but include/nsbox.h and its own headers. */
#ifndef NSBOX_CLI_H
#define NSBOX_CLI_H

#include <stdlib.h>
#include <string.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void cli_freep(void *p)
{
	free(*(void **)p);
}
#define _cleanup_free_ __attribute__((cleanup(cli_freep)))
/* Move ownership out of a cleanup variable. */
#define TAKE_PTR(p)                       \
	({                                \
		__typeof__(p) _tp_ = (p); \
		(p) = NULL;               \
		_tp_;                     \
	})

/* A failed parse: what to print after "nsbox CMD: ". */
struct cli_err {
	int code; /* errno value, 0 when not errno-based */
	char msg[1024];
};

/* Set err and return -1; with code != 0, ": strerror(code)" is appended. */
int cli_err_set(struct cli_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefix err's message with context ("ctx: old").  Returns -1. */
int cli_err_wrap(struct cli_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The length of s's first max bytes or fewer, never cutting a UTF-8
 * sequence (JSON encoders refuse a cut one). */
static inline size_t cli_utf8_prefix(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	while (n == max && n && ((unsigned char)s[n] & 0xC0) == 0x80)
		max = --n;
	return n;
}

/* poll(2)'s timeout for s seconds (>= 0), rounded up and capped at a day:
 * a longer wait (timeouts go up to 1e7 s) wakes to look again. */
static inline int cli_poll_ms(double s)
{
	return s <= 0 ? 0 : s >= 86400 ? 86400000 : (int)(s * 1000) + 1;
}

#endif
