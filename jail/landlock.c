/* Landlock (Documentation/userspace-api/landlock.rst), raw system calls.
 *
 * Best effort as in the kernel's sample: handle every access right the
 * running ABI knows, so a newer kernel restricts more and an older one
 * still restricts what it can.  Network rights (ABI 4) are left unhandled:
 * the empty network namespace already cuts networking, and handling them
 * would break TCP on the sandbox's own loopback. */
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "landlock.h"
#include "util.h"

/* Debian 12's uapi headers stop at ABI 2. */
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif

/* struct landlock_ruleset_attr as of ABI 6; the kernel is told how much of
 * it to read (ruleset_size), so older kernels see only what they know. */
struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;	/* ABI 4 */
	uint64_t scoped;		/* ABI 6 */
};

#define ACCESS_READ_EXEC                                                                     \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define ACCESS_ABI1                                                                          \
	(ACCESS_READ_EXEC | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |   \
	 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |                      \
	 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |                          \
	 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |                        \
	 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM)
/* Rights that apply to a non-directory; others on a file rule are EINVAL. */
#define ACCESS_FILE                                                                          \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |                         \
	 LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |                         \
	 LANDLOCK_ACCESS_FS_IOCTL_DEV)

static uint64_t fs_access_for_abi(int abi)
{
	uint64_t a = ACCESS_ABI1;

	if (abi >= 2)
		a |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		a |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		a |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return a;
}

static bool is_memfd(int fd)
{
	char link[64], target[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	return n > 6 && !strncmp(target, "/memfd:", 7);
}

int landlock_abi(void)
{
	long v = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);

	/* ENOSYS: not built in; EOPNOTSUPP: disabled at boot (lsm=). */
	return v > 0 ? (int)v : 0;
}

/* Allow `access` (trimmed to what applies to the object) beneath fd. */
static int add_fd_rule(int ruleset_fd, int fd, uint64_t access, const char *what, struct nsbox_err *err)
{
	struct landlock_path_beneath_attr pb;
	struct stat st;

	if (fstat(fd, &st) < 0)
		return err_sys(err, "landlock: stat %s", what);
	if (!S_ISDIR(st.st_mode))
		access &= ACCESS_FILE;
	memset(&pb, 0, sizeof(pb));
	pb.allowed_access = access;
	pb.parent_fd = fd;
	if (syscall(__NR_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
		return err_sys(err, "landlock: add rule for %s", what);
	return 0;
}

/* The same beneath path.  Returns 0, 1 when the path does not exist and
 * missing_ok, or -1. */
static int add_path_rule(int ruleset_fd, const char *path, uint64_t access, bool missing_ok,
			 struct nsbox_err *err)
{
	_cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);

	if (fd < 0) {
		if (missing_ok && errno == ENOENT)
			return 1;
		return err_sys(err, "landlock: open %s", path);
	}
	return add_fd_rule(ruleset_fd, fd, access, path, err);
}

int landlock_apply(const char *const *rw_paths, size_t n_rw, int exec_fd, enum policy_want want, int *abi_out,
		   struct nsbox_err *err)
{
	static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/full" };
	struct ll_ruleset_attr attr;
	_cleanup_close_ int ruleset_fd = -1;
	uint64_t all;
	size_t attr_size, i;
	int abi, r;

	if (abi_out)
		*abi_out = 0;
	if (want == WANT_OFF)
		return 0;
	err_step(err, "landlock");
	abi = landlock_abi();
	if (abi <= 0) {
		if (want == WANT_REQUIRE)
			return err_set(err, EOPNOTSUPP, "landlock: not supported by this kernel");
		return 0;
	}

	all = fs_access_for_abi(abi);
	memset(&attr, 0, sizeof(attr));
	attr.handled_access_fs = all;
	attr_size = sizeof(attr.handled_access_fs);
	if (abi >= 4)
		attr_size = offsetof(struct ll_ruleset_attr, scoped);
	if (abi >= 6) {
		/* Abstract unix sockets and signals reach only this domain:
		 * with Network=host the host's abstract sockets (X11, D-Bus)
		 * would otherwise be reachable. */
		attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
		attr_size = sizeof(attr);
	}
	ruleset_fd = syscall(__NR_landlock_create_ruleset, &attr, attr_size, 0);
	if (ruleset_fd < 0)
		return err_sys(err, "landlock: create ruleset (ABI %d)", abi);

	r = add_path_rule(ruleset_fd, "/", ACCESS_READ_EXEC, false, err);
	if (r < 0)
		return r;
	for (i = 0; i < n_rw; i++) {
		if (!rw_paths[i] || rw_paths[i][0] != '/')
			return err_set(err, EINVAL, "landlock: read-write path must be absolute");
		r = add_path_rule(ruleset_fd, rw_paths[i], all, false, err);
		if (r < 0)
			return r;
	}
	/* `cmd > /dev/null` must work; the rule is on the node itself so
	 * nothing can be created in /dev. */
	for (i = 0; i < ARRAY_SIZE(devs); i++) {
		r = add_path_rule(ruleset_fd, devs[i], all & ACCESS_FILE & ~LANDLOCK_ACCESS_FS_EXECUTE,
				  true, err);
		if (r < 0)
			return r;
	}

	/* A memfd is on an internal mount, which Landlock never restricts
	 * (and refuses a rule for: EBADFD). */
	if (exec_fd >= 0 && !is_memfd(exec_fd) &&
	    add_fd_rule(ruleset_fd, exec_fd, ACCESS_READ_EXEC, "the file to execute", err) < 0)
		return -1;

	/* landlock_restrict_self(2) requires no_new_privs (or CAP_SYS_ADMIN). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return err_sys(err, "landlock: prctl(PR_SET_NO_NEW_PRIVS)");
	if (syscall(__NR_landlock_restrict_self, ruleset_fd, 0) < 0)
		return err_sys(err, "landlock: restrict self");
	if (abi_out)
		*abi_out = abi;
	return 0;
}
