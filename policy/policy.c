/* The policy: built-ins, the nsbox-policy(5) file format and the setters the
 * command line uses.  Every path into a struct nsbox_policy (file line, flag,
 * Base=) goes through set_key(), so a value is checked the same way whatever
 * its source.  Pure code: no privileges and no kernel state; the only I/O is
 * policy_load() reading a file and policy_print() writing one.  Errors are
 * err_fail(..., "policy", ...): messages that say it all (no strerror()),
 * with an errno-style code all the same, in step "policy", which the
 * library does not report as a failed setup step. */
#include "policy.h"
#include "netrule.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* A printed line ("ReadOnlyBind=" + value) must stay under the parser's
 * line limit so that policy_print() output always parses back. */
#define POLICY_LINE_MAX 4096
#define POLICY_VALUE_MAX 4000
#define POLICY_FILE_MAX (1024 * 1024)

#define SIZE_MAX_BYTES (1ULL << 60)	/* 1048576T: far above any real limit, far below overflow */
#define PIDS_MAX 4194304UL		/* PID_MAX_LIMIT on 64-bit, proc(5) */
#define NOFILE_MAX 1048576UL		/* fs.nr_open default: setrlimit(2) fails above it */
#define CPUS_MAX 65536.0
#define ID_MAX 4294967294UL		/* (uid_t)-1 means "no change" to setresuid(2) */

#define SIZE_HINT "use a number with optional K, M, G, T suffix, or infinity"

/* Policies carry secrets (Set=API_KEY=...).  The helper process forks
 * every template session from its own memory, so whatever a policy string
 * leaves in freed heap could be read by a later session: wipe before free. */
