/* The policy: every setting of a sandbox, as data.  Built-in policies
 * (default, strict, permissive), the INI-style file format of
 * nsbox-policy(5), and command-line overrides all go through policy_set(),
 * so a flag and a file line have the same meaning and the same checks.
 * Pure code: no privileges, no kernel state. */
#ifndef NSBOX_POLICY_H
#define NSBOX_POLICY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "error.h"

enum policy_want {
	WANT_OFF = 0,	/* do not use */
	WANT_AUTO,	/* use where the host supports it, warn where it does not */
	WANT_REQUIRE,	/* refuse to run where the host does not support it */
};

enum policy_seccomp {
	SECCOMP_ENFORCE = 0,	/* deny by default (ENOSYS / EPERM / kill per rule) */
	SECCOMP_LOG,		/* allow everything the allowlist would deny, but log it (tuning) */
};

struct policy_mount {
	char *src;	/* host path (absolute); NULL for a TmpFS= */
	char *dst;	/* path inside the sandbox (absolute) */
	bool rw;	/* always true for a TmpFS= */
	uint64_t tmpfs;	/* TmpFS=DST:SIZE bytes; 0: TmpSize's (src NULL only) */
};

#define POLICY_MAX_MOUNTS 64
#define POLICY_MAX_ENV 64
#define POLICY_MAX_NET_RULES 64
#define POLICY_TREE_NAME_MAX 64	/* RootFS=NAME */
#define POLICY_PRELOAD_MAX 1024	/* Preload= */
#define POLICY_TIME_LIMIT_MAX 1e9	/* seconds, about 31 years: TimeLimit=, an exec's timeout */

struct nsbox_policy {
	char *name;		/* "default", "strict", "permissive" or the file path */

	/* [Sandbox] */
	uid_t uid;		/* Uid= ids inside the sandbox (default 1000) */
	gid_t gid;		/* Gid= */
	/* HostUid=, HostGid=: the host ids uid and gid map to; 0 (the
	 * default) means the launcher's own euid and egid.  Only a root
	 * launcher can map other ids (jail/userns.c refuses them otherwise,
	 * as the kernel would); nsboxd sets them per session from
	 * HostUidRange (nsboxd.conf(5)). */
	uid_t host_uid;
	gid_t host_gid;
	bool share_net;		/* Network=none|host; host shares the host's net ns */
	char *hostname;		/* Hostname= (default "nsbox") */
	char *workdir;		/* WorkDir= inside the sandbox; NULL = HOME */

	/* [Limits]  0 means "no limit" for every field */
	uint64_t memory;	/* Memory= bytes, memory.max; swap is always 0 */
	uint64_t pids;		/* Pids= */
	double cpus;		/* CPUs= e.g. 0.5, 2 */
	double time_limit;	/* TimeLimit= seconds of wall clock */
	uint64_t tmp_size;	/* TmpSize= bytes of the /tmp tmpfs (0: 64M default applies) */
	/* WorkspaceSize= bytes the sandbox may add to Workspace= (an overlay
	 * whose upper layer is a tmpfs of this size, written back into the
	 * host directory when the sandbox ends: jail/wsync.c); 0 = infinity,
	 * a plain read-write bind. */
	uint64_t workspace_size;
	uint64_t file_size;	/* FileSize= RLIMIT_FSIZE bytes */
	uint64_t nofile;	/* OpenFiles= RLIMIT_NOFILE */
	enum policy_want cgroups;	/* Cgroups=auto|require|off */

	/* [Filesystem] */
	char *rootfs;		/* RootFS= another root tree (a path, or a built tree's name), NULL = host /usr */
	char *workspace;	/* Workspace= host dir, rw at /workspace */
	struct policy_mount mounts[POLICY_MAX_MOUNTS];	/* Bind= / ReadOnlyBind= / TmpFS= */
	size_t n_mounts;

	/* [Environment] */
	/* Set=NAME=VALUE, or NAME alone for Unset=NAME (removes it from the
	 * built-in environment too); one entry per name, the later wins. */
	char *env[POLICY_MAX_ENV];
	size_t n_env;

