#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void append_errno(struct nsbox_err *err, int code)
{
	size_t len = strlen(err->msg);

	if (code > 0 && len < sizeof(err->msg))
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

int err_wrap(struct nsbox_err *err, const char *fmt, ...)
{
	char prefix[256], old[NSBOX_ERR_MSG_MAX];
	va_list ap;

	if (!err)
		return -1;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
	return -1;
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
