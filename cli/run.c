/* nsbox run [OPTIONS] -- COMMAND [ARG...]: a thin front end over
 * nsbox_run() (include/nsbox.h). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

static void run_usage(FILE *f)
{
	fprintf(f,
		"usage: nsbox run [OPTIONS] [--] COMMAND [ARG...]\n"
		"  --json-status FILE|-   report how it ended as JSON\n%s",
		args_jail_help);
}

int cmd_run(int argc, char **argv)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	struct cli_err err = { 0 };
	const char *json_status = NULL;
	/* The CLI is single-threaded: launch from here, no helper to start. */
	struct nsbox_run_opts o = {
		.struct_size = sizeof(o), .warn = cli_warn, .forward_signals = true, .in_process = true
	};
	struct nsbox_run_status st = { .struct_size = sizeof(st) };
	int i, code = NSBOX_EXIT_USAGE;

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
			code = 0;
			goto out;
		}
		if (strcmp(argv[i], "--json-status") == 0 && i + 1 < argc) {
			json_status = argv[++i];
			continue;
		}
		if (strncmp(argv[i], "--json-status=", 14) == 0) {
			json_status = argv[i] + 14;
			continue;
		}
		if (strcmp(argv[i], "--connect") == 0 || strncmp(argv[i], "--connect=", 10) == 0) {
			/* nsboxd serves Python sessions; a one-off command keeps its
			 * stdio and signals, which a service would have to relay. */
			fprintf(stderr,
				"nsbox run: --connect: nsboxd runs Python sessions (nsbox python --connect), "
				"not one-off commands; run them without --connect\n");
			code = NSBOX_EXIT_USAGE;
			goto out;
		}
		r = args_parse_jail_option(p, argc, argv, &i, &err);
		if (r < 0) {
			fprintf(stderr, "nsbox run: %s\n", err.msg);
			goto out;
		}
		if (r == 0) {
			fprintf(stderr, "nsbox run: unknown option '%s'\n", argv[i]);
			run_usage(stderr);
			goto out;
		}
	}
	if (i < argc && nsbox_policy_check(p, &e) < 0) {
		fprintf(stderr, "nsbox run: %s\n", nsbox_error_message(e));
		goto out;
	}
	if (i >= argc) {
		fprintf(stderr, "nsbox run: no command given\n");
		run_usage(stderr);
		goto out;
	}
	if (nsbox_run(p, argv + i, &o, &st, &e) < 0) {
		fprintf(stderr, "nsbox: run: %s\n", nsbox_error_message(e));
		code = NSBOX_EXIT_SETUP;
		goto out;
	}
	code = st.exit_code;
	if (st.exec_errno)
		fprintf(stderr, "nsbox run: %s: %s\n", argv[i], strerror(st.exec_errno));
	else if (st.time_limit)
		fprintf(stderr, "nsbox run: time limit exceeded\n");
	else if (code == NSBOX_EXIT_MEMORY)
		fprintf(stderr, "nsbox run: memory limit exceeded (peak %llu bytes)\n",
			(unsigned long long)st.peak_memory);
	if (json_status && cli_write_status(json_status, &st) < 0)
		fprintf(stderr, "nsbox run: cannot write --json-status %s\n", json_status);
out:
	nsbox_error_free(e);
	nsbox_policy_free(p);
	return code;
}
