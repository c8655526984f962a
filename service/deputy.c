#include "deputy.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* fd's mount id, from /proc/self/fdinfo: the VFS's own record, read
 * without asking the file's filesystem anything.  -1 if it can't be read. */
static long fd_mount_id(int fd)
{
	char path[64], buf[512];
	const char *p;
	ssize_t len;
	int f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return -1;
	len = read(f, buf, sizeof(buf) - 1);
	close(f);
	if (len <= 0)
		return -1;
	buf[len] = 0;
	p = strstr(buf, "\nmnt_id:");
	return p ? strtol(p + 8, NULL, 10) : -1;
}

/* Whether mount id mnt is, in this process's mount namespace, of a FUSE
 * type (fuse, fuseblk, fuse.*): its name in fstype, which has room for
 * 64 bytes.  0 yes, 1 no (or not a mount of ours: pipes, sockets, memfds
 * and another namespace's mounts are not listed), -1 unreadable. */
static int mount_is_fuse(long mnt, char *fstype, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int found = 1;

	if (!f)
		return -1;
	while (found == 1 && getline(&line, &cap, f) > 0) {
		char *sep, *end;

		if (strtol(line, &end, 10) != mnt || *end != ' ' || !(sep = strstr(end, " - ")))
			continue;
		sep += 3;
		snprintf(fstype, len, "%.*s", (int)strcspn(sep, " \n"), sep);
		found = (!strcmp(fstype, "fuse") || !strcmp(fstype, "fuseblk") || !strncmp(fstype, "fuse.", 5)) ? 0 : 1;
		break;
	}
	free(line);
	fclose(f);
	return found;
}

/* FUSE objects are refused before anything touches them: a stat or an
 * access check of one is a request to its server, which the client may
 * run (a user's allow_other mount), and the loop's thread would wait for
 * its answer for good (0, or a positive errno and errbuf). */
static int deputy_fs(int fd, char *errbuf, size_t errlen)
{
	char fstype[64];
	long mnt = fd_mount_id(fd);
	int fuse = mnt < 0 ? -1 : mount_is_fuse(mnt, fstype, sizeof(fstype));

	if (fuse < 0) {
		snprintf(errbuf, errlen, "can't tell its mount from /proc/self: %s", strerror(errno ? errno : EIO));
		return EIO;
	}
	if (fuse == 0) {
		snprintf(errbuf, errlen, "on a FUSE mount (%s): nsboxd takes no host object from FUSE, whose server "
			 "could hold the service", fstype);
		return EXDEV;
	}
	return 0;
}

/* What can be said without the client's ids: the object's type, and the
 * access mode the sandbox needs (0, or a positive errno and errbuf). */
static int deputy_mode(int fd, bool writable, int *mode, char *errbuf, size_t errlen)
{
	struct stat st;
	int e;

	if ((e = deputy_fs(fd, errbuf, errlen)))
		return e;
	if (fstat(fd, &st) < 0) {
		e = errno;
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

/* The ids of this thread alone: raw system calls, not glibc's (which set
 * every thread's).  Only the effective ids change: the real and saved uid
 * stay root's, so the switch back is allowed, the effective capabilities
 * come back from the permitted set, and a client's processes can't signal
 * or trace this one meanwhile (both need its real or saved uid). */
static int thread_ids(uid_t euid, gid_t egid, size_t n_groups, const gid_t *groups)
{
	/* Groups and gid while the uid is still root's (they need
	 * CAP_SETGID), the uid last: it takes the effective capabilities. */
	if (syscall(SYS_setgroups, n_groups, groups) < 0 || syscall(SYS_setresgid, -1, egid, -1) < 0 ||
	    syscall(SYS_setresuid, -1, euid, -1) < 0)
		return -1;
	return 0;
}

/* This thread's capabilities (raw: libcap's are the same calls). */
static int thread_caps(bool set, struct __user_cap_data_struct data[2])
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };

	return (int)syscall(set ? SYS_capset : SYS_capget, &hdr, data);
}

