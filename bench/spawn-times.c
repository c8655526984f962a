/* Times whole commands: spawn, wait, repeat.  Commands are given as
 * argument lists separated by "::" and are run interleaved (A B C A B C...)
 * so machine drift hits them alike.  Prints one line per command:
 * "label<TAB>us us us ...".  Used by bench/run.sh. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	char **cmds[32];
	int ncmd = 0, runs, warm = 3;
	double *t[32];

	if (argc < 4) {
		fprintf(stderr, "usage: spawn-times RUNS CMD... [:: CMD...]...\n");
		return 2;
	}
	runs = atoi(argv[1]);
	cmds[ncmd++] = &argv[2];
	for (int i = 2; i < argc && ncmd < 32; i++)
		if (strcmp(argv[i], "::") == 0) {
			argv[i] = NULL;
			cmds[ncmd++] = &argv[i + 1];
		}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	for (int c = 0; c < ncmd; c++)
		t[c] = calloc((size_t)runs, sizeof(double));
	for (int r = -warm; r < runs; r++)
		for (int c = 0; c < ncmd; c++) {
			pid_t pid;
			int st;
			double t0 = now_us();
			if (posix_spawn(&pid, cmds[c][0], &fa, NULL, cmds[c], environ) != 0) {
				perror(cmds[c][0]);
				return 1;
			}
			waitpid(pid, &st, 0);
			double dt = now_us() - t0;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				fprintf(stderr, "spawn-times: %s failed (status %d)\n", cmds[c][0], st);
				return 1;
			}
			if (r >= 0)
				t[c][r] = dt;
		}
	for (int c = 0; c < ncmd; c++) {
		for (int r = 0; r < runs; r++)
			printf("%s%.1f", r ? " " : "", t[c][r]);
		printf("\n");
	}
	return 0;
}
