/* Where a session's sandbox comes from, behind one operations table (as
 * crun's cgroup managers, STYLE.md 6b): made by libnsbox's helper process
 * (session-helper.c), made in this process by jail_start
 * (session-local.c), or a plain child without any sandbox, for tests
 * (session-unjailed.c).  session.c speaks the runner protocol and never
 * asks which backend it has. */
#ifndef NSBOX_SESSION_BACKEND_H
#define NSBOX_SESSION_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "jail.h"
#include "policy.h"
#include "session.h"

struct sandbox {
	const struct session_backend_ops *ops;
	void *priv;		/* the backend's state (malloc'd by start, freed by the session) */
	int pidfd;		/* pollable for the sandbox's exit (owned by the backend); -1 once gone */
	bool reaped;
	/* The session is being freed (set by session.c before the last
	 * destroy): a bounded workspace is written back then, never at the
	 * sandbox's end before (a time limit's kill, a crash, a protocol
	 * error), so that no exec, and no event loop driving one, waits for
	 * it. */
	bool closing;
	struct jail_status st;	/* final, once reaped */
	/* Set by a backend whose sandbox arrives with the handshake already
	 * done (the service): the runner's HELLO, owned by the session. */
	json_t *hello;
	/* The session's warning callback (NULL: none), for what goes wrong
	 * after the start: a bounded workspace's write-back (jail/wsync.h). */
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
};

struct sandbox_spec {
	const struct nsbox_policy *policy;
	int sock;			/* the runner's end of the session socket (borrowed) */
	const char *path;		/* the runner binary (local, unjailed) */
	char *const *argv;		/* the runner's argv (local, unjailed) */
	bool cold, spare;		/* helper */
	const char *connect;		/* service: nsboxd's socket */
	uint64_t output_limit;		/* service: the runner's per-stream cap */
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	/* helper, local: the egress proxy's audit descriptors (borrowed during
	 * start; jail_spec.net_audit_fds). */
	const int *net_audit_fds;
	size_t n_net_audit_fds;
};

struct session_backend_ops {
	const char *name;
	/* Start the sandbox running the runner on spec->sock.  *sock_out is
	 * -1, or a session socket to use instead of the caller's own end
	 * (owned by the caller).  On failure -1 with err (naming the setup
	 * step) and nothing left running; sb->priv may be set (freed by the
	 * caller). */
	int (*start)(struct sandbox *sb, const struct sandbox_spec *spec, int *sock_out, struct nsbox_err *err);
	/* SIGKILL the sandbox (everything in it).  No effect once reaped. */
	void (*kill)(struct sandbox *sb);
	/* Without blocking: 1 when the sandbox has ended and been reaped
	 * (sb->st filled, sb->reaped set), 0 while it runs. */
	int (*try_reap)(struct sandbox *sb);
	/* Kill if it still runs, reap, release what it holds (cgroups, fds),
	 * fill sb->st; with sb->closing, write a bounded workspace back
	 * (warning through sb->warn on failure), else keep it for a later call
	 * that has sb->closing.  Idempotent; sb->priv stays readable (info). */
	void (*destroy)(struct sandbox *sb);
	/* A sandbox inherited across fork(): close our fds, never signal. */
	void (*abandon)(struct sandbox *sb);
	/* pid, cgroup and memory use (info is zeroed by the caller). */
	int (*info)(const struct sandbox *sb, struct session_sandbox_info *info, struct nsbox_err *err);
};

extern const struct session_backend_ops session_backend_helper;
extern const struct session_backend_ops session_backend_local;
extern const struct session_backend_ops session_backend_unjailed;
extern const struct session_backend_ops session_backend_service;

#endif
