/* Replace or stop the host kernel. */
#include <linux/reboot.h>
#include "escape.h"

int main(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	must_fail_with("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0), EPERM);
	must_fail_with("kexec_file_load", syscall(SYS_kexec_file_load, fd, fd, 1, "", 0), EPERM);
	/* CAD_OFF only changes ctrl-alt-del handling; harmless if it got through. */
	must_fail_with("reboot(CAD_OFF)", syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
						   LINUX_REBOOT_CMD_CAD_OFF, NULL), EPERM);
	must_fail_with("swapon", syscall(SYS_swapon, "/tmp/swap", 0), EPERM);
	must_fail_with("acct", syscall(SYS_acct, "/tmp/acct"), EPERM);
	BLOCKED("kexec, reboot, swap and accounting are denied");
}
