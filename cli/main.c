/* nsbox: run commands and Python in a kernel-isolated sandbox.  A thin
 * front end: every subcommand lives in its own file over the core. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"

static const char usage[] =
	"usage: nsbox run [OPTIONS] -- COMMAND [ARG...]\n"
	"       nsbox python [OPTIONS] [-c CODE | FILE | -]\n"
	"       nsbox mcp [OPTIONS]\n"
	"       nsbox rootfs build [--force] NAME | nsbox rootfs list\n"
	"       nsbox info\n"
	"       nsbox doctor\n"
	"       nsbox policy check FILE | nsbox policy show [--policy NAME|FILE] [OPTIONS]\n"
	"       nsbox help | nsbox --version\n"
	"See nsbox(1).\n";

int main(int argc, char **argv)
{
	/* A parent that ignored SIGCHLD would break waiting (bubblewrap main). */
	signal(SIGCHLD, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	if (argc < 2) {
		fputs(usage, stderr);
		return NSBOX_EXIT_USAGE;
	}
	if (strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (strcmp(argv[1], "python") == 0)
		return cmd_python(argc - 1, argv + 1);
	if (strcmp(argv[1], "mcp") == 0)
		return cmd_mcp(argc - 1, argv + 1);
	if (strcmp(argv[1], "rootfs") == 0)
		return cmd_rootfs(argc - 1, argv + 1);
	if (strcmp(argv[1], "info") == 0)
		return cmd_info(argc - 1, argv + 1);
	if (strcmp(argv[1], "doctor") == 0)
		return cmd_doctor(argc - 1, argv + 1);
	if (strcmp(argv[1], "policy") == 0)
		return cmd_policy(argc - 1, argv + 1);
	if (strcmp(argv[1], "--version") == 0) {
		printf("nsbox %s\n", nsbox_version());
		return 0;
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(usage, stdout);
		return 0;
	}
	fprintf(stderr, "nsbox: unknown command '%s'\n%s", argv[1], usage);
	return NSBOX_EXIT_USAGE;
}