static void free_wiped(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static void freep_wiped(char **s)
{
	free_wiped(*s);
}

static void wipe_buf(char (*b)[POLICY_LINE_MAX + 1])
{
	explicit_bzero(*b, sizeof(*b));
}

static const char *const builtin_names[] = { "default", "strict", "permissive" };

/* A value as shown in a message: bounded and with bytes that could move a
 * terminal's cursor escaped, since values come from untrusted files. */
static const char *shown(const char *s, char *buf, size_t size)
{
	size_t o = 0, i;

	for (i = 0; s[i] && o + 8 < size; i++) {
		unsigned char c = (unsigned char)s[i];

		if (i >= 64) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (c < 0x20 || c >= 0x7f || c == '\\')
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
	return buf;
}

/* ---- values ------------------------------------------------------------ */

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_infinity(const char *v)
{
	return strcmp(v, "infinity") == 0;
}

static int parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = { "yes", "true", "1", "on" };
	static const char *const no[] = { "no", "false", "0", "off" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

static int parse_want(const char *v, enum policy_want *out)
{
	if (strcmp(v, "auto") == 0)
		*out = WANT_AUTO;
	else if (strcmp(v, "require") == 0)
		*out = WANT_REQUIRE;
	else if (strcmp(v, "off") == 0)
		*out = WANT_OFF;
	else
		return -1;
	return 0;
}

static const char *want_name(enum policy_want w)
{
	switch (w) {
	case WANT_OFF: return "off";
	case WANT_AUTO: return "auto";
	case WANT_REQUIRE: return "require";
	}
	return "?";
}

/* Sizes: util's parse_size (binary units), plus "infinity" -> 0 where the
 * key allows it. */
static int value_size(const char *v, bool allow_inf, uint64_t min, uint64_t *out,
		      struct nsbox_err *err)
{
	unsigned long long n;
	int r;

	if (allow_inf && is_infinity(v)) {
		*out = 0;
		return 0;
	}
	r = parse_size(v, &n);
	if (r == -ERANGE || (r == 0 && n > SIZE_MAX_BYTES))
		return err_fail(err, "policy", ERANGE, "too large (at most %lluT)", SIZE_MAX_BYTES >> 40);
	if (r < 0)
		return err_fail(err, "policy", EINVAL, allow_inf ? "not a size (" SIZE_HINT ")"
						   : "not a size (use a number with optional K, M, G, T suffix)");
	if (n != 0 && n < min)
		return err_fail(err, "policy", ERANGE, "too small (at least %llu%c%s)",
				(unsigned long long)min >> (min >> 20 ? 20 : 10), min >> 20 ? 'M' : 'K',
				allow_inf ? ", or infinity" : "");
	*out = n;
	return 0;
}

/* A whole number in [min, max], or 0 / infinity for no limit; below min
 * (why says what needs that many) is refused here, not met at setup. */
static int value_count(const char *v, unsigned long min, const char *why, unsigned long max, uint64_t *out,
		       struct nsbox_err *err)
{
	unsigned long n;
	int r;

	if (is_infinity(v)) {
		*out = 0;
		return 0;
	}
	r = parse_ulong(v, max, &n);
	if (r == -ERANGE)
		return err_fail(err, "policy", ERANGE, "too large (at most %lu, or infinity)", max);
	if (r < 0)
		return err_fail(err, "policy", EINVAL, "not a number (use a whole number, 0 or infinity for no limit)");
	if (n && n < min)
		return err_fail(err, "policy", ERANGE, "too small (at least %lu: %s; 0 or infinity for no limit)", min,
				why);
	*out = n;
	return 0;
}

static int value_decimal(const char *v, double min, double max, const char *what, double *out,
			 struct nsbox_err *err)
{
	double d;

	if (is_infinity(v)) {
		*out = 0;
		return 0;
	}
	if (parse_double(v, &d) < 0)
		return err_fail(err, "policy", EINVAL, "not a decimal number (use e.g. %s, 0 or infinity for no limit)",
			    what);
	if (d > max)
		return err_fail(err, "policy", ERANGE, "too large (at most %.15g, or infinity)", max);
	if (d != 0 && d < min)
		return err_fail(err, "policy", ERANGE, "too small (at least %.15g, or 0 for no limit)", min);
	*out = d;
	return 0;
}

static int value_id(const char *v, uint32_t *out, struct nsbox_err *err)
{
	unsigned long n;

	if (parse_ulong(v, ID_MAX, &n) < 0)
		return err_fail(err, "policy", EINVAL, "not an id (use a number from 0 to %lu)", ID_MAX);
	*out = (uint32_t)n;
	return 0;
}

/* Canonical form of an absolute path: no empty or "." components, no
 * trailing slash.  ".." is refused rather than resolved: inside the sandbox
 * it would be resolved against a different tree than the one the policy
 * author looked at. */
static int norm_path(const char *in, char **out, struct nsbox_err *err)
{
	__attribute__((cleanup(freep_wiped))) char *buf = NULL;
	const char *s = in;
	size_t o = 0;

	if (in[0] != '/')
		return err_fail(err, "policy", EINVAL, "not an absolute path (paths must start with /)");
	if (strlen(in) >= PATH_MAX)
		return err_fail(err, "policy", ENAMETOOLONG, "path too long (at most %d bytes)", PATH_MAX - 1);
	buf = calloc(1, strlen(in) + 2);
	if (!buf)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	while (*s) {
		size_t n;

		while (*s == '/')
			s++;
		n = strcspn(s, "/");
		if (n == 0)
			break;
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return err_fail(err, "policy", EINVAL, "'..' path components are not allowed");
		if (!(n == 1 && s[0] == '.')) {
			buf[o++] = '/';
			memcpy(buf + o, s, n);
			o += n;
		}
		s += n;
	}
	/* A file line loses trailing blanks, so such a path could not be
	 * written back by policy_print(). */
	if (o > 0 && is_blank(buf[o - 1]))
		return err_fail(err, "policy", EINVAL, "path ends in a blank");
	if (o == 0)
		buf[o++] = '/';
	buf[o] = '\0';
	*out = TAKE_PTR(buf);
	return 0;
}

/* Mounting over these would replace the sandbox's own /proc, /dev or /sys
 * (set up by the jail with hidepid, a minimal /dev and no /sys) or the root
 * itself, undoing the isolation the jail builds there. */
static const char *forbidden_dst(const char *dst)
{
	static const struct {
		const char *dir, *why;
	} under[] = {
		{ "/proc", "it would cover the sandbox's own /proc" },
		{ "/dev", "it would cover the sandbox's own /dev" },
		{ "/sys", "it would cover the sandbox's own /sys" },
	};

	if (strcmp(dst, "/") == 0)
		return "it is the sandbox root";
	for (size_t i = 0; i < ARRAY_SIZE(under); i++) {
		size_t n = strlen(under[i].dir);

		if (strncmp(dst, under[i].dir, n) == 0 && (dst[n] == '\0' || dst[n] == '/'))
			return under[i].why;
	}
	return NULL;
}

static bool env_name_ok(const char *s, size_t n)
{
	if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
			return false;
	return true;
}

/* RFC 1123 host name: letters, digits, '-' and '.', labels of 1-63, total
 * at most 64 (HOST_NAME_MAX for sethostname(2)). */
static bool hostname_ok(const char *s)
{
	size_t n = strlen(s), label = 0;

	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!(isalnum((unsigned char)c) || c == '-'))
			return false;
		if (c == '-' && label == 0)
			return false;
		if (++label > 63)
			return false;
	}
	return label > 0 && s[n - 1] != '-';
}

/* ---- setters ----------------------------------------------------------- */

static int replace_str(char **slot, const char *v, struct nsbox_err *err)
{
	char *s = strdup(v);

	if (!s)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	free_wiped(*slot);
	*slot = s;
	return 0;
}

static int set_uid(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	uint32_t id = 0;

	if (value_id(v, &id, err) < 0)
		return -1;
	p->uid = (uid_t)id;
	return 0;
}

static int set_gid(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	uint32_t id = 0;

	if (value_id(v, &id, err) < 0)
		return -1;
	p->gid = (gid_t)id;
	return 0;
}

static int set_host_uid(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	uint32_t id = 0;

	if (value_id(v, &id, err) < 0)
		return -1;
	p->host_uid = (uid_t)id;
	return 0;
}

static int set_host_gid(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	uint32_t id = 0;

	if (value_id(v, &id, err) < 0)
		return -1;
	p->host_gid = (gid_t)id;
	return 0;
}

static int set_network(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	if (strcmp(v, "none") == 0)
		p->share_net = false;
	else if (strcmp(v, "host") == 0)
		p->share_net = true;
	else
		return err_fail(err, "policy", EINVAL, "unknown network mode (use none or host)");
	return 0;
}

static int set_hostname(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	if (!hostname_ok(v))
		return err_fail(err, "policy", EINVAL,
			    "not a host name (use 1-64 letters, digits, '-' and '.', per RFC 1123)");
	return replace_str(&p->hostname, v, err);
}

static int set_memory(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	/* Below a megabyte the cgroup OOM-kills the interpreter before it starts. */
	return value_size(v, true, 1ULL << 20, &p->memory, err);
}

static int set_pids(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_count(v, 2, "the sandbox's pid 1 and its command", PIDS_MAX, &p->pids, err);
}

static int set_cpus(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	/* cpu.max needs quota >= 1ms per 100ms period: 0.01 CPU. */
	return value_decimal(v, 0.01, CPUS_MAX, "0.5 or 2", &p->cpus, err);
}

static int set_time_limit(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_decimal(v, 0.001, POLICY_TIME_LIMIT_MAX, "30 or 2.5", &p->time_limit, err);
}

static int set_tmp_size(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	/* No infinity: a tmpfs without size= may take half of the host's RAM. */
	return value_size(v, false, 1ULL << 20, &p->tmp_size, err);
}

static int set_workspace_size(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	/* 0 would read as "no limit": unlimited is spelled out (infinity). */
	if (!strcmp(v, "0"))
		return err_fail(err, "policy", ERANGE, "too small (at least 1M, or infinity)");
	if (!strcmp(v, "unlimited"))
		v = "infinity";
	return value_size(v, true, 1ULL << 20, &p->workspace_size, err);
}

static int set_file_size(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_size(v, true, 0, &p->file_size, err);
}

static int set_nofile(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_count(v, 16, "what the sandbox's own setup and runner hold open", NOFILE_MAX, &p->nofile, err);
}

static int set_cgroups(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	if (parse_want(v, &p->cgroups) < 0)
		return err_fail(err, "policy", EINVAL, "unknown mode (use auto, require or off)");
	return 0;
}

/* An empty RootFS= or Workspace= clears it, as an empty value resets a
 * setting in systemd units. */
static int set_path_opt(char **slot, const char *v, struct nsbox_err *err)
{
	char *n;

	if (!*v) {
		free_wiped(*slot);
		*slot = NULL;
		return 0;
	}
	if (norm_path(v, &n, err) < 0)
		return -1;
	free_wiped(*slot);
	*slot = n;
	return 0;
}

/* A built root tree's name (rootfs/NAME.tree), as a tree file's Name=. */
bool policy_tree_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > POLICY_TREE_NAME_MAX || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
			return false;
	return true;
}

/* RootFS=DIR (an absolute path) or RootFS=NAME (a built tree, resolved by
 * the library: lib/rootfs.c). */
static int set_rootfs(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	char *n;

	if (!*v || strchr(v, '/'))
		return set_path_opt(&p->rootfs, v, err);
	if (!policy_tree_name_ok(v))
		return err_fail(err, "policy", EINVAL,
				"not an absolute path nor a tree name (lower-case letters, digits, - and _)");
	if (!(n = strdup(v)))
		return err_fail(err, "policy", ENOMEM, "out of memory");
	free_wiped(p->rootfs);
	p->rootfs = n;
	return 0;
}

/* Preload=: module names, separated by spaces or commas; kept as one
 * space-separated list.  An empty value means none (not the tree's). */
static bool module_name_ok(const char *s, size_t n)
{
	bool start = true;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '.') {
			if (start)
				return false;
			start = true;
			continue;
		}
		if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!start && c >= '0' && c <= '9')))
			return false;
		start = false;
	}
	return !start;
}

