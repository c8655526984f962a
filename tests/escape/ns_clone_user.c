/* The other ways to a new user namespace: clone() with CLONE_NEWUSER
 * (alone, with CLONE_VM, with CLONE_NEWTIME hidden in the exit-signal
 * byte) and clone3(), whose flags seccomp cannot read. */
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include "escape.h"

static int child(void *arg)
{
	(void)arg;
	_exit(42);
}

static void check(const char *what, long r)
{
	if (r == 0)
		_exit(42);
	if (r > 0) {
		int st;
		waitpid((pid_t)r, &st, __WALL);
		ESCAPED("%s created a process in a new namespace", what);
	}
	NOTE("%s: %s", what, ename(errno));
}

int main(void)
{
	static char stack[65536];
	struct clone_args ca = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };

	check("clone(NEWUSER)", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
	check("clone(NEWUSER|NEWNS|NEWPID)",
	      syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0));
	check("clone(NEWTIME)", syscall(SYS_clone, 0x80, 0, 0, 0, 0));
	check("clone(NEWNET)", syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0));
	/* The high 32 bits of clone's flags are ignored by the kernel. */
	check("clone(NEWUSER | 1<<32)", syscall(SYS_clone, (1UL << 32) | CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
	check("clone(VM|NEWUSER) via glibc",
	      clone(child, stack + sizeof(stack), CLONE_VM | CLONE_NEWUSER | SIGCHLD, NULL));
	check("clone3(NEWUSER)", syscall(SYS_clone3, &ca, sizeof(ca)));
	ca.flags = CLONE_NEWUSER | CLONE_NEWNS;
	check("clone3(NEWUSER|NEWNS)", syscall(SYS_clone3, &ca, sizeof(ca)));
	BLOCKED("no new namespace can be created");
}
