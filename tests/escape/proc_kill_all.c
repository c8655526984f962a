/* kill -9 -1, as many times as there are pids: everything this user may
 * signal.  Outside a pid namespace this takes down every process of the
 * invoking user (and with host root, the host).  argv[1]: the host
 * sleeper's pid, which the test checks afterwards. */
#include <signal.h>
#include "escape.h"

int main(int argc, char **argv)
{
	int n = 0;

	for (int i = 0; i < 16; i++)
		if (kill(-1, SIGKILL) == 0)
			n++;
	/* Any process group id the host might use. */
	for (pid_t pg = 2; pg < 4096; pg++)
		if (pg != getpgrp())
			(void)kill(-pg, SIGKILL);
	if (argc > 1) {
		pid_t host = (pid_t)atoi(argv[1]);
		if (host <= 1)
			ESCAPED("usage: proc_kill_all PID (test bug)");
		must_fail("kill host pid group", kill(-host, SIGKILL));
	}
	BLOCKED("kill(-1) worked %d times, only inside the pid namespace (the test checks the host)", n);
}