static int set_preload(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	char buf[POLICY_PRELOAD_MAX + 1];
	size_t len = 0;

	for (const char *s = v; *s;) {
		size_t n;
		s += strspn(s, " \t,");
		n = strcspn(s, " \t,");
		if (!n)
			break;
		if (!module_name_ok(s, n))
			return err_fail(err, "policy", EINVAL, "'%.*s' is not a module name", (int)(n > 64 ? 64 : n), s);
		if (len + n + 1 > POLICY_PRELOAD_MAX)
			return err_fail(err, "policy", E2BIG, "too long (at most %d characters)", POLICY_PRELOAD_MAX);
		if (len)
			buf[len++] = ' ';
		memcpy(buf + len, s, n);
		len += n;
		s += n;
	}
	buf[len] = '\0';
	free_wiped(p->preload);
	/* Empty is kept: "none", where a root tree's own list would apply. */
	if (!(p->preload = strdup(buf)))
		return err_fail(err, "policy", ENOMEM, "out of memory");
	return 0;
}

static int set_workspace(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return set_path_opt(&p->workspace, v, err);
}

static int add_mount(struct nsbox_policy *p, const char *v, bool rw, struct nsbox_err *err)
{
	__attribute__((cleanup(freep_wiped))) char *src_raw = NULL, *src = NULL, *dst = NULL;
	const char *colon = strchr(v, ':'), *why;

	if (p->n_mounts >= POLICY_MAX_MOUNTS)
		return err_fail(err, "policy", E2BIG, "too many mounts (at most %d Bind= and ReadOnlyBind= in all)",
			    POLICY_MAX_MOUNTS);
	src_raw = colon ? strndup(v, (size_t)(colon - v)) : strdup(v);
	if (!src_raw)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	if (!*src_raw)
		return err_fail(err, "policy", EINVAL, "empty source (use SOURCE[:DESTINATION], absolute paths)");
	if (norm_path(src_raw, &src, err) < 0)
		return err_wrap(err, "source");
	if (colon && !colon[1])
		return err_fail(err, "policy", EINVAL, "empty destination (use SOURCE[:DESTINATION], absolute paths)");
	if (norm_path(colon ? colon + 1 : src_raw, &dst, err) < 0)
		return err_wrap(err, "destination");
	why = forbidden_dst(dst);
	if (why)
		return err_fail(err, "policy", EPERM, "destination %s is not allowed (%s)", dst, why);
	for (size_t i = 0; i < p->n_mounts; i++)
		if (p->mounts[i].dst && strcmp(p->mounts[i].dst, dst) == 0)
			return err_fail(err, "policy", EEXIST, "destination %s is already used by another mount", dst);
	p->mounts[p->n_mounts].src = TAKE_PTR(src);
	p->mounts[p->n_mounts].dst = TAKE_PTR(dst);
	p->mounts[p->n_mounts].rw = rw;
	p->n_mounts++;
	return 0;
}

static int set_bind(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return add_mount(p, v, true, err);
}

static int set_ro_bind(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return add_mount(p, v, false, err);
}

/* TmpFS=PATH[:SIZE]: a private tmpfs, writable, of SIZE (default TmpSize's),
 * like /tmp; its pages count toward Memory= as /tmp's do. */
static int set_tmpfs(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	__attribute__((cleanup(freep_wiped))) char *raw = NULL, *dst = NULL;
	const char *colon = strrchr(v, ':'), *why;
	uint64_t size = 0;

	if (p->n_mounts >= POLICY_MAX_MOUNTS)
		return err_fail(err, "policy", E2BIG, "too many mounts (at most %d Bind=, ReadOnlyBind= and TmpFS=)",
			    POLICY_MAX_MOUNTS);
	raw = colon ? strndup(v, (size_t)(colon - v)) : strdup(v);
	if (!raw)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	if (colon && value_size(colon + 1, false, 1ULL << 20, &size, err) < 0)
		return err_wrap(err, "size");
	if (norm_path(raw, &dst, err) < 0)
		return err_wrap(err, "path (use PATH[:SIZE])");
	why = forbidden_dst(dst);
	if (!why && (!strcmp(dst, "/tmp") || !strcmp(dst, "/workspace")))
		why = "nsbox mounts it itself (TmpSize=, Workspace=)";
	if (why)
		return err_fail(err, "policy", EPERM, "%s is not allowed (%s)", dst, why);
	for (size_t i = 0; i < p->n_mounts; i++)
		if (p->mounts[i].dst && strcmp(p->mounts[i].dst, dst) == 0)
			return err_fail(err, "policy", EEXIST, "destination %s is already used by another mount", dst);
	p->mounts[p->n_mounts] = (struct policy_mount){ .dst = TAKE_PTR(dst), .rw = true, .tmpfs = size };
	p->n_mounts++;
	return 0;
}

/* WorkDir=PATH: the working directory inside (default HOME). */
static int set_workdir(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	__attribute__((cleanup(freep_wiped))) char *n = NULL;

	if (!*v) {
		free_wiped(p->workdir);
		p->workdir = NULL;
		return 0;
	}
	if (norm_path(v, &n, err) < 0)
		return -1;
	free_wiped(p->workdir);
	p->workdir = TAKE_PTR(n);
	return 0;
}

/* The entry s (owned) for the name of n bytes: it replaces the one for the
 * same name in place, so the list never holds two for one name. */
static int put_env(struct nsbox_policy *p, char *s, size_t n, struct nsbox_err *err)
{
	for (size_t i = 0; i < p->n_env; i++) {
		if (p->env[i] && strncmp(p->env[i], s, n) == 0 && (p->env[i][n] == '=' || p->env[i][n] == '\0')) {
			free_wiped(p->env[i]);
			p->env[i] = s;
			return 0;
		}
	}
	if (p->n_env >= POLICY_MAX_ENV) {
		free_wiped(s);
		return err_fail(err, "policy", E2BIG, "too many variables (at most %d Set= and Unset=)",
			    POLICY_MAX_ENV);
	}
	p->env[p->n_env++] = s;
	return 0;
}

/* Set=NAME=VALUE: a later Set= of the same NAME replaces the earlier one in
 * place, so the list never holds two values for one name. */
static int set_env(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	const char *eq = strchr(v, '=');
	size_t n;
	char *s;

	if (!eq)
		return err_fail(err, "policy", EINVAL, "not an assignment (use NAME=VALUE)");
	n = (size_t)(eq - v);
	if (!env_name_ok(v, n))
		return err_fail(err, "policy", EINVAL,
			    "not a variable name (use letters, digits and _, not starting with a digit)");
	s = strdup(v);
	if (!s)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	return put_env(p, s, n, err);
}

/* Unset=NAME: NAME is not in the sandbox's environment, whether Set= or
 * built in (PATH, HOME, LANG, TERM, the proxy's). */
static int set_unset(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	char *s;

	if (!env_name_ok(v, strlen(v)))
		return err_fail(err, "policy", EINVAL,
			    "not a variable name (use letters, digits and _, not starting with a digit)");
	s = strdup(v);
	if (!s)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	return put_env(p, s, strlen(v), err);
}

static int set_seccomp(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	if (strcmp(v, "enforce") == 0)
		p->seccomp = SECCOMP_ENFORCE;
	else if (strcmp(v, "log") == 0)
		p->seccomp = SECCOMP_LOG;
	else
		return err_fail(err, "policy", EINVAL, "unknown mode (use enforce or log)");
	return 0;
}

