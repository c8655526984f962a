/* The launcher: the parent's half of the ordered setup pipeline.
 *
 *   parent (launch.c)             child = pid 1 of the new pid namespace
 *   ------                        (pid1.c, then the payload: payload.c)
 *   policy -> seccomp BPF         ---------------------------------------
 *   cgroup create + limits
 *   clone3(NEW* but NET,          thread: unshare(NEWNET), lo up
 *          INTO_CGROUP) -------->  unshare(NEWTIME) for the payload
 *                                  wait for "go"
 *   uid_map, setgroups, gid_map
 *   "go" ----------------------->  ids, mounts, pivot_root, hostname
 *   v1 cgroup create + attach      join the thread: setns(net)
 *   "attached" ----------------->  no_new_privs + seccomp (inherited below)
 *                                  fork the payload:
 *                                    setsid, fds, rlimits, env, caps,
 *                                    Landlock, exec
 *                                  pid 1: caps, its own tiny filter too,
 *                                    reap, forward signals
 *   <- READY / ERROR(step, errno, message) / STATUS(wait status)
 *
 * Errors from inside travel back over a SOCK_SEQPACKET socketpair (sync.h)
 * so the parent can name the failing step (crun's sync socket). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"
#include "egress.h"
#include "jail.h"
#include "pid1.h"
#include "seccomp-prebuilt.h"
#include "seccomp-rules.h"
#include "steps.h"
#include "sync.h"
#include "util.h"

/* A new child is queued on its parent's CPU, and an idle CPU takes it
 * only at its next balance: meanwhile it waits for the launcher to sleep
 * (for the cgroups to be made, ~0.45 ms).  So where another CPU is
 * allowed and idle, pid 1 is moved there right after the clone (onto a
 * busy one it only took turns with its load: +1-2 ms with one CPU
 * spinning), and takes the launcher's CPUs, c->cpus, back in its first
 * steps (pid1.c, pid1_cpus).  Decided before the clone, so that pid 1
 * knows (c->spread) and restores nothing when it was not moved; *others
 * is where it goes. */
static void spread_decide(struct child_ctx *c, cpu_set_t *others)
{
	int cpu = sched_getcpu();

	c->spread = false;
	if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(c->cpus), &c->cpus) < 0)
		return;
	*others = c->cpus;
	CPU_CLR(cpu, others);
	c->spread = CPU_COUNT(others) > 0 && !cpus_busy(CPU_COUNT(others));
}

