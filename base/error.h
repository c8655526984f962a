/* One error convention for all of nsbox: a failing function returns < 0 and
 * fills a struct nsbox_err (errno-style code + message).  Each layer may wrap
 * the message with context.  Library code never prints and never exits. */
#ifndef NSBOX_ERROR_H
#define NSBOX_ERROR_H

#include <stdarg.h>

#define NSBOX_ERR_MSG_MAX 1024

struct nsbox_err {
	int code;			/* errno value, or 0 when not errno-based */
	char step[48];			/* setup step that failed ("mount", "userns"...), may be "" */
	char msg[NSBOX_ERR_MSG_MAX];	/* human readable, names what and where */
};

/* Set err (may be NULL) and return -1.  code is an errno value (0 if none);
 * when non-zero its strerror() is appended to the message. */
int err_set(struct nsbox_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like err_set with code = errno. */
int err_sys(struct nsbox_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix an existing message with context: "ctx: old message".  Returns -1. */
int err_wrap(struct nsbox_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record the setup step name (truncated to fit).  Returns -1. */
int err_step(struct nsbox_err *err, const char *step);
void err_clear(struct nsbox_err *err);

#endif