	/* [Security] */
	enum policy_seccomp seccomp;	/* Seccomp=enforce|log */
	enum policy_want landlock;	/* Landlock=auto|require|off */

	/* [Python] */
	bool dist_packages;	/* DistPackages=yes adds /usr/lib/python3/dist-packages */
	char *preload;		/* Preload= modules the runner imports before the session, space-separated */

	/* [Network]  egress allowlist (policy/netrule.h, egress/): with any
	 * Allow= the sandbox keeps its own network namespace (lo only) and
	 * reaches the rules' destinations through the host-side proxy. */
	char *net_allow[POLICY_MAX_NET_RULES];	/* Allow= rules, as written */
	size_t n_net_allow;
	char *net_log;		/* Log= JSON-lines audit file (host path), NULL = none */
	uint64_t net_max_out;	/* MaxBytesOut= bytes sent, whole sandbox, 0 = no limit */
	uint64_t net_max_in;	/* MaxBytesIn= bytes received */
	uint64_t net_max_conns;	/* MaxConnections= proxied connections and DNS answers */
	uint64_t net_max_log;	/* MaxLogBytes= written to a regular-file audit log, 0 = no limit */
};

/* Is s a built root tree's name (RootFS=NAME): [a-z0-9][a-z0-9_-]*, at
 * most POLICY_TREE_NAME_MAX characters? */
bool policy_tree_name_ok(const char *s);

/* Initialise *p from a built-in policy: "default", "strict" or "permissive".
 * Returns 0, or -1 with err set (unknown name).  *p must be zeroed or freed
 * before; on failure *p is left zeroed. */
int policy_init_builtin(struct nsbox_policy *p, const char *name, struct nsbox_err *err);

/* "NAME|FILE": a built-in name, else a file path (contains '/' or ends in
 * ".policy" or exists).  Files start from the built-in "default" unless they
 * say [Policy] Base=strict|permissive|default as their first setting. */
int policy_load(struct nsbox_policy *p, const char *name_or_file, struct nsbox_err *err);

/* Whether policy_load takes name as a built-in policy (not a file). */
bool policy_is_builtin_name(const char *name);

/* Parse policy text (the file format) on top of *p.  `origin` names the
 * source in messages: errors read "origin:LINE: what is wrong". */
int policy_parse(struct nsbox_policy *p, const char *text, size_t len, const char *origin,
		 struct nsbox_err *err);

/* A new policy from text in the file format, on top of the built-in
 * "default" (as a policy file is read, and as policy_print() output parses
 * back).  *p is overwritten (not freed first); on failure it is left
 * untouched.  Errors as policy_parse. */
int policy_from_text(struct nsbox_policy *p, const char *text, size_t len, const char *origin,
		     struct nsbox_err *err);

/* A deep copy of src in *dst (overwritten, not freed first; owned by the
 * caller, policy_free).  On failure (-1, ENOMEM) *dst is untouched. */
int policy_copy(struct nsbox_policy *dst, const struct nsbox_policy *src, struct nsbox_err *err);

/* Set one key of one section ("Limits", "Memory", "256M").  Section and key
 * are matched case-sensitively as documented in nsbox-policy(5).  Repeatable
 * keys (Bind, ReadOnlyBind, Set) append.  Returns 0 or -1 with err naming
 * the key and the accepted values. */
int policy_set(struct nsbox_policy *p, const char *section, const char *key, const char *value,
	       struct nsbox_err *err);

/* Check cross-field consistency (absolute paths, no duplicate destinations,
 * Uid/Gid ranges). */
int policy_validate(const struct nsbox_policy *p, struct nsbox_err *err);

/* Print the effective policy in the file format (it parses back to the same
 * policy). */
void policy_print(const struct nsbox_policy *p, FILE *out);

/* Free everything *p owns and zero it.  Accepts a zeroed policy. */
void policy_free(struct nsbox_policy *p);

#endif