static int set_landlock(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	if (parse_want(v, &p->landlock) < 0)
		return err_fail(err, "policy", EINVAL, "unknown mode (use auto, require or off)");
	return 0;
}

static int set_dist_packages(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	if (parse_bool(v, &p->dist_packages) < 0)
		return err_fail(err, "policy", EINVAL, "not a boolean (use yes, no, true, false, on, off, 1 or 0)");
	return 0;
}

/* [Network] Allow=: checked here, kept as written (egress/ parses it again). */
static int set_net_allow(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	struct net_rule r;
	char *s;

	if (net_rule_parse(v, &r, err) < 0)
		return -1;
	/* "*.co.uk" or "*.github.io" would be too wide to be meant, as "*.com"
	 * is: names anyone can register, and a DNS under them the sandbox
	 * could send anything to.  Judged here, where a rule enters a policy,
	 * once (the proxy and policy_check parse it again, without the list).
	 * Without the list, only the two labels net_rule_parse asks for. */
	if (r.kind == NET_RULE_WILD && net_public_suffix(r.name, NET_PSL_PATH) == 1)
		return err_fail(err, "policy", EINVAL,
				"*.%s: %s is a public suffix (%s): anyone can register a name under it; list the names "
				"meant (*.example.%s)", r.name, r.name, NET_PSL_PATH, r.name);
	for (size_t i = 0; i < p->n_net_allow; i++)
		if (strcmp(p->net_allow[i], v) == 0)
			return 0;
	if (p->n_net_allow >= POLICY_MAX_NET_RULES)
		return err_fail(err, "policy", E2BIG, "too many rules (at most %d Allow=)", POLICY_MAX_NET_RULES);
	s = strdup(v);
	if (!s)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	p->net_allow[p->n_net_allow++] = s;
	return 0;
}

static int set_net_log(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return set_path_opt(&p->net_log, v, err);
}

static int set_net_max_out(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_size(v, true, 0, &p->net_max_out, err);
}

/* A file on the host's disk: at least one line must fit. */
static int set_net_max_log(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_size(v, true, 4096, &p->net_max_log, err);
}

static int set_net_max_in(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_size(v, true, 0, &p->net_max_in, err);
}

static int set_net_max_conns(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	return value_count(v, 0, "", 1UL << 30, &p->net_max_conns, err);
}

/* Base= is handled by the parser: it needs to know whether it came first. */
static int set_base_refused(struct nsbox_policy *p, const char *v, struct nsbox_err *err)
{
	(void)p;
	(void)v;
	return err_fail(err, "policy", EINVAL, "only allowed as the first setting of a policy file");
}

enum { KEY_EMPTY_OK = 1 };

struct policy_key {
	const char *section;
	const char *key;
	int (*set)(struct nsbox_policy *p, const char *v, struct nsbox_err *err);
	int flags;
};

static const struct policy_key keys[] = {
	{ "Policy", "Base", set_base_refused, 0 },
	{ "Sandbox", "Uid", set_uid, 0 },
	{ "Sandbox", "Gid", set_gid, 0 },
	{ "Sandbox", "HostUid", set_host_uid, 0 },
	{ "Sandbox", "HostGid", set_host_gid, 0 },
	{ "Sandbox", "Network", set_network, 0 },
	{ "Sandbox", "Hostname", set_hostname, 0 },
	{ "Sandbox", "WorkDir", set_workdir, KEY_EMPTY_OK },
	{ "Limits", "Memory", set_memory, 0 },
	{ "Limits", "Pids", set_pids, 0 },
	{ "Limits", "CPUs", set_cpus, 0 },
	{ "Limits", "TimeLimit", set_time_limit, 0 },
	{ "Limits", "TmpSize", set_tmp_size, 0 },
	{ "Limits", "WorkspaceSize", set_workspace_size, 0 },
	{ "Limits", "FileSize", set_file_size, 0 },
	{ "Limits", "OpenFiles", set_nofile, 0 },
	{ "Limits", "Cgroups", set_cgroups, 0 },
	{ "Filesystem", "RootFS", set_rootfs, KEY_EMPTY_OK },
	{ "Filesystem", "Workspace", set_workspace, KEY_EMPTY_OK },
	{ "Filesystem", "Bind", set_bind, 0 },
	{ "Filesystem", "ReadOnlyBind", set_ro_bind, 0 },
	{ "Filesystem", "TmpFS", set_tmpfs, 0 },
	{ "Environment", "Set", set_env, 0 },
	{ "Environment", "Unset", set_unset, 0 },
	{ "Security", "Seccomp", set_seccomp, 0 },
	{ "Security", "Landlock", set_landlock, 0 },
	{ "Python", "DistPackages", set_dist_packages, 0 },
	{ "Python", "Preload", set_preload, KEY_EMPTY_OK },
	{ "Network", "Allow", set_net_allow, 0 },
	{ "Network", "Log", set_net_log, KEY_EMPTY_OK },
	{ "Network", "MaxBytesOut", set_net_max_out, 0 },
	{ "Network", "MaxLogBytes", set_net_max_log, 0 },
	{ "Network", "MaxBytesIn", set_net_max_in, 0 },
	{ "Network", "MaxConnections", set_net_max_conns, 0 },
};

static const char *const sections[] = { "Policy", "Sandbox", "Limits", "Filesystem",
					"Environment", "Security", "Python", "Network" };

static bool section_known(const char *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(sections); i++)
		if (strcmp(sections[i], s) == 0)
			return true;
	return false;
}

static void list_sections(char *buf, size_t size)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(sections) && o < size; i++)
		o += (size_t)snprintf(buf + o, size - o, "%s[%s]", i ? ", " : "", sections[i]);
}

static void list_keys(const char *section, char *buf, size_t size)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(keys) && o < size; i++)
		if (strcmp(keys[i].section, section) == 0)
			o += (size_t)snprintf(buf + o, size - o, "%s%s", o ? ", " : "", keys[i].key);
}

/* Check and apply one setting.  Messages read "[Section] Key=value: what is
 * wrong (what is accepted)"; the parser adds "origin:LINE: ". */
int policy_set(struct nsbox_policy *p, const char *section, const char *key, const char *value,
	       struct nsbox_err *err)
{
	char sb[80], kb[80], vb[300], list[256], pre[400];
	const struct policy_key *k = NULL;
	__attribute__((cleanup(freep_wiped))) char *v = NULL;
	size_t start, end;

