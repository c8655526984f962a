/* Host-wide kernel settings through /proc/sys: core_pattern (a pipe
 * handler runs as root on the host), modprobe, hostname, drop_caches,
 * binfmt_misc registration. */
#include "escape.h"

static void try_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = write(fd, val, strlen(val));
		close(fd);
		if (n > 0)
			ESCAPED("wrote %s", path);
	}
	NOTE("write %s: %s", path, ename(errno));
}

int main(void)
{
	try_write("/proc/sys/kernel/core_pattern", "|/tmp/x");
	try_write("/proc/sys/kernel/modprobe", "/tmp/x");
	try_write("/proc/sys/kernel/hostname", "pwned");
	try_write("/proc/sys/kernel/panic", "1");
	try_write("/proc/sys/vm/drop_caches", "3");
	try_write("/proc/sys/fs/binfmt_misc/register", ":x:E::x::/tmp/x:");
	try_write("/proc/sys/net/ipv4/ip_forward", "1");
	try_write("/proc/sys/user/max_user_namespaces", "100000");
	BLOCKED("/proc/sys is read-only");
}
