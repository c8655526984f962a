/* Raw hardware access from user space: iopl, ioperm, modify_ldt,
 * /dev/port. */
#include "escape.h"

int main(void)
{
	must_fail_with("iopl(3)", syscall(SYS_iopl, 3), EPERM);
	must_fail_with("ioperm(0x60)", syscall(SYS_ioperm, 0x60, 8, 1), EPERM);
	must_fail_with("modify_ldt(read)", syscall(SYS_modify_ldt, 0, (char[64]){ 0 }, 64), EPERM);
	must_not_open("/dev/port", O_RDWR);
	BLOCKED("I/O port access is denied");
}
