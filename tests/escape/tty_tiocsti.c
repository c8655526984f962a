/* Terminal injection (CVE-2017-5226): push characters into the input of
 * the terminal nsbox was started from, so the user's shell runs them
 * when the sandbox exits.  fd 0 is a pty the test holds.  Try to make it
 * our controlling terminal first (TIOCSCTTY), then TIOCSTI with a plain
 * command number and with high bits set (CVE-2019-10063). */
#include <sys/ioctl.h>
#include <termios.h>
#include "escape.h"

int main(void)
{
	const char *cmd = "echo INJECTED\n";

	if (!isatty(0))
		ESCAPED("fd 0 is not a terminal: the test did not set one up");
	NOTE("TIOCSCTTY(0): %s", ioctl(0, TIOCSCTTY, 0) == 0 ? "ok" : ename(errno));
	NOTE("TIOCSCTTY(steal): %s", ioctl(0, TIOCSCTTY, 1) == 0 ? "ok" : ename(errno));
	for (const char *c = cmd; *c; c++) {
		long r = syscall(SYS_ioctl, 0, TIOCSTI, c);
		if (r == 0)
			ESCAPED("TIOCSTI injected into fd 0");
		r = syscall(SYS_ioctl, 0, 0x100000000UL | TIOCSTI, c);
		if (r == 0)
			ESCAPED("TIOCSTI | 1<<32 injected into fd 0");
		r = syscall(SYS_ioctl, 0, 0xffffffff00000000UL | TIOCSTI, c);
		if (r == 0)
			ESCAPED("TIOCSTI | ~0<<32 injected into fd 0");
	}
	must_fail_with("TIOCSTI", syscall(SYS_ioctl, 0, TIOCSTI, "x"), EPERM);
	int fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
	if (fd >= 0 && ioctl(fd, TIOCSTI, "x") == 0)
		ESCAPED("TIOCSTI through /dev/tty");
	BLOCKED("TIOCSTI is denied (the test checks the pty's input queue)");
}
