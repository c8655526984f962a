/* A bounded workspace's write-back (WorkspaceSize=, mount.c): what the
 * sandbox changed in /workspace lives in the overlay's upper layer, a
 * tmpfs; once the sandbox is dead it is copied into the host directory.
 *
 * Done in a child process of the launcher that writes with the sandbox's
 * own host ids (a root launcher's child changes only its file-system ids,
 * so that user can't stop the copy the launcher waits for), with no
 * capabilities and no_new_privs, so it can write nothing the sandbox's
 * user could not.  Nothing is opened through a symlink on either side:
 * host entries are reached one name at a time with openat2
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV) and O_NOFOLLOW, files are written to a new O_EXCL name
 * and renamed over the old one, and a symlink the sandbox made is
 * recreated as a symlink (symlinkat), never followed.  The upper layer is
 * read after the sandbox's last process has died, so nothing races it. */
#ifndef NSBOX_WSYNC_H
#define NSBOX_WSYNC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* Apply the overlay upper layer open on upper (directory fd) to the host
 * directory open on host: files and symlinks replace what is there, new
 * directories are made, whiteouts (0/0 character devices) and opaque
 * directories remove the host's entries.  Runs the copy in a child with
 * host ids uid/gid (a root caller switches to them and drops every
 * capability).  Returns 0, or -1 with err naming the first entry that
 * failed (the others are still copied).  The host directory grows by at
 * most budget bytes (the workspace's limit): each file counts at its size
 * in whole blocks of the host's file system, a sparse file's holes and
 * every name of a hard-linked file included, as that is what the copy
 * writes, and each directory or symlink made as a block; what would pass
 * the budget is not written. */
int wsync_apply(int upper, int host, uid_t uid, gid_t gid, uint64_t budget, struct nsbox_err *err);

/* A write-back taken out of its jail (jail_take_workspace) to be run later,
 * when its session is freed: its descriptors are owned while pending. */
struct wsync_job {
	bool pending;
	int upper, host;
	uid_t uid;
	gid_t gid;
	uint64_t size;
};
/* Run it if pending (wsync_apply), then drop it.  0, or -1 with err. */
int wsync_job_run(struct wsync_job *jb, struct nsbox_err *err);
/* Close its descriptors without running it. */
void wsync_job_drop(struct wsync_job *jb);

#endif
