/* What the launcher (launch.c) hands the sandbox's pid 1 (pid1.c), and pid
 * 1 the payload it starts (payload.c). */
#ifndef NSBOX_PID1_H
#define NSBOX_PID1_H

#include <sched.h>
#include <stdbool.h>
#include <sys/types.h>

#include "budget.h"
#include "jail.h"
#include "steps.h"
struct seccomp_prog;

struct child_ctx {
	const struct jail_spec *spec;
	const struct nsbox_policy *p;
	const struct seccomp_prog *prog;
	/* Whether a cgroup enforces the memory and pids limits (from the
	 * launcher's ATTACHED message; otherwise rlimits stand in). */
	bool cg_mem, cg_pids;
	bool host_root;
	bool owned_by_host_uid;	/* cloned with a HostUid='s euid (launch.c, owner_begin) */
	int sync_fd;
	int exec_src_fd;	/* spec->exec_file, opened by the launcher, or -1 */
	int bound_exec_fd;	/* in pid 1: the file to execute, or -1 */
	int ws_upper_fd;	/* in pid 1: the workspace's upper layer (WorkspaceSize=), or -1 */
	struct mount_srcs *srcs;	/* binds and workspace, opened by the launcher */
	int egress_fd;		/* to the egress proxy ([Network] Allow=), or -1 */
	/* RootFS= a built tree: its lock file with an OFD read lock, held by
	 * pid 1 for the sandbox's life (`nsbox rootfs remove` takes a write
	 * lock; launch.c, rootfs_lock_open); -1 */
	int rootfs_lock;
	struct budget_host budget;	/* the launcher's per-user limits (budget.h) */
	/* The launcher's CPUs, when it moves pid 1 off its own for the setup
	 * (launch.c, spread_decide): pid 1 takes them back. */
	bool spread;
	cpu_set_t cpus;
	/* The launcher's command name, which pid 1 gives up for "nsbox-pid1"
	 * (the payload reads /proc/1/comm) and the payload takes back. */
	char comm[16];
};

/* pid1.c: the clone's child, pid 1 of the new pid namespace.  Runs its
 * setup steps, starts the payload, then reaps and forwards signals until
 * the payload exits.  Never returns. */
__attribute__((noreturn)) void pid1_main(struct child_ctx *c);

/* payload.c: the sandbox's hostname and domain name (UTS namespace),
 * set by pid 1 once for both. */
int uts_setup(const struct nsbox_policy *p, struct nsbox_err *err);
/* A time namespace for pid 1's children whose monotonic and boot clocks
 * start at zero when pid 1 started: start_ns, pid 1's start on the boot
 * clock (payload.c). */
int timens_setup(unsigned long long start_ns, struct nsbox_err *err);
/* Start the payload (vfork-style for a command, a fork for child_fn) with
 * the read end pipefd[0] for pid 1 and the write end pipefd[1] on which a
 * failing setup step or exec sends its struct sync_msg.  Returns its pid,
 * or -1 with errno. */
pid_t payload_start(const struct child_ctx *c, const int pipefd[2]);

#endif
