/* Child step: the new network namespace holds only loopback; bring it up
 * through rtnetlink with libnl-route-3. */
#include <errno.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>

#include "steps.h"

int net_setup_loopback(struct nsbox_err *err)
{
	struct nl_sock *sk;
	struct rtnl_link *lo = NULL, *change = NULL;
	int r;

	err_step(err, "network");
	sk = nl_socket_alloc();
	if (!sk)
		return err_set(err, ENOMEM, "netlink: nl_socket_alloc");
	r = nl_connect(sk, NETLINK_ROUTE);
	if (r < 0) {
		err_set(err, 0, "netlink: connect: %s", nl_geterror(r));
		goto out;
	}
	/* A new network namespace creates lo first: it is always ifindex 1
	 * (net/core/dev.c, loopback_net_init), so no round trip to look it up. */
	lo = rtnl_link_alloc();
	change = rtnl_link_alloc();
	if (!lo || !change) {
		r = err_set(err, ENOMEM, "netlink: rtnl_link_alloc");
		goto out;
	}
	rtnl_link_set_ifindex(lo, 1);
	rtnl_link_set_flags(change, IFF_UP);
	r = rtnl_link_change(sk, lo, change, 0);
	if (r < 0)
		err_set(err, 0, "netlink: bring lo up: %s", nl_geterror(r));
out:
	rtnl_link_put(change);
	rtnl_link_put(lo);
	nl_socket_free(sk);
	return r < 0 ? -1 : 0;
}
