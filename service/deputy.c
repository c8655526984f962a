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

/* What a descriptor is, asked of no filesystem.  Its /proc/self/fd link
 * says whether it is a path, a pipe or something else (a socket, an
 * anonymous inode); for a path, statx with AT_STATX_DONT_SYNC gives the
 * inode's type and mount id as the kernel holds them (FUSE answers from
 * its cache and sends its server nothing).  Not fstat: on FUSE that is a
 * request to a server the client may run, and the loop's thread would
 * wait for it for good.  Not /proc/self/fdinfo: for an epoll it takes a
 * lock a client's thread can hold. */
enum fd_kind { FD_PATH, FD_PIPE, FD_OTHER };

struct fd_look {
	enum fd_kind kind;
	mode_t type;		/* FD_PATH: S_IFDIR, S_IFREG... */
	uint64_t mnt;		/* FD_PATH: its mount's id */
};

static int fd_look(int fd, struct fd_look *l, char *errbuf, size_t errlen)
{
	char link[64], target[16];
	struct statx stx;
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target));
	if (n <= 0) {
		int e = n < 0 ? errno : EIO;

		snprintf(errbuf, errlen, "can't tell what it is (%s): %s", link, strerror(e));
		return e;
	}
	if (target[0] != '/') {
		l->kind = n >= 6 && !memcmp(target, "pipe:[", 6) ? FD_PIPE : FD_OTHER;
		return 0;
	}
	l->kind = FD_PATH;
	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE | STATX_MNT_ID, &stx) < 0 ||
	    !(stx.stx_mask & STATX_MNT_ID)) {
		int e = errno ? errno : ENOSYS;

		snprintf(errbuf, errlen, "statx: %s", strerror(e));
		return e;
	}
	l->type = stx.stx_mode & S_IFMT;
	l->mnt = stx.stx_mnt_id;
	return 0;
}

/* FUSE's types: fuse, fuseblk, and either with a .subtype. */
static bool fuse_type(const char *t)
{
	size_t n = !strncmp(t, "fuseblk", 7) ? 7 : !strncmp(t, "fuse", 4) ? 4 : 0;

	return n && (t[n] == '\0' || t[n] == '.');
}

/* Whether each of n mount ids is one of this process's mount namespace,
 * and not FUSE: one read of /proc/self/mountinfo for all of them.
 * Returns the index of the first refused (n when none) with errbuf and
 * *code set, or -1 when mountinfo can't be read. */
static long mounts_refused(const uint64_t *mnts, size_t n, int *code, char *errbuf, size_t errlen)
{
	char types[DEPUTY_MAX_OBJS][32];
	bool seen[DEPUTY_MAX_OBJS] = { false };
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;

	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		char *end, *sep;
		unsigned long long id = strtoull(line, &end, 10);

		if (*end != ' ' || !(sep = strstr(end, " - ")))
			continue;
		sep += 3;
		for (size_t i = 0; i < n; i++)
			if (!seen[i] && mnts[i] == id) {
				seen[i] = true;
				snprintf(types[i], sizeof(types[i]), "%.*s", (int)strcspn(sep, " \n"), sep);
			}
	}
	free(line);
	fclose(f);
	for (size_t i = 0; i < n; i++) {
		if (!seen[i]) {
			*code = EXDEV;
			snprintf(errbuf, errlen, "not on a mount of nsboxd's mount namespace (one unmounted since, or of "
				 "another mount namespace: nsboxd must run in its clients', nsboxd(8) SYSTEMD UNIT)");
			return (long)i;
		}
		if (fuse_type(types[i])) {
			*code = EXDEV;
			snprintf(errbuf, errlen, "on a FUSE mount (%s): nsboxd takes no host object from FUSE, whose "
				 "server could hold the service", types[i]);
			return (long)i;
		}
	}
	return (long)n;
}

/* What can be said without the client's ids and without touching the
 * object: its kind and type, and the access mode the sandbox needs (0, or
 * a positive errno and errbuf). */
static int deputy_mode(int fd, bool writable, int *mode, uint64_t *mnt, char *errbuf, size_t errlen)
{
	struct fd_look l;
	int e;

	if ((e = fd_look(fd, &l, errbuf, errlen)))
		return e;
	if (l.kind != FD_PATH || (l.type != S_IFDIR && l.type != S_IFREG)) {
		snprintf(errbuf, errlen, "not a directory or a regular file");
		return EINVAL;
	}
	*mode = R_OK | (l.type == S_IFDIR ? X_OK : 0) | (writable ? W_OK : 0);
	*mnt = l.mnt;
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
	uint64_t mnts[DEPUTY_MAX_OBJS];
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
		if ((pre_code = deputy_mode(objs[i].fd, objs[i].writable, &modes[i], &mnts[i], errbuf, errlen)))
			pre = i;
	/* Their mounts, before anything touches them (the access checks
	 * below reach the filesystem): an earlier one refused here wins. */
	if (pre > 0) {
		int code = 0;
		char mb[256];
		long m = mounts_refused(mnts, pre, &code, mb, sizeof(mb));

		if (m < 0) {
			*failed = 0;
			snprintf(errbuf, errlen, "can't read /proc/self/mountinfo: %s", strerror(errno ? errno : EIO));
			return EIO;
		}
		if ((size_t)m < pre) {
			pre = (size_t)m;
			pre_code = code;
			snprintf(errbuf, errlen, "%s", mb);
		}
	}
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
	struct fd_look l;
	int fl = fcntl(fd, F_GETFL), e, code = 0;

	if (fl < 0) {
		snprintf(errbuf, errlen, "%s", strerror(errno));
		return errno;
	}
	/* An O_PATH descriptor grants no I/O at all; one opened read-only
	 * proves nothing about the right to write. */
	if ((fl & O_PATH) || ((fl & O_ACCMODE) != O_WRONLY && (fl & O_ACCMODE) != O_RDWR)) {
		snprintf(errbuf, errlen, "the descriptor is not open for writing");
		return EBADF;
	}
	if ((e = fd_look(fd, &l, errbuf, errlen)))
		return e;
	if (l.kind == FD_PIPE)
		return 0;
	if (l.kind != FD_PATH || (l.type != S_IFREG && l.type != S_IFIFO)) {
		snprintf(errbuf, errlen, "not a regular file or a pipe");
		return EINVAL;
	}
	switch (mounts_refused(&l.mnt, 1, &code, errbuf, errlen)) {
	case -1:
		snprintf(errbuf, errlen, "can't read /proc/self/mountinfo: %s", strerror(errno ? errno : EIO));
		return EIO;
	case 0:
		return code;
	default:
		return 0;
	}
}
