/* The i386 ABI through int $0x80: its own syscall numbers (getpid is
 * 20, unshare 310) that a filter for x86_64 would misread.  The filter
 * must kill the process with SIGSYS; the test checks the signal. */
#include "escape.h"

int main(void)
{
	long r;

	fflush(stdout);
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
	ESCAPED("int $0x80 getpid returned %ld", r);
}
