#include "deputy.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

static int access_fd(int fd, int mode)
{
	/* faccessat2 (Linux 5.8): glibc's faccessat emulates AT_EACCESS with
	 * fstatat and our own credentials, not the kernel's check. */
	return (int)syscall(SYS_faccessat2, fd, "", mode, AT_EACCESS | AT_EMPTY_PATH);
}

/* What can be said without the client's ids: the object's type, and the
 * access mode the sandbox needs (0, or a positive errno and errbuf). */
static int deputy_mode(int fd, bool writable, int *mode, char *errbuf, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		int e = errno;

		snprintf(errbuf, errlen, "stat: %s", strerror(e));
		return e;
	}
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		snprintf(errbuf, errlen, "not a directory or a regular file");
		return EINVAL;
	}
	*mode = R_OK | (S_ISDIR(st.st_mode) ? X_OK : 0) | (writable ? W_OK : 0);
	return 0;
}

/* The child's answer: the index of the first object refused (n: none) and
 * the errno of its check. */
struct deputy_answer {
	uint32_t index;
	int32_t err;
};

int deputy_check(const struct deputy_obj *objs, size_t n, uid_t uid, gid_t gid, const gid_t *groups,
		 size_t n_groups, size_t *failed, char *errbuf, size_t errlen)
{
	int modes[DEPUTY_MAX_OBJS];
	struct deputy_answer a = { .index = (uint32_t)n };
	size_t pre = n; /* the first object refused without the client's ids */
	int pre_code = 0, wst, p[2] = { -1, -1 };
	ssize_t got;
	pid_t pid;

	if (n > DEPUTY_MAX_OBJS) {
		*failed = 0;
		snprintf(errbuf, errlen, "%zu host objects, at most %d", n, DEPUTY_MAX_OBJS);
		return E2BIG;
	}
	for (size_t i = 0; i < n && pre == n; i++)
		if ((pre_code = deputy_mode(objs[i].fd, objs[i].writable, &modes[i], errbuf, errlen)))
			pre = i;
	/* The objects before it are checked with the client's ids first, as
	 * one by one they would have been: an earlier refusal wins. */
	if (pre == 0)
		goto refused_pre;
	if (uid == geteuid() && gid == getegid()) {
		for (size_t i = 0; i < pre; i++)
			if (access_fd(objs[i].fd, modes[i]) < 0) {
				int e = errno;

				*failed = i;
				snprintf(errbuf, errlen, "%s", strerror(e));
				return e;
			}
		goto refused_pre;
	}
	if (geteuid() != 0) {
		*failed = 0;
		snprintf(errbuf, errlen, "the service is not root and can't check another user's rights");
		return EPERM;
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		int e = errno;

		*failed = 0;
		snprintf(errbuf, errlen, "pipe: %s", strerror(e));
		return e;
	}
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		*failed = 0;
		snprintf(errbuf, errlen, "fork: %s", strerror(e));
		return e;
	}
	if (pid == 0) {
		/* Dropping the ids failing refuses the first object, as it did
		 * when each object had its own child. */
		if (setgroups(n_groups, groups) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
			a = (struct deputy_answer){ 0, EPERM };
		else
			for (size_t i = 0; i < pre; i++)
				if (access_fd(objs[i].fd, modes[i]) < 0) {
					a = (struct deputy_answer){ (uint32_t)i, errno ? errno : EIO };
					break;
				}
		_exit(write(p[1], &a, sizeof(a)) == (ssize_t)sizeof(a) ? 0 : 1);
	}
	close(p[1]);
	do
		got = read(p[0], &a, sizeof(a));
	while (got < 0 && errno == EINTR);
	close(p[0]);
	while (waitpid(pid, &wst, 0) < 0)
		if (errno != EINTR) {
			int e = errno;

			*failed = 0;
			snprintf(errbuf, errlen, "waitpid: %s", strerror(e));
			return e;
		}
	if (!WIFEXITED(wst) || WEXITSTATUS(wst) || got != (ssize_t)sizeof(a) || a.index > pre ||
	    (a.index < pre && a.err <= 0)) {
		*failed = 0;
		snprintf(errbuf, errlen, "the check was killed");
		return EIO;
	}
	if (a.index < pre) {
		*failed = a.index;
		snprintf(errbuf, errlen, "uid %u may not %s it: %s", (unsigned)uid, objs[a.index].writable ? "write" : "read",
			 strerror(a.err));
		return a.err;
	}
refused_pre:
	if (pre < n) {
		/* errbuf still holds deputy_mode's message: nothing since wrote it. */
		*failed = pre;
		return pre_code;
	}
	return 0;
}

int deputy_check_log(int fd, char *errbuf, size_t errlen)
{
	struct stat st;
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fstat(fd, &st) < 0) {
		snprintf(errbuf, errlen, "%s", strerror(errno));
		return errno;
	}
	/* An O_PATH descriptor grants no I/O at all; one opened read-only
	 * proves nothing about the right to write. */
	if ((fl & O_PATH) || ((fl & O_ACCMODE) != O_WRONLY && (fl & O_ACCMODE) != O_RDWR)) {
		snprintf(errbuf, errlen, "the descriptor is not open for writing");
		return EBADF;
	}
	if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
		snprintf(errbuf, errlen, "not a regular file or a pipe");
		return EINVAL;
	}
	return 0;
}
