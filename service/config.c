#include "config.h"
#include "nsbox.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONF_FILE_MAX (256 << 10)

const char *const conf_profiles[CONF_MAX_PROFILES] = { "default", "strict", "permissive" };

int conf_profile_index(const char *name)
{
	for (int i = 0; i < CONF_MAX_PROFILES; i++)
		if (!strcmp(name, conf_profiles[i]))
			return i;
	return -1;
}

static void rule_defaults(struct conf_rule *r)
{
	memset(r, 0, sizeof(*r));
	r->max_sessions = 16;
	r->max_memory = 0;
	r->max_cpus = 0;
	r->max_pids = 0;
	r->share_net = false;
	r->binds = false;
	r->net = false;	/* the proxy connects with nsboxd's network identity: nsboxd(8) */
	r->workspace = true;
	r->profiles[0] = r->profiles[1] = true;	/* default, strict; not permissive */
}

void conf_defaults(struct conf *c)
{
	memset(c, 0, sizeof(*c));
	c->pool_size = 2;
	{
		/* One more than the CPUs: one worker is kept from refilling
		 * the pool, and with only as many as the CPUs a 2-CPU host made
		 * one pooled sandbox at a time (212 against 240 sessions/s
		 * with three, bench/nsboxd.py). */
		long n = sysconf(_SC_NPROCESSORS_ONLN) + 1;

		c->workers = n < 2 ? 2 : n > 4 ? 4 : (unsigned)n;
	}
	c->pool_profile[0] = true;
	c->idle_exit = 60;
	c->max_connections = 256;
	c->max_conns_per_user = 64;
	c->hello_timeout = 10;
	c->max_sessions = 1024;
	rule_defaults(&c->dflt);
	snprintf(c->dflt.section, sizeof(c->dflt.section), "Default");
}

