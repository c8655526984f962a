/* nsbox policy check FILE | nsbox policy show [--policy NAME|FILE] [OPTIONS] */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

int cmd_policy(int argc, char **argv)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };

	if (argc >= 3 && strcmp(argv[1], "check") == 0) {
		int bad = 0;
		for (int i = 2; i < argc; i++) {
			if (policy_load(&p, argv[i], &err) < 0 || policy_validate(&p, &err) < 0) {
				fprintf(stderr, "%s\n", err.msg);
				bad = 1;
			} else {
				printf("%s: ok\n", argv[i]);
			}
			policy_free(&p);
		}
		return bad ? NSBOX_EXIT_USAGE : 0;
	}
	if (argc >= 2 && strcmp(argv[1], "show") == 0) {
		if (args_load_policy(&p, argc - 1, argv + 1, &err) < 0) {
			fprintf(stderr, "nsbox policy show: %s\n", err.msg);
			return NSBOX_EXIT_USAGE;
		}
		for (int i = 2; i < argc; i++) {
			int r = args_parse_jail_option(&p, argc, argv, &i, &err);
			if (r <= 0) {
				if (r == 0)
					fprintf(stderr, "nsbox policy show: unknown option '%s'\n", argv[i]);
				else
					fprintf(stderr, "nsbox policy show: %s\n", err.msg);
				policy_free(&p);
				return NSBOX_EXIT_USAGE;
			}
		}
		if (policy_validate(&p, &err) < 0) {
			fprintf(stderr, "nsbox policy show: %s\n", err.msg);
			policy_free(&p);
			return NSBOX_EXIT_USAGE;
		}
		policy_print(&p, stdout);
		policy_free(&p);
		return 0;
	}
	fprintf(stderr, "usage: nsbox policy check FILE...\n       nsbox policy show [--policy NAME|FILE] [OPTIONS]\n");
	return NSBOX_EXIT_USAGE;
}
