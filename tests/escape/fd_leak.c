/* Scan every fd up to 65535 for anything the host left open beyond
 * 0, 1 and 2 (a host directory, file or socket inherited is a way out:
 * CVE-2024-21626 in runc).  Also fd 0-2 must not be host files. */
#include <sys/stat.h>
#include "escape.h"

int main(void)
{
	for (int fd = 3; fd < 65536; fd++) {
		struct stat st;
		char p[64], target[512] = "";
		if (fcntl(fd, F_GETFD) < 0)
			continue;
		fstat(fd, &st);
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		(void)!readlink(p, target, sizeof(target) - 1);
		ESCAPED("inherited fd %d -> %s (mode %o)", fd, target, st.st_mode);
	}
	for (int fd = 0; fd < 3; fd++) {
		struct stat st;
		if (fstat(fd, &st) == 0 && (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
			NOTE("fd %d is a %s", fd, S_ISDIR(st.st_mode) ? "directory" : "regular file");
		if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
			ESCAPED("fd %d is a directory", fd);
	}
	BLOCKED("only fds 0, 1 and 2 are open");
}
