/* The x32 ABI: syscall numbers with bit 30 set reach a second syscall
 * table that a filter written for x86_64 numbers would not match.  The
 * filter must kill the process (SIGSYS); the test checks the signal. */
#include "escape.h"

int main(void)
{
	/* __X32_SYSCALL_BIT | __NR_getpid, then a denied one (unshare). */
	long r = syscall(0x40000000 | SYS_getpid);
	long r2 = syscall(0x40000000 | SYS_unshare, 0x10000000);

	ESCAPED("x32 syscalls returned (%ld: %s, %ld) instead of killing the process", r, ename(errno), r2);
}
