/* Per-user and host-wide kernel budgets (README, "Threat model", the
 * budget table).  The sandbox's user is the invoking host uid, so every
 * budget the kernel keeps per user is shared with the host user's own
 * processes.  What the kernel counts per user namespace (the ucounts:
 * /proc/sys/user/max_*, and RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE,
 * RLIMIT_MEMLOCK and RLIMIT_NPROC since 5.14) is capped inside the
 * sandbox at a fraction of the host's, so one sandbox can't exhaust it;
 * interfaces a Python sandbox does not need are denied by seccomp
 * (policy/seccomp-rules.c), and kernel memory is charged to the memory
 * cgroup (cgroup.c). */
#ifndef NSBOX_BUDGET_H
#define NSBOX_BUDGET_H

#include "error.h"
#include "policy.h"

/* A sandbox gets at most 1/BUDGET_SHARE of each per-user budget of the
 * host user: BUDGET_SHARE sandboxes of one user at once can still take it
 * all (the host's own processes then wait for one to end). */
#define BUDGET_SHARE 8

enum budget_userns {
	BUDGET_INOTIFY_INSTANCES = 0,
	BUDGET_INOTIFY_WATCHES,
	BUDGET__N_SHARED,	/* above: a share of the host's; below: none */
	BUDGET_FANOTIFY_GROUPS = BUDGET__N_SHARED,
	BUDGET_FANOTIFY_MARKS,
	BUDGET_USER_NS,
	BUDGET_MNT_NS,
	BUDGET_PID_NS,
	BUDGET_IPC_NS,
	BUDGET_UTS_NS,
	BUDGET_CGROUP_NS,
	BUDGET_TIME_NS,
	BUDGET__N
};

/* The launcher's own per-user-namespace limits, read before the clone
 * (inside the new user namespace /proc/sys/user shows the new one's). */
struct budget_host {
	long long userns[BUDGET__N];	/* -1: unknown (kernel without it) */
};

/* Launcher side, before the clone: fill *h.  Never fails. */
void budget_probe(struct budget_host *h);

/* pid 1, in the new user namespace with its capabilities there
 * (CAP_SYS_RESOURCE), the host's /proc still mounted, before the payload
 * exists: write the sandbox user namespace's limits (a share of h's for
 * inotify; 0 for fanotify and for every namespace type but net, which the
 * network thread caps once it has made its own; under Seccomp=enforce of
 * those zeros only max_user_namespaces, budget.c says why) and lower the
 * per-user rlimits to a share of pid 1's, for pid 1 and everything it
 * forks.  procfd: the host's /proc (O_PATH; the network thread's, which
 * may run after the main thread has pivoted), or -1 for the path "/proc".
 * Returns 0, or -1 with err set (step "budget"). */
int budget_apply(const struct nsbox_policy *p, const struct budget_host *h, int procfd, struct nsbox_err *err);

/* On the thread that made the new network namespace, inside it: no more
 * network namespaces, and per-socket buffer caps for the namespace (so
 * where no memory cgroup charges socket buffers, one socket holds at most
 * BUDGET_SOCK_BUF each way).  procfd: the host's /proc (O_PATH), or -1 for
 * the path "/proc".  Returns 0 or -1 with err set. */
#define BUDGET_SOCK_BUF (1 << 20)
int budget_netns(int procfd, struct nsbox_err *err);

#endif