	if (!p || !section || !key || !value)
		return err_fail(err, "policy", EINVAL, "policy_set: missing argument");
	if (!section_known(section)) {
		list_sections(list, sizeof(list));
		return err_fail(err, "policy", EINVAL, "unknown section [%s] (accepted: %s)",
			    shown(section, sb, sizeof(sb)), list);
	}
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0)
			k = &keys[i];
	if (!k) {
		list_keys(section, list, sizeof(list));
		return err_fail(err, "policy", EINVAL, "[%s] %s=: unknown key (accepted in [%s]: %s)", section,
			    shown(key, kb, sizeof(kb)), section, list);
	}

	/* Same trimming as a file line, so a flag and a line mean the same. */
	start = 0;
	while (is_blank(value[start]))
		start++;
	end = strlen(value);
	while (end > start && is_blank(value[end - 1]))
		end--;
	v = strndup(value + start, end - start);
	if (!v)
		return err_fail(err, "policy", ENOMEM, "out of memory");

	if (strlen(v) > POLICY_VALUE_MAX) {
		err_fail(err, "policy", E2BIG, "value too long (at most %d bytes)", POLICY_VALUE_MAX);
	} else if (!*v && !(k->flags & KEY_EMPTY_OK)) {
		err_fail(err, "policy", EINVAL, "empty value");
	} else {
		for (const char *c = v; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				return err_fail(err, "policy", EINVAL, "[%s] %s=%s: control characters are not allowed",
					    section, key, shown(v, vb, sizeof(vb)));
		if (k->set(p, v, err) == 0)
			return 0;
	}
	if (err) {
		snprintf(pre, sizeof(pre), "[%s] %s=%s: ", section, key, shown(v, vb, sizeof(vb)));
		err_prefix(err, pre);
	}
	return -1;
}

/* ---- built-ins, copy, free --------------------------------------------- */

/* Every string is wiped, not only Set='s values: libnsbox's helper parses
 * each SPAWN's policy in the heap its later sandboxes are forked from, and
 * a workspace or bind path (a user's name in it) is not the next
 * session's to find. */
void policy_free(struct nsbox_policy *p)
{
	if (!p)
		return;
	free_wiped(p->name);
	free_wiped(p->hostname);
	free_wiped(p->workdir);
	free_wiped(p->rootfs);
	free_wiped(p->preload);
	free_wiped(p->workspace);
	for (size_t i = 0; i < p->n_mounts && i < POLICY_MAX_MOUNTS; i++) {
		free_wiped(p->mounts[i].src);
		free_wiped(p->mounts[i].dst);
	}
	for (size_t i = 0; i < p->n_env && i < POLICY_MAX_ENV; i++)
		free_wiped(p->env[i]);
	for (size_t i = 0; i < p->n_net_allow && i < POLICY_MAX_NET_RULES; i++)
		free_wiped(p->net_allow[i]);
	free_wiped(p->net_log);
	explicit_bzero(p, sizeof(*p));
}

int policy_init_builtin(struct nsbox_policy *p, const char *name, struct nsbox_err *err)
{
	struct nsbox_policy q = {
		.uid = 1000,
		.gid = 1000,
		.share_net = false,
		.memory = 512ULL << 20,
		.pids = 128,
		.cpus = 1,
		.time_limit = 0,	/* none: the CLI may set one */
		.tmp_size = 64ULL << 20,
		.workspace_size = 256ULL << 20,
		.file_size = 1ULL << 30,
		.nofile = 1024,
		.cgroups = WANT_AUTO,
		.seccomp = SECCOMP_ENFORCE,
		.landlock = WANT_AUTO,
		.dist_packages = false,
		.net_max_out = 1ULL << 30,
		.net_max_in = 4ULL << 30,
		.net_max_conns = 1024,
		.net_max_log = 64ULL << 20,
	};

	if (!p)
		return err_fail(err, "policy", EINVAL, "policy_init_builtin: no policy");
	memset(p, 0, sizeof(*p));
	if (!name)
		return err_fail(err, "policy", EINVAL, "no policy name");
	if (strcmp(name, "strict") == 0) {
		q.memory = 256ULL << 20;
		q.pids = 32;
		q.cpus = 0.5;
		q.time_limit = 30;
		q.tmp_size = 16ULL << 20;
		q.workspace_size = 64ULL << 20;
		q.file_size = 64ULL << 20;
		q.nofile = 256;
		q.cgroups = WANT_REQUIRE;
		q.landlock = WANT_REQUIRE;
	} else if (strcmp(name, "permissive") == 0) {
		q.memory = 2ULL << 30;
		q.pids = 1024;
		q.cpus = 2;
		q.tmp_size = 512ULL << 20;
		q.workspace_size = 1ULL << 30;
		q.file_size = 4ULL << 30;
		q.nofile = 4096;
		q.share_net = true;
		q.dist_packages = true;
	} else if (strcmp(name, "default") != 0) {
		return err_fail(err, "policy", ENOENT, "no such built-in policy '%s' (use default, strict or permissive)",
			    name);
	}
	q.name = strdup(name);
	q.hostname = strdup("nsbox");
	if (!q.name || !q.hostname) {
		policy_free(&q);
		return err_fail(err, "policy", ENOMEM, "out of memory");
	}
	*p = q;
	return 0;
}

static int dup_opt(char **dst, const char *src)
{
	*dst = NULL;
	if (!src)
		return 0;
	*dst = strdup(src);
	return *dst ? 0 : -1;
}

/* Deep copy, so that a parse that fails half-way leaves the caller's policy
 * as it was. */
int policy_copy(struct nsbox_policy *dst, const struct nsbox_policy *src, struct nsbox_err *err)
{
	struct nsbox_policy q = *src;
	size_t nm = src->n_mounts < POLICY_MAX_MOUNTS ? src->n_mounts : POLICY_MAX_MOUNTS;
	size_t ne = src->n_env < POLICY_MAX_ENV ? src->n_env : POLICY_MAX_ENV;
	int r = 0;

	q.n_mounts = nm;
	q.n_env = ne;
	r |= dup_opt(&q.name, src->name);
	r |= dup_opt(&q.hostname, src->hostname);
	r |= dup_opt(&q.workdir, src->workdir);
	r |= dup_opt(&q.rootfs, src->rootfs);
	r |= dup_opt(&q.preload, src->preload);
	r |= dup_opt(&q.workspace, src->workspace);
	for (size_t i = 0; i < nm; i++) {
		r |= dup_opt(&q.mounts[i].src, src->mounts[i].src);
		r |= dup_opt(&q.mounts[i].dst, src->mounts[i].dst);
	}
	for (size_t i = 0; i < ne; i++)
		r |= dup_opt(&q.env[i], src->env[i]);
	q.n_net_allow = src->n_net_allow < POLICY_MAX_NET_RULES ? src->n_net_allow : POLICY_MAX_NET_RULES;
	for (size_t i = 0; i < q.n_net_allow; i++)
		r |= dup_opt(&q.net_allow[i], src->net_allow[i]);
	r |= dup_opt(&q.net_log, src->net_log);
	if (r) {
		policy_free(&q);
		return err_fail(err, "policy", ENOMEM, "out of memory");
	}
	*dst = q;
	return 0;
}

/* ---- the file format --------------------------------------------------- */

/* One line of a policy file (blanks trimmed in place) on top of *p.
 * Returns 0, or -1 with err saying what is wrong with the line. */
static int parse_line(struct nsbox_policy *p, char *line, char *section, bool *have_section, bool *seen_setting,
		      struct nsbox_err *err)
{
	char buf[300], list[256];
	char *s, *e, *eq;

