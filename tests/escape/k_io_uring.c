/* io_uring performs its operations out of seccomp's sight. */
#include <linux/io_uring.h>
#include "escape.h"

int main(void)
{
	struct io_uring_params p;

	memset(&p, 0, sizeof(p));
	must_fail_with("io_uring_setup", syscall(SYS_io_uring_setup, 8, &p), ENOSYS);
	must_fail_with("io_uring_enter", syscall(SYS_io_uring_enter, 3, 1, 0, 0, NULL, 0), ENOSYS);
	must_fail_with("io_uring_register", syscall(SYS_io_uring_register, 3, 0, NULL, 0), ENOSYS);
	BLOCKED("io_uring is unavailable");
}
