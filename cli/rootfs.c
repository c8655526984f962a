/* nsbox rootfs: builds, lists and removes root trees.  The work is Debian's
 * (mmdebstrap), driven by rootfs/nsbox-rootfs, which this execs: beside the
 * nsbox binary in the build tree, else in LIBEXECDIR; NSBOX_ROOTFS_TOOL
 * overrides both. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"

#ifndef NSBOX_LIBEXECDIR
#define NSBOX_LIBEXECDIR "/usr/local/libexec/nsbox"
#endif

static int tool_path(char *buf, size_t size)
{
	const char *env = getenv("NSBOX_ROOTFS_TOOL");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env)
		return snprintf(buf, size, "%s", env) < (int)size ? 0 : -1;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if (snprintf(buf, size, "%s/nsbox-rootfs", self) < (int)size && access(buf, X_OK) == 0)
				return 0;
		}
	}
	return snprintf(buf, size, "%s/nsbox-rootfs", NSBOX_LIBEXECDIR) < (int)size ? 0 : -1;
}

int cmd_rootfs(int argc, char **argv)
{
	char path[PATH_MAX];

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		if (argc < 2)
			fputs("nsbox rootfs: no command given\n", stderr);
		fputs("usage: nsbox rootfs build [--force] NAME|FILE.tree\n"
		      "       nsbox rootfs list\n"
		      "       nsbox rootfs remove [--force] NAME|NAME-HASH... | [--force] --stale\n"
		      "See nsbox(1), ROOT TREES.\n",
		      argc < 2 ? stderr : stdout);
		return argc < 2 ? NSBOX_EXIT_USAGE : 0;
	}
	if (tool_path(path, sizeof(path)) < 0) {
		fprintf(stderr, "nsbox rootfs: the path of nsbox-rootfs is too long\n");
		return NSBOX_EXIT_SETUP;
	}
	argv[0] = path;
	execv(path, argv);
	fprintf(stderr, "nsbox rootfs: %s: %s\n", path, strerror(errno));
	return NSBOX_EXIT_SETUP;
}
