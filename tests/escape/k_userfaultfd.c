/* userfaultfd stretches kernel race windows in exploits; both the
 * syscall and /dev/userfaultfd must be out of reach. */
#include "escape.h"

int main(void)
{
	must_fail_with("userfaultfd(0)", syscall(SYS_userfaultfd, 0), EPERM);
	must_fail_with("userfaultfd(UFFD_USER_MODE_ONLY)", syscall(SYS_userfaultfd, 1), EPERM);
	must_not_open("/dev/userfaultfd", O_RDWR);
	BLOCKED("userfaultfd is denied");
}
