/* What lib/api.c shares with the library's other files (lib/handoff.c):
 * the core session behind a public handle.  Not installed. */
#ifndef NSBOX_API_INTERNAL_H
#define NSBOX_API_INTERNAL_H

#include <sys/types.h>

#include "nsbox.h"
#include "session.h"

/* The core session of s (borrowed), NULL when s is NULL. */
struct nsbox_session *api_core_session(nsbox_session_t *s);
/* The process that made s (a forked child must not touch it). */
pid_t api_session_owner(const nsbox_session_t *s);

/* Fill *err (may be NULL) with code (a negative errno) and msg; returns
 * code. */
int api_fail(nsbox_error_t **err, int code, const char *msg);

#endif
