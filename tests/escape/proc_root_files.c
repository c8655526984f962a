/* /proc files that only the host's root may read (mode 0400, owner root):
 * physical page flags and counts (Rowhammer and page-spraying aids),
 * slab and vmalloc layout (heap exploit aids), timers.  If the sandbox's
 * uid is the host's root outside, owner permissions open them. */
#include "escape.h"

int main(void)
{
	const char *paths[] = { "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup", "/proc/slabinfo",
				"/proc/pagetypeinfo", "/proc/vmallocinfo", "/proc/timer_list", "/proc/mtrr" };
	char buf[64], got[512] = "";

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && read(fd, buf, sizeof(buf)) > 0)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), " %s", paths[i]);
		else
			NOTE("%s: %s", paths[i], ename(errno));
		if (fd >= 0)
			close(fd);
	}
	if (got[0])
		ESCAPED("read root-only files:%s", got);
	BLOCKED("root-only /proc files are unreadable");
}
