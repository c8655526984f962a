/* Make the host's OOM killer pick someone else: lower oom_score_adj to
 * -1000 (needs CAP_SYS_RESOURCE), and raise pid 1's. */
#include "escape.h"

static void try_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd >= 0 && write(fd, val, strlen(val)) > 0) {
		close(fd);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		char buf[32] = "";
		(void)!read(fd, buf, sizeof(buf) - 1);
		if (atoi(buf) == atoi(val))
			ESCAPED("%s is now %s", path, val);
	}
	NOTE("write %s: %s", path, ename(errno));
	if (fd >= 0)
		close(fd);
}

int main(void)
{
	try_write("/proc/self/oom_score_adj", "-1000");
	try_write("/proc/self/oom_adj", "-17");
	try_write("/proc/1/oom_score_adj", "-1000");
	BLOCKED("oom_score_adj cannot be lowered");
}
