/* nsboxd: the nsbox service (nsboxd(8)).  Arguments in args.c, the event
 * loop in daemon.c. */
#include <stdio.h>

#include "args.h"
#include "config.h"
#include "daemon.h"
#include "nsbox.h"

int main(int argc, char **argv)
{
	struct nsboxd_args a;
	char eb[1024];

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
