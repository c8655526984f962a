/* A bounded workspace's write-back: see wsync.h.  The child runs only
 * system calls and fixed buffers (no malloc): the launcher may be a
 * process with threads (session-local.c). */
#include "wsync.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "proto.h"
#include "util.h"

/* Deeper trees are not copied (the entry is reported): each level holds a
 * directory buffer on the stack. */
#define WSYNC_MAX_DEPTH 128

struct wsync {
	struct nsbox_err err; /* the first failure */
	bool failed;
	unsigned tmp_seq;
	char path[4096]; /* the entry at hand, for messages */
	size_t path_len;
	uint64_t left;	       /* bytes the host directory may still grow by (block_charge) */
	uint64_t block;	       /* the host file system's block size */
	mode_t umask;	       /* the launcher's, with write for others always in it */
	unsigned long removed; /* host entries removed (WSYNC_MAX_REMOVED) */
};

/* What a write-back may remove from the host directory: its owner adding
 * entries as fast as they go (to a directory the sandbox deleted) kept the
 * copy, and the worker or thread that waits for it, for good. */
#define WSYNC_MAX_REMOVED (1ul << 20)

struct linux_dirent64 {
	unsigned long long d_ino;
	long long d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int fail(struct wsync *w, int code, const char *what)
{
	if (!w->failed) {
		w->failed = true;
		char q[1024];

		/* The sandbox chose these names: quoted so that none of it
		 * (C0 or C1 controls, bidi overrides, bytes that are not UTF-8)
		 * can drive the terminal or log that shows the warning. */
		err_set(&w->err, code, "copy /workspace/%s back: %s", proto_text_inert(w->path, q, sizeof(q)), what);
	}
	return -1;
}

/* One name beneath dirfd, never through a symlink or onto another mount. */
static int open_beneath(int dirfd, const char *name, int flags, mode_t mode)
{
	struct open_how how = { .flags = (unsigned long long)(flags | O_NOFOLLOW | O_CLOEXEC),
				.mode = (flags & O_CREAT) ? mode : 0,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
					   RESOLVE_NO_XDEV };

	return (int)syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
}

static bool dots(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

static void path_push(struct wsync *w, const char *name, size_t *saved)
{
	*saved = w->path_len;
	snprintf(w->path + w->path_len, sizeof(w->path) - w->path_len, "%s%s", w->path_len ? "/" : "", name);
	w->path_len = strnlen(w->path, sizeof(w->path) - 1);
}

static void path_pop(struct wsync *w, size_t saved)
{
	w->path_len = saved;
	w->path[saved] = '\0';
}

/* Remove name beneath dirfd, a whole tree if it is a directory; gone
 * already is fine. */
static int remove_tree(struct wsync *w, int dirfd, const char *name, int depth)
{
	struct stat st;
	char buf[1024];
	int fd;
	long n;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -1;
	if (++w->removed > WSYNC_MAX_REMOVED) {
		fail(w, EMLINK,
		     "more than 1048576 host entries to remove (does the host directory keep filling?): "
		     "stopped");
		return errno = EMLINK, -1;
	}
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -1 : 0;
	if (depth >= WSYNC_MAX_DEPTH)
		return errno = ELOOP, -1;
	fd = open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return -1;
	while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
		bool removed = false;

		for (long off = 0; off < n;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);

			off += d->d_reclen;
			if (dots(d->d_name))
				continue;
			if (remove_tree(w, fd, d->d_name, depth + 1) < 0) {
				close(fd);
				return -1;
			}
			removed = true;
		}
		/* Entries were removed: read the directory from the start. */
		if (removed)
			lseek(fd, 0, SEEK_SET);
	}
	close(fd);
	if (n < 0)
		return -1;
	return unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -1 : 0;
}

