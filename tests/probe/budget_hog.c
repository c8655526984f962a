/* Takes as much of one per-user or host-wide kernel budget as the sandbox
 * lets it, then holds it until stdin closes, so the host can check that
 * its own use of the same budget still works (tests/integ/test_budgets.py).
 *
 *   budget_hog inotify|watches|timers|aio|pipes|tcp [CAP]
 *
 * Prints one line, "HOLD <what> <count> <errno name> [key=value...]", then
 * waits.  CAP bounds how much is taken (so a sandbox that is not bounded
 * still leaves the shared machine usable). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/aio_abi.h>
#include <linux/sockios.h>

static const char *ename(int e)
{
	const char *s = e ? strerrorname_np(e) : "none";

	return s ? s : "E?";
}

static void hold(void)
{
	char c;

	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
}

static long cap = 0;

static int ino[64], last_wd[64], n_ino;
static long watches;
static int watch_err;

static int add_watch(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)st, (void)type, (void)f;
	for (int i = 0; i < n_ino; i++) {
		int wd = inotify_add_watch(ino[i], path, IN_MODIFY);

		if (wd < 0) {
			if (errno == ENOSPC) {
				watch_err = errno;
				return 1;
			}
			continue;
		}
		/* A hard link to an inode watched already: no new watch. */
		if (wd <= last_wd[i])
			continue;
		last_wd[i] = wd;
		if (++watches >= cap)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";
	long n = 0;
	int err = 0;

	cap = argc > 2 ? atol(argv[2]) : 1L << 30;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(what, "inotify")) {
		while (n < cap && inotify_init1(IN_CLOEXEC) >= 0)
			n++;
		err = n < cap ? errno : 0;
		printf("HOLD inotify %ld %s\n", n, ename(err));
	} else if (!strcmp(what, "watches")) {
		while (n_ino < 64 && (ino[n_ino] = inotify_init1(IN_CLOEXEC)) >= 0)
			n_ino++;
		nftw("/usr", add_watch, 64, FTW_PHYS);
		printf("HOLD watches %ld %s instances=%d\n", watches, ename(watch_err), n_ino);
	} else if (!strcmp(what, "timers")) {
		timer_t t;
		struct sigevent sev = { .sigev_notify = SIGEV_NONE };

		while (n < cap && syscall(SYS_timer_create, CLOCK_MONOTONIC, &sev, &t) == 0)
			n++;
		err = n < cap ? errno : 0;
		printf("HOLD timers %ld %s\n", n, ename(err));
	} else if (!strcmp(what, "aio")) {
		long events = 0;

		for (;;) {
			aio_context_t ctx = 0;

			if (events >= cap)
				break;
			if (syscall(SYS_io_setup, 4096, &ctx) < 0) {
				err = errno;
				break;
			}
			events += 4096;
		}
		printf("HOLD aio %ld %s\n", events, ename(err));
	} else if (!strcmp(what, "pipes")) {
		int p[2], grown = 0, grow_err = 0;

		while (n < cap && pipe2(p, O_CLOEXEC) == 0) {
			n++;
			if (fcntl(p[1], F_SETPIPE_SZ, 1 << 20) >= 0)
				grown++;
			else
				grow_err = errno;
		}
		err = n < cap ? errno : 0;
		printf("HOLD pipes %ld %s grown=%d grow_err=%s\n", n, ename(err), grown, ename(grow_err));
	} else if (!strcmp(what, "tcp")) {
		/* cap in MiB: connected pairs on lo, both ends written full and
		 * never read. */
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);
		int l = socket(AF_INET, SOCK_STREAM, 0);
		static char buf[1 << 16];
		long long total = 0, max_conn = 0;

		if (l < 0 || bind(l, (void *)&a, sizeof(a)) < 0 || listen(l, 16) < 0 ||
		    getsockname(l, (void *)&a, &al) < 0) {
			printf("HOLD tcp 0 %s setup\n", ename(errno));
			hold();
			return 0;
		}
		while (total < (long long)cap << 20) {
			int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), s;
			long long conn = 0;

			if (c < 0) {
				err = errno;
				break;
			}
			if (connect(c, (void *)&a, sizeof(a)) < 0 && errno != EINPROGRESS) {
				err = errno;
				break;
			}
			s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
			if (s < 0) {
				err = errno;
				break;
			}
			for (int side = 0; side < 2; side++) {
				int fd = side ? s : c;
				for (int stall = 0; stall < 3;) {
					ssize_t k = send(fd, buf, sizeof(buf), MSG_NOSIGNAL);
					if (k > 0) {
						conn += k;
						stall = 0;
						continue;
					}
					if (k < 0 && errno != EAGAIN) {
						err = errno;
						break;
					}
					/* Let loopback move it to the peer's queue. */
					usleep(2000);
					stall++;
				}
			}
			total += conn;
			if (conn > max_conn)
				max_conn = conn;
			if (conn == 0)
				break;
		}
		printf("HOLD tcp %lld %s max_conn=%lld\n", total, ename(err), max_conn);
	} else {
		fprintf(stderr, "usage: budget_hog inotify|watches|timers|aio|pipes|tcp [CAP]\n");
		return 2;
	}
	hold();
	return 0;
}
