/* Landlock, the second layer under the mounts: the sandbox may read and
 * execute everywhere but write only beneath the paths it is given. */
#ifndef NSBOX_JAIL_LANDLOCK_H
#define NSBOX_JAIL_LANDLOCK_H

#include <stddef.h>

#include "error.h"
#include "policy.h"

/* The running kernel's Landlock ABI version, or 0 when Landlock is missing
 * or disabled at boot. */
int landlock_abi(void);

/* Restrict the calling thread (and its future children): read and execute
 * beneath "/", every write right the ABI knows beneath each of
 * rw_paths[0..n_rw), and writing (not creating) the character devices
 * /dev/null, /dev/zero and /dev/full where they exist.  On ABI >= 6 also
 * scopes abstract unix sockets and signals to the sandbox.  exec_fd (-1:
 * none): a file outside the tree that may be read and executed all the same
 * (the payload's own, mount.c mount_exec).  Sets
 * no_new_privs.  Paths are as seen by the caller (inside the sandbox, after
 * pivot_root); each must exist.
 *
 * want == WANT_OFF: does nothing.  WANT_AUTO on a kernel without Landlock:
 * does nothing and succeeds.  WANT_REQUIRE there: fails.  *abi_out (may be
 * NULL) receives the ABI version enforced, 0 when none.
 * Returns 0, or -1 with err set (step "landlock"). */
int landlock_apply(const char *const *rw_paths, size_t n_rw, int exec_fd, enum policy_want want, int *abi_out,
		   struct nsbox_err *err);

#endif
