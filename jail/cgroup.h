/* cgroups for one sandbox: cgroup v2 in a delegated subtree, v1
 * controllers on hybrid and legacy hosts, rlimit fallback decided by the
 * caller.  Written against cgroupfs directly (see README, "Why not
 * libcgroup").  Host side only. */
#ifndef NSBOX_CGROUP_H
#define NSBOX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "policy.h"

enum cgroup_mode { CG_NONE = 0, CG_V1, CG_HYBRID, CG_V2 };

enum cgroup_ctrl { CTRL_MEMORY = 0, CTRL_PIDS, CTRL_CPU, CTRL__N };

/* What this host offers this process (for `nsbox info` and decisions). */
struct cgroup_probe {
	enum cgroup_mode mode;
	char v2_root[256];		/* mount point of the v2 hierarchy ("" if none) */
	char v2_self[512];		/* our own v2 cgroup directory */
	char v2_parent_used[512];	/* where sandboxes go on v2 ("" if nowhere) */
	bool v2_writable;		/* we may create cgroups on v2 */
	bool v2_kill;			/* cgroup.kill exists */
	bool ctrl_ok[CTRL__N];		/* controller usable (v2 or v1) */
	bool ctrl_v1[CTRL__N];		/* ... and it comes from a v1 hierarchy */
	char ctrl_dir[CTRL__N][512];	/* directory sandboxes are created under */
	char why[CTRL__N][160];		/* why a controller is not usable */
};

const char *cgroup_mode_name(enum cgroup_mode m);
const char *cgroup_ctrl_name(enum cgroup_ctrl c);

/* The host's cgroup hierarchy is pure v2 (/sys/fs/cgroup is cgroup2):
 * sandboxes are cloned straight into their cgroup. */
bool cgroup_host_v2(void);

/* Inspect the host.  Never fails; unusable things are reported in *pr. */
void cgroup_probe_host(struct cgroup_probe *pr);

/* Moving a task into a cgroup (writing cgroup.procs) takes the global
 * cgroup_threadgroup_rwsem for writing, and unless some cgroup hierarchy is
 * mounted with favordynmods that waits for an RCU grace period whenever no
 * other migration happened within the last one: ~5-20 ms per sandbox start
 * on a hybrid host, where pid 1 is moved into the v1 memory, pids and cpu
 * cgroups.  On pure v2 the child is cloned straight into its cgroup
 * (CLONE_INTO_CGROUP, a read lock) and nothing is moved. */
enum cgroup_migration { CG_MIGRATE_NONE = 0, CG_MIGRATE_FAST, CG_MIGRATE_SLOW };

struct cgroup_migration_info {
	enum cgroup_migration state;
	bool favordynmods;		/* a cgroup or cgroup2 mount has favordynmods */
	char remount[256];		/* the cgroup2 mount to remount with it ("" if none) */
};

/* What sandboxes here cost in migrations, from a probe and /proc/self/mounts. */
void cgroup_migration_probe(const struct cgroup_probe *pr, struct cgroup_migration_info *mi);
/* The fix for CG_MIGRATE_SLOW as text (lines separated by '\n', no
 * trailing one) in buf; for the front ends to print. */
void cgroup_migration_hint(const struct cgroup_migration_info *mi, char *buf, size_t size);

struct cgroup_handle {
	struct cgroup_probe probe;
	char v2_dir[600];		/* the sandbox's v2 cgroup ("" if none) */
	int v2_fd;			/* O_PATH|O_DIRECTORY fd of v2_dir for CLONE_INTO_CGROUP, or -1 */
	char v1_dir[CTRL__N][600];	/* the sandbox's v1 cgroups ("" if none) */
	bool enforced[CTRL__N];		/* the limit for this controller is enforced */
};

/* Create the sandbox's cgroup(s) and write the policy's limits.  Limits that
 * can't be enforced are reported through warn() (or are an error when the
 * policy says Cgroups=require).  *out is NULL when no cgroup is used at all.
 * Returns 0 or -1 with err set (nothing left behind). */
int cgroup_create(const struct nsbox_policy *p, struct cgroup_handle **out,
		  void (*warn)(void *ctx, const char *msg), void *warn_ctx, struct nsbox_err *err);

/* Move pid into the v1 cgroups (and the v2 one when clone3 could not).
 * Returns 1 if it moved pid anywhere, 0 if there was nothing to move it
 * into, -1 with err set. */
int cgroup_attach(struct cgroup_handle *h, pid_t pid, bool v2_too, struct nsbox_err *err);

/* SIGKILL every process in the sandbox's cgroups (cgroup.kill on v2). */
void cgroup_kill(struct cgroup_handle *h);

/* Peak memory in bytes (0 if unknown) and whether the OOM killer fired. */
void cgroup_stats(struct cgroup_handle *h, uint64_t *peak, bool *oom, double *cpu_usec);

/* Remove the cgroups (they must be empty) and free h.  Accepts NULL. */
void cgroup_destroy(struct cgroup_handle *h);

#endif
