/* landlock_apply in forked children: writes only beneath the rw paths and
 * to /dev/null; reads everywhere; WANT_OFF does nothing.  Needs Landlock
 * in the kernel; says so and skips (visibly) where it is missing, or
 * fails under NSBOX_MUST_WORK=1 (CI). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "landlock.h"
#include "tap.h"
#include "util.h"

static char base[] = "/tmp/nsbox-test-landlock-XXXXXX";
static char rw[128], ro[128];

/* 0 on success, else errno of the failing step. */
static int try_create(const char *dir, const char *name)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno;
	if (write(fd, "x", 1) != 1) {
		int e = errno;

		close(fd);
		return e ? e : EIO;
	}
	close(fd);
	return 0;
}

/* Child: apply, then check; the exit status is a bitmask of failures. */
static void child(enum policy_want want)
{
	const char *paths[] = { rw };
	struct nsbox_err err;
	char buf[16];
	int abi = -1, fail = 0, fd, e;

	if (landlock_apply(paths, 1, -1, want, &abi, &err) < 0) {
		fprintf(stderr, "# %s\n", err.msg);
		_exit(200);
	}
	if (want == WANT_OFF) {
		/* Nothing restricted: both dirs writable, abi reported 0. */
		if (abi != 0)
			fail |= 1;
		if (try_create(ro, "off") != 0)
			fail |= 2;
		_exit(fail);
	}
	if (landlock_abi() == 0)
		_exit(abi != 0);	/* WANT_AUTO: a no-op reporting ABI 0 */
	if (abi != landlock_abi())
		fail |= 1;
	if ((e = try_create(rw, "f")) != 0) {
		fprintf(stderr, "# write in rw dir: %s\n", strerror(e));
		fail |= 2;
	}
	if (try_create(ro, "f") != EACCES)
		fail |= 4;
	if (mkdir("/tmp/nsbox-test-landlock-escape", 0700) == 0 || errno != EACCES)
		fail |= 8;
	fd = open("/dev/null", O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0 || write(fd, "x", 1) != 1)
		fail |= 16;
	if (fd >= 0)
		close(fd);
	fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno != ENOENT)
		fail |= 32;
	if (fd >= 0) {
		if (read(fd, buf, sizeof(buf)) < 0)
			fail |= 32;
		close(fd);
	}
	{
		/* Renaming out of the rw dir is a write outside it. */
		char from[256], to[256];

		snprintf(from, sizeof(from), "%s/f", rw);
		snprintf(to, sizeof(to), "%s/moved", ro);
		if (rename(from, to) == 0 || (errno != EACCES && errno != EXDEV))
			fail |= 64;
	}
	/* Signals to processes outside the domain (ABI >= 6): our parent. */
	if (abi >= 6 && (kill(getppid(), 0) == 0 || errno != EPERM))
		fail |= 128;
	_exit(fail);
}

static int run(enum policy_want want)
{
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0)
		child(want);
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

static void cleanup(void)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/f", rw);
	unlink(p);
	snprintf(p, sizeof(p), "%s/off", ro);
	unlink(p);
	snprintf(p, sizeof(p), "%s/f", ro);
	unlink(p);
	snprintf(p, sizeof(p), "%s/moved", ro);
	unlink(p);
	rmdir(rw);
	rmdir(ro);
	rmdir("/tmp/nsbox-test-landlock-escape");
	rmdir(base);
}

int main(void)
{
	int abi = landlock_abi(), r;
	struct nsbox_err err;
	const char *nopaths[] = { NULL };

	printf("# landlock ABI %d\n", abi);
	if (!mkdtemp(base)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		tap_done();
	}
	snprintf(rw, sizeof(rw), "%s/rw", base);
	snprintf(ro, sizeof(ro), "%s/ro", base);
	/* ok() evaluates its condition twice: no side effects inside. */
	r = mkdir(rw, 0755) == 0 && mkdir(ro, 0755) == 0;
	ok(r, "temp dirs");

	r = run(WANT_OFF);
	ok(r == 0, "WANT_OFF: nothing restricted, abi 0 (status %d)", r);

	if (abi <= 0) {
		if (tap_must_work()) {
			ok(0, "Landlock is missing but NSBOX_MUST_WORK=1");
		} else {
			printf("# SKIP landlock enforcement: the kernel has no Landlock\n");
			r = run(WANT_AUTO);
			ok(r == 0, "WANT_AUTO without Landlock succeeds, reports ABI 0");
			r = landlock_apply(nopaths, 0, -1, WANT_REQUIRE, NULL, &err) < 0 &&
			    strstr(err.msg, "not supported");
			ok(r, "WANT_REQUIRE without Landlock fails");
		}
		cleanup();
		tap_done();
	}
	r = run(WANT_AUTO);
	ok(r == 0, "WANT_AUTO: write in rw dir works, elsewhere EACCES, /dev/null writable, reads work, "
		   "no rename out, signals scoped (status %d)", r);
	r = run(WANT_REQUIRE);
	ok(r == 0, "WANT_REQUIRE: same (status %d)", r);
	{
		/* A missing rw path is an error, in a child (a failed apply
		 * must not leave us restricted either way). */
		const char *bad[] = { "/nonexistent-nsbox-path" };
		pid_t pid;
		int st;

		fflush(stdout);
		pid = fork();
		if (pid == 0)
			_exit(landlock_apply(bad, 1, -1, WANT_AUTO, NULL, &err) < 0 &&
					      strstr(err.msg, "/nonexistent-nsbox-path")
				      ? 0
				      : 1);
		r = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
		ok(r,
		   "a missing rw path fails with its name in the message");
	}
	cleanup();
	r = access(base, F_OK) < 0;
	ok(r, "temp dirs removed");
	tap_done();
}
