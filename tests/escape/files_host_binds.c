/* Modify the host files that are bind-mounted in read-only (/usr,
 * /etc/ld.so.cache, /etc/alternatives): write, truncate, chmod, chown,
 * utimes, xattrs, rename over, unlink.  Inside uid 1000 is the invoking
 * user on the host, so ownership alone does not stop this: the read-only
 * mounts and Landlock must. */
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include "escape.h"

int main(void)
{
	const char *files[] = { "/etc/ld.so.cache", "/usr/bin/true", "/usr/lib/os-release" };

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		const char *f = files[i];
		must_not_open(f, O_WRONLY);
		must_not_open(f, O_RDWR | O_APPEND);
		must_fail("truncate", truncate(f, 0));
		must_fail("chmod", chmod(f, 0777));
		must_fail("chown", chown(f, 1000, 1000));
		must_fail("utimes", utimes(f, NULL));
		must_fail("setxattr", setxattr(f, "user.nsbox", "x", 1, 0));
		must_fail("unlink", unlink(f));
	}
	int fd = open("/tmp/over", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
	must_fail("rename over /etc/ld.so.cache", rename("/tmp/over", "/etc/ld.so.cache"));
	must_fail("rename over /usr/bin/true", rename("/tmp/over", "/usr/bin/true"));
	must_fail("mkdir in /usr", mkdir("/usr/nsbox-escape", 0755));
	must_fail("symlink in /etc/alternatives", symlink("/tmp/x", "/etc/alternatives/nsbox-escape"));
	BLOCKED("the host's bound files cannot be changed");
}
