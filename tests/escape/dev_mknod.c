/* Make device nodes in the writable /tmp and /dev/shm: the host's disk
 * (8:0, 254:0), /dev/mem (1:1), /dev/kmsg (1:11), a tty (4:1). */
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "escape.h"

int main(void)
{
	struct {
		mode_t type;
		unsigned maj, min;
	} devs[] = { { S_IFBLK, 8, 0 }, { S_IFBLK, 254, 0 }, { S_IFBLK, 253, 0 },
		     { S_IFCHR, 1, 1 }, { S_IFCHR, 1, 11 }, { S_IFCHR, 4, 1 } };
	const char *dirs[] = { "/tmp", "/dev/shm" };

	for (size_t d = 0; d < 2; d++)
		for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++) {
			char p[64];
			snprintf(p, sizeof(p), "%s/dev%zu", dirs[d], i);
			if (mknod(p, devs[i].type | 0666, makedev(devs[i].maj, devs[i].min)) == 0) {
				/* nodev must still stop it from being opened. */
				must_not_open(p, O_RDONLY);
				NOTE("mknod %s worked but nodev stops it", p);
				continue;
			}
			NOTE("mknod %s: %s", p, ename(errno));
		}
	if (mkfifo("/tmp/fifo", 0600) < 0)
		ESCAPED("mkfifo failed (%s): the test cannot tell mknod from nothing", ename(errno));
	BLOCKED("device nodes cannot be made or used");
}
