/* nsboxd: the nsbox service (nsboxd(8)).  Arguments in args.c, the event
 * loop in daemon.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>

#include "args.h"
#include "config.h"
#include "daemon.h"
#include "nsbox.h"

/* Started with 0, 1 or 2 closed, the first descriptor nsboxd opens would
 * take its place: a client's connection on 2 would get the log.  /dev/null
 * goes on each closed one first, as sudo and ssh do. */
static int stdio_ensure(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd)
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct nsboxd_args a;
	char eb[1024];

	if (stdio_ensure() < 0)
		return 1;
	if (nsboxd_parse_args(argc, argv, &a, eb, sizeof(eb)) < 0) {
		fprintf(stderr, "nsboxd: %s\n%s", eb, nsboxd_usage);
		return 2;
	}
	switch (a.action) {
	case ACT_HELP:
		fputs(nsboxd_usage, stdout);
		return 0;
	case ACT_VERSION:
		printf("nsboxd (libnsbox %s)\n", nsbox_version());
		return 0;
	case ACT_CHECK_CONFIG: {
		struct conf c;

		conf_defaults(&c);
		if (conf_load(&c, a.d.config_path, a.d.config_may_be_missing, eb, sizeof(eb)) < 0) {
			fprintf(stderr, "nsboxd: %s\n", eb);
			return 2;
		}
		conf_print(&c, stdout);
		return 0;
	}
	case ACT_RUN:
		break;
	}
	return daemon_run(&a.d);
}
