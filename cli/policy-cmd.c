/* nsbox policy check FILE... | nsbox policy show [--policy NAME|FILE] [OPTIONS] */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

static const char policy_usage[] =
	"usage: nsbox policy check FILE...\n"
	"       nsbox policy show [--policy NAME|FILE] [OPTIONS]\n"
	"  check: report every error of each policy file (FILE:LINE: what), or FILE: ok\n"
	"  show: print the effective policy, after the jail options below, in the file format\n";

static bool is_help(const char *a)
{
	return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

static int check(int argc, char **argv)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	int bad = 0, i = 1;

	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc) {
		fprintf(stderr, "nsbox policy check: no file given (see nsbox policy --help)\n");
		return NSBOX_EXIT_USAGE;
	}
	for (; i < argc; i++) {
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

static int show(int argc, char **argv)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	struct cli_err err = { 0 };
	char *text;

	if (args_load_policy(&p, argc, argv, NULL, &err) < 0) {
		fprintf(stderr, "nsbox policy show: %s\n", err.msg);
		return NSBOX_EXIT_USAGE;
	}
	for (int i = 1; i < argc; i++) {
		int r = args_parse_jail_option(p, argc, argv, &i, &err);

		if (r == 0)
			args_unknown_option("policy show", argv[i], NULL, &err);
		if (r <= 0) {
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

int cmd_policy(int argc, char **argv)
{
	bool help = false;

	/* --help anywhere before "--", for policy, check or show. */
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		help |= is_help(argv[i]);
	if (help) {
		printf("%s%s", policy_usage, argc > 1 && strcmp(argv[1], "show") == 0 ? args_jail_help : "");
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "check") == 0)
		return check(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "show") == 0)
		return show(argc - 1, argv + 1);
	if (argc >= 2)
		fprintf(stderr, "nsbox policy: unknown subcommand '%s' (check or show; see nsbox policy --help)\n",
			argv[1]);
	else
		fputs(policy_usage, stderr);
	return NSBOX_EXIT_USAGE;
}
