/* nsboxd's event loop (nsboxd(8)): one thread over non-blocking fds. */
#ifndef NSBOXD_DAEMON_H
#define NSBOXD_DAEMON_H

#include <stdbool.h>

#include "config.h"

struct daemon_opts {
	const char *config_path;	/* nsboxd.conf */
	bool config_may_be_missing;	/* the default path */
	const char *listen_path;	/* --listen, or NULL: socket activation */
	int listen_mode;		/* --listen's socket mode */
	const char *listen_group;	/* --group: the socket's group, NULL: ours */
	bool verbose;
};

/* Run until SIGTERM/SIGINT (or idle, when socket-activated).  Returns the
 * process exit status; messages go to stderr (the journal). */
int daemon_run(const struct daemon_opts *o);

#endif
