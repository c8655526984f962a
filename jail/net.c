/* The new network namespace holds only loopback; bring it up through
 * rtnetlink with libnl-route-3.
 *
 * Split in two for start-up time: the sandbox's pid 1 opens the
 * NETLINK_ROUTE socket (a socket belongs to its creator's network
 * namespace) and hands it to the launcher, which sends the request while
 * pid 1 builds the root.  The kernel checks CAP_NET_ADMIN against both the
 * socket's opener and the sender (__netlink_ns_capable, CVE-2014-0181): the
 * opener is pid 1 with every capability in the new user namespace, the
 * sender is the namespace's creator, which holds them all there too
 * (user_namespaces(7)).
 *
 * libnl-route-3 and libnl-3 are dlopen()ed on first use instead of being
 * linked: loading and relocating them, and their constructors, cost ~0.3 ms
 * of every exec of nsbox; loaded here, after the clone, that time overlaps
 * with pid 1's mount work (systemd loads optional libraries the same way). */
#include <dlfcn.h>
#include <errno.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "steps.h"

/* The SONAME: libnl 3.x's ABI (3.2 onwards). */
#define LIBNL_ROUTE_SONAME "libnl-route-3.so.200"

struct libnl {
	typeof(nl_socket_alloc) *socket_alloc;
	typeof(nl_socket_set_fd) *socket_set_fd;
	typeof(nl_socket_free) *socket_free;
	typeof(nl_geterror) *geterror;
	typeof(rtnl_link_alloc) *link_alloc;
	typeof(rtnl_link_set_ifindex) *link_set_ifindex;
	typeof(rtnl_link_set_flags) *link_set_flags;
	typeof(rtnl_link_change) *link_change;
	typeof(rtnl_link_put) *link_put;
};

static int libnl_load(const struct libnl **out, struct nsbox_err *err)
{
	static struct libnl nl;
	static bool loaded;
	void *h;

	if (loaded) {
		*out = &nl;
		return 0;
	}
	/* Lazy binding, as at exec: resolving all of libnl's imports up front
	 * (RTLD_NOW) costs ~0.13 ms more.  The handle is kept for the life of
	 * the process. */
	h = dlopen(LIBNL_ROUTE_SONAME, RTLD_LAZY | RTLD_LOCAL);
	if (!h)
	{
		/* dlerror() already says why: no strerror() suffix. */
		err_set(err, 0, "load %s (package libnl-route-3-200): %s", LIBNL_ROUTE_SONAME, dlerror());
		err->code = ENOENT;
		return -1;
	}
#define SYM(field, name)                                                                        \
	do {                                                                                    \
		if (!(*(void **)&nl.field = dlsym(h, #name))) {                                 \
			err_set(err, ENOENT, "%s: symbol %s missing", LIBNL_ROUTE_SONAME, #name); \
			dlclose(h);                                                             \
			return -1;                                                              \
		}                                                                               \
	} while (0)
	SYM(socket_alloc, nl_socket_alloc);
	SYM(socket_set_fd, nl_socket_set_fd);
	SYM(socket_free, nl_socket_free);
	SYM(geterror, nl_geterror);
	SYM(link_alloc, rtnl_link_alloc);
	SYM(link_set_ifindex, rtnl_link_set_ifindex);
	SYM(link_set_flags, rtnl_link_set_flags);
	SYM(link_change, rtnl_link_change);
	SYM(link_put, rtnl_link_put);
#undef SYM
	loaded = true;
	*out = &nl;
	return 0;
}

int net_open_rtnl(struct nsbox_err *err)
{
	struct sockaddr_nl local = { .nl_family = AF_NETLINK };
	int fd;

	err_step(err, "network");
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return err_sys(err, "netlink: socket(NETLINK_ROUTE)");
	/* Port id 0: the kernel picks one. */
	if (bind(fd, (struct sockaddr *)&local, sizeof(local)) < 0) {
		err_sys(err, "netlink: bind");
		close(fd);
		return -1;
	}
	return fd;
}

int net_setup_loopback_fd(int fd, struct nsbox_err *err)
{
	const struct libnl *nl;
	struct nl_sock *sk;
	struct rtnl_link *lo = NULL, *change = NULL;
	int r;

	err_step(err, "network");
	{
		/* It came from the sandbox (before any of its code ran, but it is
		 * the other side of a trust boundary): use it only if it is what
		 * pid 1 was to send. */
		int dom = -1, proto = -1;
		socklen_t l1 = sizeof(dom), l2 = sizeof(proto);

		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l1) < 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l2) < 0 || dom != AF_NETLINK ||
		    proto != NETLINK_ROUTE) {
			close(fd);
			return err_set(err, EPROTO, "netlink: the sandbox passed something other than a NETLINK_ROUTE socket");
		}
	}
	if (libnl_load(&nl, err) < 0) {
		close(fd);
		return -1;
	}
	sk = nl->socket_alloc();
	if (!sk) {
		close(fd);
		return err_set(err, ENOMEM, "netlink: nl_socket_alloc");
	}
	r = nl->socket_set_fd(sk, NETLINK_ROUTE, fd);
	if (r < 0) {
		close(fd);
		err_set(err, 0, "netlink: adopt the sandbox's socket: %s", nl->geterror(r));
		goto out;
	}
	/* A new network namespace creates lo first: it is always ifindex 1
	 * (net/core/dev.c, loopback_net_init), so no round trip to look it up. */
	lo = nl->link_alloc();
	change = nl->link_alloc();
	if (!lo || !change) {
		r = err_set(err, ENOMEM, "netlink: rtnl_link_alloc");
		goto out;
	}
	nl->link_set_ifindex(lo, 1);
	nl->link_set_flags(change, IFF_UP);
	r = nl->link_change(sk, lo, change, 0);
	if (r < 0)
		err_set(err, 0, "netlink: bring lo up: %s", nl->geterror(r));
out:
	if (change)
		nl->link_put(change);
	if (lo)
		nl->link_put(lo);
	nl->socket_free(sk);	/* closes fd once adopted */
	return r < 0 ? -1 : 0;
}

int net_setup_loopback(struct nsbox_err *err)
{
	int fd = net_open_rtnl(err);

	return fd < 0 ? -1 : net_setup_loopback_fd(fd, err);
}
