/* nsbox run [OPTIONS] -- COMMAND [ARG...]: a thin front end over
 * nsbox_run() (include/nsbox.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"

/* run's own options, for "did you mean". */
static const char *const run_opts[] = { "json-status", "quiet", "help", "connect", NULL };

static void run_usage(FILE *f)
{
	fprintf(f,
		"usage: nsbox run [OPTIONS] [--] COMMAND [ARG...]\n"
		"  --json-status FILE|-   report how it ended as JSON (FILE is created up front)\n"
		"  --quiet                no warnings about limits enforced by a fallback\n%s",
		args_jail_help);
}

/* run's own options that take the next word (args_load_policy). */
static const char *const run_values[] = { "json-status", "connect", NULL };

int cmd_run(int argc, char **argv)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	struct cli_err err = { 0 };
	const char *json_status = NULL;
	int status_fd = -1;
	/* The CLI is single-threaded: launch from here, no helper to start. */
	struct nsbox_run_opts o = {
		.struct_size = sizeof(o), .warn = cli_warn, .forward_signals = true, .in_process = true
	};
	struct nsbox_run_status st = { .struct_size = sizeof(st) };
	struct cli_tty tty = { .slave = -1, .relay = -1 };
	int i, r, stdio[3], code = NSBOX_EXIT_USAGE;

	if (args_load_policy(&p, argc, argv, run_values, &err) < 0) {
		fprintf(stderr, "nsbox run: %s\n", err.msg);
		return NSBOX_EXIT_USAGE;
	}
	for (i = 1; i < argc; i++) {
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
		if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) {
			o.warn = NULL;
			continue;
		}
		if (strcmp(argv[i], "--json-status") == 0) {
			if (i + 1 >= argc) {
				fprintf(stderr, "nsbox run: --json-status needs a value (a file, or - for stdout)\n");
				code = NSBOX_EXIT_USAGE;
				goto out;
			}
			json_status = argv[++i];
			continue;
		}
		if (strncmp(argv[i], "--json-status=", 14) == 0) {
			json_status = argv[i] + 14;
			if (!*json_status) {
				fprintf(stderr, "nsbox run: --json-status needs a value (a file, or - for stdout)\n");
				code = NSBOX_EXIT_USAGE;
				goto out;
			}
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
			args_unknown_option("run", argv[i], run_opts, &err);
			fprintf(stderr, "nsbox run: %s\n", err.msg);
			goto out;
		}
	}
	if (i < argc && nsbox_policy_check(p, &e) < 0) {
		fprintf(stderr, "nsbox run: %s\n", nsbox_error_message(e));
		goto out;
	}
	if (i >= argc || !argv[i][0]) {
		fprintf(stderr, "nsbox run: no command given%s (see nsbox run --help)\n",
			i < argc ? " (an empty name)" : "");
		goto out;
	}
	/* The status is the run's outcome as the caller will read it: where
	 * the sandbox may write (its workspace, a writable bind) it replaced
	 * the file with its own, exit code 0 for a command that failed. */
	if (json_status && strcmp(json_status, "-") != 0 && nsbox_policy_check_host_file(p, json_status, &e) < 0) {
		fprintf(stderr, "nsbox run: --json-status %s\n", nsbox_error_message(e));
		goto out;
	}
	/* Before the command runs, not after: a status that cannot be
	 * written is a usage error, found while nothing has happened yet. */
	if (json_status && strcmp(json_status, "-") != 0 && (status_fd = cli_open_status(json_status, &err)) < 0) {
		fprintf(stderr, "nsbox run: --json-status %s\n", err.msg);
		goto out;
	}
	/* A terminal on stdin: the command gets a pty of its own as its
	 * controlling terminal (cli/tty.c), never ours.  On stdout or stderr
	 * only, libnsbox gives it a pty of its own for them (host/ttyrelay.c). */
	if (isatty(0)) {
		if (cli_tty_start(&tty, &err) < 0) {
			fprintf(stderr, "nsbox run: %s\n", err.msg);
			code = NSBOX_EXIT_SETUP;
			goto out;
		}
		stdio[0] = tty.slave;
		stdio[1] = isatty(1) ? tty.slave : 1;
		stdio[2] = isatty(2) ? tty.slave : 2;
		o.stdio = stdio;
		o.controlling_tty = true;
	}
	r = nsbox_run(p, argv + i, &o, &st, &e);
	cli_tty_stop(&tty);
	if (r < 0) {
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
		fprintf(stderr, "nsbox run: memory limit exceeded (peak %.1f MiB)\n",
			(double)st.peak_memory / (1 << 20));
	if (json_status) {
		int fd = status_fd;

		status_fd = -1; /* cli_write_status closes it */
		if (cli_write_status(json_status, fd, &st) < 0)
			fprintf(stderr, "nsbox run: cannot write --json-status %s: %s\n", json_status, strerror(errno));
	}
out:
	if (status_fd >= 0)
		close(status_fd);
	nsbox_error_free(e);
	nsbox_policy_free(p);
	return code;
}
