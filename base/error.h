/* One error convention for all of nsbox: a failing function returns < 0 and
 * fills a struct nsbox_err (errno-style code + message).  Each layer may wrap
 * the message with context.  Library code never prints and never exits.
 *
 * struct nsbox_err is also the one error record that crosses a process
 * boundary (pid 1 and its payload -> the launcher over the sync socket,
 * jail/sync.h; the helper -> the library, helper/helper.h): fixed size and
 * without pointers, so it travels as it is, embedded in those messages, and
 * is copied out with err_copy(), which never trusts the other side to have
 * terminated its strings.  The failing setup step survives the trip. */
#ifndef NSBOX_ERROR_H
#define NSBOX_ERROR_H

#include <stdarg.h>

#define NSBOX_ERR_MSG_MAX 1024
#define NSBOX_ERR_STEP_MAX 48

struct nsbox_err {
	int code;			/* errno value, or 0 when not errno-based */
	char step[NSBOX_ERR_STEP_MAX];	/* setup step that failed ("mount", "userns"...), may be "" */
	char msg[NSBOX_ERR_MSG_MAX];	/* human readable, names what and where */
};

/* Set err (may be NULL) and return -1.  code is an errno value (0 if none);
 * when non-zero its strerror() is appended to the message. */
int err_set(struct nsbox_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like err_set with code = errno. */
int err_sys(struct nsbox_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A message that says it all (no strerror() suffix) with an errno-style
 * code all the same, so that callers can tell EINVAL from ENOMEM, failing
 * in step (NULL: leave err's step as it is).  err may be NULL.  Returns -1. */
int err_fail(struct nsbox_err *err, const char *step, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Prefix an existing message with context: "ctx: old message".  Returns -1. */
int err_wrap(struct nsbox_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Put pre in front of err's message as it is (no ": "), keeping as much of
 * both as fits.  err may be NULL.  Returns -1. */
int err_prefix(struct nsbox_err *err, const char *pre);
/* Record the setup step name (truncated to fit).  Returns -1. */
int err_step(struct nsbox_err *err, const char *step);
void err_clear(struct nsbox_err *err);
/* Copy the record src (NULL: an empty one) into dst (may be NULL; may be
 * src itself), bounding and NUL-terminating step and msg: src may come
 * from another process. */
void err_copy(struct nsbox_err *dst, const struct nsbox_err *src);

#endif
