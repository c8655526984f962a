/* A bounded workspace's write-back: see wsync.h.  The child runs only
 * system calls and fixed buffers (no malloc): the launcher may be a
 * process with threads (session-local.c). */
#include "wsync.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
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

/* The mode an entry gets on the host.  A new one: the sandbox's, never
 * with write for group or others (a sandbox's chmod 777 of .git/hooks let
 * every local user into the owner's tree after the session) and no set-id
 * bit (none can be set inside).  One the host had: never more read or
 * write for group and others, nor a set-id bit, than it had there (a 0600
 * file came back 0666); otherwise as the sandbox left it, so that what
 * overlayfs copied up unchanged (every parent of a changed file) keeps its
 * mode, a shared 2775 directory included.  A file's chmod +x stands; a
 * directory's x for others would let them in. */
static mode_t host_mode(mode_t inside, int host, const char *name)
{
	struct stat hst;

	if (fstatat(host, name, &hst, AT_SYMLINK_NOFOLLOW) < 0)
		return inside & 01755;
	return (inside & 01700) | (inside & hst.st_mode & 06077) | (S_ISREG(inside) ? inside & 0111 : 0);
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
	if (copy_data(in, out, st.st_size) < 0 || fchmod(out, host_mode(st.st_mode, host, name)) < 0 ||
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
	mode = host_mode(st.st_mode, host, name);
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
		/* Raw system calls: this child shares its caller's memory, and
		 * glibc's setgroups would change every thread of the caller's
		 * (its set*id broadcast goes by the thread list it finds). */
		if (syscall(SYS_setgroups, 0, NULL) < 0)
			return -1;
		/* They answer the id they replaced: asked again, whether it took. */
		(void)syscall(SYS_setfsgid, gid);
		(void)syscall(SYS_setfsuid, uid);
		if ((gid_t)syscall(SYS_setfsgid, (gid_t)-1) != gid || (uid_t)syscall(SYS_setfsuid, (uid_t)-1) != uid)
			return errno = EPERM, -1;
	} else if (geteuid() != uid || getegid() != gid) {
		return errno = EPERM, -1;
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -1;
	return (int)syscall(SYS_capset, &hdr, data);
}

struct wsync_arg {
	int upper, host;
	uid_t uid;
	gid_t gid;
	uint64_t budget;
	pid_t parent;
	bool done;	      /* the child came to its end (else it died) */
	struct nsbox_err err; /* the child's first failure (code -1: none) */
};

/* The copying child (clone with CLONE_VM | CLONE_VFORK | CLONE_FILES): the
 * caller's memory and descriptor table, not copies.  A copy of the
 * caller's page tables cost a host process with 1 GiB resident 65 ms per
 * close; a copy of its descriptors held each one (a FUSE file a client of
 * nsboxd sent would have made the child's exit wait on that client's
 * server).  The calling thread waits (CLONE_VFORK); the child runs on a
 * stack of its own, makes system calls only (raw for the ids: see
 * drop_rights) and writes nothing of the caller's but *arg, and closes
 * nothing it did not open. */
static int wsync_child(void *arg)
{
	struct wsync_arg *a = arg;
	struct wsync w;
	sigset_t none;

	/* The caller's handlers are its code, not ours (Python's would run
	 * here, on the caller's memory): the defaults, the ignored kept (this
	 * child's table is its own: no CLONE_SIGHAND); and a process group
	 * of our own, out of the way of a terminal's ^C to the caller's.
	 * Signals were blocked across the clone. */
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
			signal(sig, SIG_DFL);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	(void)setpgid(0, 0);
	memset(&w, 0, sizeof(w));
	w.left = a->budget;
	/* Each entry costs the host what its file system charges: 16,000
	 * empty directories (nothing in the sandbox's tmpfs) grew an ext4
	 * host directory by 64 MiB past a 64M limit. */
	w.block = fs_block_size(a->host);
	/* After the drop: a change of ids clears the death signal (and then
	 * a killed launcher left its copy running). */
	if (drop_rights(a->uid, a->gid) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != a->parent) {
		err_set(&w.err, errno, "copy /workspace back: become uid %u gid %u without capabilities",
			(unsigned)a->uid, (unsigned)a->gid);
		w.failed = true;
	} else if (lseek(a->upper, 0, SEEK_SET) < 0) {
		fail(&w, errno, "rewind the upper layer");
	} else {
		copy_dir(&w, a->upper, a->host, 0);
	}
	if (!w.failed)
		w.err.code = -1; /* done: no failure (a nsbox_err with code -1 is never an error's) */
	a->err = w.err;
	a->done = true;
	return w.failed ? 1 : 0;
}

int wsync_apply(int upper, int host, uid_t uid, gid_t gid, uint64_t budget, struct nsbox_err *err)
{
	struct wsync_arg a = { .upper = upper, .host = host, .uid = uid, .gid = gid, .budget = budget };
	size_t stack_size = 1u << 20; /* 128 levels of copy_dir and a struct wsync, with room */
	int saved_errno = errno;
	sigset_t all, old;
	void *stack;
	pid_t pid;

	stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return err_sys(err, "copy /workspace back: a stack for the copy");
	a.parent = getpid();
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = clone(wsync_child, (char *)stack + stack_size, CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		int e = errno;

		munmap(stack, stack_size);
		errno = e;
		return err_sys(err, "copy /workspace back: clone");
	}
	/* Ended (CLONE_VFORK): reaped here.  ECHILD: a caller that reaps
	 * every child (SIGCHLD ignored) has it; a.done says how it went. */
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	munmap(stack, stack_size);
	errno = saved_errno; /* the child ran on this thread's errno */
	if (!a.done)
		return err_set(err, EIO, "copy /workspace back: the copying process died");
	if (a.err.code == -1)
		return 0;
	err_copy(err, &a.err);
	return -1;
}

int wsync_job_run(struct wsync_job *jb, struct nsbox_err *err)
{
	int r = jb->pending ? wsync_apply(jb->upper, jb->host, jb->uid, jb->gid, jb->size, err) : 0;

	wsync_job_drop(jb);
	return r;
}

void wsync_job_drop(struct wsync_job *jb)
{
	if (!jb->pending)
		return;
	close(jb->upper);
	close(jb->host);
	jb->pending = false;
}
