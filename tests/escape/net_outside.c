/* Reach the outside: TCP and UDP to 1.1.1.1:53 and 8.8.8.8:53, the cloud
 * metadata service, and IPv6. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include "escape.h"

static void try(int type, const char *addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int s = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (s < 0)
		BLOCKED("socket: %s", ename(errno));
	inet_pton(AF_INET, addr, &sa.sin_addr);
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && type == SOCK_STREAM)
		ESCAPED("tcp connect %s:%d", addr, port);
	if (errno == EINPROGRESS) {
		struct pollfd p = { s, POLLOUT, 0 };
		int e = 0;
		socklen_t l = sizeof(e);
		if (poll(&p, 1, 1500) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e == 0)
			ESCAPED("tcp connect %s:%d", addr, port);
		errno = e ? e : ETIMEDOUT;
	}
	NOTE("%s %s:%d: %s", type == SOCK_STREAM ? "tcp" : "udp", addr, port, ename(errno));
	if (type == SOCK_DGRAM) {
		/* A DNS query for "." NS: any answer means we got out. */
		static const unsigned char q[] = { 0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1 };
		if (sendto(s, q, sizeof(q), 0, (struct sockaddr *)&sa, sizeof(sa)) == (ssize_t)sizeof(q)) {
			struct pollfd p = { s, POLLIN, 0 };
			if (poll(&p, 1, 1500) == 1 && recv(s, (char[512]){ 0 }, 512, 0) > 0)
				ESCAPED("udp answer from %s:%d", addr, port);
			ESCAPED("udp sendto %s:%d was accepted: there is a route out", addr, port);
		}
		NOTE("udp sendto %s:%d: %s", addr, port, ename(errno));
	}
	close(s);
}

int main(void)
{
	try(SOCK_STREAM, "1.1.1.1", 53);
	try(SOCK_DGRAM, "1.1.1.1", 53);
	try(SOCK_STREAM, "8.8.8.8", 53);
	try(SOCK_DGRAM, "8.8.8.8", 53);
	try(SOCK_STREAM, "169.254.169.254", 80);
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(53) };
	inet_pton(AF_INET6, "2606:4700:4700::1111", &s6.sin6_addr);
	int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (struct sockaddr *)&s6, sizeof(s6)) == 0)
		ESCAPED("ipv6 connect");
	BLOCKED("no route out: %s", ename(errno));
}
