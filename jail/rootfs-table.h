/* The sandbox's root as data: which host device nodes, /dev links and
 * top-level directories it gets, what of /proc is masked, which paths are
 * writable, and the text of the generated /etc files.  Pure functions of
 * the policy, with no side effects (STYLE.md 2), so they are checked
 * offline (tests/unit/test-rootfs.c); mount.c does the mounting. */
#ifndef NSBOX_ROOTFS_TABLE_H
#define NSBOX_ROOTFS_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "policy.h"

struct rootfs_link {
	const char *target;
	const char *name;	/* under /dev */
};

/* The host's device nodes bound (read-only, dev) into /dev, by name.
 * *out gets static storage; returns the count. */
size_t rootfs_dev_nodes(const char *const **out);
/* The symlinks made in /dev.  Static storage; returns the count. */
size_t rootfs_dev_links(const struct rootfs_link **out);
/* The top-level names that are links into /usr on a merged-usr host (the
 * link is copied), else directories bound as they are.  Static storage. */
size_t rootfs_merged_usr(const char *const **out);
/* Files of the root's /etc shown read-only in the sandbox's /etc (regular
 * files only, where the root has them). */
#define ROOTFS_ETC_SHARED_MAX 4
size_t rootfs_etc_shared(const char *const **out);
/* ... and directories of the root's /etc, the same way. */
#define ROOTFS_ETC_SHARED_DIRS_MAX 2
size_t rootfs_etc_shared_dirs(const char *const **out);
/* Whether a top-level entry of another root tree (--rootfs) is left out:
 * the jail makes its own (/proc, /dev, /tmp, /etc, /run, /workspace) or it
 * holds the machine's state, not the system's. */
bool rootfs_skip_top(const char *name);
/* The /proc entries (names under /proc) hidden under /dev/null, as runc
 * masks them; with host_root (the sandbox's user is host uid 0) the
 * mode-0400 ones too.  Fills out[0..max) with static strings, returns the
 * count. */
size_t rootfs_proc_masked(bool host_root, const char **out, size_t max);
/* The writable paths inside the sandbox, for Landlock: out[0..max) gets
 * static strings or the policy's own; returns the count. */
size_t rootfs_rw_paths(const struct nsbox_policy *p, const char **out, size_t max);
/* The sandbox user's home directory: /workspace if there is one, else /tmp. */
const char *rootfs_home(const struct nsbox_policy *p);

/* The generated /etc: passwd, group, hosts and nsswitch.conf, in that
 * order.  The root's ld.so.cache and shared files and directories, and
 * (with the host's network) resolv.conf are bound by mount.c, not generated. */
#define ROOTFS_ETC_FILES 4
#define ROOTFS_ETC_MAX 1024
struct rootfs_etc_file {
	const char *name;	/* under /etc */
	char text[ROOTFS_ETC_MAX];
};
void rootfs_etc(const struct nsbox_policy *p, struct rootfs_etc_file out[ROOTFS_ETC_FILES]);

#endif
