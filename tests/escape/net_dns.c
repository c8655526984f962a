/* Resolve a name: through the resolver (needs /etc/resolv.conf and a
 * route) and by hand to the usual nameservers. */
#include <netdb.h>
#include "escape.h"

int main(void)
{
	struct addrinfo *ai = NULL, hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	const char *names[] = { "example.com", "deb.debian.org", "metadata.google.internal" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int r = getaddrinfo(names[i], "80", &hints, &ai);
		if (r == 0) {
			freeaddrinfo(ai);
			ESCAPED("resolved %s", names[i]);
		}
		NOTE("getaddrinfo %s: %s", names[i], gai_strerror(r));
	}
	BLOCKED("no name resolves");
}
