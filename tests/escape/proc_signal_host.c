/* Signal a host process by its host pid, and open a pidfd for it.
 * argv[1]: the host sleeper's pid. */
#include <signal.h>
#include <sys/stat.h>
#include "escape.h"

static int is_host_sleeper(pid_t pid)
{
	char p[64], buf[256] = "";
	int fd;

	snprintf(p, sizeof(p), "/proc/%d/cmdline", pid);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	(void)!read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return strstr(buf, "sleep") != NULL;
}

int main(int argc, char **argv)
{
	pid_t pid;
	char p[64];
	struct stat st;

	if (argc < 2)
		ESCAPED("usage: proc_signal_host PID (test bug)");
	pid = (pid_t)atoi(argv[1]);
	if (pid <= 1)
		ESCAPED("usage: proc_signal_host PID (test bug)");
	snprintf(p, sizeof(p), "/proc/%d", pid);
	if (stat(p, &st) == 0 && is_host_sleeper(pid))
		ESCAPED("%s is the host sleeper", p);
	if (kill(pid, 0) == 0 && is_host_sleeper(pid))
		ESCAPED("kill(%d, 0) reaches the host sleeper", pid);
	(void)kill(pid, SIGKILL);
	(void)kill(pid, SIGSTOP);
	long fd = syscall(SYS_pidfd_open, pid, 0);
	if (fd >= 0 && is_host_sleeper(pid))
		ESCAPED("pidfd_open(%d) on the host sleeper", pid);
	if (fd >= 0 && syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0)
		NOTE("pidfd_send_signal hit some inside pid %d", pid);
	BLOCKED("host pid %d is not in this pid namespace (the test checks it survived)", pid);
}