/* Back to root's: the uid first, then the capabilities as they were
 * (the uid gives them back unless SECBIT_NO_SETUID_FIXUP), then what
 * needs CAP_SETGID. */
static int thread_ids_back(uid_t euid, gid_t egid, size_t n_groups, const gid_t *groups,
			   struct __user_cap_data_struct caps[2])
{
	if (syscall(SYS_setresuid, -1, euid, -1) < 0 || thread_caps(true, caps) < 0 ||
	    syscall(SYS_setresgid, -1, egid, -1) < 0 || syscall(SYS_setgroups, n_groups, groups) < 0)
		return -1;
	return 0;
}

int deputy_check(const struct deputy_obj *objs, size_t n, uid_t uid, gid_t gid, const gid_t *groups,
		 size_t n_groups, size_t *failed, char *errbuf, size_t errlen)
{
	int modes[DEPUTY_MAX_OBJS];
	size_t pre = n; /* the first object refused without the client's ids */
	int pre_code = 0, dumpable, n_mine, err = 0;
	size_t bad = 0;
	static gid_t mine[NGROUPS_MAX]; /* 256 KiB: not on the stack; one caller, the loop */
	struct __user_cap_data_struct caps[2], none[2], now[2];
	uid_t my_uid = geteuid();
	gid_t my_gid = getegid();

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
	if (uid == my_uid && gid == my_gid) {
		for (size_t i = 0; i < pre; i++)
			if (access_fd(objs[i].fd, modes[i]) < 0) {
				int e = errno;

				*failed = i;
				snprintf(errbuf, errlen, "%s", strerror(e));
				return e;
			}
		goto refused_pre;
	}
	if (my_uid != 0) {
		*failed = 0;
		snprintf(errbuf, errlen, "the service is not root and can't check another user's rights");
		return EPERM;
	}
	/* In this thread, with the client's ids for the checks: no child per
	 * OPEN (a fork on the event loop's thread for each OPEN let one uid's
	 * refused OPENs slow every other client's requests 40-fold). */
	n_mine = getgroups(NGROUPS_MAX, mine);
	dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (n_mine < 0 || dumpable < 0 || n_groups > NGROUPS_MAX || thread_caps(false, caps) < 0) {
		*failed = 0;
		snprintf(errbuf, errlen, "getgroups or prctl: %s", strerror(errno ? errno : EINVAL));
		return EIO;
	}
	/* Taking the ids failing refuses the first object.  With
	 * SECBIT_NO_SETUID_FIXUP (a unit's SecureBits=) the uid change keeps
	 * the capabilities, and CAP_DAC_OVERRIDE would pass every check:
	 * none may be in effect for them. */
	memcpy(none, caps, sizeof(none));
	none[0].effective = none[1].effective = 0;
	if (thread_ids(uid, gid, n_groups, groups) < 0 || thread_caps(true, none) < 0 || thread_caps(false, now) < 0 ||
	    now[0].effective || now[1].effective)
		err = EPERM;
	else
		for (size_t i = 0; i < pre; i++)
			if (access_fd(objs[i].fd, modes[i]) < 0) {
				err = errno ? errno : EIO;
				bad = i;
				break;
			}
	/* Back to ours, or nothing this process does after could be trusted:
	 * the loop would go on with a client's ids. */
	if (thread_ids_back(my_uid, my_gid, (size_t)n_mine, mine, caps) < 0 || geteuid() != my_uid ||
	    getegid() != my_gid) {
		fprintf(stderr, "nsboxd: can't take back its own ids after a check: %s\n", strerror(errno));
		abort();
	}
	/* A change of the effective uid left the process not dumpable (the
	 * kernel's rule for set-id programs): as it was before. */
	if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != dumpable)
		(void)prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
	if (err) {
		*failed = bad;
		snprintf(errbuf, errlen, "uid %u may not %s it: %s", (unsigned)uid, objs[bad].writable ? "write" : "read",
			 strerror(err));
		return err;
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
	int fl = fcntl(fd, F_GETFL), e;

	if ((e = deputy_fs(fd, errbuf, errlen)))
		return e;
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
