/* /sys would expose the host's devices, cgroups (release_agent,
 * cgroup.procs of other cgroups), firmware and kernel knobs. */
#include <dirent.h>
#include <sys/stat.h>
#include "escape.h"

int main(void)
{
	const char *paths[] = { "/sys", "/sys/fs/cgroup", "/sys/kernel", "/sys/fs/cgroup/cgroup.procs",
				"/sys/kernel/uevent_helper", "/sys/firmware", "/sys/class/net" };
	struct stat st;

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (stat(paths[i], &st) == 0) {
			DIR *d = opendir(paths[i]);
			int n = 0;
			if (d) {
				while (readdir(d))
					n++;
				closedir(d);
			}
			if (n > 2 || !S_ISDIR(st.st_mode))
				ESCAPED("%s exists with content", paths[i]);
		}
		NOTE("%s: %s", paths[i], ename(errno));
	}
	must_not_open("/proc/self/cgroup/../../../sys/fs/cgroup/cgroup.procs", O_WRONLY);
	BLOCKED("there is no /sys");
}