/* A fresh name in host for a file to be renamed into place. */
static int create_tmp(struct wsync *w, int host, char tmp[64])
{
	for (int tries = 0; tries < 100; tries++) {
		int fd;

		snprintf(tmp, 64, ".nsbox-wsync.%d.%u", (int)getpid(), w->tmp_seq++);
		fd = open_beneath(host, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1;
}

static int copy_data(int in, int out, off_t size)
{
	off_t off = 0;

	while (off < size) {
		ssize_t n = sendfile(out, in, &off,
				     (size_t)(size - off) > (1u << 30) ? 1u << 30 : (size_t)(size - off));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
	}
	return 0;
}

/* Put tmp in place of name (whatever name is now: a directory is
 * removed first; rename replaces a file or symlink without following it). */
static int replace(struct wsync *w, int host, const char *tmp, const char *name)
{
	struct stat st;

	if (fstatat(host, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	    remove_tree(w, host, name, 0) < 0) {
		unlinkat(host, tmp, 0);
		return fail(w, errno, "remove the directory it replaces");
	}
	if (renameat(host, tmp, host, name) < 0) {
		int e = errno;

		unlinkat(host, tmp, 0);
		return fail(w, e, "rename into place");
	}
	return 0;
}

/* The mode an entry gets on the host: the sandbox's, less the launcher's
 * umask and always less write for others (a sandbox's chmod o+w of
 * .git/hooks let every local user into the owner's tree after the
 * session), and for an entry the host had, never more read or write for
 * group and others than it had there (a 0600 file came back 0666).  No set-id bit: none can
 * be set inside, and the content is the sandbox's. */
static mode_t host_mode(const struct wsync *w, mode_t inside, int host, const char *name)
{
	struct stat hst;
	mode_t m = inside & 01777 & ~w->umask;

	/* A file's chmod +x stands; a directory's x would let others in. */
	if (fstatat(host, name, &hst, AT_SYMLINK_NOFOLLOW) == 0)
		m &= 01700 | (hst.st_mode & 077) | (S_ISREG(inside) ? 0111 : 0);
	return m;
}

static int copy_file(struct wsync *w, int upper, int host, const char *name)
{
	_cleanup_close_ int in = openat(upper, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), out = -1;
	struct timespec times[2];
	struct stat st;
	char tmp[64];

	if (in < 0 || fstat(in, &st) < 0)
		return fail(w, errno, "open in the upper layer");
	if (!S_ISREG(st.st_mode))
		return fail(w, EINVAL, "not a regular file any more");
	/* Charged at its size in whole blocks: sparse holes and hard links
	 * cost the upper layer nothing, but the copy writes them whole.  An
	 * empty file counts as a block too, as a directory or symlink does:
	 * free, 400,000 of them took the write-back past a minute. */
	if (block_charge(&w->left, (uint64_t)st.st_size, w->block) < 0)
		return fail(w, EFBIG,
			    "the write-back would exceed the workspace's limit (WorkspaceSize; a sparse "
			    "file's holes and each name of a hard link count in full, in whole blocks, an "
			    "empty file as one): not copied");
	out = create_tmp(w, host, tmp);
	if (out < 0)
		return fail(w, errno, "create a file in the host directory");
	times[0] = st.st_atim;
	times[1] = st.st_mtim;
	if (copy_data(in, out, st.st_size) < 0 || fchmod(out, host_mode(w, st.st_mode, host, name)) < 0 ||
	    futimens(out, times) < 0) {
		int e = errno;

		unlinkat(host, tmp, 0);
		return fail(w, e, "write into the host directory");
	}
	return replace(w, host, tmp, name);
}

static int copy_symlink(struct wsync *w, int upper, int host, const char *name)
{
	char target[4096], tmp[64];
	ssize_t n = readlinkat(upper, name, target, sizeof(target) - 1);

	if (n < 0)
		return fail(w, errno, "read the symlink");
	target[n] = '\0';
	if (block_charge(&w->left, 0, w->block) < 0)
		return fail(w, EFBIG,
			    "the write-back would exceed the workspace's limit (WorkspaceSize; a symlink "
			    "counts as a block of the host's file system): not made");
	for (int tries = 0;; tries++) {
		snprintf(tmp, sizeof(tmp), ".nsbox-wsync.%d.%u", (int)getpid(), w->tmp_seq++);
		if (symlinkat(target, host, tmp) == 0)
			break;
		if (errno != EEXIST || tries >= 100)
			return fail(w, errno, "make the symlink");
	}
	return replace(w, host, tmp, name);
}

static bool opaque(int dirfd)
{
	char v[2];

	return (fgetxattr(dirfd, "user.overlay.opaque", v, sizeof(v)) == 1 ||
		fgetxattr(dirfd, "trusted.overlay.opaque", v, sizeof(v)) == 1) &&
	       v[0] == 'y';
}

static void copy_dir(struct wsync *w, int upper, int host, int depth);

static int copy_subdir(struct wsync *w, int upper, int host, const char *name, int depth)
{
	_cleanup_close_ int u = openat(upper, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), h = -1;
	struct stat st, hst;
	mode_t mode;

	if (u < 0 || fstat(u, &st) < 0)
		return fail(w, errno, "open in the upper layer");
	if (depth >= WSYNC_MAX_DEPTH)
		return fail(w, ELOOP, "more than 128 directories deep");
	/* An opaque directory replaced the host's one of that name: its old
	 * entries are gone inside. */
	bool have = fstatat(host, name, &hst, AT_SYMLINK_NOFOLLOW) == 0;

	if (have && (!S_ISDIR(hst.st_mode) || opaque(u))) {
		if (remove_tree(w, host, name, 0) < 0)
			return fail(w, errno, "remove what the directory replaces");
		have = false;
	}
	if (!have && block_charge(&w->left, 0, w->block) < 0)
		return fail(w, EFBIG,
			    "the write-back would exceed the workspace's limit (WorkspaceSize; a directory "
			    "counts as a block of the host's file system): not made, nor what is in it");
	/* Its mode now, with the host's as it was (mkdirat's 0700 is no bound). */
	mode = host_mode(w, st.st_mode, host, name);
	if (mkdirat(host, name, 0700) < 0 && errno != EEXIST)
		return fail(w, errno, "make the directory");
	h = open_beneath(host, name, O_RDONLY | O_DIRECTORY, 0);
	if (h < 0)
		return fail(w, errno, "open the host's directory");
	copy_dir(w, u, h, depth + 1);
	if (fchmod(h, mode) < 0)
		return fail(w, errno, "chmod");
	return 0;
}

static void copy_dir(struct wsync *w, int upper, int host, int depth)
{
	char buf[1024];
	long n;

	while ((n = syscall(SYS_getdents64, upper, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
			struct stat st;
			size_t saved;

			off += d->d_reclen;
			if (dots(d->d_name))
				continue;
			path_push(w, d->d_name, &saved);
			if (fstatat(upper, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				fail(w, errno, "stat in the upper layer");
			else if (S_ISCHR(st.st_mode) && st.st_rdev == 0) {
				/* overlay's whiteout: the sandbox removed it */
				if (remove_tree(w, host, d->d_name, 0) < 0)
					fail(w, errno, "remove");
			} else if (S_ISDIR(st.st_mode))
				copy_subdir(w, upper, host, d->d_name, depth);
			else if (S_ISREG(st.st_mode))
				copy_file(w, upper, host, d->d_name);
			else if (S_ISLNK(st.st_mode))
				copy_symlink(w, upper, host, d->d_name);
			/* fifos, sockets: nothing to copy */
			path_pop(w, saved);
		}
	}
	if (n < 0)
		fail(w, errno, "read the upper layer");
}

/* Write as the sandbox's host user, with no capabilities.  A root caller
 * changes only its file-system ids, which alone decide what the copy may
 * write: its real, effective and saved ids stay root's, so that user (under
 * nsboxd, a client) can't signal, stop, renice, prlimit or trace the copy.
 * A SIGSTOP sent to a copy that had become the client's uid held the
 * launcher's wait, and with it an nsboxd worker, for good (red team 6). */
static int drop_rights(uid_t uid, gid_t gid)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = { { 0 } };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (geteuid() == 0) {
		if (setgroups(0, NULL) < 0)
			return -1;
		/* They answer the id they replaced: asked again, whether it took. */
		(void)setfsgid(gid);
		(void)setfsuid(uid);
		if ((gid_t)setfsgid((gid_t)-1) != gid || (uid_t)setfsuid((uid_t)-1) != uid)
			return errno = EPERM, -1;
	} else if (geteuid() != uid || getegid() != gid) {
		return errno = EPERM, -1;
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -1;
	return (int)syscall(SYS_capset, &hdr, data);
}

int wsync_apply(int upper, int host, uid_t uid, gid_t gid, uint64_t budget, struct nsbox_err *err)
{
	int pipefd[2], st;
	struct wsync w;
	pid_t pid, parent;
	ssize_t n;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return err_sys(err, "copy /workspace back: pipe");
	parent = getpid();
	/* _Fork: no atfork handler runs (libnsbox runs this in its caller's
	 * process, which may have threads and handlers of its own: the SDK's
	 * Python, nsboxd); the child makes only system calls. */
	pid = _Fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return err_sys(err, "copy /workspace back: fork");
	}
	if (pid == 0) {
		memset(&w, 0, sizeof(w));
		w.left = budget;
		/* Each entry costs the host what its file system charges:
		 * 16,000 empty directories (nothing in the sandbox's tmpfs)
		 * grew an ext4 host directory by 64 MiB past a 64M limit. */
		w.block = fs_block_size(host);
		w.umask = umask(077);
		w.umask |= S_IWOTH;
		close(pipefd[0]);
		/* After the drop: a change of ids clears the death signal (and
		 * then a killed launcher left its copy running). */
		if (drop_rights(uid, gid) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent) {
			err_set(&w.err, errno, "copy /workspace back: become uid %u gid %u without capabilities",
				(unsigned)uid, (unsigned)gid);
			w.failed = true;
		} else if (lseek(upper, 0, SEEK_SET) < 0) {
			fail(&w, errno, "rewind the upper layer");
		} else {
			copy_dir(&w, upper, host, 0);
		}
		if (w.failed)
			(void)write_full(pipefd[1], &w.err, sizeof(w.err));
		_exit(w.failed ? 1 : 0);
	}
	close(pipefd[1]);
	n = read_full(pipefd[0], &w.err, sizeof(w.err));
	close(pipefd[0]);
	st = 0;
	/* ECHILD: a caller that reaps every child (SIGCHLD ignored) has it;
	 * the pipe has said what there is to say. */
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (n == (ssize_t)sizeof(w.err)) {
		err_copy(err, &w.err);
		return -1;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return err_set(err, EIO, "copy /workspace back: the copying process died");
	return 0;
}
