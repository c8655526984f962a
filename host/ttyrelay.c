/* A terminal among nsbox_run's stdio is never the command's (host/ttyrelay.h).
 *
 * Handed over, the caller's terminal would take the command's ioctls, and
 * they outlive the sandbox: TIOCEXCL (every later open of it fails with
 * EBUSY), TCXONC (its output stopped), TCSETS (echo off, raw mode),
 * TCFLSH, TIOCSWINSZ; TIOCSTI (CVE-2017-5226) is one of the family, denied
 * by seccomp either way.  So output bound for a terminal goes to the slave
 * of a pseudo-terminal made here (the command still sees a terminal, with
 * the caller's modes and size), and input from a terminal comes through a
 * pipe; a relay process copies between them and the caller's terminal.
 * The caller's terminal keeps its modes: it echoes and edits lines, and a
 * Ctrl-C on it signals the caller (nsbox_run's forward_signals passes it
 * on), not the command.  nsbox(1) with a terminal on stdin makes the
 * command a controlling terminal of its own instead (cli/tty.c, the
 * controlling_tty option), and hands that over as it is.
 *
 * The relay is forked from a process that may have other threads: from
 * _Fork() on it makes only async-signal-safe calls. */
#include "ttyrelay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "util.h"

static volatile sig_atomic_t winch;

static void on_winch(int sig)
{
	(void)sig;
	winch = 1;
}

static bool write_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t k = write(fd, buf, n);

		if (k < 0 && errno == EAGAIN) {
			/* The caller's description is non-blocking (asyncio's,
			 * node's): wait for room, lose nothing. */
			struct pollfd p = { fd, POLLOUT, 0 };

			(void)poll(&p, 1, -1);
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		buf += k;
		n -= (size_t)k;
	}
	return true;
}

/* The caller's terminal fd opened afresh (a description of our own: its
 * O_NONBLOCK is ours to set, not the caller's), or fd itself. */
static int reopen(int fd, int flags)
{
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	r = open(path, flags | O_NOCTTY | O_CLOEXEC);
	return r >= 0 ? r : fd;
}

/* Close every fd but those in keep[] (-1s ignored). */
static void close_others(int keep[], size_t n)
{
	unsigned int next = 0;

	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];

			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < 0 || (unsigned int)keep[i] < next)
			continue;
		if ((unsigned int)keep[i] > next)
			(void)close_range(next, (unsigned int)keep[i] - 1, 0);
		next = (unsigned int)keep[i] + 1;
	}
	(void)close_range(next, ~0U, 0);
}

/* What the pty still holds, until it has been quiet for 100 ms or every
 * slave is closed (EIO). */
static void drain(int master, int out)
{
	char buf[16384];

	for (;;) {
		struct pollfd p = { master, POLLIN, 0 };
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			return;
		n = read(master, buf, sizeof(buf));
		if ((n < 0 && errno != EINTR && errno != EAGAIN) || n == 0 ||
		    (n > 0 && !write_all(out, buf, (size_t)n)))
			return;
	}
}

/* master -> out (until EIO: every slave closed), term_in -> in_wr (until
 * its reader is gone, or the terminal ends), until ctl says the command
 * has ended (a copy of a slave or of the pipe that a fork of the caller
 * made meanwhile would hold EIO back for as long as it lives).  in_wr is
 * non-blocking: what the command has not read waits in buf, and the
 * terminal is not read meanwhile, so output never waits for the command to
 * read its input. */
