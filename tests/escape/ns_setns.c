/* setns(2) into any namespace file this process can open: its own, pid
 * 1's (nsbox's init, still in the same namespaces), and pidfds. */
#include <sched.h>
#include "escape.h"

int main(void)
{
	const char *ns[] = { "user", "mnt", "net", "pid", "ipc", "uts", "cgroup", "time" };
	const char *who[] = { "self", "1" };

	for (size_t w = 0; w < 2; w++)
		for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
			char p[64];
			snprintf(p, sizeof(p), "/proc/%s/ns/%s", who[w], ns[i]);
			int fd = open(p, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				NOTE("open %s: %s", p, ename(errno));
				continue;
			}
			must_fail_with(p, setns(fd, 0), EPERM);
			close(fd);
		}
	long pfd = syscall(SYS_pidfd_open, 1, 0);
	if (pfd >= 0)
		must_fail_with("setns(pidfd 1)", setns((int)pfd, CLONE_NEWNS | CLONE_NEWNET), EPERM);
	BLOCKED("setns is denied");
}
