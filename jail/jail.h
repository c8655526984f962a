/* The jail: start a process in fresh namespaces with a minimal read-only
 * root, no capabilities, no_new_privs, Landlock, seccomp and cgroup limits,
 * then watch it.  Used by `nsbox run` (exec a command) and by the runner's
 * template (run a function in the sandbox after setup, no exec).
 *
 * The calling process must be single-threaded: jail_start() clones.
 * libnsbox therefore calls it from its helper process, never from the
 * host's own (possibly threaded) process. */
#ifndef NSBOX_JAIL_H
#define NSBOX_JAIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "egress.h"
#include "policy.h"
#include "wsync.h"
#include "wsync.h"

/* NSBOX_EXIT_*: the exit statuses, in the public header (nsbox.h). */
#include "nsbox.h"

struct jail_spec {
	const struct nsbox_policy *policy;
	/* Exactly one of argv (execve it, PATH searched inside) or child_fn
	 * (called inside the sandbox after every setup step including
	 * seccomp; its return value is the exit status). */
	char *const *argv;
	int (*child_fn)(void *arg);
	void *child_arg;
	/* When >= 0 (argv mode), execveat(exec_fd, "", argv, AT_EMPTY_PATH)
	 * instead of a PATH search: a sealed memfd holding the binary, so the
	 * sandbox cannot rewrite it (runc CVE-2019-5736).  Set -1 for none. */
	int exec_fd;
	/* Or (argv mode, exec_fd < 0): a host file, opened by the launcher
	 * (with its rights), that pid 1 clones as a detached read-only,
	 * nosuid and nodev mount of its own (open_tree), which the payload
	 * executes and which is never attached to the sandbox's tree: no path
	 * inside names it.  Nothing is copied, and what runs inside can't
	 * rewrite the file through /proc/self/exe (CVE-2019-5736): the mount
	 * is read-only, and the sandbox can't remount it (no capabilities,
	 * seccomp).  Where pid 1 can't clone that same file (pid 1 can't
	 * reach the path, it is on a noexec mount, or another file is there
	 * now), pid 1 runs a sealed memfd copy of the launcher's instead.
	 * NULL for none. */
	const char *exec_file;
	/* Extra fds passed into the sandbox, renumbered to 3, 4, ... in this
	 * order.  Everything else but 0, 1, 2 is closed. */
	const int *pass_fds;
	size_t n_pass_fds;
	/* Warnings about limits the host can't enforce are sent here (may be
	 * NULL: dropped). */
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	/* argv mode: stdin becomes the payload's controlling terminal. */
	bool controlling_tty;
	/* With an egress allowlist: descriptors (borrowed, at most
	 * EGRESS_AUDIT_FDS) the proxy writes every audit line to, besides
	 * [Network] Log= (egress.h).  Only the proxy keeps them; nothing of
	 * the sandbox ever holds one. */
	const int *net_audit_fds;
	size_t n_net_audit_fds;
	/* With an allowlist and no audit destination: the proxy is forked at
	 * the sandbox's first connection or DNS query, not at the start
	 * (jail_wait_with watches its sockets meanwhile).  Only for a caller
	 * that waits in jail_wait_with, single-threaded, with policy alive
	 * until then. */
	bool egress_lazy;
};

struct jail_status {
	bool exited;		/* true: exit_code valid; false: term_signal valid */
	int exit_code;
	int term_signal;
	bool time_limit;	/* killed by the wall-clock limit */
	bool oom_killed;	/* the memory limit killed something */
	int exec_errno;		/* execve failed inside with this errno (then exit_code is 126/127) */
	bool setup_failed;	/* killed because the host side failed (a lazy egress proxy's fork) */
	uint64_t peak_memory;	/* bytes; cgroup peak, else ru_maxrss */
	double cpu_user, cpu_system;	/* seconds */
	double wall;		/* seconds from clone to exit */
};

struct cgroup_handle;