static __attribute__((noreturn)) void relay(int master, int out, int term_in, int in_wr, int ctl)
{
	struct sigaction sa = { .sa_handler = on_winch };
	int keep[] = { master, out, term_in, in_wr, ctl };
	char obuf[16384], ibuf[4096];
	size_t ilen = 0, ioff = 0;

	close_others(keep, ARRAY_SIZE(keep));
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	/* The caller's process group gets the terminal's signals: they are
	 * the caller's (^C, ^\, ^Z stops us with it).  Read from the
	 * background, the terminal is at its end for us (EIO), not a stop. */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTTIN, SIG_IGN);
	signal(SIGTTOU, SIG_IGN);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	sigemptyset(&sa.sa_mask);
	if (master >= 0)
		sigaction(SIGWINCH, &sa, NULL);
	/* Blocked across the fork; the caller's thread may block more. */
	sigprocmask(SIG_SETMASK, &sa.sa_mask, NULL);
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	while (master >= 0 || in_wr >= 0) {
		struct pollfd p[4] = { { master, POLLIN, 0 },
				       { ilen ? -1 : term_in, POLLIN, 0 },
				       { in_wr, ilen ? POLLOUT : 0, 0 },
				       { ctl, POLLIN, 0 } };

		if (winch) {
			struct winsize ws;

			winch = 0;
			if (ioctl(out, TIOCGWINSZ, &ws) == 0)
				(void)ioctl(master, TIOCSWINSZ, &ws);
		}
		if (poll(p, 4, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (p[3].revents) {
			if (master >= 0)
				drain(master, out);
			_exit(0);
		}
		if (p[0].revents) {
			ssize_t n = read(master, obuf, sizeof(obuf));

			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			/* EIO: the command's copies are all closed. */
			if (n <= 0 || !write_all(out, obuf, (size_t)n)) {
				close(master);
				master = -1;
			}
		}
		if (in_wr >= 0 && (p[2].revents & (POLLERR | POLLHUP))) {
			/* The command's end is closed: it reads no more. */
			close(in_wr);
			in_wr = term_in = -1;
		} else if (p[2].revents & POLLOUT) {
			ssize_t n = write(in_wr, ibuf + ioff, ilen - ioff);

			if (n > 0 && (ioff += (size_t)n) == ilen)
				ioff = ilen = 0;
		} else if (p[1].revents) {
			ssize_t n = read(term_in, ibuf, sizeof(ibuf));

			if (n > 0) {
				ilen = (size_t)n;
			} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				/* EAGAIN: another reader of the terminal took
				 * the line (ours is a non-blocking description). */
				/* ^D, a hangup, or read from the background:
				 * the command's stdin ends. */
				close(in_wr);
				in_wr = term_in = -1;
			}
		}
	}
	_exit(0);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int ttyrelay_start(struct ttyrelay *r, const int stdio[3], struct nsbox_err *err)
{
	bool tty_in = isatty(stdio[0]), tty_out = isatty(stdio[1]), tty_err = isatty(stdio[2]);
	int master = -1, out = tty_out ? stdio[1] : stdio[2], in[2] = { -1, -1 }, ctl[2] = { -1, -1 }, out_own = -1,
	    in_own = -1;
	sigset_t all, old;
	char name[64];

	*r = (struct ttyrelay){ .stdio = { stdio[0], stdio[1], stdio[2] }, .slave = -1, .in_rd = -1, .ctl = -1 };
	if (!tty_in && !tty_out && !tty_err)
		return 0;
	if (tty_out || tty_err) {
		struct termios mode;
		struct winsize ws;

		master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
		    ptsname_r(master, name, sizeof(name)) != 0) {
			err_sys(err, "a pseudo-terminal for the command's output");
			goto fail;
		}
		r->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (r->slave < 0) {
			err_sys(err, "open %s", name);
			goto fail;
		}
		/* The caller's modes and size; its own terminal does the output
		 * processing (a newline to CR LF), once. */
		if (tcgetattr(out, &mode) == 0) {
			mode.c_oflag &= ~(tcflag_t)OPOST;
			(void)tcsetattr(r->slave, TCSANOW, &mode);
		}
		if (ioctl(out, TIOCGWINSZ, &ws) == 0)
			(void)ioctl(r->slave, TIOCSWINSZ, &ws);
		if (tty_out)
			r->stdio[1] = r->slave;
		if (tty_err)
			r->stdio[2] = r->slave;
	}
	if (tty_in) {
		if (pipe2(in, O_CLOEXEC) < 0 || fcntl(in[1], F_SETFL, O_NONBLOCK) < 0) {
			err_sys(err, "a pipe for the command's input");
			goto fail;
		}
		r->in_rd = r->stdio[0] = in[0];
	}
	/* A socket: sending to a relay already gone raises no SIGPIPE. */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0) {
		err_sys(err, "a pipe for the terminal relay");
		goto fail;
	}
	/* Descriptions of the relay's own: a blocking one to write (the
	 * caller's may be non-blocking), a non-blocking one to read (a line
	 * another reader of the terminal took must not block the relay). */
	if (tty_out || tty_err)
		out_own = reopen(out, O_WRONLY);
	if (tty_in) {
		in_own = reopen(stdio[0], O_RDONLY | O_NONBLOCK);
		if (in_own == stdio[0])
			in_own = -1;
	}
	/* The caller's handlers must not run in the relay before it has
	 * set its own (Python's writes to a wakeup fd the two share). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r->pid = _Fork();
	if (r->pid == 0)
		relay(master, out_own >= 0 ? out_own : out,
		      in_own >= 0 ? in_own
		      : tty_in	  ? stdio[0]
				  : -1,
		      in[1], ctl[0]);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r->pid < 0) {
		r->pid = 0;
		err_sys(err, "fork the terminal relay");
		goto fail;
	}
	if (out_own != out)
		close_fd(&out_own);
	close_fd(&in_own);
	close_fd(&master);
	close_fd(&in[1]);
	close_fd(&ctl[0]);
	r->ctl = ctl[1];
	return 0;
fail:
	close_fd(&ctl[0]);
	close_fd(&ctl[1]);
	if (out_own != out)
		close_fd(&out_own);
	close_fd(&in_own);
	close_fd(&master);
	close_fd(&in[1]);
	close_fd(&r->slave);
	close_fd(&r->in_rd);
	memcpy(r->stdio, stdio, sizeof(r->stdio));
	return -1;
}

void ttyrelay_stop(struct ttyrelay *r, bool late)
{
	close_fd(&r->slave);
	close_fd(&r->in_rd);
	/* Written, not only closed: a fork of the caller may hold a copy. */
	while (r->ctl >= 0 && send(r->ctl, "", 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
	close_fd(&r->ctl);
	if (r->pid > 0) {
		if (late) {
			/* A pidfd names the relay whatever happens to its pid
			 * meanwhile: killed only if it is still running, never
			 * a process that came by its number (a caller that
			 * reaps every child may have taken it: then pidfd_open
			 * fails, and there is nothing to kill). */
			int pfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
			struct pollfd p = { pfd, POLLIN, 0 };

			while (pfd >= 0 && poll(&p, 1, TTYRELAY_LATE_MS) < 0 && errno == EINTR)
				;
			if (pfd >= 0 && !(p.revents & POLLIN))
				(void)syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
			if (pfd >= 0)
				close(pfd);
		}
		/* ECHILD: a caller that reaps every child (SIGCHLD ignored, or
		 * its own waitpid(-1)) has it already. */
		while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
			;
		r->pid = 0;
	}
}
