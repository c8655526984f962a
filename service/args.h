/* nsboxd's command line (nsboxd(8)), parsed without side effects. */
#ifndef NSBOXD_ARGS_H
#define NSBOXD_ARGS_H

#include <stdbool.h>

#include "daemon.h"

#define NSBOXD_CONF_DEFAULT "/etc/nsbox/nsboxd.conf"

enum nsboxd_action { ACT_RUN, ACT_CHECK_CONFIG, ACT_HELP, ACT_VERSION };

struct nsboxd_args {
	enum nsboxd_action action;
	struct daemon_opts d;
};

/* Returns 0, or -1 with a message in errbuf (exit status 2). */
int nsboxd_parse_args(int argc, char **argv, struct nsboxd_args *a, char *errbuf, unsigned errlen);
extern const char nsboxd_usage[];

#endif
