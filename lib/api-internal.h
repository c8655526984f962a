/* What lib/api.c shares with the library's other files (lib/handoff.c):
 * the core session behind a public handle.  Not installed. */
#ifndef NSBOX_API_INTERNAL_H
#define NSBOX_API_INTERNAL_H

#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

#include "nsbox.h"
#include "policy.h"
#include "session.h"

/* The core session of s (borrowed), NULL when s is NULL. */
struct nsbox_session *api_core_session(nsbox_session_t *s);
/* The process that made s (a forked child must not touch it). */
pid_t api_session_owner(const nsbox_session_t *s);

/* A public run status (struct_size n, the caller's) from the jail's: the
 * one translation nsbox_run and nsbox_session_end share; exit_code is what
 * nsbox(1) exits with (jail_exit_code). */
void api_run_status(struct nsbox_run_status *out, size_t n, const struct jail_status *js);

/* Fill *err (may be NULL) with code (a negative errno) and msg; returns
 * code. */
int api_fail(nsbox_error_t **err, int code, const char *msg);

/* lib/rootfs.c: built root trees.  rootfs_resolve replaces p's RootFS=NAME
 * with the built tree's directory (NULL for "minimal"), takes the tree's
 * Preload= unless p sets one, and turns DistPackages on; *named says
 * whether RootFS= was a name.  A path or no RootFS= is left alone.
 * Returns 0, or -1 with err set (ENOENT: not built). */
int rootfs_resolve(struct nsbox_policy *p, bool *named, struct nsbox_err *err);
/* The installed packages (a JSON array of {"name", "version"}, new
 * reference in *out) of the root tree at root (NULL: the host's). */
int rootfs_packages(const char *root, json_t **out, struct nsbox_err *err);

#endif
