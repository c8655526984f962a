/* Per-user budgets, held inside the sandbox (budget.h).
 *
 * The kernel charges these per (user namespace, uid) and up the chain of
 * user namespaces (kernel/ucount.c: inc_ucount, inc_rlimit_get_ucounts):
 * a limit set in the sandbox's user namespace, or an rlimit of the
 * sandbox's processes, bounds what the whole sandbox can take of its
 * creator's count in the parent namespace, which is the host user's.  The
 * namespace's owner may lower them while it still has CAP_SYS_RESOURCE
 * there (kernel/ucount.c set_permissions); once pid 1 drops its
 * capabilities nothing inside can raise them again. */
#include "budget.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util.h"

static const char *const userns_files[BUDGET__N] = {
	[BUDGET_INOTIFY_INSTANCES] = "sys/user/max_inotify_instances",
	[BUDGET_INOTIFY_WATCHES] = "sys/user/max_inotify_watches",
	[BUDGET_FANOTIFY_GROUPS] = "sys/user/max_fanotify_groups",
	[BUDGET_FANOTIFY_MARKS] = "sys/user/max_fanotify_marks",
	[BUDGET_USER_NS] = "sys/user/max_user_namespaces",
	[BUDGET_MNT_NS] = "sys/user/max_mnt_namespaces",
	[BUDGET_PID_NS] = "sys/user/max_pid_namespaces",
	[BUDGET_IPC_NS] = "sys/user/max_ipc_namespaces",
	[BUDGET_UTS_NS] = "sys/user/max_uts_namespaces",
	[BUDGET_CGROUP_NS] = "sys/user/max_cgroup_namespaces",
	[BUDGET_TIME_NS] = "sys/user/max_time_namespaces",
};

void budget_probe(struct budget_host *h)
{
	_cleanup_close_ int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
	char buf[32];

	for (int i = 0; i < BUDGET__N; i++) {
		h->userns[i] = -1;
		if (i < BUDGET__N_SHARED && proc >= 0 && read_file_at(proc, userns_files[i], buf, sizeof(buf)) > 0)
			h->userns[i] = strtoll(buf, NULL, 10);
	}
}

/* A share of a budget: at least 1 where the host has any. */
static long long share(long long host)
{
	long long v = host / BUDGET_SHARE;

	return host > 0 && v < 1 ? 1 : v;
}

/* rlimits the kernel counts per user (ucounts): a share of pid 1's own
 * soft limit, soft and hard.  An unlimited host limit stays unlimited
 * here: the kernel does not count that budget against anything. */
static int share_rlimit(int res, const char *name, struct nsbox_err *err)
{
	struct rlimit rl;

	if (getrlimit(res, &rl) < 0)
		return err_sys(err, "getrlimit(%s)", name);
	if (rl.rlim_cur == RLIM_INFINITY)
		return 0;
	rl.rlim_cur = rl.rlim_max = rl.rlim_cur / BUDGET_SHARE > 0 ? rl.rlim_cur / BUDGET_SHARE : 1;
	if (setrlimit(res, &rl) < 0)
		return err_sys(err, "setrlimit(%s, %llu)", name, (unsigned long long)rl.rlim_cur);
	return 0;
}

int budget_apply(const struct nsbox_policy *p, const struct budget_host *h, int procfd, struct nsbox_err *err)
{
	int dir = procfd >= 0 ? procfd : AT_FDCWD;
	const char *prefix = procfd >= 0 ? "" : "/proc/";
	char path[96], val[32];

	err_step(err, "budget");
	for (int i = 0; i < BUDGET__N; i++) {
		long long v = 0;

		/* Under Seccomp=enforce the filter refuses fanotify_init,
		 * unshare, setns, clone3 and clone's namespace flags, and a
		 * sandbox without a user namespace of its own has no capability
		 * to make any other kind (each needs CAP_SYS_ADMIN in its user
		 * namespace): max_user_namespaces is the one limit of these that
		 * still holds something, behind the filter.  Each write costs
		 * ~25 us of every start (a lookup in the new namespace's sysctl
		 * set); Seccomp=log, where the filter only logs, writes all. */
		if (p->seccomp == SECCOMP_ENFORCE && i >= BUDGET__N_SHARED && i != BUDGET_USER_NS)
			continue;
		if (i < BUDGET__N_SHARED) {
			if (h->userns[i] < 0)
				continue;
			v = share(h->userns[i]);
		}
		/* The clone's cgroup namespace and the one pid 1 makes once the
		 * launcher has moved it (pid1.c, SYNC_CG_MOVED): none more. */
		if (i == BUDGET_CGROUP_NS)
			v = 2;
		/* Our own user namespace, whatever mount /proc is: the sysctl
		 * set is the writer's (kernel/ucount.c set_lookup). */
		snprintf(path, sizeof(path), "%s%s", prefix, userns_files[i]);
		snprintf(val, sizeof(val), "%lld", v);
		if (write_file_at(dir, path, val) < 0) {
			/* Kernels without the file (fanotify: 5.19, time: 5.6). */
			if (errno == ENOENT)
				continue;
			return err_sys(err, "write %lld to /proc/%s", v, userns_files[i]);
		}
	}
	/* With the host's network namespace none is made (budget_netns). */
	snprintf(path, sizeof(path), "%ssys/user/max_net_namespaces", prefix);
	if (p->share_net && write_file_at(dir, path, "0") < 0 && errno != ENOENT)
		return err_sys(err, "write 0 to /proc/sys/user/max_net_namespaces");
	/* Signals queued and POSIX timers (each preallocates its sigqueue,
	 * counted here: timer_create fails with EAGAIN past it), POSIX
	 * message queue bytes, SHM_LOCK'ed and other user-locked memory. */
	if (share_rlimit(RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING", err) < 0 ||
	    share_rlimit(RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", err) < 0 ||
	    share_rlimit(RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", err) < 0)
		return -1;
	/* Processes: the pids limit (a cgroup, or RLIMIT_NPROC set to it in
	 * the payload) where the policy has one; a share of the host user's
	 * otherwise. */
	if (!p->pids && share_rlimit(RLIMIT_NPROC, "RLIMIT_NPROC", err) < 0)
		return -1;
	return 0;
}

int budget_netns(int procfd, struct nsbox_err *err)
{
	static const struct {
		const char *file, *val;
		bool optional;
	} net[] = {
		/* min, default, max: the max is what one socket may queue
		 * each way, autotuned or asked for. */
		{ "sys/net/ipv4/tcp_rmem", "4096 131072 1048576" },
		{ "sys/net/ipv4/tcp_wmem", "4096 16384 1048576" },
		/* SO_RCVBUF/SO_SNDBUF caps: the host's before 6.? (no file
		 * here), per namespace but read-only outside the initial user
		 * namespace since (EACCES): the host's cap applies then. */
		{ "sys/net/core/rmem_max", "1048576", true },
		{ "sys/net/core/wmem_max", "1048576", true },
		{ "sys/user/max_net_namespaces", "0" },
	};
	int dir = procfd >= 0 ? procfd : AT_FDCWD;
	char path[96];

	err_step(err, "budget");
	for (size_t i = 0; i < ARRAY_SIZE(net); i++) {
		snprintf(path, sizeof(path), "%s%s", procfd >= 0 ? "" : "/proc/", net[i].file);
		if (write_file_at(dir, path, net[i].val) < 0 && errno != ENOENT &&
		    !(net[i].optional && (errno == EACCES || errno == EPERM)))
			return err_sys(err, "write \"%s\" to /proc/%s", net[i].val, net[i].file);
	}
	return 0;
}
