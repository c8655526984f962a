/* libnsbox's helper process: where sandboxes are made.
 *
 * A multithreaded host must never clone or unshare (STYLE.md 3;
 * minijail's warning before sys_clone), so on the first session the
 * library posix_spawns `nsbox-runner --helper`, executed from a sealed
 * memfd copy of the runner (runc CVE-2019-5736), with an empty
 * environment, /dev/null on 0-2, and a SOCK_SEQPACKET control socket on
 * fd 3 (the memfd itself is fd 4, for cold starts).  The helper is
 * single-threaded: it initialises CPython once (the template) and serves
 * one request at a time:
 *
 *   SPAWN   policy text (policy_print) + the session socket (SCM_RIGHTS);
 *           flag HELPER_COLD execs the runner afresh instead of forking
 *           the template; flag HELPER_NET_AUDIT: the descriptors after
 *           the socket are the egress proxy's audit descriptors
 *           (jail_spec.net_audit_fds), and no spare is taken or made.  Answer: id, pid, and the sandbox's pidfd
 *           (SCM_RIGHTS) so the library can SIGKILL it directly.  When a
 *           spare sandbox made earlier for the same policy text is used
 *           (helper/helper.c), its session socket follows the pidfd
 *           (has_sock) and replaces the library's.  Flag HELPER_SPARE (or
 *           NSBOX_SPARE=1 in the host's environment when the helper
 *           started) asks for a spare to be made for the next SPAWN.
 *   RUN     policy text, then argv as argc NUL-terminated strings, + the
 *           command's stdin, stdout and stderr (SCM_RIGHTS), and with
 *           HELPER_NET_AUDIT the proxy's audit descriptors (one or two:
 *           nsbox_run's net_log_fd, its net_audit's pipe): a sandbox
 *           that executes argv.  Answer as SPAWN, or exec_failed with the
 *           final status when argv could not be executed inside.
 *   KILL    SIGKILL the sandbox and its cgroup.
 *   DESTROY kill, reap, remove the cgroups; answer the final jail_status.
 *   INFO    the sandbox's cgroup and its memory use now.
 *
 * When the control socket closes (the host exited or forked away), the
 * helper kills every sandbox it made and exits.  PR_SET_PDEATHSIG is not
 * used: it fires when the spawning *thread* exits.
 *
 * Both ends are built from the same tree (the runner binary and the
 * library), so the messages are fixed-size C structs guarded by a magic
 * number that changes with their layout. */
#ifndef NSBOX_HELPER_H
#define NSBOX_HELPER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "egress.h"
#include "error.h"
#include "jail.h"
#include "policy.h"

#define HELPER_MAGIC 0x4e534835u	/* "NSH5"; bump when a struct below or the fds a request carries change */
#define HELPER_MAX_POLICY (128u << 10)
#define HELPER_MAX_ARGV (128u << 10)	/* RUN: bytes of argv strings */
#define HELPER_MAX_RUN (192u << 10)	/* RUN: request, policy and argv together */
#define HELPER_MAX_FDS (3 + EGRESS_AUDIT_FDS)	/* passed with one request: RUN's stdio and audit descriptors */
#define HELPER_CTL_FD 3
#define HELPER_EXEC_FD 4

enum helper_op {
	HELPER_SPAWN = 1,
	HELPER_KILL,
	HELPER_DESTROY,
	HELPER_INFO_RETIRED,	/* no longer sent: the client reads the counters itself */
	HELPER_RUN,
};

#define HELPER_COLD 1u
#define HELPER_SPARE 2u
#define HELPER_NET_AUDIT 4u

struct helper_req {
	uint32_t magic;
	uint32_t op;
	uint32_t flags;
	uint32_t len;		/* bytes after the struct (SPAWN, RUN) */
	uint32_t text_len;	/* RUN: of which policy text (the rest is argv) */
	uint32_t argc;		/* RUN */
	uint64_t id;		/* KILL, DESTROY, INFO */
};

