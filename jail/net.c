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
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "steps.h"
#include "util.h"

int net_setup_loopback(struct nsbox_err *err)
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
