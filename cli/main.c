/* nsbox: run commands and Python in a kernel-isolated sandbox.  A thin
 * front end: every subcommand lives in its own file over the core. */
#include <errno.h>
#include <fcntl.h>
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
	"       nsbox help [COMMAND] | nsbox --version\n"
	"See nsbox(1).\n";

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{ "run", cmd_run },	  { "python", cmd_python }, { "mcp", cmd_mcp },	      { "info", cmd_info },
	{ "doctor", cmd_doctor }, { "policy", cmd_policy }, { "rootfs", cmd_rootfs },
};

static int (*find_command(const char *name))(int, char **)
{
	for (size_t k = 0; k < ARRAY_SIZE(commands); k++)
		if (strcmp(commands[k].name, name) == 0)
			return commands[k].fn;
	return NULL;
}

/* Started with 0, 1 or 2 closed, the first descriptor nsbox opens would
 * take its place: an internal eventfd would be the
 * sandbox's stdin, a session's socket the command's stdout.  /dev/null goes on each closed one first, as
 * sudo and ssh do. */
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
	int (*fn)(int, char **);

	/* A parent that ignored SIGCHLD would break waiting (bubblewrap main). */
	signal(SIGCHLD, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	if (stdio_ensure() < 0) {
		perror("nsbox: open /dev/null for a closed stdin, stdout or stderr");
		return NSBOX_EXIT_SETUP;
	}
	if (argc < 2) {
		fputs(usage, stderr);
		return NSBOX_EXIT_USAGE;
	}
	fn = find_command(argv[1]);
	if (fn)
		return fn(argc - 1, argv + 1);
	if (strcmp(argv[1], "--version") == 0) {
		printf("nsbox %s\n", nsbox_version());
		return 0;
	}
	if (strcmp(argv[1], "help") == 0 && argc > 2) {
		/* `nsbox help run` is `nsbox run --help`. */
		char *sub[] = { argv[2], "--help", NULL };

		fn = find_command(argv[2]);
		if (!fn) {
			fprintf(stderr, "nsbox help: unknown command '%s' (see nsbox --help)\n", argv[2]);
			return NSBOX_EXIT_USAGE;
		}
		return fn(2, sub);
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(usage, stdout);
		return 0;
	}
	fprintf(stderr, "nsbox: unknown command '%s' (see nsbox --help)\n", argv[1]);
	return NSBOX_EXIT_USAGE;
}
