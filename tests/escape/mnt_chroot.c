/* The classic chroot escape: chroot into a subdirectory while keeping a
 * directory fd outside it, then fchdir and climb ".."; also chroot via
 * /proc/self/root.  argv[1]: the canary's host path. */
#include <sys/stat.h>
#include "escape.h"

int main(int argc, char **argv)
{
	int keep = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (argc < 2)
		ESCAPED("usage: mnt_chroot CANARY (test bug)");
	if (mkdir("/tmp/jail", 0755) < 0)
		ESCAPED("mkdir /tmp/jail: %s (test cannot run)", ename(errno));
	must_fail_with("chroot(/tmp/jail)", chroot("/tmp/jail"), EPERM);
	must_fail_with("chroot(/proc/self/root)", chroot("/proc/self/root"), EPERM);
	if (fchdir(keep) == 0) {
		for (int i = 0; i < 100; i++)
			(void)chdir("..");
		must_fail_with("chroot(.)", chroot("."), EPERM);
		if (access(argv[1] + 1, F_OK) == 0)
			ESCAPED("climbed to the host canary");
	}
	BLOCKED("chroot is denied and .. stops at the sandbox root");
}
