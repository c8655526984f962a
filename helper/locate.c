/* Finding the runner binary and sealing a copy of it (locate.h). */
#include "locate.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#ifndef NSBOX_LIBEXECDIR	/* set by the Makefile; not by every build (fuzzers) */
#define NSBOX_LIBEXECDIR "/usr/local/libexec/nsbox"
#endif


static bool is_file(const char *p)
{
	struct stat sb;

	return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int runner_locate(char *buf, size_t size, struct nsbox_err *err)
{
	const char *env = getenv("NSBOX_RUNNER");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env) {
		if (!is_file(env))
			return err_set(err, ENOENT, "NSBOX_RUNNER=%s is not a file", env);
		snprintf(buf, size, "%s", env);
		return 0;
	}
	/* Next to our own binary first: build/nsbox uses build/nsbox-runner,
	 * build/tests/x uses build/nsbox-runner too. */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;

		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(buf, size, "%s/nsbox-runner", self);
			if (is_file(buf))
				return 0;
			snprintf(buf, size, "%s/../nsbox-runner", self);
			if (is_file(buf))
				return 0;
		}
	}
	/* Next to libnsbox.so itself: a Python host's /proc/self/exe is the
	 * interpreter. */
	Dl_info info;
	if (dladdr((void *)runner_locate, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
		char lib[PATH_MAX], *slash;

		snprintf(lib, sizeof(lib), "%s", info.dli_fname);
		slash = strrchr(lib, '/');
		*slash = '\0';
		snprintf(buf, size, "%s/nsbox-runner", lib);
		if (is_file(buf))
			return 0;
	}
	snprintf(buf, size, "%s/nsbox-runner", NSBOX_LIBEXECDIR);
	if (is_file(buf))
		return 0;
	return err_set(err, ENOENT, "cannot find nsbox-runner (tried next to %s and in %s; set NSBOX_RUNNER)",
		       n > 0 ? self : "/proc/self/exe", NSBOX_LIBEXECDIR);
}

/* Copy the runner into a sealed memfd: what runs from it can never write
 * back to the binary the host executes (runc CVE-2019-5736).  For the
 * helper (once per helper) and unjailed test sessions; a jailed cold
 * session binds the file read-only instead (jail_spec.exec_file): ~7 MB
 * would take ~3 ms to copy. */
int runner_sealed_copy(const char *path, struct nsbox_err *err)
{
	_cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	int mfd;

	if (in < 0)
		return err_sys(err, "open %s", path);
	mfd = sealed_copy_fd(in);
	if (mfd < 0)
		return err_sys(err, "copy %s into a sealed memfd", path);
	return mfd;
}

