/* pivot_root back out: onto /tmp, and the "pivot_root(., .)" trick. */
#include <sys/stat.h>
#include "escape.h"

int main(void)
{
	must_fail_with("pivot_root(/tmp, /tmp)", syscall(SYS_pivot_root, "/tmp", "/tmp"), EPERM);
	if (chdir("/") == 0)
		must_fail_with("pivot_root(., .)", syscall(SYS_pivot_root, ".", "."), EPERM);
	if (mkdir("/tmp/old", 0755) == 0)
		must_fail_with("pivot_root(/, /tmp/old)", syscall(SYS_pivot_root, "/", "/tmp/old"), EPERM);
	BLOCKED("pivot_root is denied");
}
