/* /proc/keys lists every key the caller may view, and the kernel keyring
 * is not namespaced: the invoking user's (or, for a root invoker, root's)
 * keyrings show up with their descriptions.  Docker and runc mask this
 * file.  The keyctl syscalls themselves are denied (k_keyctl). */
#include "escape.h"

int main(void)
{
	char buf[4096];
	int fd = open("/proc/keys", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (n > 0) {
		int lines = 0;
		buf[n] = '\0';
		for (char *p = buf; *p; p++)
			lines += *p == '\n';
		*strchrnul(buf, '\n') = '\0';
		ESCAPED("/proc/keys lists %d host keys, e.g. \"%.60s\"", lines, buf);
	}
	BLOCKED("/proc/keys shows nothing: %s", n < 0 ? ename(errno) : "empty");
}
