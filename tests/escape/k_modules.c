/* Load or unload a kernel module. */
#include "escape.h"

int main(void)
{
	static const char elf[64] = "\177ELF";
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	must_fail_with("init_module", syscall(SYS_init_module, elf, sizeof(elf), ""), EPERM);
	must_fail_with("finit_module", syscall(SYS_finit_module, fd, "", 0), EPERM);
	must_fail_with("delete_module", syscall(SYS_delete_module, "ext4", O_NONBLOCK), EPERM);
	must_not_open("/proc/sys/kernel/modprobe", O_WRONLY);
	BLOCKED("module syscalls are denied");
}
