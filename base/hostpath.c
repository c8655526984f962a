/* Opening operator-named host paths without following links (hostpath.h). */
#include "hostpath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

bool host_path_is_descriptor(const char *path)
{
	const char *n = NULL;

	if (!strcmp(path, "/dev/stdout") || !strcmp(path, "/dev/stderr"))
		return true;
	if (!strncmp(path, "/dev/fd/", 8))
		n = path + 8;
	else if (!strncmp(path, "/proc/self/fd/", 14))
		n = path + 14;
	return n && *n && strspn(n, "0123456789") == strlen(n);
}

/* The walk openat2 does in the kernel, in user space: every directory
 * component opened O_PATH | O_NOFOLLOW beneath the last, the final one
 * with the caller's flags and O_NOFOLLOW.  A link as a directory
 * component opens as the link itself (O_PATH | O_NOFOLLOW), which
 * O_DIRECTORY refuses with ENOTDIR: told apart from a file by lstat. */
static int walk_open(const char *path, int flags, mode_t mode)
{
	char buf[PATH_MAX], *p, *next;
	_cleanup_close_ int dir = -1;
	size_t len = strlen(path);

	if (!len)
		return errno = ENOENT, -1;
	if (len >= sizeof(buf))
		return errno = ENAMETOOLONG, -1;
	memcpy(buf, path, len + 1);
	dir = open(buf[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return -1;
	p = buf;
	for (;;) {
		struct stat st;
		int sub;

		while (*p == '/')
			p++;
		if (!*p) /* "/" or a trailing slash: the directory itself */
			return openat(dir, ".", flags | O_CLOEXEC, mode);
		next = strchr(p, '/');
		if (next)
			*next++ = '\0';
		while (next && *next == '/')
			next++;
		if (!next || !*next) {
			/* The last component (a trailing slash asks for a directory). */
			int fl = flags | O_NOFOLLOW | O_CLOEXEC | (next ? O_DIRECTORY : 0),
			    fd = openat(dir, p, fl, mode), e;

			/* O_PATH | O_NOFOLLOW opens a link as itself, and
			 * O_DIRECTORY then refuses it with ENOTDIR: ELOOP both. */
			if (fd >= 0 && (fl & O_PATH) && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
				close(fd);
				return errno = ELOOP, -1;
			}
			e = errno;
			if (fd < 0 && e == ENOTDIR && fstatat(dir, p, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode))
				e = ELOOP;
			return fd >= 0 ? fd : (errno = e, -1);
		}
		sub = openat(dir, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			int e = errno;

			if (e == ENOTDIR && fstatat(dir, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
				e = ELOOP;
			return errno = e, -1;
		}
		close(dir);
		dir = sub;
		p = next;
	}
}

int host_path_open(const char *path, int flags, mode_t mode)
{
	struct open_how how = { .flags = (uint64_t)(flags | O_CLOEXEC),
				.mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? mode : 0,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd;

	if (host_path_is_descriptor(path))
		return open(path, flags | O_CLOEXEC, mode);
	fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
	if (fd < 0 && (errno == ENOSYS || errno == EPERM))
		fd = walk_open(path, flags, mode);
	return fd;
}

int host_path_mkdir_open(const char *path, mode_t mode)
{
	char parent[PATH_MAX];
	const char *name;
	size_t len = strlen(path);
	_cleanup_close_ int pfd = -1;
	int fd;

	while (len > 1 && path[len - 1] == '/')
		len--;
	if (!len)
		return errno = ENOENT, -1;
	if (len >= sizeof(parent))
		return errno = ENAMETOOLONG, -1;
	memcpy(parent, path, len);
	parent[len] = '\0';
	if (!strcmp(parent, "/"))
		return host_path_open("/", O_RDONLY | O_DIRECTORY, 0);
	{
		char *slash = strrchr(parent, '/');

		if (!slash) {
			name = parent;
			pfd = host_path_open(".", O_PATH | O_DIRECTORY, 0);
		} else {
			*slash = '\0';
			name = slash + 1;
			pfd = host_path_open(slash == parent ? "/" : parent, O_PATH | O_DIRECTORY, 0);
		}
	}
	if (pfd < 0)
		return -1;
	if (mkdirat(pfd, name, mode) < 0 && errno != EEXIST)
		return -1;
	fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOTDIR) {
		struct stat st;

		if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
			errno = ELOOP;
		else
			errno = ENOTDIR;
	}
	return fd;
}