static pid_t do_clone(unsigned long long flags, int cgroup_fd, int *pidfd)
{
	struct clone_args ca = {
		.flags = flags | CLONE_PIDFD | (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
		.pidfd = (unsigned long long)(uintptr_t)pidfd,
		.exit_signal = SIGCHLD,
		.cgroup = cgroup_fd >= 0 ? (unsigned long long)cgroup_fd : 0,
	};

	return (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
}

/* The kernel charges every per-user counter of a user namespace (inotify
 * instances and watches, pending signals and POSIX timers, message queue
 * bytes, locked memory, processes, user namespaces: its ucounts) up the
 * chain of namespaces to the *owner* of each, the euid of the process
 * that created it, whatever uid its id map names.  A root launcher with a
 * HostUid= of the policy's (nsboxd's per-session uids) therefore clones
 * with that euid and egid, so that the sandbox's counters are the host
 * uid's and not root's: with its own creator's, nine sessions of one
 * client took all of host root's inotify instances and POSIX timers.
 * Only the effective ids change, on this thread, and the capabilities stay
 * (SECBIT_NO_SETUID_FIXUP; the real and saved uid stay 0), so the clone
 * may still go into a root-owned cgroup; the root launcher writes the
 * maps as before.  The child gets a full set in its new user namespace
 * anyway. */
struct owner_ids {
	bool changed;
	int securebits;
};

static int owner_begin(const struct nsbox_policy *p, bool host_root, struct owner_ids *o, struct nsbox_err *err)
{
	uid_t uid = p->host_uid ? p->host_uid : 0;
	gid_t gid = p->host_gid ? p->host_gid : 0;

	o->changed = false;
	if (!host_root || (uid == 0 && gid == 0))
		return 0;
	o->securebits = prctl(PR_GET_SECUREBITS);
	if (o->securebits < 0 || prctl(PR_SET_SECUREBITS, o->securebits | SECBIT_NO_SETUID_FIXUP) < 0)
		return err_sys(err, "securebits (to clone as host uid %u)", (unsigned)uid);
	o->changed = true;
	if (syscall(SYS_setresgid, -1, gid, -1) < 0 || syscall(SYS_setresuid, -1, uid, -1) < 0)
		return err_sys(err, "set the effective ids to %u:%u (to clone as them)", (unsigned)uid, (unsigned)gid);
	return 0;
}

/* Back to root's ids and securebits; errno is kept (the clone's).  A
 * failure here would leave the launcher acting with another uid's
 * rights: nothing can go on. */
static void owner_end(struct owner_ids *o)
{
	int e = errno;

	if (!o->changed)
		return;
	if (syscall(SYS_setresuid, -1, 0, -1) < 0 || syscall(SYS_setresgid, -1, 0, -1) < 0 ||
	    prctl(PR_SET_SECUREBITS, o->securebits) < 0)
		abort();
	o->changed = false;
	errno = e;
}

static void warn_none(void *ctx, const char *msg)
{
	(void)ctx;
	(void)msg;
}

/* Setup's processes (pid 1, the payload before its exec) run as the
 * sandbox's host user, who may stop them: under a root nsboxd with a
 * workspace, the client.  One stopped in setup held the launcher's wait for
 * READY, a helper's only thread, until nsboxd gave the helper up after 60 s
 * with every other sandbox it held (red team 6).  So that wait polls: a
 * stopped process of the sandbox ends the start at once, and the whole
 * setup has SETUP_TIMEOUT_S, within nsboxd's and libnsbox's 60 s for a
 * helper's answer. */
#define SETUP_TIMEOUT_S 30
#define SETUP_POLL_MS 20

/* Wait for pid 1's answer to GO and ATTACHED on fd: 0 when there is one
 * to read, -1 with err when the sandbox was stopped or setup took too long
 * (the caller kills it). */
static int wait_setup(struct jail *j, int fd, struct nsbox_err *err)
{
	unsigned long long deadline = now_ns() + SETUP_TIMEOUT_S * 1000000000ULL;
	/* As /proc numbers it, which may not be our pid namespace's. */
	pid_t pid = j->pidfd >= 0 ? pidfd_pid(j->pidfd) : j->pid;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		int n = poll(&p, 1, SETUP_POLL_MS);

		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return 0; /* the read says what is wrong */
		if (pid > 0 && proc_tree_stopped(pid)) {
			err_set(err, EINTR, "a process of the sandbox was stopped (SIGSTOP) during setup: killed");
			return err_step(err, "launch"), -1;
		}
		if (now_ns() >= deadline) {
			err_set(err, ETIMEDOUT, "the sandbox's setup took more than %d s: killed", SETUP_TIMEOUT_S);
			return err_step(err, "launch"), -1;
		}
	}
}

/* The lock of a built tree (rootfs/nsbox-rootfs): CACHE/NAME-HASH/lock
 * beside CACHE/NAME-HASH/tree, a regular file the build made (0644, owned
 * by the cache's owner).  Every sandbox on the tree takes an OFD read lock
 * on it, kept by pid 1; `nsbox rootfs remove` takes a write lock, which
 * needs the file open for writing: only its owner can, so another user
 * holding the strongest lock a read-only descriptor allows (a read lock)
 * can delay a removal, never stop a sandbox.  (flock(2) on the tree, as
 * before, needed only a descriptor: any user could block every sandbox.)
 * A tree that is not a build (a DIR not named tree, or no info file
 * beside it) and a build with no lock file (made by nsbox before lock
 * files; remove wants --force for it) get no lock: *fd stays -1.  No link
 * is followed, a fifo or device named lock is not opened for good. */
static int rootfs_lock_open(const char *rootfs, int *fd, struct nsbox_err *err)
{
	const char *slash = strrchr(rootfs, '/');
	char parent[PATH_MAX];
	_cleanup_close_ int dfd = -1, lfd = -1;
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	struct stat st;
	size_t n;

	*fd = -1;
	if (!slash || strcmp(slash + 1, "tree"))
		return 0;
	n = slash == rootfs ? 1 : (size_t)(slash - rootfs);
	if (n >= sizeof(parent))
		return 0;
	memcpy(parent, rootfs, n);
	parent[n] = '\0';
	dfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstatat(dfd, "info", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return 0;
	lfd = openat(dfd, "lock", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (lfd < 0) {
		if (errno == ENOENT)
			return 0;
		return err_set(err, errno, "open the root tree's lock file %s/lock", parent);
	}
	if (fstat(lfd, &st) < 0)
		return err_set(err, errno, "fstat %s/lock", parent);
	if (!S_ISREG(st.st_mode))
		return err_set(err, EINVAL, "the root tree's lock file %s/lock is not a regular file", parent);
	if (fcntl(lfd, F_OFD_SETLK, &fl) < 0) {
		if (errno == EAGAIN || errno == EACCES)
			return err_set(err, EBUSY, "the root tree %s is being removed (nsbox rootfs remove)", rootfs);
		return err_set(err, errno, "lock the root tree's lock file %s/lock", parent);
	}
	*fd = lfd;
	lfd = -1;
	return 0;
}

int jail_start(struct jail *j, const struct jail_spec *spec, struct nsbox_err *err)
{
	const struct nsbox_policy *p = spec->policy;
	void (*warn)(void *, const char *) = spec->warn ? spec->warn : warn_none;
	struct seccomp_prog prog = { 0 };
	struct cgroup_handle *cg = NULL;
	struct child_ctx c = { .spec = spec, .p = p, .prog = &prog, .exec_src_fd = -1, .bound_exec_fd = -1,
			       .egress_fd = -1, .ws_upper_fd = -1, .rootfs_lock = -1 };
	_cleanup_close_ int egress_fd = -1, rootfs_lock = -1;
	struct egress_prep eprep __attribute__((cleanup(egress_prep_close))) = { .proxy_fd = -1, .log_fd = -1 };
	/* No CLONE_NEWNET: pid 1 makes its network namespace itself, beside
	 * its other setup (net.c, netns_start). */
	unsigned long long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
				   CLONE_NEWCGROUP;
	int sv[2] = { -1, -1 }, pidfd = -1, r;
	_cleanup_close_ int exec_src = -1;
	struct mount_srcs srcs __attribute__((cleanup(mount_srcs_close))) = { .workspace = -1 };
	bool v2_attached = false, cg_early = cgroup_host_v2();
	struct sync_msg m;
	struct owner_ids owner = { 0 };
	cpu_set_t spread_to;
	pid_t pid;

	memset(j, 0, sizeof(*j));
	j->pidfd = -1;
	j->sync_fd = -1;
	j->ws_upper_fd = j->ws_host_fd = -1;
	j->time_limit = p->time_limit;
	err_clear(err);
	if ((!spec->argv) == (!spec->child_fn))
		return err_set(err, EINVAL, "jail: exactly one of argv and child_fn");
	if (spec->argv && !spec->argv[0])
		return err_set(err, EINVAL, "jail: empty command");
	if (policy_validate(p, err) < 0)
		return err_step(err, "policy");
	/* The egress proxy's log and socket pair now; its process once the
	 * sandbox is in its cgroups, off the start's path (egress.h).  It
	 * stays in our cgroup, not the sandbox's. */
	if (p->n_net_allow && !p->share_net) {
		if (egress_prepare(p, spec->net_audit_fds, spec->n_net_audit_fds, &eprep, &egress_fd, err) < 0)
			return -1;
		j->egress_audited = p->net_log || spec->n_net_audit_fds > 0;
		c.egress_fd = egress_fd;
	}
	/* Precompiled at build time from the same rule table (test-seccomp-prebuilt). */
	seccomp_prog_prebuilt(p->seccomp, &prog);
	/* On cgroup v2 the child is cloned straight into its cgroup
	 * (CLONE_INTO_CGROUP), so that comes first.  Elsewhere pid 1 is
	 * moved in later anyway, and the cgroups are made while it builds
	 * its root. */
	if (cg_early && cgroup_create(p, &cg, warn, spec->warn_ctx, err) < 0)
		goto fail;
	c.host_root = geteuid() == 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		err_sys(err, "socketpair");
		err_step(err, "launch");
		goto fail;
	}
	c.sync_fd = sv[1];
	if (spec->argv && spec->exec_fd < 0 && spec->exec_file) {
		exec_src = open(spec->exec_file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (exec_src < 0) {
			err_sys(err, "open %s", spec->exec_file);
			err_step(err, "launch");
			goto fail;
		}
		c.exec_src_fd = exec_src;
	}
	if (mount_open_sources(p, &srcs, err) < 0)
		goto fail;
	/* Where a bounded workspace is copied back to: the directory the
	 * caller named, opened now, with the launcher's rights. */
	if (p->workspace && p->workspace_size) {
		j->ws_host_fd = open(p->workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (j->ws_host_fd < 0) {
			err_sys(err, "open the workspace %s", p->workspace);
			err_step(err, "mount");
			goto fail;
		}
		j->ws_uid = p->host_uid ? p->host_uid : geteuid();
		j->ws_gid = p->host_gid ? p->host_gid : getegid();
		j->ws_size = p->workspace_size;
	}
	c.srcs = &srcs;
	/* A built tree in use is not removed: pid 1 keeps a read lock on the
	 * build's lock file for the sandbox's life (rootfs_lock_open). */
	if (p->rootfs && rootfs_lock_open(p->rootfs, &rootfs_lock, err) < 0) {
		err_step(err, "mount");
		goto fail;
	}
	c.rootfs_lock = rootfs_lock;

	budget_probe(&c.budget);
	j->start_ns = now_ns();
	if (owner_begin(p, c.host_root, &owner, err) < 0) {
		owner_end(&owner);
		err_step(err, "namespaces");
		goto fail;
	}
	c.owned_by_host_uid = owner.changed;
	spread_decide(&c, &spread_to);
	pid = do_clone(flags, cg ? cg->v2_fd : -1, &pidfd);
	if (pid < 0 && (errno == ENOSYS || errno == EINVAL) && cg && cg->v2_fd >= 0) {
		pid = do_clone(flags, -1, &pidfd);
		v2_attached = true;
	}
	if (pid != 0)
		owner_end(&owner);
	if (pid < 0) {
		int e = errno;
		err_set(err, e, "clone into new user, mount, pid, ipc, uts and cgroup namespaces");
		if (e == EPERM || e == ENOSPC || e == EINVAL)
			err_wrap(err, "%s", "hint: check sysctl user.max_user_namespaces, "
				 "kernel.unprivileged_userns_clone and kernel.apparmor_restrict_unprivileged_userns");
		err_step(err, "namespaces");
		goto fail;
	}
	if (pid == 0) {
		close(sv[0]);
		pid1_main(&c);
	}
	if (c.spread)
		(void)sched_setaffinity(pid, sizeof(spread_to), &spread_to);
	close(sv[1]);
	sv[1] = -1;
	if (egress_fd >= 0) {
		close(egress_fd);
		egress_fd = -1;
	}
	j->pid = pid;
	j->pidfd = pidfd;
	j->cg = cg;

	/* pid 1 works (lo up) before GO: if it failed and died meanwhile, the
	 * maps or GO fail, and its own ERROR, already queued, says why. */
	if (userns_write_maps(pid, p, !c.host_root, err) < 0 ||
	    sync_send(sv[0], SYNC_GO, 0, NULL) < 0) {
		struct sync_msg early;
		int saved_errno = errno;

		if (sync_recv(sv[0], &early, MSG_DONTWAIT) == 1 && early.type == SYNC_ERROR) {
			err_copy(err, &early.err);
		} else if (!err->msg[0]) {
			errno = saved_errno;
			err_sys(err, "release the child");
			err_step(err, "launch");
		}
		goto fail_child;
	}
	/* From here on pid 1 mounts its root in parallel. */
	if (!cg_early) {
		if (cgroup_create(p, &cg, warn, spec->warn_ctx, err) < 0)
			goto fail_child;
		j->cg = cg;
	}
	if (cg) {
		j->cg_mode = cg->probe.mode;
		for (int k = 0; k < CTRL__N; k++)
			j->cg_enforced[k] = cg->enforced[k];
	}
	/* Moving a task into a v1 cgroup waits for an RCU grace period (a few
	 * ms, unless the host mounts cgroup2 with favordynmods: `nsbox info`);
	 * the child builds its root meanwhile and forks the payload only
	 * after ATTACHED, so the payload starts inside every cgroup. */
	r = cg ? cgroup_attach(cg, pid, v2_attached, err) : 0;
	if (r < 0)
		goto fail_child;
	/* If this fails the child has died; its ERROR is read below. */
	(void)sync_send(sv[0], SYNC_ATTACHED,
		       (j->cg_enforced[CTRL_MEMORY] ? SYNC_CG_MEMORY : 0) | (j->cg_enforced[CTRL_PIDS] ? SYNC_CG_PIDS : 0) |
			       (r > 0 ? SYNC_CG_MOVED : 0),
		       NULL);
	/* The proxy, while pid 1 starts the payload: the sockets pid 1 sent
	 * wait in the pair, connections in their listen queues.  Or, lazily,
	 * at the first of those (jail_wait_with): most sandboxes with an
	 * allowlist never connect, and the fork and the reap of the proxy
	 * were ~0.25 ms of their start and end. */
	if (eprep.proxy_fd >= 0 && !(spec->egress_lazy && !j->egress_audited) &&
	    egress_fork(p, &eprep, NULL, confine_proxy, &j->egress_pid, err) < 0)
		goto fail_child;
	r = wait_setup(j, sv[0], err) < 0 ? -2 : sync_recv_fd(sv[0], &m, 0, &j->ws_upper_fd);
	/* A lazy proxy's pair is still ours: pid 1's network thread sent the
	 * sockets over it before READY.  The jail holds both from here. */
	if (r == 1 && m.type == SYNC_READY && eprep.proxy_fd >= 0) {
		if (egress_recv_socks(eprep.proxy_fd, j->egress_socks) < 0) {
			err_set(err, EPROTO, "the sandbox's pid 1 sent no egress sockets");
			err_step(err, "egress");
			goto fail_child;
		}
		j->egress_prep = eprep;
		j->egress_policy = p;
		j->egress_pending = true;
		eprep.proxy_fd = eprep.log_fd = -1;
	}
	if (r == 1 && m.type == SYNC_READY) {
		if (j->ws_host_fd >= 0 && j->ws_upper_fd < 0) {
			err_set(err, EPROTO, "the sandbox's pid 1 sent no workspace layer");
			err_step(err, "launch");
			goto fail_child;
		}
		/* prog is static */
		j->sync_fd = sv[0];
		return 0;
	}
	if (r == 1 && (m.type == SYNC_ERROR || m.type == SYNC_EXEC_ERROR)) {
		err_copy(err, &m.err);
		if (m.type == SYNC_EXEC_ERROR) {
			/* The command itself is the problem: report like a shell. */
			j->sync_fd = sv[0];
			sv[0] = -1;
			jail_wait(j, &j->status, NULL);
			j->status.exec_errno = m.err.code ? m.err.code : ENOEXEC;
			jail_destroy(j);
			/* prog is static */
			return -2;
		}
	} else if (r != -2) {
		err_set(err, r < 0 ? errno : 0, "the sandbox died during setup");
		err_step(err, "launch");
	}
fail_child:
	jail_destroy(j);	/* closes the pidfd and removes the cgroups */
	cg = NULL;
	pidfd = -1;
fail:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	if (pidfd >= 0)
		close(pidfd);
	cgroup_destroy(cg);
	egress_stop(j->egress_pid, j->egress_audited);
	j->egress_pid = 0;
	/* prog is static */
	j->pidfd = -1;
	if (j->ws_host_fd >= 0)
		close(j->ws_host_fd);
	if (j->ws_upper_fd >= 0)
		close(j->ws_upper_fd);
	j->ws_host_fd = j->ws_upper_fd = -1;
	return -1;
}
