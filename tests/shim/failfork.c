/* LD_PRELOAD'ed into nsbox by a test: fork(3) fails with EAGAIN in the
 * process that loaded it (not in its children, nor in the sandbox's pid 1,
 * a clone of it) while NSBOX_TEST_FAIL_FORK is set.  For a host-side fork
 * failure the tests can't otherwise cause, such as nsbox run's lazy egress
 * proxy (test_egress.py). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static pid_t loader;

__attribute__((constructor)) static void init(void)
{
	loader = getpid();
}

pid_t fork(void)
{
	pid_t (*real)(void) = (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");

	if (getpid() == loader && getenv("NSBOX_TEST_FAIL_FORK")) {
		errno = EAGAIN;
		return -1;
	}
	return real();
}
