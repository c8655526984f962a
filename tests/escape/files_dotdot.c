/* Climb out with ../ from every writable and read-only place, through
 * openat with a deep ../ chain, and through openat2 without RESOLVE_*
 * restrictions.  argv[1]: the canary's host path. */
#include <linux/openat2.h>
#include "escape.h"

int main(int argc, char **argv)
{
	const char *starts[] = { "/", "/tmp", "/usr", "/proc", "/dev/shm", "/usr/lib" };
	char p[8192];

	if (argc < 2)
		ESCAPED("usage: files_dotdot CANARY (test bug)");
	for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
		int dfd = open(starts[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		size_t n = 0;
		if (dfd < 0)
			continue;
		for (int k = 0; k < 40; k++)
			n += (size_t)snprintf(p + n, sizeof(p) - n, "../");
		snprintf(p + n, sizeof(p) - n, "%s", argv[1] + 1);
		int fd = openat(dfd, p, O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			ESCAPED("openat(%s, ../x40%s)", starts[i], argv[1]);
		struct open_how how = { .flags = O_RDONLY | O_CLOEXEC };
		fd = (int)syscall(SYS_openat2, dfd, p, &how, sizeof(how));
		if (fd >= 0)
			ESCAPED("openat2(%s, ../x40%s)", starts[i], argv[1]);
		close(dfd);
	}
	if (chdir("/tmp") == 0) {
		for (int k = 0; k < 100; k++)
			(void)chdir("..");
		if (access(argv[1] + 1, F_OK) == 0)
			ESCAPED("chdir .. x100 reaches the canary");
	}
	BLOCKED("../ never leaves the sandbox root");
}
