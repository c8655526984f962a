/* Child step: a new tmpfs root holding only what the sandbox may see, then
 * pivot_root into it and detach the host's root.  Every mount is nosuid and
 * nodev (the bound device nodes in /dev excepted), read-only unless the
 * policy says otherwise, and propagation is private. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jail.h"
#include "rootfs-table.h"
#include "steps.h"
#include "util.h"

/* glibc 2.36's <sys/mount.h> clashes with <linux/mount.h>; declare the two
 * calls we need. */
int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const void *data);
int umount2(const char *target, int flags);
#define MNT_DETACH 2

#define NEWROOT "/tmp"	/* host /tmp is only hidden in our mount namespace */
#define DEFAULT_TMP_SIZE (64ULL << 20)

/* A tmpfs's inode cap for a size cap: one inode per 4 KiB, at least 1024 and
 * at most 2^20.  size= bounds the pages, not the files: an empty file, a
 * directory or a short symlink takes none, and the kernel's default is half
 * the host's pages (3 million here), each inode and dentry ~1 KiB of kernel
 * memory that only a memory cgroup charges (2 million empty files in /dev/shm
 * took 1.6 GiB of the host's from --memory 64M without one: red team 4). */
static unsigned long long tmpfs_inodes(uint64_t size)
{
	uint64_t n = size / 4096;

	return n < 1024 ? 1024 : n > (1u << 20) ? 1u << 20 : n;
}

static int set_attr(const char *path, unsigned long long set, bool recursive, struct nsbox_err *err)
{
	struct mount_attr attr = { .attr_set = set };

	if (syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr, sizeof(attr)) == 0)
		return 0;
	if (errno != ENOSYS)
		return err_sys(err, "mount_setattr %s", path);
	/* Kernels before 5.12: a non-recursive remount (submounts keep their
	 * flags). */
	unsigned long fl = MS_REMOUNT | MS_BIND;
	if (set & MOUNT_ATTR_RDONLY)
		fl |= MS_RDONLY;
	if (set & MOUNT_ATTR_NOSUID)
		fl |= MS_NOSUID;
	if (set & MOUNT_ATTR_NODEV)
		fl |= MS_NODEV;
	if (set & MOUNT_ATTR_NOEXEC)
		fl |= MS_NOEXEC;
	if (mount(NULL, path, NULL, fl, NULL) < 0)
		return err_sys(err, "remount %s", path);
	return 0;
}

static int mkdir_p(const char *path, mode_t mode)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* Why a mount point can't be made, as the sandbox will see it (dst
 * without NEWROOT): a read-only parent says so, not just EROFS. */
static int mountpoint_failed(const char *what, const char *dst, struct nsbox_err *err)
{
	const char *name = dst + strlen(NEWROOT);

	if (errno == EROFS)
		return err_fail(err, NULL, EROFS,
				"%s does not exist in the sandbox and can't be made there: its directory is read-only "
				"(bind onto a path that exists, or under a writable one such as /tmp)",
				name);
	return err_sys(err, "%s %s", what, name);
}

/* Create the mount point for a bind of srcfd at dst (a path under NEWROOT).
 * Most parents exist: they are made only when the first try says not.  A
 * directory goes onto a directory and anything else onto a non-directory:
 * the mismatch is named here, not left to the mount's EINVAL. */
static int make_mountpoint(int srcfd, const char *dst, struct nsbox_err *err)
{
	struct stat st, have;
	char parent[4096];
	char *slash;
	int fd;

	if (fstat(srcfd, &st) < 0)
		return err_sys(err, "stat the source of %s", dst + strlen(NEWROOT));
	if (lstat(dst, &have) == 0 && !S_ISLNK(have.st_mode)) {
		if (S_ISDIR(have.st_mode) != S_ISDIR(st.st_mode))
			return err_fail(err, NULL, S_ISDIR(st.st_mode) ? ENOTDIR : EISDIR,
					"%s is a %s in the sandbox and the source is %s: bind a directory onto a "
					"directory and a file onto a file",
					dst + strlen(NEWROOT), S_ISDIR(have.st_mode) ? "directory" : "file",
					S_ISDIR(st.st_mode) ? "a directory" : "not");
		return 0;
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdir(dst, 0755) < 0 && errno != EEXIST && (errno != ENOENT || mkdir_p(dst, 0755) < 0))
			return mountpoint_failed("mkdir", dst, err);
		return 0;
	}
	fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 && errno == ENOENT) {
		snprintf(parent, sizeof(parent), "%s", dst);
		slash = strrchr(parent, '/');
		if (slash && slash != parent) {
			*slash = '\0';
			if (mkdir_p(parent, 0755) < 0)
				return mountpoint_failed("mkdir", parent, err);
		}
		fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	}
	if (fd < 0 && errno != EEXIST)
		return mountpoint_failed("create the mount point", dst, err);
	if (fd >= 0)
		close(fd);
	return 0;
}

