/* Plant symlinks and hard links in the writable /tmp pointing at host
 * paths, and follow them.  argv[1]: the canary's host path. */
#include "escape.h"

int main(int argc, char **argv)
{
	const char *targets[] = { argv[1], "/proc/1/root/etc/shadow", "/proc/self/root/../../etc/shadow",
				  "/proc/1/cwd", "../../../../../../etc/shadow" };

	if (argc < 2)
		ESCAPED("usage: files_symlink CANARY (test bug)");
	for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
		char l[64];
		snprintf(l, sizeof(l), "/tmp/link%zu", i);
		if (symlink(targets[i], l) < 0)
			ESCAPED("symlink in /tmp failed (%s): the test cannot run", ename(errno));
		must_not_open(l, O_RDONLY);
	}
	/* A hard link to a file of another mount is EXDEV; to a root-owned
	 * file it needs ownership (protected_hardlinks). */
	must_fail("link /etc/ld.so.cache", link("/etc/ld.so.cache", "/tmp/cache"));
	must_fail("link /usr/bin/su", link("/usr/bin/su", "/tmp/su"));
	BLOCKED("links in /tmp resolve inside the sandbox only");
}