struct helper_rep {
	uint32_t magic;
	int32_t failed;		/* the request failed: err says why */
	uint64_t id;
	int32_t pid;		/* SPAWN: host pid of the sandbox's pid 1 */
	int32_t has_sock;	/* SPAWN: a spare was used; its session socket follows the pidfd */
	int32_t exec_failed;	/* RUN: argv could not be executed; st is final, no pidfd */
	int32_t cg_mode;	/* SPAWN, RUN: enum cgroup_mode */
	uint8_t cg_enforced[4];	/* SPAWN, RUN: memory, pids, cpu limits enforced by a cgroup */
	struct jail_status st;	/* DESTROY; RUN when exec_failed */
	int32_t has_ws;		/* DESTROY: a write-back is the library's to run: its upper layer and
				 * host directory follow (SCM_RIGHTS), with these ids and budget */
	uint32_t ws_uid, ws_gid;
	uint64_t ws_size;
	char cgroup[256];	/* SPAWN: the sandbox's memory cgroup, "" if none */
	char warnings[NSBOX_ERR_MSG_MAX];	/* SPAWN, RUN success: the jail's warnings, one per line */
	struct nsbox_err err;	/* failed: errno, setup step and message, complete */
};

/* ---- library side (helper/helper.c) ---- */

struct helper_sandbox {
	uint64_t id;
	uint64_t gen;		/* which helper made it */
	unsigned slot;		/* and where that helper is (its lock alone is taken) */
	pid_t pid;
	int pidfd;		/* owned; closed by helper_destroy */
	char cgroup[256];
	int cg_mode;		/* enum cgroup_mode */
	bool cg_enforced[3];
	bool ws_expected;	/* the policy has a bounded workspace (set by the caller) */
	/* A bounded workspace's write-back, handed over by helper_destroy, for
	 * the caller to run (wsync_job_run) when the session is freed. */
	struct wsync_job ws;
};

struct helper_spawn_opts {
	bool cold;		/* exec the runner afresh instead of forking the template */
	bool spare;		/* keep a spare sandbox for the next SPAWN of this policy */
	void (*warn)(void *ctx, const char *msg);	/* the jail's warnings; may be NULL */
	void *warn_ctx;
	/* The egress proxy's audit descriptors (jail_spec.net_audit_fds; at
	 * most EGRESS_AUDIT_FDS), sent along: such a SPAWN never takes a spare. */
	const int *net_audit_fds;
	size_t n_net_audit_fds;
};

/* Start a sandbox for a session through the helper (started on first
 * use, restarted after it died or after a fork).  sock is the sandbox end
 * of the session's socketpair (the caller keeps and closes its copy).
 * *sock_out is -1, or (a spare sandbox was used) the session socket to
 * use instead of the caller's own end, owned by the caller.
 * Thread-safe.  On success fills *sb; on failure returns -1 with err. */
int helper_spawn(const struct nsbox_policy *p, int sock, const struct helper_spawn_opts *o,
		 struct helper_sandbox *sb, int *sock_out, struct nsbox_err *err);
/* Start a sandbox executing argv with stdio[0..2] as its stdin, stdout and
 * stderr (borrowed), and audit_fds (n_audit_fds <= EGRESS_AUDIT_FDS,
 * borrowed) as the egress proxy's audit descriptors
 * (jail_spec.net_audit_fds).  Returns 1 with *sb filled when it runs (wait on
 * sb->pidfd, then helper_destroy), 0 with *st final when argv could not be
 * executed inside, -1 with err when no sandbox could be made.  warn gets
 * the jail's warnings.  Thread-safe. */
int helper_run(const struct nsbox_policy *p, char *const argv[], const int stdio[3], const int *audit_fds,
	       size_t n_audit_fds, void (*warn)(void *ctx, const char *msg), void *warn_ctx, struct helper_sandbox *sb,
	       struct jail_status *st, struct nsbox_err *err);
/* SIGKILL the sandbox through its pidfd.  Async-signal-safe. */
void helper_kill(const struct helper_sandbox *sb);
/* Kill, reap and clean up; fills *st (may be NULL) with the final status.
 * Closes sb->pidfd.  Thread-safe.  Returns 0 or -1 with err (then *st says
 * "killed by SIGKILL", which is what happened: the helper is gone).  A
 * bounded workspace's write-back is not done here: it is left in sb->ws
 * (the helper hands it over and serves its other sandboxes at once). */
int helper_destroy(struct helper_sandbox *sb, struct jail_status *st, struct nsbox_err *err);
/* Memory use of the sandbox now.  Thread-safe. */
int helper_info(const struct helper_sandbox *sb, uint64_t *current, uint64_t *peak, struct nsbox_err *err);
/* The (first) helper's pid (0 if none is running).  For tests and benchmarks. */
pid_t helper_pid(void);
/* How many helpers may run at once, 1 (the default) to HELPER_MAX; each
 * makes one sandbox at a time.  Returns 0 or -EINVAL. */
#define HELPER_MAX 4
int helper_set_count(unsigned n);

#endif
