#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void append_errno(struct nsbox_err *err, int code)
{
	size_t len = strlen(err->msg);

	if (code <= 0 || len >= sizeof(err->msg))
		return;
	/* EMFILE is this process's own RLIMIT_NOFILE, not the system's
	 * (ENFILE): say which limit, once. */
	if (code == EMFILE && !strstr(err->msg, "RLIMIT_NOFILE"))
		snprintf(err->msg + len, sizeof(err->msg) - len, ": %s (RLIMIT_NOFILE reached)", strerror(code));
	else
		snprintf(err->msg + len, sizeof(err->msg) - len, ": %s", strerror(code));
}

static int err_vset(struct nsbox_err *err, int code, const char *fmt, va_list ap)
{
	if (!err)
		return -1;
	err->code = code;
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	append_errno(err, code);
	return -1;
}

int err_set(struct nsbox_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(err, code, fmt, ap);
	va_end(ap);
	return -1;
}

int err_sys(struct nsbox_err *err, const char *fmt, ...)
{
	int code = errno;
	va_list ap;

	va_start(ap, fmt);
	err_vset(err, code, fmt, ap);
	va_end(ap);
	return -1;
}

int err_fail(struct nsbox_err *err, const char *step, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return -1;
	va_start(ap, fmt);
	err_vset(err, 0, fmt, ap);
	va_end(ap);
	err->code = code;
	if (step)
		err_step(err, step);
	return -1;
}

int err_prefix(struct nsbox_err *err, const char *pre)
{
	size_t pl, ml;

	if (!err)
		return -1;
	pl = strlen(pre);
	ml = strnlen(err->msg, sizeof(err->msg) - 1);
	if (pl > sizeof(err->msg) - 1)
		pl = sizeof(err->msg) - 1;
	if (pl + ml > sizeof(err->msg) - 1)
		ml = sizeof(err->msg) - 1 - pl;
	memmove(err->msg + pl, err->msg, ml);
	memcpy(err->msg, pre, pl);
	err->msg[pl + ml] = '\0';
	return -1;
}

int err_wrap(struct nsbox_err *err, const char *fmt, ...)
{
	char prefix[256];
	va_list ap;
	int n;

	if (!err)
		return -1;
	va_start(ap, fmt);
	n = vsnprintf(prefix, sizeof(prefix) - 2, fmt, ap);
	va_end(ap);
	if (n < 0)
		prefix[0] = '\0';
	strcat(prefix, ": ");
	return err_prefix(err, prefix);
}

int err_step(struct nsbox_err *err, const char *step)
{
	if (err)
		snprintf(err->step, sizeof(err->step), "%s", step);
	return -1;
}

void err_clear(struct nsbox_err *err)
{
	if (!err)
		return;
	err->code = 0;
	err->step[0] = '\0';
	err->msg[0] = '\0';
}

void err_copy(struct nsbox_err *dst, const struct nsbox_err *src)
{
	size_t sl, ml;

	if (!dst)
		return;
	if (!src) {
		err_clear(dst);
		return;
	}
	sl = strnlen(src->step, sizeof(src->step) - 1);
	ml = strnlen(src->msg, sizeof(src->msg) - 1);
	dst->code = src->code;
	memmove(dst->step, src->step, sl);
	dst->step[sl] = '\0';
	memmove(dst->msg, src->msg, ml);
	dst->msg[ml] = '\0';
}
