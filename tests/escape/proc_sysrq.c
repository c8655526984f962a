/* /proc/sysrq-trigger: "b" reboots the host at once; "t" only dumps
 * tasks to the log, harmless if it got through.  Also /proc/sys/kernel/sysrq. */
#include "escape.h"

int main(void)
{
	int fd = open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (write(fd, "t", 1) == 1)
			ESCAPED("wrote /proc/sysrq-trigger");
		ESCAPED("opened /proc/sysrq-trigger for writing");
	}
	NOTE("open /proc/sysrq-trigger: %s", ename(errno));
	must_not_open("/proc/sys/kernel/sysrq", O_WRONLY);
	BLOCKED("sysrq is out of reach");
}
