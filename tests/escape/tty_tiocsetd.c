/* TIOCSETD: attach a line discipline (n_gsm, n_hdlc, ...) to a terminal,
 * kernel code with a history of bugs reachable from any tty fd
 * (CVE-2023-6546 n_gsm use-after-free, CVE-2024-36016).  fd 0 is the
 * test's pty; also try a pty pair of our own, command numbers with high
 * bits set (CVE-2019-10063), and TIOCCONS (console redirection).  Only
 * N_TTY is asked for first, so a broken filter changes nothing harmful;
 * the line discipline of fd 0 is read back at the end. */
#include <sys/ioctl.h>
#include <termios.h>
#include "escape.h"

#ifndef N_GSM0710
#define N_GSM0710 21
#endif

static void try_setd(const char *what, int fd)
{
	int ldisc = N_TTY;
	char buf[96];

	snprintf(buf, sizeof(buf), "TIOCSETD(N_TTY) %s", what);
	must_fail_with(buf, syscall(SYS_ioctl, fd, TIOCSETD, &ldisc), EPERM);
	snprintf(buf, sizeof(buf), "TIOCSETD | 1<<32 %s", what);
	must_fail_with(buf, syscall(SYS_ioctl, fd, 0x100000000UL | TIOCSETD, &ldisc), EPERM);
	snprintf(buf, sizeof(buf), "TIOCSETD | ~0<<32 %s", what);
	must_fail_with(buf, syscall(SYS_ioctl, fd, 0xffffffff00000000UL | TIOCSETD, &ldisc), EPERM);
	ldisc = N_GSM0710;
	snprintf(buf, sizeof(buf), "TIOCSETD(N_GSM0710) %s", what);
	must_fail_with(buf, syscall(SYS_ioctl, fd, TIOCSETD, &ldisc), EPERM);
}

int main(void)
{
	int ldisc = -1, master, slave;

	if (!isatty(0))
		ESCAPED("fd 0 is not a terminal: the test did not set one up");
	try_setd("fd 0", 0);
	must_fail_with("TIOCCONS fd 0", syscall(SYS_ioctl, 0, TIOCCONS, 0), EPERM);
	must_fail_with("TIOCCONS | 1<<32 fd 0", syscall(SYS_ioctl, 0, 0x100000000UL | TIOCCONS, 0), EPERM);

	int fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		try_setd("/dev/tty", fd);
		close(fd);
	} else {
		NOTE("open /dev/tty: %s", ename(errno));
	}

	/* A pty of our own: what a payload without a terminal on its stdio
	 * would use. */
	master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (master >= 0) {
		try_setd("pty master", master);
		if (grantpt(master) == 0 && unlockpt(master) == 0 && ptsname(master) &&
		    (slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC)) >= 0) {
			try_setd("pty slave", slave);
			close(slave);
		} else {
			NOTE("pty slave: %s", ename(errno));
		}
		close(master);
	} else {
		NOTE("posix_openpt: %s", ename(errno));
	}

	/* Reading the discipline stays allowed; it must still be N_TTY. */
	if (ioctl(0, TIOCGETD, &ldisc) < 0)
		NOTE("TIOCGETD fd 0: %s", ename(errno));
	else if (ldisc != N_TTY)
		ESCAPED("fd 0's line discipline is now %d", ldisc);
	BLOCKED("TIOCSETD and TIOCCONS are denied (fd 0 keeps N_TTY)");
}
