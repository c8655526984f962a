/* Open the host's devices by name: disks, memory, the kernel log, ttys,
 * and anything unexpected in /dev. */
#include <dirent.h>
#include "escape.h"

int main(void)
{
	const char *paths[] = { "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/xvda", "/dev/dm-0", "/dev/mem",
				/* /dev/ptmx opens the sandbox's own devpts instance (mount.c,
				 * make_dev): not here; none of its ptys exists yet */
				"/dev/kmem", "/dev/kmsg", "/dev/tty", "/dev/console", "/dev/pts/0",
				"/dev/fuse", "/dev/kvm", "/dev/vsock", "/dev/net/tun", "/dev/loop0",
				"/dev/loop-control", "/dev/cpu/0/msr", "/dev/snapshot", "/dev/input/event0" };
	const char *allowed[] = { ".", "..", "null", "zero", "full", "random", "urandom", "shm", "fd", "stdin",
				  "stdout", "stderr", "pts", "ptmx" };
	DIR *d;
	struct dirent *de;

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		must_not_open(paths[i], O_RDWR);
	if ((d = opendir("/dev"))) {
		while ((de = readdir(d))) {
			size_t k;
			for (k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
				if (!strcmp(de->d_name, allowed[k]))
					break;
			if (k == sizeof(allowed) / sizeof(allowed[0]))
				ESCAPED("unexpected /dev/%s", de->d_name);
		}
		closedir(d);
	}
	BLOCKED("only the harmless devices exist");
}
