/* nsbox run with a terminal on stdin: the command gets a pseudo-terminal of
 * its own as its controlling terminal (a shell has job control, no "can't
 * access tty"), never the caller's terminal.  A relay process copies bytes
 * between the two, the caller's terminal is raw meanwhile (the pty's own
 * line discipline does the editing and turns ^C into SIGINT inside), and
 * window size changes follow.  Like bubblewrap, nsbox never makes the
 * caller's terminal the sandbox's (CVE-2017-5226); TIOCSTI is denied by
 * seccomp either way.
 *
 * With a terminal on stdout or stderr only (`... | nsbox run -- cmd`),
 * libnsbox itself gives the command a pty for them (host/ttyrelay.c), as it
 * does for every nsbox_run: the caller's terminal, as fd 1 or 2, took ioctls
 * that outlive the sandbox (TIOCEXCL: every later open of it fails with
 * EBUSY; TCXONC: its output stopped; TCSETS, TCFLSH, TIOCSWINSZ). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "commands.h"

static volatile sig_atomic_t winch;

static void on_winch(int sig)
{
	(void)sig;
	winch = 1;
}

static int write_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t k = write(fd, buf, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		buf += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The relay: the caller's stdin -> master, master -> stdout, until the
 * master reads EIO or EOF (every slave closed: the sandbox is gone).  The
 * window size follows stdin's. */
static __attribute__((noreturn)) void relay(int master)
{
	struct sigaction sa = { .sa_handler = on_winch };
	bool in_open = true;
	char buf[16384];

	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, NULL);
	signal(SIGINT, SIG_IGN); /* the parent's forwarding is for signals from others */
	signal(SIGTERM, SIG_DFL);
	for (;;) {
		struct pollfd p[2] = { { master, POLLIN, 0 }, { 0, POLLIN, 0 } };
		int k;

		if (winch) {
			struct winsize ws;

			winch = 0;
			if (ioctl(0, TIOCGWINSZ, &ws) == 0)
				(void)ioctl(master, TIOCSWINSZ, &ws);
		}
		k = poll(p, in_open ? 2 : 1, -1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			_exit(1);
		if (p[0].revents) {
			ssize_t n = read(master, buf, sizeof(buf));

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				_exit(0);
			if (write_all(1, buf, (size_t)n) < 0)
				_exit(1);
		}
		if (in_open && p[1].revents) {
			ssize_t n = read(0, buf, sizeof(buf));

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0 || write_all(master, buf, (size_t)n) < 0)
				in_open = false;
		}
	}
}

int cli_tty_start(struct cli_tty *t, struct cli_err *err)
{
	struct termios raw;
	struct winsize ws;
	char name[64];
	int master = -1;

	*t = (struct cli_tty){ .slave = -1, .relay = -1 };
	if (tcgetattr(0, &t->saved) < 0)
		return cli_err_set(err, errno, "stdin terminal");
	master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || ptsname_r(master, name, sizeof(name)) != 0) {
		cli_err_set(err, errno, "a pseudo-terminal for the sandbox");
		goto fail;
	}
	t->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (t->slave < 0) {
		cli_err_set(err, errno, "open %s", name);
		goto fail;
	}
	/* The command sees the caller's settings and size. */
	if (tcsetattr(t->slave, TCSANOW, &t->saved) < 0 ||
	    (ioctl(0, TIOCGWINSZ, &ws) == 0 && ioctl(t->slave, TIOCSWINSZ, &ws) < 0)) {
		cli_err_set(err, errno, "set up %s", name);
		goto fail;
	}
	fflush(NULL);
	t->relay = fork();
	if (t->relay < 0) {
		cli_err_set(err, errno, "fork the terminal relay");
		goto fail;
	}
	if (t->relay == 0) {
		close(t->slave);
		relay(master);
	}
	close(master);
	raw = t->saved;
	cfmakeraw(&raw); /* no output processing either: the pty's own did it */
	t->raw = tcsetattr(0, TCSADRAIN, &raw) == 0;
	return 0;
fail:
	if (master >= 0)
		close(master);
	if (t->slave >= 0)
		close(t->slave);
	t->slave = -1;
	return -1;
}

void cli_tty_stop(struct cli_tty *t)
{
	int ws;

	if (t->slave >= 0)
		close(t->slave);
	t->slave = -1;
	if (t->relay > 0) {
		/* The sandbox is gone, so no slave is left open: the relay
		 * drains what the command wrote and ends at EIO. */
		while (waitpid(t->relay, &ws, 0) < 0 && errno == EINTR)
			;
		t->relay = -1;
	}
	if (t->raw)
		(void)tcsetattr(0, TCSADRAIN, &t->saved);
	t->raw = false;
}
