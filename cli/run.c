/* nsbox run [OPTIONS] -- COMMAND [ARG...] */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

static void run_usage(FILE *f)
{
	fprintf(f, "usage: nsbox run [OPTIONS] [--] COMMAND [ARG...]\n"
		   "  --json-status FILE|-   report how it ended as JSON\n%s",
		args_jail_help);
}

int cmd_run(int argc, char **argv)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	struct jail j;
	const char *json_status = NULL;
	int i, code;

	if (args_load_policy(&p, argc, argv, &err) < 0) {
		fprintf(stderr, "nsbox run: %s\n", err.msg);
		return NSBOX_EXIT_USAGE;
	}
	for (i = 1; i < argc; i++) {
		int r;
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (argv[i][0] != '-')
			break;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			run_usage(stdout);
			policy_free(&p);
			return 0;
		}
		if (strcmp(argv[i], "--json-status") == 0 && i + 1 < argc) {
			json_status = argv[++i];
			continue;
		}
		if (strncmp(argv[i], "--json-status=", 14) == 0) {
			json_status = argv[i] + 14;
			continue;
		}
		r = args_parse_jail_option(&p, argc, argv, &i, &err);
		if (r < 0) {
			fprintf(stderr, "nsbox run: %s\n", err.msg);
			policy_free(&p);
			return NSBOX_EXIT_USAGE;
		}
		if (r == 0) {
			fprintf(stderr, "nsbox run: unknown option '%s'\n", argv[i]);
			run_usage(stderr);
			policy_free(&p);
			return NSBOX_EXIT_USAGE;
		}
	}
	if (i < argc && policy_validate(&p, &err) < 0) {
		fprintf(stderr, "nsbox run: %s\n", err.msg);
		policy_free(&p);
		return NSBOX_EXIT_USAGE;
	}
	if (i >= argc) {
		fprintf(stderr, "nsbox run: no command given\n");
		run_usage(stderr);
		policy_free(&p);
		return NSBOX_EXIT_USAGE;
	}

	struct jail_spec spec = {
		.policy = &p, .argv = argv + i, .exec_fd = -1, .warn = cli_warn,
	};
	int r = jail_start(&j, &spec, &err);
	if (r == -1) {
		cli_print_error("run", &err);
		policy_free(&p);
		return NSBOX_EXIT_SETUP;
	}
	if (r == -2) {
		fprintf(stderr, "nsbox run: %s\n", err.msg);
	} else {
		cli_forward_signals(j.pid);
		if (jail_wait(&j, NULL, &err) < 0)
			cli_print_error("run", &err);
		cli_forward_signals(0);
		jail_destroy(&j);
	}
	code = jail_exit_code(&j.status);
	if (j.status.time_limit)
		fprintf(stderr, "nsbox run: time limit exceeded (%.3g s)\n", p.time_limit);
	else if (code == NSBOX_EXIT_MEMORY)
		fprintf(stderr, "nsbox run: memory limit exceeded (peak %llu bytes)\n",
			(unsigned long long)j.status.peak_memory);
	if (json_status && cli_write_status(json_status, &j.status, &j) < 0)
		fprintf(stderr, "nsbox run: cannot write --json-status %s\n", json_status);
	policy_free(&p);
	return code;
}
