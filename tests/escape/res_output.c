/* Flood stdout with 200 MB as fast as possible.  The host reading it must
 * survive: it counts bytes and checks its own memory. */
#include "escape.h"

int main(void)
{
	static char buf[1 << 16];
	long long total = 0;

	memset(buf, 'A', sizeof(buf));
	for (int i = 0; i < (200 << 20) / (int)sizeof(buf); i++) {
		ssize_t n = write(1, buf, sizeof(buf));
		if (n <= 0)
			break;
		total += n;
	}
	printf("\n");
	BLOCKED("wrote %lld bytes: the host decides", total);
}