	s = line;
	while (is_blank(*s))
		s++;
	e = s + strlen(s);
	while (e > s && is_blank(e[-1]))
		*--e = '\0';
	if (!*s || *s == '#' || *s == ';')
		return 0;

	if (*s == '[') {
		if (e[-1] != ']' || e - s < 3)
			return err_fail(err, "policy", EINVAL, "bad section header %s (use [Name])",
				    shown(s, buf, sizeof(buf)));
		e[-1] = '\0';
		/* Until the next header, its keys are not reported again. */
		section[0] = '\0';
		*have_section = true;
		if (!section_known(s + 1)) {
			list_sections(list, sizeof(list));
			return err_fail(err, "policy", EINVAL, "unknown section [%s] (accepted: %s)",
				    shown(s + 1, buf, sizeof(buf)), list);
		}
		strcpy(section, s + 1);
		return 0;
	}

	eq = strchr(s, '=');
	if (!eq)
		return err_fail(err, "policy", EINVAL, "%s: not a setting (use Key=Value, a [Section] or a # comment)",
			    shown(s, buf, sizeof(buf)));
	if (!*have_section)
		return err_fail(err, "policy", EINVAL, "%s: setting outside a section (put it under a [Section] header)",
			    shown(s, buf, sizeof(buf)));
	if (!section[0])
		return 0; /* under an unknown section, already reported */
	e = eq;
	while (e > s && is_blank(e[-1]))
		e--;
	*e = '\0';
	if (!*s)
		return err_fail(err, "policy", EINVAL, "missing key before '='");

	if (strcmp(section, "Policy") == 0 && strcmp(s, "Base") == 0) {
		struct nsbox_policy b;
		const char *v = eq + 1;

		while (is_blank(*v))
			v++;
		if (*seen_setting)
			return err_fail(err, "policy", EINVAL,
				    "[Policy] Base=%s: must be the first setting of the file",
				    shown(v, buf, sizeof(buf)));
		*seen_setting = true;
		if (policy_init_builtin(&b, v, err) < 0)
			return err_wrap(err, "[Policy] Base=%s", shown(v, buf, sizeof(buf)));
		free(b.name);
		b.name = TAKE_PTR(p->name);
		policy_free(p);
		*p = b;
		return 0;
	}
	*seen_setting = true;
	return policy_set(p, section, s, eq + 1, err);
}

/* Every line of text on top of *p.  A line that is wrong is reported and
 * parsing goes on, so that one run of `nsbox policy check` names every
 * error: err's message then holds one "origin:LINE: what" per line, as
 * many as fit.  Returns 0 or -1. */
static int parse_into(struct nsbox_policy *p, const char *text, size_t len, const char *origin,
		      struct nsbox_err *err)
{
	__attribute__((cleanup(wipe_buf))) char line[POLICY_LINE_MAX + 1];
	__attribute__((cleanup(wipe_buf))) char section[POLICY_LINE_MAX + 1] = "";
	bool have_section = false, seen_setting = false;
	unsigned lineno = 0, n_errors = 0, n_shown = 0;
	char all[NSBOX_ERR_MSG_MAX] = "";
	size_t pos = 0, used = 0;
	int code = 0;

	/* A UTF-8 byte order mark, as some editors write. */
	if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
		pos = 3;
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
		struct nsbox_err one = { 0 };
		int r;

		++lineno;
		if (n > POLICY_LINE_MAX) {
			r = err_fail(&one, "policy", E2BIG, "line too long (at most %d bytes)", POLICY_LINE_MAX);
		} else if (memchr(text + pos, '\0', n)) {
			r = err_fail(&one, "policy", EINVAL, "NUL byte in line (policy files are text)");
		} else {
			memcpy(line, text + pos, n);
			line[n] = '\0';
			r = parse_line(p, line, section, &have_section, &seen_setting, &one);
		}
		pos += n + (nl ? 1 : 0);
		if (r == 0)
			continue;
		if (one.code == ENOMEM) {
			err_copy(err, &one);
			return -1;
		}
		if (!n_errors++)
			code = one.code;
		/* What does not fit is counted below, not cut mid-message. */
		int k = snprintf(all + used, sizeof(all) - used, "%s%.512s:%u: %s", used ? "\n" : "", origin, lineno,
				 one.msg);
		if (k > 0 && (size_t)k < sizeof(all) - used - 40) {
			used += (size_t)k;
			n_shown++;
		} else {
			all[used] = '\0';
		}
	}
	if (!n_errors)
		return 0;
	if (n_errors > n_shown)
		snprintf(all + used, sizeof(all) - used, "\n%s: and %u more error%s", origin, n_errors - n_shown,
			 n_errors - n_shown == 1 ? "" : "s");
	return err_fail(err, "policy", code, "%s", all);
}

int policy_parse(struct nsbox_policy *p, const char *text, size_t len, const char *origin,
		 struct nsbox_err *err)
{
	struct nsbox_policy q;
	if (!origin)
		origin = "<policy>";
	if (!p || (!text && len))
		return err_fail(err, "policy", EINVAL, "%s: policy_parse: missing argument", origin);
	if (policy_copy(&q, p, err) < 0)
		return err_wrap(err, "%s", origin);
	if (parse_into(&q, text ? text : "", len, origin, err) < 0) {
		policy_free(&q);
		return -1;
	}
	policy_free(p);
	*p = q;
	return 0;
}

static bool is_builtin(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(builtin_names); i++)
		if (strcmp(builtin_names[i], name) == 0)
			return true;
	return false;
}

bool policy_is_builtin_name(const char *name)
{
	return is_builtin(name);
}

int policy_load(struct nsbox_policy *p, const char *name_or_file, struct nsbox_err *err)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *text = NULL;
	struct nsbox_policy q;
	struct stat st;
	ssize_t n;

	if (!p)
		return err_fail(err, "policy", EINVAL, "policy_load: no policy");
	memset(p, 0, sizeof(*p));
	if (!name_or_file || !*name_or_file)
		return err_fail(err, "policy", EINVAL, "empty policy name");
	if (is_builtin(name_or_file))
		return policy_init_builtin(p, name_or_file, err);

	/* O_NONBLOCK: opening a FIFO must not hang; it is refused below. */
	fd = open(name_or_file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return err_fail(err, "policy", ENOENT,
				    "policy '%s': no such built-in policy (default, strict, permissive) and no such file",
				    name_or_file);
		return err_sys(err, "policy '%s': open", name_or_file);
	}
	if (fstat(fd, &st) < 0)
		return err_sys(err, "policy '%s': fstat", name_or_file);
	if (!S_ISREG(st.st_mode))
		return err_fail(err, "policy", EINVAL, "policy '%s': not a regular file", name_or_file);
	text = malloc(POLICY_FILE_MAX + 1);
	if (!text)
		return err_fail(err, "policy", ENOMEM, "out of memory");
	n = read_full(fd, text, POLICY_FILE_MAX + 1);
	if (n < 0)
		return err_sys(err, "policy '%s': read", name_or_file);
	if (n > POLICY_FILE_MAX)
		return err_fail(err, "policy", EFBIG, "policy '%s': file too large (at most %d bytes)", name_or_file,
			    POLICY_FILE_MAX);

	if (policy_from_text(&q, text, (size_t)n, name_or_file, err) < 0)
		return -1;
	if (replace_str(&q.name, name_or_file, err) < 0) {
		policy_free(&q);
		return -1;
	}
	*p = q;
	return 0;
}

