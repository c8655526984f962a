/* Allocate and touch far more memory than --memory allows (2 GiB in
 * 16 MiB steps).  With a cgroup the OOM killer stops us (exit 123);
 * without one RLIMIT_AS makes mmap fail.  argv[1]: the limit in MiB. */
#include <sys/mman.h>
#include "escape.h"

int main(int argc, char **argv)
{
	long limit = argc > 1 ? atol(argv[1]) : 64;
	long got = 0;

	for (int i = 0; i < 128; i++) {
		char *p = mmap(NULL, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			break;
		memset(p, 0xa5, 16 << 20);
		got += 16;
	}
	if (got > 2 * limit)
		ESCAPED("touched %ld MiB with a %ld MiB limit", got, limit);
	BLOCKED("allocation stopped at %ld MiB (limit %ld MiB)", got, limit);
}
