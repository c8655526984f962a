/* personality(2) tricks: switch off ASLR (ADDR_NO_RANDOMIZE), make
 * reads imply exec, map page zero (MMAP_PAGE_ZERO: NULL-deref exploits),
 * pretend to be 32-bit. */
#include <sys/mman.h>
#include <sys/personality.h>
#include "escape.h"

int main(void)
{
	unsigned long bad[] = { ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, PER_LINUX32, ADDR_LIMIT_3GB,
				PER_SVR4 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		long r = syscall(SYS_personality, bad[i]);
		long now = syscall(SYS_personality, 0xffffffffUL);
		if (r >= 0 && now == (long)bad[i])
			ESCAPED("personality(%#lx) took effect", bad[i]);
		NOTE("personality(%#lx): %s", bad[i], r < 0 ? ename(errno) : "ignored");
	}
	void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p != MAP_FAILED)
		ESCAPED("mapped page zero");
	BLOCKED("personality is fixed at PER_LINUX");
}
