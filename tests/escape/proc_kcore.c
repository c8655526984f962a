/* Kernel memory and addresses through /proc: kcore, kallsyms addresses
 * (KASLR leak), /proc/self/pagemap physical frames, /dev/mem.
 * Root-only /proc files are proc_root_files. */
#include <stdint.h>
#include "escape.h"

int main(void)
{
	char line[256];
	FILE *f;

	must_not_open("/proc/kcore", O_RDONLY);
	if ((f = fopen("/proc/kallsyms", "re"))) {
		while (fgets(line, sizeof(line), f))
			if (strncmp(line, "0000000000000000", 16)) {
				line[40] = '\0';
				ESCAPED("kallsyms shows a kernel address: %s", line);
			}
		fclose(f);
	}
	/* pagemap: physical frame numbers are zeroed without CAP_SYS_ADMIN
	 * (Rowhammer, CVE-2015 "flip feng shui"). */
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		uint64_t e = 0;
		volatile char probe = line[0];
		(void)probe;
		if (pread(fd, &e, 8, (off_t)(((uintptr_t)line / 4096) * 8)) == 8 && (e & ((1ULL << 55) - 1)))
			ESCAPED("pagemap shows a physical frame number");
		close(fd);
	}
	BLOCKED("kernel memory and addresses are hidden");
}
