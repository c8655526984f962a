/* Starting and stopping the proxy process; the sockets inside.  See egress.h. */
#include "egress.h"
#include "hostpath.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define PROXY_URL "http://127.0.0.1:3128"
#define SOCKS_URL "socks5h://127.0.0.1:1080"

/* ALL_PROXY is for what has no scheme-specific variable (curl, git:
 * socks5h: the proxy resolves names, so the sandbox needs no DNS). */
const char *const egress_env[] = {
	"HTTP_PROXY=" PROXY_URL,  "HTTPS_PROXY=" PROXY_URL, "ALL_PROXY=" SOCKS_URL,
	"http_proxy=" PROXY_URL,  "https_proxy=" PROXY_URL, "all_proxy=" SOCKS_URL,
	"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	"PIP_PROXY=" PROXY_URL,   NULL,
};

int egress_prepare(const struct nsbox_policy *p, const int *audit_fds, size_t n_audit_fds, struct egress_prep *ep,
		   int *ns_fd, struct nsbox_err *err)
{
	int sv[2];

	ep->proxy_fd = ep->log_fd = -1;
	ep->audit_fds = audit_fds;
	ep->n_audit_fds = n_audit_fds;
	err_step(err, "egress");
	if (n_audit_fds > EGRESS_AUDIT_FDS)
		return err_set(err, EINVAL, "too many network audit descriptors");
	if (p->net_log && (ep->log_fd = egress_open_log(p->net_log, err)) < 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		err_sys(err, "socketpair");
		egress_prep_close(ep);
		return -1;
	}
	ep->proxy_fd = sv[0];
	*ns_fd = sv[1];
	return 0;
}

void egress_prep_close(struct egress_prep *ep)
{
	if (ep->proxy_fd >= 0)
		close(ep->proxy_fd);
	if (ep->log_fd >= 0)
		close(ep->log_fd);
	ep->proxy_fd = ep->log_fd = -1;
}

int egress_open_log(const char *path, struct nsbox_err *err)
{
	/* No symlink in the path is followed (hostpath.h): the log often sits
	 * in a directory the sandbox writes, and a link planted there as the
	 * log's name or as a directory above it had the next start create and
	 * append to a file of the sandbox's choosing with the launcher's
	 * rights (/etc/nologin as root). */
	int fd = host_path_open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOCTTY | O_NONBLOCK, 0600), fl;

	if (fd < 0 && errno == ELOOP)
		return err_set(err, ELOOP,
			       "open the network log %s: " HOST_PATH_LINK_HINT, path);
	if (fd < 0)
		return err_sys(err, "open the network log %s%s", path, errno == ENXIO ? " (a FIFO with no reader?)" : "");
	/* Writes stay blocking: a line is never dropped for a slow reader. */
	if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		err_sys(err, "the network log %s", path);
		close(fd);
		return -1;
	}
	return fd;
}