/* Bind the already opened source (O_PATH fd) at dst, flags unset: a bind
 * copies its source mount's (bind_fd, bind_sys set them). */
static int bind_only(int srcfd, const char *dst, struct nsbox_err *err)
{
	char src[64];

	if (make_mountpoint(srcfd, dst, err) < 0)
		return -1;
	snprintf(src, sizeof(src), "/proc/self/fd/%d", srcfd);
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return err_sys(err, "bind mount onto %s", dst + strlen(NEWROOT));
	return 0;
}

/* The same, then apply flags to the whole subtree: bind mounts ignore
 * ro/nosuid/nodev until set again (bubblewrap bind-mount.c). */
static int bind_fd(int srcfd, const char *dst, bool rw, bool nodev, struct nsbox_err *err)
{
	unsigned long long attr = MOUNT_ATTR_NOSUID | (nodev ? MOUNT_ATTR_NODEV : 0) | (rw ? 0 : MOUNT_ATTR_RDONLY);

	if (bind_only(srcfd, dst, err) < 0)
		return -1;
	return set_attr(dst, attr, true, err);
}

/* A bind of the system's (/usr, a root tree's directories, /etc's shared
 * files): read-only, nosuid and nodev.  With batch, its flags are set by
 * seal_system, in one call for all of them; without (a kernel with no
 * mount_setattr), at once. */
static int bind_sys(int srcfd, const char *dst, bool batch, struct nsbox_err *err)
{
	return batch ? bind_only(srcfd, dst, err) : bind_fd(srcfd, dst, false, true, err);
}

/* set (read-only among them) on every mount below path in one recursive
 * call, then path's own mount writable again for the mount points still
 * to come (the new root and /dev are made read-only after pivot_root). */
static int seal_below(const char *path, unsigned long long set, struct nsbox_err *err)
{
	struct mount_attr ro = { .attr_set = set };
	struct mount_attr rw = { .attr_clr = MOUNT_ATTR_RDONLY };

	if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &ro, sizeof(ro)) < 0 ||
	    syscall(SYS_mount_setattr, AT_FDCWD, path, 0, &rw, sizeof(rw)) < 0)
		return err_sys(err, "make the binds below %s read-only", path + strlen(NEWROOT));
	return 0;
}

/* Every mount under the new root so far is a system bind: all read-only,
 * nosuid and nodev at once. */
static int seal_system(bool batch, struct nsbox_err *err)
{
	return batch ? seal_below(NEWROOT, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err) : 0;
}

/* The same for a detached tree the launcher cloned (open_tree), attached
 * here with move_mount: the way into our mount namespace from the host's. */
static int attach_tree(int treefd, const char *dst, bool rw, struct nsbox_err *err)
{
	unsigned long long attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (rw ? 0 : MOUNT_ATTR_RDONLY);

	if (make_mountpoint(treefd, dst, err) < 0)
		return -1;
	if (syscall(SYS_move_mount, treefd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return err_sys(err, "attach the launcher's tree onto %s", dst + strlen(NEWROOT));
	return set_attr(dst, attr, true, err);
}

static int open_src(const char *path, struct nsbox_err *err)
{
	int fd = open(path, O_PATH | O_CLOEXEC);

	if (fd < 0)
		err_sys(err, "open %s", path);
	return fd;
}

static int write_etc(const char *name, const char *content, struct nsbox_err *err)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), NEWROOT "/etc/%s", name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return err_sys(err, "create /etc/%s", name);
	if (write_full(fd, content, strlen(content)) < 0) {
		close(fd);
		return err_sys(err, "write /etc/%s", name);
	}
	close(fd);
	return 0;
}

static int make_etc(const struct nsbox_policy *p, struct nsbox_err *err)
{
	struct rootfs_etc_file files[ROOTFS_ETC_FILES];

	if (mkdir(NEWROOT "/etc", 0755) < 0)
		return err_sys(err, "mkdir /etc");
	rootfs_etc(p, files);
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		if (write_etc(files[i].name, files[i].text, err) < 0)
			return -1;
	return 0;
}

