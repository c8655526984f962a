/* Read the kernel log (addresses, other tenants' messages) or flood it:
 * klogctl, /dev/kmsg, /proc/kmsg. */
#include <sys/klog.h>
#include "escape.h"

int main(void)
{
	char buf[256];

	must_fail_with("klogctl(READ_ALL)", klogctl(3, buf, sizeof(buf)), EPERM);
	must_fail_with("klogctl(SIZE_BUFFER)", klogctl(10, NULL, 0), EPERM);
	must_fail_with("klogctl(CONSOLE_LEVEL)", klogctl(8, NULL, 1), EPERM);
	must_not_open("/dev/kmsg", O_RDONLY);
	must_not_open("/dev/kmsg", O_WRONLY);
	must_not_open("/proc/kmsg", O_RDONLY);
	BLOCKED("the kernel log is out of reach");
}
