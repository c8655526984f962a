/* Raw sockets: raw IP, ICMP, AF_PACKET (sniff or spoof the host's
 * traffic). */
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "escape.h"

int main(void)
{
	must_fail("socket(AF_INET, SOCK_RAW, IPPROTO_RAW)", socket(AF_INET, SOCK_RAW, IPPROTO_RAW));
	must_fail("socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
	must_fail("socket(AF_INET6, SOCK_RAW, IPPROTO_RAW)", socket(AF_INET6, SOCK_RAW, IPPROTO_RAW));
	must_fail("socket(AF_PACKET, SOCK_RAW)", socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)));
	must_fail("socket(AF_PACKET, SOCK_DGRAM)", socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL)));
	BLOCKED("no raw or packet socket");
}
