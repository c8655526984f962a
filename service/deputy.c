#include "deputy.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
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

int deputy_check(int fd, bool writable, uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups, char *errbuf,
		 size_t errlen)
{
	struct stat st;
	int mode, wst;
	pid_t pid;

	if (fstat(fd, &st) < 0) {
		snprintf(errbuf, errlen, "stat: %s", strerror(errno));
		return errno;
	}
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		snprintf(errbuf, errlen, "not a directory or a regular file");
		return EINVAL;
	}
	mode = R_OK | (S_ISDIR(st.st_mode) ? X_OK : 0) | (writable ? W_OK : 0);
	if (uid == geteuid() && gid == getegid()) {
		if (access_fd(fd, mode) < 0) {
			snprintf(errbuf, errlen, "%s", strerror(errno));
			return errno;
		}
		return 0;
	}
	if (geteuid() != 0) {
		snprintf(errbuf, errlen, "the service is not root and can't check another user's rights");
		return EPERM;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(errbuf, errlen, "fork: %s", strerror(errno));
		return errno;
	}
	if (pid == 0) {
		if (setgroups(n_groups, groups) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
			_exit(EPERM);
		_exit(access_fd(fd, mode) < 0 ? (errno & 0xff) : 0);
	}
	while (waitpid(pid, &wst, 0) < 0)
		if (errno != EINTR) {
			snprintf(errbuf, errlen, "waitpid: %s", strerror(errno));
			return errno;
		}
	if (!WIFEXITED(wst)) {
		snprintf(errbuf, errlen, "the check was killed");
		return EIO;
	}
	if (WEXITSTATUS(wst)) {
		snprintf(errbuf, errlen, "uid %u may not %s it: %s", (unsigned)uid, writable ? "write" : "read",
			 strerror(WEXITSTATUS(wst)));
		return WEXITSTATUS(wst);
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
