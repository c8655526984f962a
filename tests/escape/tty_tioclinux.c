/* TIOCLINUX: paste the VT selection (TIOCL_PASTESEL) into the console's
 * input, the same injection as TIOCSTI on a virtual console; also with
 * high bits set.  fd 0 is the test's pty; /dev/tty0 must be absent. */
#include <sys/ioctl.h>
#include <linux/tiocl.h>
#include "escape.h"

int main(void)
{
	char sub = TIOCL_PASTESEL;

	must_fail_with("TIOCLINUX(PASTESEL) fd 0", syscall(SYS_ioctl, 0, TIOCLINUX, &sub), EPERM);
	must_fail_with("TIOCLINUX | 1<<32", syscall(SYS_ioctl, 0, 0x100000000UL | TIOCLINUX, &sub), EPERM);
	must_not_open("/dev/tty0", O_RDWR);
	must_not_open("/dev/tty1", O_RDWR);
	must_not_open("/dev/console", O_RDWR);
	must_not_open("/dev/vcs", O_RDONLY);
	BLOCKED("TIOCLINUX is denied and no VT is reachable");
}