int policy_from_text(struct nsbox_policy *p, const char *text, size_t len, const char *origin,
		     struct nsbox_err *err)
{
	struct nsbox_policy q;

	if (policy_init_builtin(&q, "default", err) < 0)
		return -1;
	if (policy_parse(&q, text, len, origin, err) < 0) {
		policy_free(&q);
		return -1;
	}
	*p = q;
	return 0;
}

/* ---- validation -------------------------------------------------------- */

static int check_path(const char *what, const char *path, bool is_dst, struct nsbox_err *err)
{
	__attribute__((cleanup(freep_wiped))) char *n = NULL;
	const char *why;

	if (!path)
		return err_fail(err, "policy", EINVAL, "%s: missing path", what);
	if (norm_path(path, &n, err) < 0)
		return err_wrap(err, "%s %s", what, path);
	if (is_dst && (why = forbidden_dst(n)))
		return err_fail(err, "policy", EPERM, "%s %s: not allowed (%s)", what, path, why);
	return 0;
}

/* a is strictly below b ("/x/y" under "/x"; not "/xy"). */
static bool path_under(const char *a, const char *b)
{
	size_t n = strlen(b);

	if (strcmp(b, "/") == 0)
		return a[1] != '\0';
	return strncmp(a, b, n) == 0 && a[n] == '/';
}

int policy_validate(const struct nsbox_policy *p, struct nsbox_err *err)
{
	if (!p)
		return err_fail(err, "policy", EINVAL, "no policy");
	if (p->uid == (uid_t)-1)
		return err_fail(err, "policy", EINVAL, "[Sandbox] Uid=%u: not a valid id (use 0 to %lu)",
			    (unsigned)p->uid, ID_MAX);
	if (p->gid == (gid_t)-1)
		return err_fail(err, "policy", EINVAL, "[Sandbox] Gid=%u: not a valid id (use 0 to %lu)",
			    (unsigned)p->gid, ID_MAX);
	if (p->host_uid == (uid_t)-1 || p->host_gid == (gid_t)-1)
		return err_fail(err, "policy", EINVAL, "[Sandbox] HostUid=, HostGid=: not a valid id (use 0 to %lu)", ID_MAX);
	/* A picked uid with the launcher's gid (root's) would share a group
	 * with it: both or neither. */
	if (!p->host_uid != !p->host_gid)
		return err_fail(err, "policy", EINVAL, "[Sandbox] HostUid=%u, HostGid=%u: set both or neither",
			    (unsigned)p->host_uid, (unsigned)p->host_gid);
	if (!p->hostname || !hostname_ok(p->hostname))
		return err_fail(err, "policy", EINVAL, "[Sandbox] Hostname=: missing or not a valid host name");
	if (!isfinite(p->cpus) || p->cpus < 0 || !isfinite(p->time_limit) || p->time_limit < 0)
		return err_fail(err, "policy", EINVAL, "[Limits] CPUs= and TimeLimit= must be finite and not negative");
	if ((unsigned)p->cgroups > WANT_REQUIRE || (unsigned)p->landlock > WANT_REQUIRE ||
	    (unsigned)p->seccomp > SECCOMP_LOG)
		return err_fail(err, "policy", EINVAL, "[Limits] Cgroups=, [Security] Landlock= or Seccomp=: bad mode");
	if (p->rootfs && strchr(p->rootfs, '/') && check_path("[Filesystem] RootFS=", p->rootfs, false, err) < 0)
		return -1;
	if (p->workdir && check_path("[Sandbox] WorkDir=", p->workdir, false, err) < 0)
		return -1;
	if (p->rootfs && !strchr(p->rootfs, '/') && !policy_tree_name_ok(p->rootfs))
		return err_fail(err, "policy", EINVAL, "[Filesystem] RootFS=%s: not a path nor a tree name", p->rootfs);
	if (p->preload && strlen(p->preload) > POLICY_PRELOAD_MAX)
		return err_fail(err, "policy", E2BIG, "[Python] Preload=: too long");
	/* Network=host would make the allowlist a lie: every address reachable. */
	if (p->n_net_allow && p->share_net)
		return err_fail(err, "policy", EINVAL, "[Network] Allow= needs [Sandbox] Network=none (not --share-net)");
	if (p->n_net_allow > POLICY_MAX_NET_RULES)
		return err_fail(err, "policy", E2BIG, "[Network]: %zu rules (at most %d)", p->n_net_allow, POLICY_MAX_NET_RULES);
	for (size_t i = 0; i < p->n_net_allow; i++) {
		struct net_rule r;

		if (net_rule_parse(p->net_allow[i], &r, err) < 0)
			return err_wrap(err, "[Network] Allow=%s", p->net_allow[i]);
	}
	if (p->net_log && check_path("[Network] Log=", p->net_log, false, err) < 0)
		return -1;
	if (p->workspace && check_path("[Filesystem] Workspace=", p->workspace, false, err) < 0)
		return -1;
	if (p->n_mounts > POLICY_MAX_MOUNTS)
		return err_fail(err, "policy", E2BIG, "[Filesystem]: %zu mounts (at most %d)", p->n_mounts,
			    POLICY_MAX_MOUNTS);
	for (size_t i = 0; i < p->n_mounts; i++) {
		const struct policy_mount *m = &p->mounts[i];
		const char *key = m->rw ? "[Filesystem] Bind= source" : "[Filesystem] ReadOnlyBind= source";
		__attribute__((cleanup(freep_wiped))) char *di = NULL;

		if (!m->src && (!m->rw || (m->tmpfs && m->tmpfs < (1ULL << 20))))
			return err_fail(err, "policy", EINVAL, "[Filesystem] TmpFS= %s: read-only or under 1M",
				    m->dst ? m->dst : "");
		if (m->src && check_path(key, m->src, false, err) < 0)
			return -1;
		key = !m->src ? "[Filesystem] TmpFS="
		      : m->rw ? "[Filesystem] Bind= destination"
			      : "[Filesystem] ReadOnlyBind= destination";
		if (check_path(key, m->dst, true, err) < 0)
			return -1;
		if (norm_path(m->dst, &di, err) < 0)
			return -1;
		if (p->workspace && strcmp(di, "/workspace") == 0)
			return err_fail(err, "policy", EEXIST,
				    "%s %s: conflicts with Workspace=, which is mounted there", key, m->dst);
		/* The launcher resolves destinations on the host before
		 * pivot_root: one inside a writable mount would follow symlinks
		 * that an earlier sandbox left there. */
		if (p->workspace && path_under(di, "/workspace"))
			return err_fail(err, "policy", EINVAL, "%s %s: inside Workspace= (a writable mount): not allowed", key,
				    m->dst);
		for (size_t j = 0; j < p->n_mounts; j++) {
			__attribute__((cleanup(freep_wiped))) char *dj = NULL;

			if (j == i)
				continue;
			if (norm_path(p->mounts[j].dst, &dj, err) < 0)
				return -1;
			if (j < i && strcmp(di, dj) == 0)
				return err_fail(err, "policy", EEXIST, "%s %s: used by two mounts", key, m->dst);
			if (p->mounts[j].rw && path_under(di, dj))
				return err_fail(err, "policy", EINVAL, "%s %s: inside the writable Bind= %s: not allowed", key,
					    m->dst, p->mounts[j].dst);
		}
	}
	if (p->n_env > POLICY_MAX_ENV)
		return err_fail(err, "policy", E2BIG, "[Environment]: %zu variables (at most %d)", p->n_env,
			    POLICY_MAX_ENV);
	for (size_t i = 0; i < p->n_env; i++) {
		size_t n = p->env[i] ? strcspn(p->env[i], "=") : 0;

		if (!env_name_ok(p->env[i] ? p->env[i] : "", n))
			return err_fail(err, "policy", EINVAL, "[Environment] Set=: entry %zu is not NAME=VALUE", i + 1);
		for (size_t j = 0; j < i; j++)
			if (p->env[j] && strncmp(p->env[j], p->env[i], n) == 0 &&
			    (p->env[j][n] == '=' || p->env[j][n] == '\0'))
				return err_fail(err, "policy", EEXIST, "[Environment] Set=: %.*s is set twice", (int)n,
					    p->env[i]);
	}
	return 0;
}