static int make_dev(const struct nsbox_policy *p, bool batch, struct nsbox_err *err)
{
	const char *const *nodes;
	const struct rootfs_link *links;
	size_t n_nodes = rootfs_dev_nodes(&nodes), n_links = rootfs_dev_links(&links);
	char path[128], opts[64];

	if (mount("tmpfs", NEWROOT "/dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") < 0)
		return err_sys(err, "mount tmpfs on /dev");
	for (size_t i = 0; i < n_links; i++) {
		snprintf(path, sizeof(path), NEWROOT "/dev/%s", links[i].name);
		if (symlink(links[i].target, path) < 0)
			return err_sys(err, "symlink /dev/%s", links[i].name);
	}
	if (mkdir(NEWROOT "/dev/pts", 0755) < 0 || mkdir(NEWROOT "/dev/shm", 01777) < 0)
		return err_sys(err, "mkdir /dev/pts, /dev/shm");
	for (size_t i = 0; i < n_nodes; i++) {
		_cleanup_close_ int fd = -1;
		snprintf(path, sizeof(path), "/dev/%s", nodes[i]);
		fd = open_src(path, err);
		if (fd < 0)
			return -1;
		snprintf(path, sizeof(path), NEWROOT "/dev/%s", nodes[i]);
		/* Device nodes need dev; they are the only such mounts.  Read-only
		 * all the same: writing a device node works on a read-only mount,
		 * but chmod and chown of the host's inode (the sandbox's user is
		 * its owner when nsbox runs as root) fail with EROFS.  With batch,
		 * set below for all of them (and /dev's tmpfs) in one call. */
		if ((batch ? bind_only(fd, path, err) : bind_fd(fd, path, false, false, err)) < 0)
			return -1;
	}
	if (batch && seal_below(NEWROOT "/dev", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, err) < 0)
		return -1;
	/* A private devpts instance, as bubblewrap's --dev: os.openpty() and
	 * pty users work, and no pty of the host's is reachable (/dev/ptmx is
	 * a link into it, rootfs-table.c).  max=64: ptys come from the
	 * host-wide kernel.pty.max, less kernel.pty.reserve for the host's own
	 * instance; one sandbox must not take them all from the others. */
	if (mount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=620,max=64") < 0)
		return err_sys(err, "mount devpts");
	snprintf(opts, sizeof(opts), "mode=1777,size=%llu,nr_inodes=%llu",
		 (unsigned long long)(p->tmp_size ? p->tmp_size : DEFAULT_TMP_SIZE),
		 tmpfs_inodes(p->tmp_size ? p->tmp_size : DEFAULT_TMP_SIZE));
	if (mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
		return err_sys(err, "mount tmpfs on /dev/shm");
	return 0;
}

/* Host /usr with the merged-usr links, or the top level of another root. */
static int make_system(const struct nsbox_policy *p, int rootfd, bool batch, struct nsbox_err *err)
{
	const char *const *merged;
	size_t n_merged = rootfs_merged_usr(&merged);
	char path[4096], target[256];

	if (!p->rootfs) {
		_cleanup_close_ int usr = open_src("/usr", err);
		if (usr < 0)
			return -1;
		if (bind_sys(usr, NEWROOT "/usr", batch, err) < 0)
			return -1;
		for (size_t i = 0; i < n_merged; i++) {
			char hostp[64];
			ssize_t n;
			snprintf(hostp, sizeof(hostp), "/%s", merged[i]);
			n = readlink(hostp, target, sizeof(target) - 1);
			snprintf(path, sizeof(path), NEWROOT "/%s", merged[i]);
			if (n > 0) {
				target[n] = '\0';
				if (symlink(target, path) < 0)
					return err_sys(err, "symlink /%s", merged[i]);
			} else if (access(hostp, F_OK) == 0) {
				/* Not a merged-usr host: bind the directory itself. */
				_cleanup_close_ int fd = open_src(hostp, err);
				if (fd < 0 || bind_sys(fd, path, batch, err) < 0)
					return -1;
			}
		}
		return 0;
	}

	/* rootfd was opened before the new root's tmpfs hid host /tmp. */
	int dfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	struct dirent *de;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return err_sys(err, "read --rootfs %s", p->rootfs);
	}
	while ((de = readdir(d))) {
		if (rootfs_skip_top(de->d_name))
			continue;
		snprintf(path, sizeof(path), NEWROOT "/%s", de->d_name);
		ssize_t n = readlinkat(rootfd, de->d_name, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			if (symlink(target, path) < 0) {
				closedir(d);
				return err_sys(err, "symlink /%s", de->d_name);
			}
			continue;
		}
		struct stat st;
		if (fstatat(rootfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			continue;
		_cleanup_close_ int fd = openat(rootfd, de->d_name, O_PATH | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			closedir(d);
			return err_sys(err, "open --rootfs %s/%s", p->rootfs, de->d_name);
		}
		if (bind_sys(fd, path, batch, err) < 0) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	return 0;
}

/* /proc/sys/kernel/random/boot_id names the host's boot (it is the same
 * in every namespace): a fresh random one per sandbox.  From a file of the
 * new root's tmpfs, unlinked once bound, so mountinfo shows nothing of the
 * host for it (a memfd can't be bound: it is not on a mount of ours). */
static int fake_boot_id(struct nsbox_err *err)
{
	static const char tmp[] = NEWROOT "/.boot_id";
	_cleanup_close_ int fd = -1;
	unsigned char u[16];
	char text[40];
	int r;

	if (syscall(SYS_getrandom, u, sizeof(u), 0) != (long)sizeof(u))
		return err_sys(err, "getrandom for boot_id");
	u[6] = (u[6] & 0x0f) | 0x40;	/* version 4, RFC 4122 variant, as the kernel's */
	u[8] = (u[8] & 0x3f) | 0x80;
	snprintf(text, sizeof(text), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", u[0],
		 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);
	if (fd < 0 || write_full(fd, text, strlen(text)) < 0)
		return err_sys(err, "write a boot_id");
	r = mount(tmp, NEWROOT "/proc/sys/kernel/random/boot_id", NULL, MS_BIND, NULL);
	(void)unlink(tmp);
	if (r < 0)
		return err_sys(err, "bind over /proc/sys/kernel/random/boot_id");
	return set_attr(NEWROOT "/proc/sys/kernel/random/boot_id",
			MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false, err);
}

/* /proc entries hidden (rootfs-table.c says which): files under /dev/null,
 * directories under an empty directory of the new root's tmpfs, removed
 * once bound (mountinfo then names nothing of the host for it, and nothing
 * can be made in it).  The first bind of each kind gets the flags, the
 * others are binds of it and copy them. */
static int mask_proc(bool host_root, struct nsbox_err *err)
{
	/* A name no other root brings (rootfs-table.c, skip_top). */
	static const char empty[] = NEWROOT "/.proc_mask";
	_cleanup_close_ int null = open_src("/dev/null", err);
	const char *masked[48];
	size_t n = rootfs_proc_masked(host_root, masked, ARRAY_SIZE(masked));
	char path[128], src[128], dsrc[128];
	bool first = true, dfirst = true;
	int r = 0;

	if (null < 0)
		return -1;
	if (mkdir(empty, 0555) < 0)
		return err_sys(err, "mkdir %s", empty);
	snprintf(src, sizeof(src), "/proc/self/fd/%d", null);
	snprintf(dsrc, sizeof(dsrc), "%s", empty);
	for (size_t i = 0; i < n && r == 0; i++) {
		size_t len = strlen(masked[i]);
		bool dir = len && masked[i][len - 1] == '/';
		char(*from)[sizeof(src)] = dir ? &dsrc : &src;
		bool *once = dir ? &dfirst : &first;

		snprintf(path, sizeof(path), NEWROOT "/proc/%.*s", (int)(dir ? len - 1 : len), masked[i]);
		if (mount(*from, path, NULL, MS_BIND, NULL) < 0) {
			if (errno == ENOENT) /* not in this kernel's /proc */
				continue;
			r = err_sys(err, "mask /proc/%s", masked[i]);
			break;
		}
		if (*once) {
			/* nodev: the node can't even be opened; read-only: nor
			 * chmod'ed (it is the host's inode), nor a file made in
			 * the directory. */
			r = set_attr(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
				     false, err);
			snprintf(*from, sizeof(*from), "%s", path);
			*once = false;
		}
	}
	if (rmdir(empty) < 0 && r == 0)
		r = err_sys(err, "rmdir %s", empty);
	return r;
}

/* exec_file opened by path in our mount namespace (O_PATH), if it is the
 * file the launcher opened (src) and may be executed from its mount; else
 * -1: the caller copies src instead. */
static int bindable_exec(const char *path, int src)
{
	_cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);
	struct stat a, b;
	struct statvfs fs;

	if (fd < 0 || fstat(fd, &a) < 0 || fstat(src, &b) < 0 || fstatvfs(fd, &fs) < 0)
		return -1;
	if (!S_ISREG(a.st_mode) || a.st_dev != b.st_dev || a.st_ino != b.st_ino || (fs.f_flag & ST_NOEXEC))
		return -1;
	return take_fd(&fd);
}

/* Open path beneath dirfd without following any symlink (openat2
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); -1 if that is not possible. */
static int open_in_root(int dirfd, const char *path, int flags)
{
	struct open_how how = { .flags = (unsigned long long)flags,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };

	return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int mount_exec(const char *exec_file, int exec_src, int *exec_fd, struct nsbox_err *err)
{
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
	_cleanup_close_ int exefd = bindable_exec(exec_file, exec_src);
	int fd = -1;

	err_step(err, "exec");
	if (exefd >= 0)
		fd = (int)syscall(SYS_open_tree, exefd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (fd >= 0 && syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &ro, sizeof(ro)) < 0) {
		err_sys(err, "make %s's mount read-only", exec_file);
		close(fd);
		return -1;
	}
	if (fd < 0 && (fd = sealed_copy_fd(exec_src)) < 0)
		return err_sys(err, "copy %s into a sealed memfd", exec_file);
	*exec_fd = fd;
	return 0;
}

void mount_srcs_close(struct mount_srcs *s)
{
	for (size_t i = 0; i < s->n_bind && i < ARRAY_SIZE(s->bind); i++)
		if (s->bind[i] >= 0)
			close(s->bind[i]);
	if (s->workspace >= 0)
		close(s->workspace);
	s->n_bind = 0;
	s->workspace = -1;
	s->detached = false;
}

static int clone_tree(const char *path, struct nsbox_err *err)
{
	int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);

	/* The kernel clones only mounts of the caller's own namespace: a
	 * descriptor nsboxd got from a client in another one (nsboxd started
	 * with a mount namespace of its own: ProtectSystem=, PrivateTmp=...). */
	if (fd < 0 && errno == EINVAL)
		err_set(err, EINVAL, "open %s: on a mount of another mount namespace than ours (nsboxd must run in its "
			"clients' mount namespace, nsboxd(8) SYSTEMD UNIT)", path);
	else if (fd < 0)
		err_sys(err, "open %s", path);
	return fd;
}

/* *fd is the launcher's O_PATH descriptor of a source: a mount of the
 * host's namespace, which a bind here would refuse (EINVAL: not in our
 * namespace).  Replace it with the same object opened in our copy of that
 * namespace by its path, refusing a path that names another object by now
 * (a rename or a symlink swapped in since the launcher opened it). */
static int reopen_here(int *fd, const char *what, struct nsbox_err *err)
{
	char link[64], path[4096];
	struct stat was, is;
	ssize_t n;
	int nfd;

	if (*fd < 0)
		return err_set(err, EBADF, "%s: not opened by the launcher", what);
	snprintf(link, sizeof(link), "/proc/self/fd/%d", *fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n < 0)
		return err_sys(err, "%s: find its path", what);
	path[n] = '\0';
	if (path[0] != '/')
		return err_set(err, ENOENT, "%s: no path names it (%s)", what, path);
	nfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (nfd < 0)
		return err_sys(err, "open %s (%s)", what, path);
	if (fstat(*fd, &was) < 0 || fstat(nfd, &is) < 0 || was.st_dev != is.st_dev || was.st_ino != is.st_ino) {
		close(nfd);
		return err_set(err, ESTALE, "%s: %s is no longer what was opened", what, path);
	}
	close(*fd);
	*fd = nfd;
	return 0;
}

/* WorkspaceSize=: the host directory becomes the read-only lower layer of an
 * overlay whose upper layer is a tmpfs of that size, so what the sandbox
 * writes there is bounded by the tmpfs (ENOSPC inside; its pages are
 * charged to the sandbox's memory cgroup) and never reaches the host's
 * filesystem directly.  The launcher copies the upper layer back into the
 * host directory once the sandbox is dead (wsync.c).  Project quotas would
 * keep live writes but need root and a filesystem mounted with prjquota
 * (ext4 here has neither); an overlay in a user namespace needs neither
 * (Linux 5.11).  userxattr: overlay's trusted.* xattrs need CAP_SYS_ADMIN
 * over the host; a tmpfs without user.* xattrs (before Linux 6.6) makes
 * overlay run without xattrs (then a directory made where the host's
 * directory had an entry the sandbox deleted fails, EIO: it can't be
 * marked opaque).  *upper gets an fd of the upper layer. */
static int mount_ws_overlay(int wsfd, bool detached, uint64_t size, int *upper, struct nsbox_err *err)
{
	const char *lower = NEWROOT "/.nsbox-wsl", *tmp = NEWROOT "/.nsbox-wsu";
	char opts[256];
	struct stat st;

	if (fstat(wsfd, &st) < 0)
		return err_sys(err, "stat the workspace");
	if ((detached ? attach_tree(wsfd, lower, false, err) : bind_fd(wsfd, lower, false, true, err)) < 0)
		return err_wrap(err, "workspace");
	if (mkdir(tmp, 0700) < 0)
		return err_sys(err, "mkdir %s", tmp + strlen(NEWROOT));
	snprintf(opts, sizeof(opts), "mode=0700,size=%llu,nr_inodes=%llu", (unsigned long long)size,
		 tmpfs_inodes(size));
	if (mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return err_sys(err, "mount the workspace's tmpfs (%s)", opts);
	if (mkdir(NEWROOT "/.nsbox-wsu/u", st.st_mode & 07777) < 0 || mkdir(NEWROOT "/.nsbox-wsu/w", 0700) < 0 ||
	    mkdir_p(NEWROOT "/workspace", 0755) < 0)
		return err_sys(err, "mkdir the workspace's layers");
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s/u,workdir=%s/w,userxattr", lower, tmp, tmp);
	if (mount("overlay", NEWROOT "/workspace", "overlay", MS_NOSUID | MS_NODEV, opts) < 0) {
		/* userxattr is Linux 5.11's, as is overlay in a user namespace */
		opts[strlen(opts) - strlen(",userxattr")] = '\0';
		if (errno != EINVAL || mount("overlay", NEWROOT "/workspace", "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
			return err_sys(err, "mount an overlay on /workspace (WorkspaceSize=%s; --workspace-size "
				       "infinity binds the directory as it is, unbounded)",
				       errno == ENODEV ? "; this kernel has no overlayfs: modprobe overlay" : "");
	}
	*upper = open(NEWROOT "/.nsbox-wsu/u", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (*upper < 0)
		return err_sys(err, "open the workspace's upper layer");
	/* The overlay holds private clones of both layers: the staging
	 * mounts go, and nothing of them shows inside. */
	if (umount2(lower, MNT_DETACH) < 0 || umount2(tmp, MNT_DETACH) < 0 || rmdir(lower) < 0 || rmdir(tmp) < 0)
		return err_sys(err, "detach the workspace's staging mounts");
	return 0;
}

int mount_open_sources(const struct nsbox_policy *p, struct mount_srcs *s, struct nsbox_err *err)
{
	/* OPEN_TREE_CLONE needs CAP_SYS_ADMIN over the host's mount
	 * namespace.  An unprivileged launcher opens the sources with O_PATH
	 * instead, from the host's user namespace with the sandbox's uid (its
	 * own): what pid 1 could not do for nsboxd's /proc/PID/fd/N.  Pid 1
	 * finds each again in its copy of the mount namespace (reopen_here). */
	bool detached = geteuid() == 0;
	int (*open_one)(const char *, struct nsbox_err *) = detached ? clone_tree : open_src;

	mount_srcs_close(s);
	s->detached = detached;
	for (size_t i = 0; i < p->n_mounts && i < POLICY_MAX_MOUNTS; i++) {
		s->bind[i] = p->mounts[i].src ? open_one(p->mounts[i].src, err) : -1; /* -1: a TmpFS= */
		s->n_bind = i + 1;
		if (s->bind[i] < 0 && p->mounts[i].src)
			goto fail;
	}
	if (p->workspace && (s->workspace = open_one(p->workspace, err)) < 0)
		goto fail;
	return 0;
fail:
	mount_srcs_close(s);
	return err_step(err, "mount");
}

int mount_setup(const struct nsbox_policy *p, struct mount_srcs *srcs, bool host_root, int *ws_upper,
		struct nsbox_err *err)
{
	int *srcfd = srcs->bind;
	_cleanup_close_ int wsfd = srcs->workspace, cachefd = -1, resolvfd = -1, rootfd = -1;
	char path[4096], opts[64];
	const char *home = rootfs_home(p);
	const char *const *shared, *const *shared_dirs;
	size_t n_shared = rootfs_etc_shared(&shared), n_dirs = rootfs_etc_shared_dirs(&shared_dirs);
	int sharedfd[ROOTFS_ETC_SHARED_MAX] = { -1, -1, -1, -1 }, etcdir[ROOTFS_ETC_SHARED_DIRS_MAX] = { -1, -1 };
	struct mount_attr probe = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
	bool batch;
	int r = -1;

	err_step(err, "mount");
	srcs->workspace = -1;	/* wsfd's now */
	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		err_sys(err, "make / private");
		goto out;
	}
	/* Open every source here before the new root's tmpfs hides host
	 * /tmp, from the launcher's descriptors (mount_open_sources). */
	if (!srcs->detached) {
		for (size_t i = 0; i < p->n_mounts && i < POLICY_MAX_MOUNTS; i++) {
			if (p->mounts[i].src && reopen_here(&srcfd[i], p->mounts[i].src, err) < 0)
				goto out;
		}
		if (p->workspace && reopen_here(&wsfd, p->workspace, err) < 0)
			goto out;
	}
	if (p->rootfs && (rootfd = open(p->rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		err_sys(err, "open --rootfs %s", p->rootfs);
		goto out;
	}
	/* Debian's awk, editor, pager... are /etc/alternatives links.  In
	 * another root tree these are resolved inside that tree: a symlink
	 * there must not reach the host's files. */
	cachefd = p->rootfs ? open_in_root(rootfd, "etc/ld.so.cache", O_PATH | O_CLOEXEC)
			    : open("/etc/ld.so.cache", O_PATH | O_CLOEXEC);
	for (size_t i = 0; i < n_dirs && i < ROOTFS_ETC_SHARED_DIRS_MAX; i++) {
		snprintf(path, sizeof(path), "/etc/%s", shared_dirs[i]);
		etcdir[i] = p->rootfs ? open_in_root(rootfd, path + 1, O_PATH | O_CLOEXEC | O_DIRECTORY)
				     : open(path, O_PATH | O_CLOEXEC | O_DIRECTORY);
	}
	for (size_t i = 0; i < n_shared && i < ROOTFS_ETC_SHARED_MAX; i++) {
		struct stat st;
		/* "/etc/NAME" on the host, "etc/NAME" beneath another root */
		snprintf(path, sizeof(path), "/etc/%s", shared[i]);
		sharedfd[i] = p->rootfs ? open_in_root(rootfd, path + 1, O_PATH | O_CLOEXEC)
					: open(path, O_PATH | O_CLOEXEC);
		if (sharedfd[i] >= 0 && (fstat(sharedfd[i], &st) < 0 || !S_ISREG(st.st_mode))) {
			close(sharedfd[i]);
			sharedfd[i] = -1;
		}
	}
	if (p->share_net)
		resolvfd = open("/etc/resolv.conf", O_PATH | O_CLOEXEC);

	if (mount("tmpfs", NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096") < 0) {
		err_sys(err, "mount tmpfs for the new root");
		goto out;
	}
	/* mount_setattr (Linux 5.12) lets the system's binds get their flags
	 * in one call (seal_system); this one changes nothing. */
	batch = syscall(SYS_mount_setattr, AT_FDCWD, NEWROOT, 0, &probe, sizeof(probe)) == 0;
	if (make_system(p, rootfd, batch, err) < 0)
		goto out;
	if (mkdir(NEWROOT "/proc", 0555) < 0 || mkdir(NEWROOT "/dev", 0755) < 0 || mkdir(NEWROOT "/tmp", 01777) < 0 ||
	    mkdir(NEWROOT "/out", 0755) < 0) {
		err_sys(err, "mkdir /proc, /dev, /tmp, /out");
		goto out;
	}
	if (make_etc(p, err) < 0)
		goto out;
	if (cachefd >= 0 && bind_sys(cachefd, NEWROOT "/etc/ld.so.cache", batch, err) < 0)
		goto out;
	for (size_t i = 0; i < n_dirs && i < ROOTFS_ETC_SHARED_DIRS_MAX; i++) {
		snprintf(path, sizeof(path), NEWROOT "/etc/%s", shared_dirs[i]);
		if (etcdir[i] >= 0 && bind_sys(etcdir[i], path, batch, err) < 0)
			goto out;
	}
	for (size_t i = 0; i < n_shared && i < ROOTFS_ETC_SHARED_MAX; i++) {
		snprintf(path, sizeof(path), NEWROOT "/etc/%s", shared[i]);
		if (sharedfd[i] >= 0 && bind_sys(sharedfd[i], path, batch, err) < 0)
			goto out;
	}
	/* With an egress allowlist the only resolver is the responder on the
	 * sandbox's loopback (egress.h). */
	if (p->n_net_allow && !p->share_net) {
		if (write_etc("resolv.conf", "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n", err) < 0)
			goto out;
	} else if (resolvfd >= 0 && bind_sys(resolvfd, NEWROOT "/etc/resolv.conf", batch, err) < 0)
		goto out;
	if (seal_system(batch, err) < 0)
		goto out;

	/* A read-only proc: an inside uid mapped to host root must not write
	 * the sysctls that check only the file mode (proc_sys test_perm). */
	if (mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL) < 0) {
		err_sys(err, "mount proc");
		goto out;
	}
	if (mask_proc(host_root, err) < 0 || fake_boot_id(err) < 0)
		goto out;
	if (make_dev(p, batch, err) < 0)
		goto out;
	snprintf(opts, sizeof(opts), "mode=1777,size=%llu,nr_inodes=%llu",
		 (unsigned long long)(p->tmp_size ? p->tmp_size : DEFAULT_TMP_SIZE),
		 tmpfs_inodes(p->tmp_size ? p->tmp_size : DEFAULT_TMP_SIZE));
	if (mount("tmpfs", NEWROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) {
		err_sys(err, "mount tmpfs on /tmp");
		goto out;
	}
	/* /out: files an exec writes there come back with its result
	 * (nsbox-protocol(7), RICH RESULTS); capped as /tmp is. */
	snprintf(opts, sizeof(opts), "mode=1777,size=%llu,nr_inodes=4096",
		 (unsigned long long)(p->tmp_size ? p->tmp_size : DEFAULT_TMP_SIZE));
	if (mount("tmpfs", NEWROOT "/out", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) {
		err_sys(err, "mount tmpfs on /out");
		goto out;
	}

	if (wsfd >= 0 && p->workspace_size) {
		if (mount_ws_overlay(wsfd, srcs->detached, p->workspace_size, ws_upper, err) < 0)
			goto out;
	} else if (wsfd >= 0 && (srcs->detached ? attach_tree(wsfd, NEWROOT "/workspace", true, err)
						: bind_fd(wsfd, NEWROOT "/workspace", true, true, err)) < 0)
		goto out;
	for (size_t i = 0; i < p->n_mounts; i++) {
		snprintf(path, sizeof(path), NEWROOT "%s", p->mounts[i].dst);
		if (!p->mounts[i].src) {
			/* TmpFS=: sized like /tmp, and like /tmp charged to the
			 * memory cgroup of whoever writes it. */
			snprintf(opts, sizeof(opts), "mode=1777,size=%llu,nr_inodes=%llu",
				 (unsigned long long)(p->mounts[i].tmpfs ?: p->tmp_size ?: DEFAULT_TMP_SIZE),
				 tmpfs_inodes(p->mounts[i].tmpfs ?: p->tmp_size ?: DEFAULT_TMP_SIZE));
			if (mkdir_p(path, 0755) < 0 || mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) {
				err_sys(err, "--tmpfs %s", p->mounts[i].dst);
				goto out;
			}
			continue;
		}
		if ((srcs->detached ? attach_tree(srcfd[i], path, p->mounts[i].rw, err)
				    : bind_fd(srcfd[i], path, p->mounts[i].rw, true, err)) < 0) {
			err_wrap(err, "--%s %s:%s", p->mounts[i].rw ? "bind" : "ro-bind", p->mounts[i].src,
				 p->mounts[i].dst);
			goto out;
		}
	}

	/* pivot_root(".", ".") then detach the old root stacked on top
	 * (pivot_root(2), "pivot_root(\".\", \".\")"). */
	if (chdir(NEWROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0) {
		err_sys(err, "pivot_root");
		goto out;
	}
	if (umount2(".", MNT_DETACH) < 0) {
		err_sys(err, "detach the old root");
		goto out;
	}
	if (chdir("/") < 0) {
		err_sys(err, "chdir /");
		goto out;
	}
	if (set_attr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false, err) < 0 ||
	    set_attr("/dev", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false, err) < 0)
		goto out;
	if (chdir(p->workdir ? p->workdir : home) < 0) {
		err_sys(err, "%s %s", p->workdir ? "--chdir" : "chdir", p->workdir ? p->workdir : home);
		goto out;
	}
	r = 0;
out:
	for (size_t i = 0; i < ROOTFS_ETC_SHARED_MAX; i++)
		if (sharedfd[i] >= 0)
			close(sharedfd[i]);
	for (size_t i = 0; i < ROOTFS_ETC_SHARED_DIRS_MAX; i++)
		if (etcdir[i] >= 0)
			close(etcdir[i]);
	mount_srcs_close(srcs);
	return r;
}
