/* The setup steps run inside the new namespaces, one file per facility.
 * Each returns 0 or -1 with err naming what failed. */
#ifndef NSBOX_STEPS_H
#define NSBOX_STEPS_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "policy.h"

/* mount.c: a root launcher clones the policy's bind and workspace sources
 * before the clone (open_tree, OPEN_TREE_CLONE: detached trees, attached by
 * pid 1 with move_mount), with its rights, as it opens exec_file.  Opened
 * by pid 1 they fail for nsboxd's /proc/PID/fd/N of a client's descriptor:
 * a process in another user namespace may not look into a root process's
 * fds (commoncap's ptrace check wants the same user namespace), nor, with a
 * HostUid= of its own, into another uid's; and a bind of it would name a
 * mount of the host's namespace (EINVAL).  An unprivileged launcher opens
 * O_PATH descriptors instead (its uid is the sandbox's), and pid 1 opens
 * the same objects again by their paths in its copy of the mount namespace,
 * checking device and inode.  s starts as { .workspace = -1 } (nothing
 * open); on failure nothing is left open. */
struct mount_srcs {
	int bind[POLICY_MAX_MOUNTS];
	size_t n_bind;		/* bind[0..n_bind) are set (-1 or open) */
	int workspace;
	bool detached;		/* open_tree clones (else the launcher's O_PATH fds) */
};
int mount_open_sources(const struct nsbox_policy *p, struct mount_srcs *s, struct nsbox_err *err);
/* Closes what is open and empties s.  For __attribute__((cleanup)). */
void mount_srcs_close(struct mount_srcs *s);

/* Build the minimal root on a tmpfs and pivot_root into it; takes
 * ownership of srcs (closed, success or not).  Leaves the cwd at
 * /workspace (if any) or /.  host_root: the launcher is host root (the
 * sandbox's user is host uid 0 unless HostUid= says otherwise), so
 * root-only /proc files are masked too.  With a WorkspaceSize= the
 * workspace is an overlay over a tmpfs of that size, and *ws_upper gets an
 * fd of its upper layer (for the launcher: wsync.h); otherwise it is left
 * alone. */
int mount_setup(const struct nsbox_policy *p, struct mount_srcs *srcs, bool host_root, int *ws_upper,
		struct nsbox_err *err);
/* What the payload executes (jail.h, exec_file): *exec_fd gets the
 * launcher's file (exec_src), found again by its path in our mount
 * namespace, as a detached mount of its own (open_tree), read-only, nosuid
 * and nodev and never attached to the sandbox's tree, so nothing in
 * mountinfo names the host path it came from (a build tree's is the
 * user's checkout) and /proc/self/exe reads "/"; or a sealed memfd copy
 * where that is not possible (another file at the path by now, a noexec
 * mount, a kernel before 5.2).  The file can't be rewritten through
 * /proc/self/exe (CVE-2019-5736): its mount is read-only and the sandbox
 * can't change that.  Before the budget step: the detached mount has a
 * mount namespace of its own, which max_mnt_namespaces = 0 then refuses. */
int mount_exec(const char *exec_file, int exec_src, int *exec_fd, struct nsbox_err *err);
/* (What it mounts, as data: rootfs-table.h.) */

/* net.c: a new network namespace with lo up (one rtnetlink request;
 * CAP_NET_ADMIN there is pid 1's from the clone on), made on a thread of its own while
 * the caller goes on: netns_start() begins it (or, with no thread to be
 * had, makes it at once for the caller); netns_join() waits for it and
 * moves the calling thread in.  The caller sets egress_fd (-1: none)
 * before netns_start.  Nothing may be forked, and no filter that
 * denies setns loaded, between the two. */
struct netns_job {
	pthread_t tid;
	bool threaded;
	bool failed;
	int procfd;		/* the host's /proc, O_PATH */
	int nsfd;		/* the new namespace, from the thread */
	int egress_fd;		/* >= 0: make the egress sockets there and send them (egress.h) */
	/* Another of the CPUs was idle when the launcher looked, just before
	 * the clone (launch.c, spread_decide; child_ctx.spread), and cpus
	 * the set pid 1 runs on: the thread goes to one of the others. */
	bool idle_cpu;
	cpu_set_t cpus;
	/* The thread also applies the per-user budgets (budget_apply), off
	 * the main thread's path: where threaded, they are its. */
	const struct nsbox_policy *p;
	const struct budget_host *budget;
	struct nsbox_err err;	/* the thread's error */
};
int netns_start(struct netns_job *job, struct nsbox_err *err);
/* Whether the n other CPUs the caller may run on all have something to
 * run now: the count of runnable tasks in /proc/loadavg (proc(5); the
 * whole host's, of this instant), less the caller.  Unknown: not busy.
 * Then pid 1 moved off the launcher's CPU (launch.c), or a second thread
 * of pid 1's (net.c, netns_job.idle_cpu), only takes turns with whatever
 * keeps that CPU busy. */
bool cpus_busy(int n);
int netns_join(struct netns_job *job, struct nsbox_err *err);

/* caps.c: lock securebits, empty the bounding, ambient, inheritable,
 * permitted and effective sets (libcap). */
int caps_drop_all(struct nsbox_err *err);
/* The two halves of caps_drop_all.  Securebits and the bounding set are
 * inherited across fork, so pid 1 sets them once for itself and the
 * payload; each process then clears its own ambient, permitted, effective
 * and inheritable sets. */
int caps_lock_bounding(struct nsbox_err *err);
int caps_clear(struct nsbox_err *err);
/* A host-side process that reads what the sandbox sends (the egress
 * proxy, egress_fork): the sandbox's host uid and gid when p has them
 * (HostUid=) and we are root, no capabilities (the bounding set too,
 * where it may drop them), no_new_privs, and, where the kernel has
 * Landlock, no write through any path and no signal out of its domain. */
int confine_proxy(const struct nsbox_policy *p, struct nsbox_err *err);
/* Drop supplementary groups and switch to uid/gid (inside ids). */
int ids_switch(uid_t uid, gid_t gid, bool may_setgroups, struct nsbox_err *err);

/* userns.c (parent side): write uid_map, setgroups, gid_map of pid. */
int userns_write_maps(pid_t pid, const struct nsbox_policy *p, bool deny_setgroups, struct nsbox_err *err);

#endif