struct jail {
	pid_t pid;		/* host pid of the sandbox's pid 1 */
	int pidfd;		/* pidfd of pid, pollable for exit */
	int sync_fd;		/* SEQPACKET to pid 1: READY, STATUS */
	unsigned long long start_ns;
	double time_limit;	/* seconds, 0 = none (from the policy) */
	bool have_payload_status;
	int payload_status;	/* wait status of the payload, from pid 1 */
	struct cgroup_handle *cg;	/* NULL when no cgroup is in use */
	int cg_mode;			/* enum cgroup_mode of the host, kept after destroy */
	bool cg_enforced[3];		/* memory, pids, cpu enforced by a cgroup */
	bool reaped;
	struct jail_status status;
	pid_t egress_pid;	/* the egress proxy ([Network] Allow=), 0 = none */
	bool egress_audited;	/* it has a Log= or audit fds: stopped gently (egress_stop) */
	/* jail_spec.egress_lazy, from READY on: the proxy not forked yet.
	 * Its prepared pair, pid 1's sockets (owned), and the policy it will
	 * run (borrowed). */
	bool egress_pending;
	struct egress_prep egress_prep;
	int egress_socks[EGRESS_NS_SOCKETS];
	const struct nsbox_policy *egress_policy;
	/* WorkspaceSize=: the overlay's upper layer (from pid 1) and the host
	 * directory, copied back by jail_sync_workspace (wsync.h); -1 none. */
	int ws_upper_fd, ws_host_fd;
	uid_t ws_uid;		/* the host ids the sandbox's user maps to */
	gid_t ws_gid;
	uint64_t ws_size;	/* WorkspaceSize=: the write-back's budget too */
	bool ws_synced;
};

/* Start the sandbox.  On success returns 0 and fills *j; the sandbox is
 * running (the command has been executed, or child_fn called).  On failure
 * returns -1, nothing is left behind, and err names the step ("userns",
 * "mount", "cgroup", ...) and the cause.  Returns -2 when the command could
 * not be executed inside (not found, not executable): j->status is then
 * final (exit_code 127 or 126, exec_errno set), err says why, and nothing
 * is left behind either. */
int jail_start(struct jail *j, const struct jail_spec *spec, struct nsbox_err *err);

/* Wait for the sandbox to end, enforcing the policy's time limit (from
 * jail_start).  Fills *st.  Returns 0, or -1 on an internal error. */
int jail_wait(struct jail *j, struct jail_status *st, struct nsbox_err *err);
/* jail_wait, also calling on_fd(ctx) on this thread whenever fd (>= 0) is
 * readable, until on_fd returns false (fd is then no longer watched). */
int jail_wait_with(struct jail *j, struct jail_status *st, int fd, bool (*on_fd)(void *ctx), void *ctx,
		   struct nsbox_err *err);

/* Non-blocking: if pid 1 has exited, reap, fill j->status and return 1;
 * 0 if still running; -1 on error. */
int jail_try_reap(struct jail *j, struct nsbox_err *err);

/* Kill everything in the sandbox (pid 1 of its pid namespace, and the
 * cgroup).  Safe to call more than once. */
void jail_kill(struct jail *j);

/* Kill, reap, collect final accounting into j->status, remove cgroups and
 * close fds.  Safe on a zeroed or already destroyed jail.  Copies a
 * bounded workspace back (jail_sync_workspace) if nobody did; an error
 * there is lost: call that first to see it. */
void jail_destroy(struct jail *j);

/* WorkspaceSize=: once the sandbox is dead (killed and reaped here if it
 * is not), copy what it changed in /workspace (the overlay's upper layer)
 * into the host directory, in a child process with the sandbox's host ids
 * and no capabilities that opens nothing through a symlink (wsync.h).
 * Once per jail; 0 when there is nothing to do.  -1 with err otherwise
 * (what was copied before the failure stays). */
int jail_sync_workspace(struct jail *j, struct nsbox_err *err);

/* What jail_sync_workspace would copy, for a caller that runs
 * wsync_apply() itself, in another process (libnsbox's helper hands it to
 * the library: a long write-back must not hold the helper's other
 * sandboxes).  The sandbox is killed and reaped first, as there.  1: *out
 * is the pending write-back (its descriptors the caller's), taken out of j,
 * which will copy nothing itself; 0: nothing to copy. */
int jail_take_workspace(struct jail *j, struct wsync_job *out);

/* Map a status to nsbox(1)'s exit status. */
int jail_exit_code(const struct jail_status *st);

#endif