int egress_fork(const struct nsbox_policy *p, struct egress_prep *ep, const int *socks,
		int (*confine)(const struct nsbox_policy *p, struct nsbox_err *err), pid_t *pid, struct nsbox_err *err)
{
	pid_t parent = getpid(), c;
	sigset_t all, old;

	/* No handler of the caller's runs in the child before they are reset
	 * below (nsbox run forwards signals to the sandbox, and a lazy proxy
	 * is forked after its handlers are set). */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	c = fork();
	if (c != 0)
		sigprocmask(SIG_SETMASK, &old, NULL);
	if (c < 0) {
		err_sys(err, "fork the egress proxy");
		err_step(err, "egress");
		egress_prep_close(ep);
		return -1;
	}
	if (c == 0) {
		int keep[2 + EGRESS_AUDIT_FDS + EGRESS_NS_SOCKETS] = { ep->proxy_fd }, fds[1 + EGRESS_AUDIT_FDS];
		size_t nk = 1, nf = 0;

		/* The caller's handlers become the default; what it ignores
		 * stays ignored (nohup), except SIGTERM, which the proxy reads
		 * (egress_stop).  The proxy's mask is set in egress_proxy_main. */
		for (int sig = 1; sig < NSIG; sig++) {
			struct sigaction sa;

			if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
				continue;
			if (sa.sa_handler != SIG_IGN || sig == SIGTERM)
				signal(sig, SIG_DFL);
		}
		/* A process group of its own: a Ctrl-C or hangup at the
		 * caller's terminal goes to nsbox run, which forwards it to the
		 * sandbox, and must not end the sandbox's network under it. */
		(void)setpgid(0, 0);
		signal(SIGTTOU, SIG_IGN);	/* a Log= on the terminal, from the background */
		/* Dies with the launcher; the launcher kills it with the sandbox. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(1);
		if (ep->log_fd >= 0)
			keep[nk++] = fds[nf++] = ep->log_fd;
		for (size_t i = 0; i < ep->n_audit_fds; i++)
			if (ep->audit_fds[i] >= 0)
				keep[nk++] = fds[nf++] = ep->audit_fds[i];
		for (size_t i = 0; socks && i < EGRESS_NS_SOCKETS; i++)
			keep[nk++] = socks[i];
		if (close_fds_except(3, keep, nk) < 0)
			_exit(1);
		if (confine) {
			struct nsbox_err e = { 0 };

			if (confine(p, &e) < 0) {
				fprintf(stderr, "nsbox: egress proxy: %s\n", e.msg);
				_exit(1);
			}
		}
		egress_proxy_main(p, ep->proxy_fd, socks, fds, nf);
	}
	egress_prep_close(ep);
	*pid = c;
	return 0;
}

void egress_stop_begin(pid_t pid, bool audited)
{
	if (pid > 0 && !audited)
		kill(pid, SIGKILL);
}

void egress_stop(pid_t pid, bool audited)
{
	int pidfd;

	if (pid <= 0)
		return;
	if (!audited) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return;
	}
	/* SIGTERM first: the proxy ends the tunnels still open and writes
	 * their audit lines, which SIGKILL would lose; SIGKILL after
	 * EGRESS_STOP_MS whatever it does. */
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd >= 0) {
		struct pollfd pf = { .fd = pidfd, .events = POLLIN };

		if (kill(pid, SIGTERM) == 0)
			while (poll(&pf, 1, EGRESS_STOP_MS) < 0 && errno == EINTR)
				;
		close(pidfd);
	}
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

static int listen_on(int type, int port, struct nsbox_err *err)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr = { htonl(INADDR_LOOPBACK) } };
	/* The proxy polls its listeners: accept never blocks. */
	int one = 1, fd = socket(AF_INET, type | SOCK_CLOEXEC | (type == SOCK_STREAM ? SOCK_NONBLOCK : 0), 0);

	if (fd < 0)
		return err_sys(err, "egress: socket");
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || (type == SOCK_STREAM && listen(fd, 128) < 0)) {
		err_sys(err, "egress: bind 127.0.0.1:%d in the sandbox", port);
		close(fd);
		return -1;
	}
	return fd;
}

int egress_ns_listen(int ns_fd, struct nsbox_err *err)
{
	int fds[EGRESS_NS_SOCKETS];
	char c = 'L';
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int r = 0;

	err_step(err, "egress");
	for (int i = 0; i < EGRESS_NS_SOCKETS; i++) {
		fds[i] = i == EGRESS_NS_DNS    ? listen_on(SOCK_DGRAM, EGRESS_DNS_PORT, err)
			 : i == EGRESS_NS_HTTP ? listen_on(SOCK_STREAM, EGRESS_PROXY_PORT, err)
					       : listen_on(SOCK_STREAM, EGRESS_SOCKS_PORT, err);
		if (fds[i] < 0) {
			while (i-- > 0)
				close(fds[i]);
			return -1;
		}
	}
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	if (sendmsg(ns_fd, &mh, MSG_NOSIGNAL) != 1)
		r = err_sys(err, "egress: pass the sandbox's sockets to the proxy");
	for (int i = 0; i < EGRESS_NS_SOCKETS; i++)
		close(fds[i]);
	return r;
}
