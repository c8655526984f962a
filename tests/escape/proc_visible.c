/* Count the processes /proc shows and look for host ones by name. */
#include <dirent.h>
#include "escape.h"

int main(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	if (!d)
		BLOCKED("no /proc: %s", ename(errno));
	while ((de = readdir(d))) {
		char p[300], buf[256] = "";
		int fd;
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		n++;
		snprintf(p, sizeof(p), "/proc/%s/comm", de->d_name);
		if ((fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0) {
			(void)!read(fd, buf, sizeof(buf) - 1);
			close(fd);
		}
		NOTE("pid %s: %s", de->d_name, strtok(buf, "\n") ? buf : "?");
		if (!strncmp(buf, "systemd", 7) || !strncmp(buf, "sshd", 4) || !strncmp(buf, "kthreadd", 8) ||
		    !strncmp(buf, "sleep", 5) || !strncmp(buf, "python", 6) || !strncmp(buf, "pytest", 6))
			ESCAPED("host process %s (%s) visible", de->d_name, buf);
	}
	closedir(d);
	/* nsbox's pid 1 and this program. */
	if (n > 4)
		ESCAPED("%d processes visible in /proc", n);
	BLOCKED("only %d sandbox processes visible", n);
}
