/* nsbox-runner: runs inside the sandbox, embeds CPython and serves the
 * runner protocol (nsbox-protocol(7)) on the socket it inherits (fd 3 by
 * default).  It never touches the host's terminal: setup errors go back as
 * an ERROR frame.  Usage: nsbox-runner [--fd N] [--dist-packages]
 * [--preload "MOD ..."] (the policy's Preload=: imported before HELLO)
 * `nsbox-runner --helper [--spare]` is libnsbox's helper process instead
 * (helper.c). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <jansson.h>

#include "proto.h"
#include "runner.h"
#include "util.h"

static void report(int fd, const struct nsbox_err *err)
{
	json_t *m = json_pack("{s:s}", "message", err->msg);
	char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;

	if (s)
		proto_write_frame(fd, PROTO_ERROR, 0, s, strlen(s), NULL);
	free(s);
	json_decref(m);
}

/* Memory limited by RLIMIT_AS (no memory cgroup): user code that runs out
 * gets MemoryError, and formatting it must not need to import anything
 * then.  (Otherwise traceback is imported on first use.) */
static const char *const under_rlimit[] = { "traceback" };

static bool as_limited(void)
{
	struct rlimit rl;

	return getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}

int main(int argc, char **argv)
{
	struct nsbox_err err = { 0 };
	bool dist = false;
	const char *preload = NULL;
	unsigned long fd = 3;
	int keep[1];

	/* A write past RLIMIT_FSIZE is OSError(EFBIG), not a dead session:
	 * CPython's own main ignores SIGXFSZ too (Python/pylifecycle.c,
	 * signal_install_handlers); subprocess restores it for children.
	 * Before --helper: the helper's template forks sessions too. */
	signal(SIGXFSZ, SIG_IGN);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--fd") && i + 1 < argc) {
			if (parse_ulong(argv[++i], 1024, &fd) < 0)
				return 2;
		} else if (!strcmp(argv[i], "--dist-packages")) {
			dist = true;
		} else if (!strcmp(argv[i], "--stdin")) {
			runner_keep_stdin = true;
		} else if (!strcmp(argv[i], "--preload") && i + 1 < argc) {
			preload = argv[++i];
		} else if (!strcmp(argv[i], "--helper") && i == 1 &&
			   (argc == 2 || (argc == 3 && !strcmp(argv[2], "--spare")))) {
			/* libnsbox's helper (helper/helper.h): outside any sandbox. */
			return runner_helper_main(argc == 3);
		} else {
			return 2;
		}
	}
	if (fcntl((int)fd, F_GETFD) < 0)
		return 2;
	/* User code's subprocesses must not inherit the protocol socket. */
	if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0)
		return 2;
	keep[0] = (int)fd;
	close_fds_except(3, keep, 1);
	/* A write to a closed socket is an error return, not a death. */
	signal(SIGPIPE, SIG_IGN);
	runner_rlimit_tune();

	if (runner_py_init(dist, &err) < 0 || (as_limited() && runner_py_preload(under_rlimit, 1, &err) < 0) ||
	    runner_py_preload_list(preload, &err) < 0 ||
	    /* What a preload imported goes to the permanent generation, as the
	     * template's does: the session's collections never walk it. */
	    (preload && *preload && runner_py_freeze(&err) < 0) ||
	    runner_py_session((int)fd, &err) < 0) {
		report((int)fd, &err);
		_exit(125);	/* NSBOX_EXIT_SETUP */
	}
	_exit(runner_py_serve());
}
