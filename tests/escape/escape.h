/* Shared by the hostile programs of the escape suite (issue 5).  Each one
 * tries one way out of the sandbox and ends with exactly one line,
 * "ESCAPED: <what>" or "BLOCKED: <how>", then exits 0.  Being killed by the
 * kernel (SIGSYS from seccomp, SIGKILL from the OOM killer) is judged by the
 * test runner, tests/integ/test_escape.py. */
#ifndef NSBOX_ESCAPE_H
#define NSBOX_ESCAPE_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline const char *ename(int e)
{
	const char *s = strerrorname_np(e);

	return s ? s : "E?";
}

static inline __attribute__((noreturn, format(printf, 2, 3))) void verdict(const char *tag, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	printf("%s: ", tag);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	_exit(0);
}
#define ESCAPED(...) verdict("ESCAPED", __VA_ARGS__)
#define BLOCKED(...) verdict("BLOCKED", __VA_ARGS__)

/* Notes for the log; never the final line. */
#define NOTE(...) (printf("note: " __VA_ARGS__), printf("\n"))

/* One attempt that must fail: escape on success, note the errno. */
static inline void must_fail(const char *what, long r)
{
	if (r >= 0)
		ESCAPED("%s succeeded (%ld)", what, r);
	NOTE("%s: %s", what, ename(errno));
}

/* One attempt that must fail with a specific errno (the documented one). */
static inline void must_fail_with(const char *what, long r, int want)
{
	if (r >= 0)
		ESCAPED("%s succeeded (%ld)", what, r);
	if (errno != want)
		ESCAPED("%s failed with %s, not the documented %s", what, ename(errno), ename(want));
	NOTE("%s: %s", what, ename(errno));
}

/* Opening a path must fail. */
static inline void must_not_open(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);

	if (fd >= 0) {
		char buf[64] = "";
		ssize_t n = (flags & O_ACCMODE) == O_WRONLY ? 0 : read(fd, buf, sizeof(buf) - 1);
		ESCAPED("opened %s (read %zd bytes: %.20s)", path, n, n > 0 ? buf : "");
	}
	NOTE("open %s: %s", path, ename(errno));
}
#endif
