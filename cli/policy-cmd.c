/* nsbox policy check FILE | nsbox policy show [--policy NAME|FILE] [OPTIONS] */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

int cmd_policy(int argc, char **argv)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	struct cli_err err = { 0 };

	if (argc >= 3 && strcmp(argv[1], "check") == 0) {
		int bad = 0;
		for (int i = 2; i < argc; i++) {
			if (nsbox_policy_new(argv[i], &p, &e) < 0 || nsbox_policy_check(p, &e) < 0) {
				fprintf(stderr, "%s\n", nsbox_error_message(e));
				nsbox_error_free(e);
				e = NULL;
				bad = 1;
			} else {
				printf("%s: ok\n", argv[i]);
			}
			nsbox_policy_free(p);
			p = NULL;
		}
		return bad ? NSBOX_EXIT_USAGE : 0;
	}
	if (argc >= 2 && strcmp(argv[1], "show") == 0) {
		char *text;

		if (args_load_policy(&p, argc - 1, argv + 1, &err) < 0) {
			fprintf(stderr, "nsbox policy show: %s\n", err.msg);
			return NSBOX_EXIT_USAGE;
		}
		for (int i = 2; i < argc; i++) {
			int r = args_parse_jail_option(p, argc, argv, &i, &err);
			if (r <= 0) {
				if (r == 0)
					fprintf(stderr, "nsbox policy show: unknown option '%s'\n", argv[i]);
				else
					fprintf(stderr, "nsbox policy show: %s\n", err.msg);
				nsbox_policy_free(p);
				return NSBOX_EXIT_USAGE;
			}
		}
		if (nsbox_policy_check(p, &e) < 0) {
			fprintf(stderr, "nsbox policy show: %s\n", nsbox_error_message(e));
			nsbox_error_free(e);
			nsbox_policy_free(p);
			return NSBOX_EXIT_USAGE;
		}
		text = nsbox_policy_to_string(p);
		nsbox_policy_free(p);
		if (!text) {
			fprintf(stderr, "nsbox policy show: out of memory\n");
			return NSBOX_EXIT_USAGE;
		}
		fputs(text, stdout);
		nsbox_free(text);
		return 0;
	}
	fprintf(stderr, "usage: nsbox policy check FILE...\n       nsbox policy show [--policy NAME|FILE] [OPTIONS]\n");
	return NSBOX_EXIT_USAGE;
}
