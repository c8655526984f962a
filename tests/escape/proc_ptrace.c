/* Trace or poke other processes: ptrace pid 1 (nsbox's init, which
 * holds the socket to the host), PTRACE_TRACEME, process_vm_readv,
 * /proc/1/mem, /proc/1/environ, pidfd_getfd. */
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include "escape.h"

int main(void)
{
	char buf[16];
	struct iovec l = { buf, sizeof(buf) }, r = { (void *)0x400000, sizeof(buf) };

	must_fail("ptrace(ATTACH, 1)", ptrace(PTRACE_ATTACH, 1, 0, 0));
	must_fail("ptrace(SEIZE, 1)", ptrace(PTRACE_SEIZE, 1, 0, 0));
	must_fail("ptrace(TRACEME)", ptrace(PTRACE_TRACEME, 0, 0, 0));
	must_fail("process_vm_readv(1)", syscall(SYS_process_vm_readv, 1, &l, 1, &r, 1, 0));
	must_fail("process_vm_writev(1)", syscall(SYS_process_vm_writev, 1, &l, 1, &r, 1, 0));
	must_not_open("/proc/1/mem", O_RDWR);
	must_not_open("/proc/1/environ", O_RDONLY);
	long pfd = syscall(SYS_pidfd_open, 1, 0);
	if (pfd >= 0)
		for (int fd = 0; fd < 300; fd++)
			must_fail("pidfd_getfd(1)", syscall(SYS_pidfd_getfd, pfd, fd, 0));
	/* A traced child: the parent must not get to trace it. */
	pid_t c = fork();
	if (c == 0) {
		pause();
		_exit(0);
	}
	must_fail("ptrace(ATTACH, child)", ptrace(PTRACE_ATTACH, c, 0, 0));
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
	BLOCKED("no process can be traced or read");
}