static int bad(char *errbuf, size_t errlen, const char *origin, unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int bad(char *errbuf, size_t errlen, const char *origin, unsigned line, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(errbuf, errlen, "%s:%u: ", origin, line);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < errlen)
		vsnprintf(errbuf + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static bool parse_bool(const char *v, bool *out)
{
	if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1"))
		return *out = true, true;
	if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0"))
		return *out = false, true;
	return false;
}

static bool parse_uint(const char *v, unsigned long long max, unsigned long long *out)
{
	char *end;
	unsigned long long n;

	if (!isdigit((unsigned char)*v))
		return false;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || *end || n > max)
		return false;
	*out = n;
	return true;
}

/* A size as nsbox-policy(5) writes one ("256M", "4GiB", "1048576": whole
 * numbers, binary units), or "infinity" (0). */
static bool parse_size(const char *v, uint64_t *out)
{
	if (!strcmp(v, "infinity"))
		return *out = 0, true;
	return nsbox_parse_size(v, out, NULL) == 0;
}

/* A plain decimal ("0.5", "30", "1e3"), or "infinity" (0): no blank, sign
 * or hex float (strtod reads "0x1p3"), as the policy's numbers. */
static bool parse_number(const char *v, double *out)
{
	char *end;
	double n;

	if (!strcmp(v, "infinity"))
		return *out = 0, true;
	if (!(isdigit((unsigned char)*v) || *v == '.') || v[strspn(v, "0123456789.eE+-")])
		return false;
	n = strtod(v, &end);
	if (end == v || *end || !(n >= 0) || !isfinite(n))
		return false;
	*out = n;
	return true;
}

/* The section already read for this uid or gid, if any. */
static const struct conf_rule *rule_of(const struct conf *c, bool group, unsigned id)
{
	for (size_t i = 0; i < c->n_rules; i++)
		if (c->rules[i].kind == (group ? RULE_GROUP : RULE_USER) && c->rules[i].id == id)
			return &c->rules[i];
	return NULL;
}

static bool resolve_id(const char *v, bool group, unsigned *out)
{
	unsigned long long n;

	if (parse_uint(v, 0xfffffffeu, &n))
		return *out = (unsigned)n, true;
	if (group) {
		struct group *g = getgrnam(v);

		if (g)
			return *out = (unsigned)g->gr_gid, true;
	} else {
		struct passwd *p = getpwnam(v);

		if (p)
			return *out = (unsigned)p->pw_uid, true;
	}
	return false;
}

/* A space-separated list of users or groups. */
static int parse_ids(char *v, bool group, unsigned *ids, unsigned *n, char *errbuf, size_t errlen,
		     const char *origin, unsigned line)
{
	for (char *save = NULL, *w = strtok_r(v, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (*n >= CONF_MAX_IDS)
			return bad(errbuf, errlen, origin, line, "more than %d entries", CONF_MAX_IDS);
		if (!resolve_id(w, group, &ids[*n]))
			return bad(errbuf, errlen, origin, line, "no such %s '%s'", group ? "group" : "user", w);
		(*n)++;
	}
	return 0;
}

static int parse_profiles(char *v, bool *set, char *errbuf, size_t errlen, const char *origin, unsigned line)
{
	memset(set, 0, CONF_MAX_PROFILES * sizeof(bool));
	for (char *save = NULL, *w = strtok_r(v, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		int i = conf_profile_index(w);

		if (i < 0)
			return bad(errbuf, errlen, origin, line, "unknown profile '%s' (default, strict, permissive)", w);
		set[i] = true;
	}
	return 0;
}

static int rule_key(struct conf_rule *r, const char *k, char *v, char *errbuf, size_t errlen, const char *origin,
		    unsigned line)
{
	unsigned long long n;

	if (!strcmp(k, "MaxSessions")) {
		if (!parse_uint(v, 1000000, &n))
			return bad(errbuf, errlen, origin, line, "MaxSessions: '%s' is not a count", v);
		r->max_sessions = (unsigned)n;
	} else if (!strcmp(k, "MaxMemory")) {
		/* A session has at least 1M (nsbox-policy(5), Memory=): below it
		 * every OPEN would be refused. */
		if (!parse_size(v, &r->max_memory) || (r->max_memory && r->max_memory < (1u << 20)))
			return bad(errbuf, errlen, origin, line,
				   "MaxMemory: '%s' is not a size of at least 1M (K, M, G, T: powers of 1024; or infinity)",
				   v);
	} else if (!strcmp(k, "MaxPids")) {
		if (!strcmp(v, "infinity"))
			r->max_pids = 0;
		else if (!parse_uint(v, 1ULL << 32, &n) || !n)
			return bad(errbuf, errlen, origin, line, "MaxPids: '%s' is not a count above 0 (or infinity)", v);
		else
			r->max_pids = n;
	} else if (!strcmp(k, "MaxCPUs")) {
		if (!parse_number(v, &r->max_cpus) || (r->max_cpus && r->max_cpus < 0.01))
			return bad(errbuf, errlen, origin, line,
				   "MaxCPUs: '%s' is not a number of CPUs of at least 0.01 (or infinity)", v);
	} else if (!strcmp(k, "AllowShareNet") || !strcmp(k, "AllowBinds") || !strcmp(k, "AllowWorkspace") ||
		   !strcmp(k, "AllowNet")) {
		bool *b = k[5] == 'S' ? &r->share_net : k[5] == 'B' ? &r->binds : k[5] == 'N' ? &r->net : &r->workspace;

		if (!parse_bool(v, b))
			return bad(errbuf, errlen, origin, line, "%s: '%s' is not yes or no", k, v);
	} else if (!strcmp(k, "AllowProfiles")) {
		return parse_profiles(v, r->profiles, errbuf, errlen, origin, line);
	} else {
		return bad(errbuf, errlen, origin, line, "unknown key '%s' in [%s]", k, r->section);
	}
	return 0;
}

static int service_key(struct conf *c, const char *k, char *v, char *errbuf, size_t errlen, const char *origin,
		       unsigned line)
{
	unsigned long long n, m;

	if (!strcmp(k, "PoolSize")) {
		if (!parse_uint(v, 64, &n))
			return bad(errbuf, errlen, origin, line, "PoolSize: '%s' is not a count from 0 to 64", v);
		c->pool_size = (unsigned)n;
	} else if (!strcmp(k, "Workers")) {
		if (!parse_uint(v, 4, &n) || n < 1)
			return bad(errbuf, errlen, origin, line, "Workers: '%s' is not a count from 1 to 4", v);
		c->workers = (unsigned)n;
	} else if (!strcmp(k, "PoolProfiles")) {
		return parse_profiles(v, c->pool_profile, errbuf, errlen, origin, line);
	} else if (!strcmp(k, "IdleExitSec")) {
		/* Bounded: past ~1.8e10 s its nanoseconds overflowed to 0 in the
		 * loop, and nsboxd told "never, nearly" exited at once. */
		if (!parse_number(v, &c->idle_exit) || c->idle_exit > 1e9)
			return bad(errbuf, errlen, origin, line,
				   "IdleExitSec: '%s' is not a number of seconds from 0 to 1e9 (or infinity: never)", v);
	} else if (!strcmp(k, "HelloTimeoutSec")) {
		if (!parse_number(v, &c->hello_timeout) || c->hello_timeout <= 0 || c->hello_timeout > 3600)
			return bad(errbuf, errlen, origin, line,
				   "HelloTimeoutSec: '%s' is not a number of seconds above 0, up to 3600", v);
	} else if (!strcmp(k, "MaxConnectionsPerUser")) {
		if (!parse_uint(v, 1000000, &n) || n == 0)
			return bad(errbuf, errlen, origin, line, "%s: '%s' is not a positive count", k, v);
		c->max_conns_per_user = (unsigned)n;
	} else if (!strcmp(k, "MaxConnections") || !strcmp(k, "MaxSessions")) {
		if (!parse_uint(v, 1000000, &n) || n == 0)
			return bad(errbuf, errlen, origin, line, "%s: '%s' is not a positive count", k, v);
		*(k[3] == 'C' ? &c->max_connections : &c->max_sessions) = (unsigned)n;
	} else if (!strcmp(k, "HostUidRange")) {
		char *dash = strchr(v, '-');

		if (!*v) {
			c->uid_count = 0;
			return 0;
		}
		if (!dash)
			return bad(errbuf, errlen, origin, line, "HostUidRange: '%s' is not FIRST-LAST", v);
		*dash = '\0';
		if (!parse_uint(v, 0xfffffffeu, &n) || !parse_uint(dash + 1, 0xfffffffeu, &m) || m < n || n < 1000)
			return bad(errbuf, errlen, origin, line, "HostUidRange: not FIRST-LAST with 1000 <= FIRST <= LAST");
		c->uid_first = (unsigned)n;
		c->uid_count = (unsigned)(m - n + 1);
	} else if (!strcmp(k, "AllowUsers")) {
		return parse_ids(v, false, c->allow_uids, &c->n_allow_uids, errbuf, errlen, origin, line);
	} else if (!strcmp(k, "AllowGroups")) {
		return parse_ids(v, true, c->allow_gids, &c->n_allow_gids, errbuf, errlen, origin, line);
	} else {
		return bad(errbuf, errlen, origin, line, "unknown key '%s' in [Service]", k);
	}
	return 0;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int conf_policy_limits(const char *text, uint64_t *memory, uint64_t *pids, double *cpus)
{
	char *copy = strdup(text), *save = NULL, *ln;
	bool in_limits = false;
	unsigned seen = 0;
	uint64_t mem = 0, n = 0;
	double cpu = 0;

	if (!copy)
		return -1;
	for (ln = strtok_r(copy, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
		char *l = trim(ln), *eq;

		if (*l == '[') {
			in_limits = !strcmp(l, "[Limits]");
			continue;
		}
		if (!in_limits || !(eq = strchr(l, '=')))
			continue;
		*eq = '\0';
		if (!strcmp(trim(l), "Memory") && parse_size(trim(eq + 1), &mem))
			seen |= 1;
		else if (!strcmp(trim(l), "Pids") && parse_size(trim(eq + 1), &n))
			seen |= 2;
		else if (!strcmp(trim(l), "CPUs") && parse_number(trim(eq + 1), &cpu))
			seen |= 4;
	}
	free(copy);
	if (seen != 7)
		return -1;
	*memory = mem;
	*pids = n;
	*cpus = cpu;
	return 0;
}

int conf_parse(struct conf *c, const char *text, size_t len, const char *origin, char *errbuf, size_t errlen)
{
	char *copy = strndup(text, len);
	char *save = NULL;
	enum { S_NONE, S_SERVICE, S_RULE } sect = S_NONE;
	struct conf_rule *rule = NULL;
	unsigned line = 0;
	int r = 0;

	if (!copy)
		return bad(errbuf, errlen, origin, 0, "out of memory");
	if (memchr(text, '\0', len)) {
		free(copy);
		return bad(errbuf, errlen, origin, 0, "a NUL byte in the file");
	}
	/* A UTF-8 byte order mark, as some editors write (nsbox-policy(5)
	 * skips it too). */
	for (char *l = strncmp(copy, "\xef\xbb\xbf", 3) ? copy : copy + 3, *next; l && r == 0; l = next) {
		char *k, *v, *eq;

		next = strchr(l, '\n');
		if (next)
			*next++ = '\0';
		line++;
		(void)save;
		l = trim(l);
		if (!*l || *l == '#' || *l == ';')
			continue;
		if (*l == '[') {
			char *end = strchr(l, ']');

			if (!end || end[1])
				r = bad(errbuf, errlen, origin, line, "bad section header");
			else if (*end = '\0', !strcmp(l + 1, "Service"))
				sect = S_SERVICE;
			else if (!strcmp(l + 1, "Default"))
				sect = S_RULE, rule = &c->dflt;
			else if (!strncmp(l + 1, "User:", 5) || !strncmp(l + 1, "Group:", 6)) {
				bool group = l[1] == 'G';
				const struct conf_rule *prev;
				unsigned id;

				if (c->n_rules >= CONF_MAX_RULES)
					r = bad(errbuf, errlen, origin, line, "more than %d sections", CONF_MAX_RULES);
				else if (!resolve_id(l + (group ? 7 : 6), group, &id))
					r = bad(errbuf, errlen, origin, line, "no such %s '%s'", group ? "group" : "user",
						l + (group ? 7 : 6));
				else if ((prev = rule_of(c, group, id)))
					/* Only the first would ever apply. */
					r = bad(errbuf, errlen, origin, line, "%s %u has a section already ([%s])",
						group ? "gid" : "uid", id, prev->section);
				else {
					rule = &c->rules[c->n_rules++];
					/* A section starts from [Default] as read so far. */
					*rule = c->dflt;
					snprintf(rule->section, sizeof(rule->section), "%s", l + 1);
					rule->kind = group ? RULE_GROUP : RULE_USER;
					rule->id = id;
					sect = S_RULE;
				}
			} else
				r = bad(errbuf, errlen, origin, line, "unknown section [%s]", l + 1);
			continue;
		}
		eq = strchr(l, '=');
		if (!eq) {
			r = bad(errbuf, errlen, origin, line, "expected KEY=VALUE");
			continue;
		}
		*eq = '\0';
		k = trim(l);
		v = trim(eq + 1);
		if (sect == S_NONE)
			r = bad(errbuf, errlen, origin, line, "%s= outside a section", k);
		else if (sect == S_SERVICE)
			r = service_key(c, k, v, errbuf, errlen, origin, line);
		else
			r = rule_key(rule, k, v, errbuf, errlen, origin, line);
	}
	free(copy);
	return r;
}

int conf_load(struct conf *c, const char *path, bool may_be_missing, char *errbuf, size_t errlen)
{
	char *buf;
	ssize_t n;
	size_t have = 0;
	/* Non-blocking, and a regular file (or a character device such as
	 * /dev/null, which reads at once or fails with EAGAIN): a FIFO or a
	 * tty blocked the read, at start, in --check-config, and on SIGHUP in
	 * the one event loop every client waits on. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	int r;

	if (fd < 0) {
		if (errno == ENOENT && may_be_missing)
			return 0;
		snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	r = fstat(fd, &st);
	if (r < 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) {
		snprintf(errbuf, errlen, "%s: %s", path, r < 0 ? strerror(errno) : "not a regular file");
		close(fd);
		return -1;
	}
	buf = malloc(CONF_FILE_MAX + 1);
	if (!buf) {
		close(fd);
		snprintf(errbuf, errlen, "%s: out of memory", path);
		return -1;
	}
	while ((n = read(fd, buf + have, CONF_FILE_MAX + 1 - have)) > 0 && have + (size_t)n <= CONF_FILE_MAX)
		have += (size_t)n;
	close(fd);
	if (n < 0 || have + (size_t)(n > 0 ? n : 0) > CONF_FILE_MAX) {
		free(buf);
		snprintf(errbuf, errlen, "%s: %s", path, n < 0 ? strerror(errno) : "larger than 256 KiB");
		return -1;
	}
	r = conf_parse(c, buf, have, path, errbuf, errlen);
	free(buf);
	return r;
}

static bool in_groups(unsigned gid, gid_t pgid, const gid_t *groups, size_t n)
{
	if (gid == pgid)
		return true;
	for (size_t i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

bool conf_allowed(const struct conf *c, uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups)
{
	/* root and the service's own user may always connect. */
	if (uid == 0 || uid == geteuid())
		return true;
	for (unsigned i = 0; i < c->n_allow_uids; i++)
		if (c->allow_uids[i] == uid)
			return true;
	for (unsigned i = 0; i < c->n_allow_gids; i++)
		if (in_groups(c->allow_gids[i], gid, groups, n_groups))
			return true;
	return false;
}

const struct conf_rule *conf_rule_for(const struct conf *c, uid_t uid, gid_t gid, const gid_t *groups,
				      size_t n_groups)
{
	for (size_t i = 0; i < c->n_rules; i++)
		if (c->rules[i].kind == RULE_USER && c->rules[i].id == uid)
			return &c->rules[i];
	for (size_t i = 0; i < c->n_rules; i++)
		if (c->rules[i].kind == RULE_GROUP && in_groups(c->rules[i].id, gid, groups, n_groups))
			return &c->rules[i];
	return &c->dflt;
}

static void print_profiles(FILE *f, const bool *set)
{
	bool first = true;

	for (int i = 0; i < CONF_MAX_PROFILES; i++)
		if (set[i]) {
			fprintf(f, "%s%s", first ? "" : " ", conf_profiles[i]);
			first = false;
		}
	fputc('\n', f);
}

static void print_rule(FILE *f, const struct conf_rule *r)
{
	fprintf(f, "\n[%s]\nMaxSessions=%u\n", r->section, r->max_sessions);
	if (r->max_memory)
		fprintf(f, "MaxMemory=%llu\n", (unsigned long long)r->max_memory);
	else
		fprintf(f, "MaxMemory=infinity\n");
	if (r->max_cpus > 0)
		fprintf(f, "MaxCPUs=%g\n", r->max_cpus);
	else
		fprintf(f, "MaxCPUs=infinity\n");
	if (r->max_pids)
		fprintf(f, "MaxPids=%llu\n", (unsigned long long)r->max_pids);
	else
		fprintf(f, "MaxPids=infinity\n");
	fprintf(f, "AllowShareNet=%s\nAllowNet=%s\nAllowBinds=%s\nAllowWorkspace=%s\nAllowProfiles=",
		r->share_net ? "yes" : "no", r->net ? "yes" : "no", r->binds ? "yes" : "no", r->workspace ? "yes" : "no");
	print_profiles(f, r->profiles);
}

void conf_print(const struct conf *c, FILE *f)
{
	fprintf(f, "[Service]\nPoolSize=%u\nWorkers=%u\nPoolProfiles=", c->pool_size, c->workers);
	print_profiles(f, c->pool_profile);
	fprintf(f, "IdleExitSec=%g\nMaxConnections=%u\nMaxConnectionsPerUser=%u\nHelloTimeoutSec=%g\nMaxSessions=%u\n",
		c->idle_exit, c->max_connections, c->max_conns_per_user, c->hello_timeout, c->max_sessions);
	if (c->uid_count)
		fprintf(f, "HostUidRange=%u-%u\n", c->uid_first, c->uid_first + c->uid_count - 1);
	else
		fprintf(f, "HostUidRange=\n");
	fprintf(f, "AllowUsers=");
	for (unsigned i = 0; i < c->n_allow_uids; i++)
		fprintf(f, "%s%u", i ? " " : "", c->allow_uids[i]);
	fprintf(f, "\nAllowGroups=");
	for (unsigned i = 0; i < c->n_allow_gids; i++)
		fprintf(f, "%s%u", i ? " " : "", c->allow_gids[i]);
	fputc('\n', f);
	print_rule(f, &c->dflt);
	for (size_t i = 0; i < c->n_rules; i++)
		print_rule(f, &c->rules[i]);
}
