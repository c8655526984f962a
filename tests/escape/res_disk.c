/* Fill /tmp and /dev/shm until the kernel says no; both are size-capped
 * tmpfs, not the host's disk or unlimited RAM.  argv[1], argv[2]: the
 * caps in MiB of /tmp and /dev/shm. */
#include <sys/statvfs.h>
#include "escape.h"

static long long fill(const char *path)
{
	static char buf[1 << 20];
	long long total = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		ESCAPED("cannot create %s: %s (the test cannot run)", path, ename(errno));
	memset(buf, 'x', sizeof(buf));
	for (int i = 0; i < 4096; i++) {
		ssize_t n = write(fd, buf, sizeof(buf));
		if (n <= 0) {
			NOTE("%s: %s after %lld bytes", path, n < 0 ? ename(errno) : "short", total);
			break;
		}
		total += n;
	}
	close(fd);
	return total;
}

int main(int argc, char **argv)
{
	long long tcap = (argc > 1 ? atoll(argv[1]) : 8) << 20, scap = (argc > 2 ? atoll(argv[2]) : 64) << 20;
	long long t = fill("/tmp/fill"), s = fill("/dev/shm/fill");

	/* A second file in the full /tmp, then a new directory. */
	if (fill("/tmp/fill2") > 1 << 20)
		ESCAPED("/tmp took more after it was full");
	printf("bytes tmp=%lld shm=%lld\n", t, s);
	if (t > tcap + (1 << 20))
		ESCAPED("/tmp took %lld bytes with a cap of %lld", t, tcap);
	if (s > scap + (1 << 20))
		ESCAPED("/dev/shm took %lld bytes with a cap of %lld", s, scap);
	BLOCKED("/tmp stopped at %lld bytes, /dev/shm at %lld", t, s);
}
