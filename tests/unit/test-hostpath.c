/* base/hostpath: operator-named host paths opened with no symbolic link
 * followed, through openat2 and through the component walk used where
 * openat2 is missing or refused (run here under a seccomp filter that
 * refuses it with EPERM, as an old container profile does). */
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostpath.h"
#include "tap.h"

static char root[64];

static void mk(const char *rel, int dir)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	if (dir)
		mkdir(p, 0755);
	else
		close(open(p, O_WRONLY | O_CREAT, 0644));
}

static void ln(const char *target, const char *rel)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	if (symlink(target, p) < 0)
		perror("symlink");
}

static int try_open(const char *rel, int flags)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	fd = host_path_open(p, flags, 0600);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return -errno;
}

static int try_mkdir(const char *rel)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	fd = host_path_mkdir_open(p, 0755);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return -errno;
}

static int exists(const char *rel)
{
	char p[256];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	return lstat(p, &st) == 0;
}

static void cases(const char *how)
{
	ok(try_open("d/f", O_RDONLY) == 0, "%s: a plain path opens", how);
	ok(try_open("d//f", O_RDONLY) == 0 && try_open("./d/./f", O_RDONLY) == 0, "%s: doubled slashes and dots", how);
	ok(try_open("d/new", O_WRONLY | O_CREAT) == 0 && exists("d/new"), "%s: O_CREAT makes the file", how);
	ok(try_open("flink", O_RDONLY) == -ELOOP, "%s: a link as the last component: ELOOP", how);
	ok(try_open("dlink/f", O_RDONLY) == -ELOOP, "%s: a link as a directory above: ELOOP", how);
	ok(try_open("dlink/made", O_WRONLY | O_CREAT) == -ELOOP && !exists("outside/made"),
	   "%s: nothing created through a directory link", how);
	ok(try_open("d/dangling", O_WRONLY | O_CREAT) == -ELOOP && !exists("outside/dangle"),
	   "%s: a dangling link is not created through", how);
	ok(try_open("d/missing/f", O_RDONLY) == -ENOENT, "%s: a missing directory: ENOENT", how);
	ok(try_open("d/f/x", O_RDONLY) == -ENOTDIR, "%s: a file as a directory: ENOTDIR", how);
	ok(try_open("d/", O_RDONLY | O_DIRECTORY) == 0, "%s: a trailing slash", how);
	ok(try_mkdir("d/sub") == 0 && exists("d/sub"), "%s: mkdir_open makes a directory", how);
	ok(try_mkdir("d/sub/") == 0, "%s: and opens it again (trailing slash)", how);
	ok(try_mkdir("dlink/sub") == -ELOOP && !exists("outside/sub"), "%s: mkdir_open under a link: ELOOP", how);
	ok(try_mkdir("d/dirlink") == -ELOOP, "%s: mkdir_open of a link: ELOOP", how);
	ok(try_mkdir("d/f") == -ENOTDIR, "%s: mkdir_open of a file: ENOTDIR", how);
}

int main(void)
{
	int fd;
	char cwd[256];

	snprintf(root, sizeof(root), "/tmp/nsbox-hostpath-XXXXXX");
	if (!mkdtemp(root))
		return 1;
	mk("d", 1);
	mk("d/f", 0);
	mk("outside", 1);
	mk("outside/f", 0);
	ln("d/f", "flink");
	ln("outside", "dlink");
	ln("../outside/dangle", "d/dangling");
	ln("../outside", "d/dirlink");

	ok(host_path_is_descriptor("/dev/stdout") && host_path_is_descriptor("/dev/fd/12") &&
		   host_path_is_descriptor("/proc/self/fd/3") && !host_path_is_descriptor("/dev/fd/") &&
		   !host_path_is_descriptor("/dev/fd/1x") && !host_path_is_descriptor("/tmp/x"),
	   "the caller's descriptors are told apart");
	fd = host_path_open("/dev/stdout", O_WRONLY, 0);
	ok(fd >= 0, "/dev/stdout is followed (a link the system makes)");
	if (fd >= 0)
		close(fd);
	cases("openat2");
	/* A relative path, from the working directory. */
	if (getcwd(cwd, sizeof(cwd)) && chdir(root) == 0) {
		fd = host_path_open("d/f", O_RDONLY, 0);
		ok(fd >= 0, "a relative path opens");
		if (fd >= 0)
			close(fd);
		ok(host_path_open("dlink/f", O_RDONLY, 0) < 0 && errno == ELOOP,
		   "a relative path through a link: ELOOP");
		fd = host_path_mkdir_open("rel", 0755);
		ok(fd >= 0 && exists("rel"), "mkdir_open of a relative name");
		if (fd >= 0)
			close(fd);
		if (chdir(cwd) < 0)
			return 1;
	}

	/* The same with openat2 refused: the component walk.  This process
	 * keeps the filter to its end (rm below uses openat). */
	{
		scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);

		ok(ctx && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(openat2), 0) == 0 &&
			   seccomp_load(ctx) == 0,
		   "a filter refusing openat2 is loaded");
		if (ctx)
			seccomp_release(ctx);
	}
	ok(syscall(SYS_openat2, -1, "", NULL, 0) < 0 && errno == EPERM, "openat2 is refused now");
	rmdir(strcat(strcpy(cwd, root), "/d/sub"));
	unlink(strcat(strcpy(cwd, root), "/d/new"));
	cases("walk");
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
		if (system(cmd) != 0)
			return 1;
	}
	tap_done();
}
