/* A fork bomb: every child forks too, until fork fails.  The pids
 * cgroup (or RLIMIT_NPROC without one) must stop it near --pids.
 * argv[1]: the limit.  Counts through a pipe how many processes ran. */
#include <signal.h>
#include <sys/wait.h>
#include "escape.h"

int main(int argc, char **argv)
{
	long limit = argc > 1 ? atol(argv[1]) : 32;
	int p[2];
	long n = 0;
	char c;

	if (pipe(p) < 0)
		BLOCKED("pipe: %s", ename(errno));
	pid_t top = fork();
	if (top == 0) {
		close(p[0]);
		setpgid(0, 0);
		for (int round = 0; round < 12; round++) {
			pid_t k = fork();
			if (k == 0) {
				(void)!write(p[1], "x", 1);
				continue; /* the child keeps forking */
			}
			if (k < 0)
				break;
		}
		pause();
		_exit(0);
	}
	close(p[1]);
	/* Count arrivals for a while; the bomb would reach 4096 processes. */
	struct timeval tv = { 2, 0 };
	fd_set set;
	for (;;) {
		FD_ZERO(&set);
		FD_SET(p[0], &set);
		if (select(p[0] + 1, &set, NULL, NULL, &tv) <= 0 || read(p[0], &c, 1) != 1)
			break;
		n++;
		tv.tv_sec = 0;
		tv.tv_usec = 300000;
	}
	kill(-top, SIGKILL);
	kill(top, SIGKILL);
	while (waitpid(-1, NULL, 0) > 0)
		;
	if (n > 2 * limit)
		ESCAPED("%ld processes with a limit of %ld", n, limit);
	BLOCKED("the fork bomb stopped at %ld processes (limit %ld)", n, limit);
}
