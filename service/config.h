/* nsboxd.conf(5): who may connect and what each may ask for.  Parsing is
 * pure apart from resolving user and group names (getpwnam, getgrnam). */
#ifndef NSBOXD_CONFIG_H
#define NSBOXD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define CONF_MAX_RULES 64
#define CONF_MAX_IDS 64
#define CONF_MAX_PROFILES 3

/* Limits and rights of one [User:NAME], [Group:NAME] or [Default] section. */
struct conf_rule {
	char section[80];
	enum { RULE_DEFAULT, RULE_USER, RULE_GROUP } kind;
	unsigned id;			/* uid or gid */
	unsigned max_sessions;		/* live sessions of one uid; 0: none allowed */
	uint64_t max_memory;		/* bytes: sum of the sessions' memory limits; 0: no cap */
	double max_cpus;		/* sum of the sessions' CPU limits; 0: no cap */
	uint64_t max_pids;		/* sum of the sessions' pids limits; 0: no cap */
	bool share_net, binds, workspace;	/* may ask for these */
	bool net;			/* AllowNet: an egress allowlist ([Network] Allow=) */
	bool profiles[CONF_MAX_PROFILES];	/* default, strict, permissive */
};

struct conf {
	unsigned pool_size;		/* ready sandboxes per pooled profile */
	unsigned workers;		/* threads (and helpers) making sandboxes: 1 to 4 */
	bool pool_profile[CONF_MAX_PROFILES];
	double idle_exit;		/* seconds without clients before exiting (socket-activated); 0 never */
	unsigned max_connections;
	unsigned max_conns_per_user;	/* of one uid at once (root's and nsboxd's own: only the total) */
	double hello_timeout;		/* seconds a new connection has to send HELLO */
	unsigned max_sessions;		/* all uids together */
	unsigned uid_first, uid_count;	/* per-session host uids (root only); count 0: off */
	unsigned allow_uids[CONF_MAX_IDS], n_allow_uids;
	unsigned allow_gids[CONF_MAX_IDS], n_allow_gids;
	struct conf_rule rules[CONF_MAX_RULES];
	size_t n_rules;
	struct conf_rule dflt;
};

extern const char *const conf_profiles[CONF_MAX_PROFILES];
int conf_profile_index(const char *name);

/* Defaults (nsboxd.conf(5)), then text on top.  Returns 0 or -1 with
 * "origin:line: what" in errbuf. */
void conf_defaults(struct conf *c);
int conf_parse(struct conf *c, const char *text, size_t len, const char *origin, char *errbuf, size_t errlen);
/* Read FILE (a missing default file is not an error when may_be_missing). */
int conf_load(struct conf *c, const char *path, bool may_be_missing, char *errbuf, size_t errlen);
/* Whether a peer may connect, and its rule: [User:] first, then the first
 * [Group:] matching its gid or a supplementary group, then [Default]. */
bool conf_allowed(const struct conf *c, uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups);
const struct conf_rule *conf_rule_for(const struct conf *c, uid_t uid, gid_t gid, const gid_t *groups,
				      size_t n_groups);
/* A policy's [Limits] Memory=, Pids= and CPUs= (0: none), read from its
 * text as nsbox_policy_to_string() writes it (nsbox-policy(5)): what a
 * session of that profile will have unless its OPEN says otherwise.
 * Returns 0, or -1 when one of the three is missing or unreadable. */
int conf_policy_limits(const char *text, uint64_t *memory, uint64_t *pids, double *cpus);
/* The configuration as a file (nsboxd --check-config prints it). */
void conf_print(const struct conf *c, FILE *f);

#endif