/* ---- printing ---------------------------------------------------------- */

static void print_size(FILE *out, const char *key, uint64_t v, const char *zero)
{
	static const char units[] = "TGMK";

	if (v == 0) {
		fprintf(out, "%s=%s\n", key, zero);
		return;
	}
	for (int i = 0; i < 4; i++) {
		uint64_t u = 1ULL << (10 * (4 - i));

		if (v % u == 0) {
			fprintf(out, "%s=%llu%c\n", key, (unsigned long long)(v / u), units[i]);
			return;
		}
	}
	fprintf(out, "%s=%llu\n", key, (unsigned long long)v);
}

static void print_count(FILE *out, const char *key, uint64_t v)
{
	if (v == 0)
		fprintf(out, "%s=infinity\n", key);
	else
		fprintf(out, "%s=%llu\n", key, (unsigned long long)v);
}

/* The shortest decimal that reads back as the same double. */
static void print_decimal(FILE *out, const char *key, double v)
{
	char buf[64];

	if (v == 0) {
		fprintf(out, "%s=infinity\n", key);
		return;
	}
	/* Plain notation ("10", "0.25") where it is exact, as people write
	 * it; %.17g, which always reads back the same, otherwise. */
	for (int prec = 0; prec <= 17; prec++) {
		int n = format_double_c(buf, sizeof(buf), "%.*f", prec, v);

		if (n > 0 && (size_t)n < sizeof(buf) && strtod_c(buf, NULL) == v) {
			fprintf(out, "%s=%s\n", key, buf);
			return;
		}
	}
	format_double_c(buf, sizeof(buf), "%.17g", 0, v);
	fprintf(out, "%s=%s\n", key, buf);
}

void policy_print(const struct nsbox_policy *p, FILE *out)
{
	if (!p || !out)
		return;
	fprintf(out, "# nsbox policy%s%s (see nsbox-policy(5))\n", p->name ? ": " : "",
		p->name ? p->name : "");
	/* Every setting is printed, so starting from a known base makes the
	 * output mean the same whatever policy it is parsed on top of. */
	fprintf(out, "[Policy]\nBase=default\n");

	fprintf(out, "\n[Sandbox]\nUid=%u\nGid=%u\nNetwork=%s\n", (unsigned)p->uid, (unsigned)p->gid,
		p->share_net ? "host" : "none");
	if (p->hostname)
		fprintf(out, "Hostname=%s\n", p->hostname);
	if (p->workdir)
		fprintf(out, "WorkDir=%s\n", p->workdir);
	/* Only when set: the base has none, and most policies never do. */
	if (p->host_uid || p->host_gid)
		fprintf(out, "HostUid=%u\nHostGid=%u\n", (unsigned)p->host_uid, (unsigned)p->host_gid);

	fprintf(out, "\n[Limits]\n");
	print_size(out, "Memory", p->memory, "infinity");
	print_count(out, "Pids", p->pids);
	print_decimal(out, "CPUs", p->cpus);
	print_decimal(out, "TimeLimit", p->time_limit);
	print_size(out, "TmpSize", p->tmp_size, "0");
	print_size(out, "WorkspaceSize", p->workspace_size, "infinity");
	print_size(out, "FileSize", p->file_size, "infinity");
	print_count(out, "OpenFiles", p->nofile);
	fprintf(out, "Cgroups=%s\n", want_name(p->cgroups));

	fprintf(out, "\n[Filesystem]\n");
	if (p->rootfs)
		fprintf(out, "RootFS=%s\n", p->rootfs);
	if (p->workspace)
		fprintf(out, "Workspace=%s\n", p->workspace);
	for (size_t i = 0; i < p->n_mounts && i < POLICY_MAX_MOUNTS; i++) {
		if (p->mounts[i].src && p->mounts[i].dst)
			fprintf(out, "%s=%s:%s\n", p->mounts[i].rw ? "Bind" : "ReadOnlyBind",
				p->mounts[i].src, p->mounts[i].dst);
		else if (p->mounts[i].dst && p->mounts[i].tmpfs)
			fprintf(out, "TmpFS=%s:%llu\n", p->mounts[i].dst, (unsigned long long)p->mounts[i].tmpfs);
		else if (p->mounts[i].dst)
			fprintf(out, "TmpFS=%s\n", p->mounts[i].dst);
	}

	fprintf(out, "\n[Environment]\n");
	for (size_t i = 0; i < p->n_env && i < POLICY_MAX_ENV; i++)
		if (p->env[i])
			fprintf(out, "%s=%s\n", strchr(p->env[i], '=') ? "Set" : "Unset", p->env[i]);

	fprintf(out, "\n[Security]\nSeccomp=%s\nLandlock=%s\n",
		p->seccomp == SECCOMP_LOG ? "log" : "enforce", want_name(p->landlock));
	fprintf(out, "\n[Python]\nDistPackages=%s\n", p->dist_packages ? "yes" : "no");
	if (p->preload)
		fprintf(out, "Preload=%s\n", p->preload);

	fprintf(out, "\n[Network]\n");
	for (size_t i = 0; i < p->n_net_allow && i < POLICY_MAX_NET_RULES; i++)
		fprintf(out, "Allow=%s\n", p->net_allow[i]);
	if (p->net_log)
		fprintf(out, "Log=%s\n", p->net_log);
	print_size(out, "MaxBytesOut", p->net_max_out, "infinity");
	print_size(out, "MaxBytesIn", p->net_max_in, "infinity");
	print_count(out, "MaxConnections", p->net_max_conns);
	print_size(out, "MaxLogBytes", p->net_max_log, "infinity");
}
