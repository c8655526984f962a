/* Change the network: create an interface over rtnetlink (dummy, veth),
 * bring lo down, add an address.  All need CAP_NET_ADMIN over the
 * network namespace, which the sandbox user does not hold. */
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include "escape.h"

static int rtnl_newlink(const char *kind, const char *name)
{
	struct {
		struct nlmsghdr nh;
		struct ifinfomsg ifi;
		char attrs[256];
	} req = { 0 };
	struct rtattr *rta;
	char buf[4096];
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);

	if (s < 0)
		return -1;
	req.nh.nlmsg_type = RTM_NEWLINK;
	req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
	req.ifi.ifi_family = AF_UNSPEC;
	req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(req.ifi));
	rta = (struct rtattr *)((char *)&req + NLMSG_ALIGN(req.nh.nlmsg_len));
	rta->rta_type = IFLA_IFNAME;
	rta->rta_len = (unsigned short)RTA_LENGTH(strlen(name) + 1);
	memcpy(RTA_DATA(rta), name, strlen(name) + 1);
	req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_ALIGN(rta->rta_len);
	struct rtattr *li = (struct rtattr *)((char *)&req + req.nh.nlmsg_len);
	li->rta_type = IFLA_LINKINFO;
	struct rtattr *k = RTA_DATA(li);
	k->rta_type = IFLA_INFO_KIND;
	k->rta_len = (unsigned short)RTA_LENGTH(strlen(kind));
	memcpy(RTA_DATA(k), kind, strlen(kind));
	li->rta_len = (unsigned short)(RTA_LENGTH(0) + RTA_ALIGN(k->rta_len));
	req.nh.nlmsg_len += RTA_ALIGN(li->rta_len);
	if (send(s, &req, req.nh.nlmsg_len, 0) < 0) {
		close(s);
		return -1;
	}
	ssize_t n = recv(s, buf, sizeof(buf), 0);
	close(s);
	if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)))
		return errno = EPROTO, -1;
	struct nlmsgerr *e = NLMSG_DATA((struct nlmsghdr *)buf);
	if (e->error == 0)
		return 0;
	errno = -e->error;
	return -1;
}

int main(void)
{
	struct ifreq ifr = { 0 };
	int s;

	must_fail("RTM_NEWLINK dummy", rtnl_newlink("dummy", "esc0"));
	must_fail("RTM_NEWLINK veth", rtnl_newlink("veth", "esc1"));
	must_fail("RTM_NEWLINK macvlan", rtnl_newlink("macvlan", "esc2"));
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		BLOCKED("socket: %s", ename(errno));
	snprintf(ifr.ifr_name, IFNAMSIZ, "lo");
	ifr.ifr_flags = 0;
	must_fail("SIOCSIFFLAGS lo down", ioctl(s, SIOCSIFFLAGS, &ifr));
	snprintf(ifr.ifr_name, IFNAMSIZ, "lo");
	ifr.ifr_mtu = 1280;
	must_fail("SIOCSIFMTU lo", ioctl(s, SIOCSIFMTU, &ifr));
	struct if_nameindex *ifs = if_nameindex();
	for (struct if_nameindex *i = ifs; i && i->if_name; i++)
		if (strcmp(i->if_name, "lo"))
			ESCAPED("interface %s exists", i->if_name);
	BLOCKED("the network namespace holds only lo and cannot change");
}
