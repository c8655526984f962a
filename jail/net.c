/* Child step: the new network namespace holds only loopback; bring it up
 * with one rtnetlink request (rtnetlink(7)): RTM_NEWLINK on ifindex 1 with
 * IFF_UP in ifi_change and ifi_flags, acknowledged.
 *
 * Written against the kernel's netlink ABI rather than libnl-route-3: the
 * whole job is one 32-byte message and its ack, and loading libnl (two
 * libraries, their relocations and constructors) cost ~0.3 ms of every
 * sandbox start, more than everything else in this file.  See README,
 * "Design notes". */
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "budget.h"
#include "egress.h"
#include "steps.h"
#include "util.h"

/* lo up in the caller's network namespace. */
static int net_setup_loopback(struct nsbox_err *err)
{
	struct {
		struct nlmsghdr nh;
		struct ifinfomsg ifi;
	} req = {
		.nh = { .nlmsg_len = sizeof(req), .nlmsg_type = RTM_NEWLINK,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK, .nlmsg_seq = 1 },
		/* A new network namespace creates lo first: it is always
		 * ifindex 1 (net/core/dev.c, loopback_net_init). */
		.ifi = { .ifi_family = AF_UNSPEC, .ifi_index = 1, .ifi_flags = IFF_UP, .ifi_change = IFF_UP },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	union {
		struct nlmsghdr nh;
		char buf[256];
	} ack;
	_cleanup_close_ int fd = -1;
	ssize_t n;

	err_step(err, "network");
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return err_sys(err, "netlink: socket(NETLINK_ROUTE)");
	if (sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) != (ssize_t)sizeof(req))
		return err_sys(err, "netlink: send RTM_NEWLINK (lo up)");
	do
		n = recv(fd, &ack, sizeof(ack), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return err_sys(err, "netlink: receive the ack");
	/* Exactly one NLMSG_ERROR answering our request; error 0 is the ack. */
	if ((size_t)n < NLMSG_LENGTH(sizeof(struct nlmsgerr)) || !NLMSG_OK(&ack.nh, (size_t)n) ||
	    ack.nh.nlmsg_type != NLMSG_ERROR || ack.nh.nlmsg_seq != req.nh.nlmsg_seq)
		return err_set(err, EPROTO, "netlink: unexpected answer to RTM_NEWLINK (%zd bytes, type %u)", n,
			       (unsigned)ack.nh.nlmsg_type);
	{
		const struct nlmsgerr *e = NLMSG_DATA(&ack.nh);

		if (e->error != 0)
			return err_set(err, -e->error, "netlink: bring lo up");
	}
	return 0;
}

/* ---- the network namespace, made beside the rest of the setup ----
 *
 * Creating a network namespace is the dearest part of a sandbox start:
 * ~0.6 ms of the ~0.9 ms clone3 with every CLONE_NEW* flag here (setup_net
 * runs every subsystem's per-namespace init).  pid 1 is therefore cloned
 * without CLONE_NEWNET and makes the namespace on a second thread, at the
 * same time as the main thread waits for its id maps and builds the root;
 * the main thread joins it with setns(2) before its seccomp filter (which
 * denies setns) and before the payload is forked, so nothing but pid 1's
 * own setup code ever runs in the host's network namespace. */

static int make_netns(int procfd, int egress_fd, int *nsfd, struct nsbox_err *err)
{
	err_step(err, "network");
	if (unshare(CLONE_NEWNET) < 0)
		return err_sys(err, "unshare(CLONE_NEWNET)");
	if (net_setup_loopback(err) < 0 || budget_netns(procfd, err) < 0)
		return -1;
	/* The egress proxy's sockets, made here before anything of the
	 * sandbox runs in this namespace (egress.h). */
	if (egress_fd >= 0 && egress_ns_listen(egress_fd, err) < 0)
		return -1;
	if (procfd < 0)
		return 0;
	/* The host's /proc, through a descriptor opened before the mounts:
	 * thread-self is this thread there, whatever the main thread has
	 * done to the root meanwhile. */
	*nsfd = openat(procfd, "thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (*nsfd < 0)
		return err_sys(err, "open /proc/thread-self/ns/net");
	return 0;
}

static void *netns_thread(void *arg)
{
	struct netns_job *job = arg;

	job->failed = make_netns(job->procfd, job->egress_fd, &job->nsfd, &job->err) < 0 ||
		      budget_apply(job->p, job->budget, job->procfd, &job->err) < 0;
	return NULL;
}

/* steps.h */
bool cpus_busy(int n)
{
	char buf[128], *slash, *p;
	ssize_t len = read_file("/proc/loadavg", buf, sizeof(buf));

	if (len <= 0 || !(slash = strchr(buf, '/')))
		return false;
	*slash = '\0';
	p = strrchr(buf, ' ');
	return p && atol(p + 1) - 1 >= n;
}

int netns_start(struct netns_job *job, struct nsbox_err *err)
{
	pthread_attr_t attr;
	sigset_t all, old;
	int r;

	int cpu = sched_getcpu();
	cpu_set_t set = job->cpus;
	bool other_cpu;

	job->nsfd = -1;
	job->failed = false;
	job->threaded = false;
	memset(&job->err, 0, sizeof(job->err));
	/* The thread pays only on a CPU that is idle meanwhile: with one CPU
	 * to run on, or the others all busy, it only takes turns (the join
	 * waited 0.2-2.8 ms with one CPU spinning, where the namespace made
	 * here costs ~0.6).  Whether they were idle, the launcher has just
	 * looked (job->idle_cpu): not read again here. */
	other_cpu = job->idle_cpu && cpu >= 0 && cpu < CPU_SETSIZE && (CPU_CLR(cpu, &set), CPU_COUNT(&set) > 0);
	job->procfd = other_cpu ? open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
	if (job->procfd >= 0 && pthread_attr_init(&attr) == 0) {
		/* A new thread is queued on its creator's CPU, and the
		 * scheduler leaves it there though another goes idle: then
		 * it only takes turns with the main thread.  So it is kept
		 * off the main thread's CPU (set before it first runs; it
		 * ends soon, and the payload is forked from the main thread,
		 * with its mask). */
		(void)pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
		/* A small stack: glibc keeps a joined thread's stack mapped,
		 * and a template session inherits pid 1's address space
		 * (counted against RLIMIT_AS where that stands in for a
		 * memory cgroup). */
		(void)pthread_attr_setstacksize(&attr, 64 * 1024);
		/* No signal meant for pid 1 is ever taken on this thread. */
		sigfillset(&all);
		r = pthread_sigmask(SIG_BLOCK, &all, &old);
		if (r == 0) {
			r = pthread_create(&job->tid, &attr, netns_thread, job);
			/* A mask that won't come back would block pid 1's signals
			 * for good: then no thread, and stop here. */
			if (pthread_sigmask(SIG_SETMASK, &old, NULL) != 0) {
				pthread_attr_destroy(&attr);
				return err_set(err, EINVAL, "restore the signal mask");
			}
		}
		pthread_attr_destroy(&attr);
		if (r == 0) {
			job->threaded = true;
			return 0;
		}
	}
	if (job->procfd >= 0)
		close(job->procfd);
	job->procfd = -1;
	/* One CPU, no /proc or no thread to be had: the namespace is made
	 * here, now, for the whole (still single-threaded) process. */
	return make_netns(-1, job->egress_fd, &job->nsfd, err);
}

int netns_join(struct netns_job *job, struct nsbox_err *err)
{
	int r = 0;

	if (!job->threaded)
		return 0;
	job->threaded = false;
	if (pthread_join(job->tid, NULL) != 0) {
		err_set(err, EINVAL, "join the network namespace thread");
		r = err_step(err, "network");
	} else if (job->failed) {
		err_copy(err, &job->err);
		r = -1;
	} else if (setns(job->nsfd, CLONE_NEWNET) < 0) {
		err_sys(err, "setns into the new network namespace");
		r = err_step(err, "network");
	}
	if (job->nsfd >= 0)
		close(job->nsfd);
	close(job->procfd);
	job->nsfd = job->procfd = -1;
	return r;
}
