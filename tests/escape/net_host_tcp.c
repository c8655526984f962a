/* Connect to a TCP port the test listens on at the host's 127.0.0.1, and
 * to the same port on every host-ish address.  argv[1]: the port. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "escape.h"

int main(int argc, char **argv)
{
	const char *addrs[] = { "127.0.0.1", "127.0.1.1", "10.0.2.2", "172.17.0.1", "192.168.122.1" };

	if (argc < 2)
		ESCAPED("usage: net_host_tcp PORT (test bug)");
	for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
		struct timeval tv = { 1, 0 };
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			BLOCKED("socket: %s", ename(errno));
		inet_pton(AF_INET, addrs[i], &sa.sin_addr);
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			char buf[64] = "";
			(void)!read(s, buf, sizeof(buf) - 1);
			ESCAPED("connected to %s:%s (%s)", addrs[i], argv[1], buf);
		}
		NOTE("connect %s: %s", addrs[i], ename(errno));
		close(s);
	}
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)atoi(argv[1])),
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (struct sockaddr *)&s6, sizeof(s6)) == 0)
		ESCAPED("connected to [::1]:%s", argv[1]);
	BLOCKED("the host's loopback listener is unreachable");
}
