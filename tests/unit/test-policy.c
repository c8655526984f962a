/* Unit tests for policy/: built-ins, every key good and bad, file:line in
 * messages, Base=, repeated keys, caps, comments, garbage, load, validate and
 * the print -> parse round trip.  Needs no privileges.  Data files are read
 * from $NSBOX_TEST_DATA or tests/data (run from the project root). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy.h"
#include "tap.h"

/* tap.h's ok() evaluates its condition twice (once for the verdict, once
 * for the message); the conditions here call the code under test, so
 * evaluate them exactly once. */
#define check(cond, ...)                       \
	do {                                   \
		bool check_ = (cond);          \
		ok(check_, __VA_ARGS__);       \
	} while (0)

static const char *data_dir(void)
{
	const char *d = getenv("NSBOX_TEST_DATA");

	return d && *d ? d : "tests/data";
}

static bool str_eq(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Everything but the name: the name records where a policy came from. */
static bool policy_equal(const struct nsbox_policy *a, const struct nsbox_policy *b)
{
	if (a->uid != b->uid || a->gid != b->gid || a->share_net != b->share_net ||
	    !str_eq(a->hostname, b->hostname) || a->memory != b->memory || a->pids != b->pids ||
	    a->cpus != b->cpus || a->time_limit != b->time_limit || a->tmp_size != b->tmp_size ||
	    a->file_size != b->file_size || a->nofile != b->nofile || a->cgroups != b->cgroups ||
	    !str_eq(a->rootfs, b->rootfs) || !str_eq(a->workspace, b->workspace) ||
	    a->n_mounts != b->n_mounts || a->n_env != b->n_env || a->seccomp != b->seccomp ||
	    a->landlock != b->landlock || a->dist_packages != b->dist_packages)
		return false;
	for (size_t i = 0; i < a->n_mounts; i++)
		if (!str_eq(a->mounts[i].src, b->mounts[i].src) ||
		    !str_eq(a->mounts[i].dst, b->mounts[i].dst) || a->mounts[i].rw != b->mounts[i].rw)
			return false;
	for (size_t i = 0; i < a->n_env; i++)
		if (!str_eq(a->env[i], b->env[i]))
			return false;
	return true;
}

static int parse_str(struct nsbox_policy *p, const char *text, struct nsbox_err *err)
{
	err_clear(err);
	return policy_parse(p, text, strlen(text), "t.policy", err);
}

static char *print_to_string(const struct nsbox_policy *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	policy_print(p, f);
	fclose(f);
	return buf;
}

/* Print p, parse the text on top of `base`, and compare. */
static bool round_trips(const struct nsbox_policy *p, const char *base)
{
	struct nsbox_policy q = { 0 };
	struct nsbox_err err = { 0 };
	char *text = print_to_string(p);
	bool same;

	if (!text || policy_init_builtin(&q, base, &err) < 0) {
		free(text);
		return false;
	}
	if (policy_parse(&q, text, strlen(text), "printed", &err) < 0) {
		printf("# round trip parse failed: %s\n# %s\n", err.msg, text);
		same = false;
	} else {
		same = policy_equal(p, &q);
		if (!same)
			printf("# round trip differs:\n%s", text);
	}
	free(text);
	policy_free(&q);
	return same;
}

static void test_builtins(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };

	check(policy_init_builtin(&p, "default", &err) == 0, "built-in default");
	check(str_eq(p.name, "default") && p.uid == 1000 && p.gid == 1000 && !p.share_net &&
		   str_eq(p.hostname, "nsbox"),
	   "default [Sandbox]: 1000/1000, no network, hostname nsbox");
	check(p.memory == 512ULL << 20 && p.pids == 128 && p.cpus == 1 && p.time_limit == 0 &&
		   p.tmp_size == 64ULL << 20 && p.file_size == 1ULL << 30 && p.nofile == 1024 &&
		   p.cgroups == WANT_AUTO,
	   "default [Limits]");
	check(!p.rootfs && !p.workspace && p.n_mounts == 0 && p.n_env == 0, "default has no mounts or env");
	check(p.seccomp == SECCOMP_ENFORCE && p.landlock == WANT_AUTO && !p.dist_packages,
	   "default [Security] and [Python]");
	check(policy_validate(&p, &err) == 0, "default validates");
	check(round_trips(&p, "default") && round_trips(&p, "strict"), "default round trips");
	policy_free(&p);

	check(policy_init_builtin(&p, "strict", &err) == 0, "built-in strict");
	check(p.memory == 256ULL << 20 && p.pids == 32 && p.cpus == 0.5 && p.time_limit == 30 &&
		   p.tmp_size == 16ULL << 20 && p.file_size == 64ULL << 20 && p.nofile == 256 &&
		   p.cgroups == WANT_REQUIRE && p.landlock == WANT_REQUIRE &&
		   p.seccomp == SECCOMP_ENFORCE && !p.share_net && !p.dist_packages,
	   "strict values");
	check(policy_validate(&p, &err) == 0, "strict validates");
	check(round_trips(&p, "permissive"), "strict round trips");
	policy_free(&p);

	check(policy_init_builtin(&p, "permissive", &err) == 0, "built-in permissive");
	check(p.memory == 2ULL << 30 && p.pids == 1024 && p.cpus == 2 && p.time_limit == 0 &&
		   p.tmp_size == 512ULL << 20 && p.file_size == 4ULL << 30 && p.nofile == 4096 &&
		   p.share_net && p.dist_packages && p.landlock == WANT_AUTO &&
		   p.cgroups == WANT_AUTO && p.seccomp == SECCOMP_ENFORCE,
	   "permissive values");
	check(policy_validate(&p, &err) == 0, "permissive validates");
	check(round_trips(&p, "default"), "permissive round trips");
	policy_free(&p);

	memset(&p, 0x5a, sizeof(p));
	check(policy_init_builtin(&p, "lax", &err) < 0 && strstr(err.msg, "lax") &&
		   strstr(err.msg, "default, strict or permissive"),
	   "unknown built-in refused: %s", err.msg);
	check(p.name == NULL && p.hostname == NULL && p.n_mounts == 0, "failed init leaves *p zeroed");
	check(policy_init_builtin(&p, "Default", &err) < 0, "built-in names are case-sensitive");
	check(policy_init_builtin(&p, NULL, &err) < 0, "NULL name refused");
}

struct good_case {
	const char *section, *key, *value;
};

/* Values every key must accept; checked for effect in test_good_effects. */
static const struct good_case good[] = {
	{ "Sandbox", "Uid", "0" },	     { "Sandbox", "Uid", "4294967294" },
	{ "Sandbox", "Gid", "65534" },	     { "Sandbox", "Network", "none" },
	{ "Sandbox", "Network", "host" },    { "Sandbox", "Hostname", "a" },
	{ "Sandbox", "Hostname", "x-1.y2" }, { "Limits", "Memory", "256M" },
	{ "Limits", "Memory", "1G" },	     { "Limits", "Memory", "0" },
	{ "Limits", "Memory", "infinity" },  { "Limits", "Memory", "1048576" },
	{ "Limits", "Memory", "2GiB" },	     { "Limits", "Pids", "2" },
	{ "Limits", "Pids", "infinity" },    { "Limits", "Pids", "4194304" },
	{ "Limits", "CPUs", "0.5" },	     { "Limits", "CPUs", "2" },
	{ "Limits", "CPUs", "0" },	     { "Limits", "CPUs", ".25" },
	{ "Limits", "TimeLimit", "30" },     { "Limits", "TimeLimit", "0.1" },
	{ "Limits", "TimeLimit", "infinity" }, { "Limits", "TmpSize", "16M" },
	{ "Limits", "TmpSize", "0" },	     { "Limits", "FileSize", "1T" },
	{ "Limits", "WorkspaceSize", "64M" }, { "Limits", "WorkspaceSize", "infinity" },
	{ "Limits", "WorkspaceSize", "unlimited" },
	{ "Limits", "FileSize", "123" },     { "Limits", "FileSize", "infinity" },
	{ "Limits", "OpenFiles", "64" },     { "Limits", "OpenFiles", "1048576" },
	{ "Limits", "Cgroups", "auto" },     { "Limits", "Cgroups", "require" },
	{ "Limits", "Cgroups", "off" },	     { "Filesystem", "RootFS", "/srv/root" },
	{ "Filesystem", "RootFS", "" },	     { "Filesystem", "Workspace", "/home/u/w" },
	{ "Filesystem", "Bind", "/a" },	     { "Filesystem", "Bind", "/b:/c" },
	{ "Filesystem", "Bind", "/with space/ x:/y z" },
	{ "Filesystem", "ReadOnlyBind", "/d:/e/f" }, { "Environment", "Set", "A=1" },
	{ "Environment", "Set", "_x9=" },    { "Environment", "Set", "B=x=y:z # not a comment" },
	{ "Security", "Seccomp", "enforce" }, { "Security", "Seccomp", "log" },
	{ "Security", "Landlock", "auto" },  { "Security", "Landlock", "require" },
	{ "Security", "Landlock", "off" },   { "Python", "DistPackages", "yes" },
	{ "Python", "DistPackages", "no" },  { "Python", "DistPackages", "TRUE" },
	{ "Python", "DistPackages", "0" },   { "Python", "DistPackages", "on" },
	{ "Filesystem", "RootFS", "datascience" }, { "Filesystem", "RootFS", "my-tree_2" },
	{ "Python", "Preload", "numpy pandas" }, { "Python", "Preload", "numpy,pandas" },
	{ "Python", "Preload", "a.b_c.D9" },  { "Python", "Preload", "" },
};

struct bad_case {
	const char *section, *key, *value, *want;
};

/* Values every key must refuse, with the words the message must contain. */
static const struct bad_case bad[] = {
	{ "Sandbox", "Uid", "-1", "not an id (use a number from 0 to 4294967294)" },
	{ "Sandbox", "Uid", "4294967295", "not an id" },
	{ "Sandbox", "Uid", "1000x", "not an id" },
	{ "Sandbox", "Gid", "", "empty value" },
	{ "Sandbox", "Gid", "99999999999999999999", "not an id" },
	{ "Sandbox", "Network", "bridge", "use none or host" },
	{ "Sandbox", "Network", "Host", "use none or host" },
	{ "Sandbox", "Hostname", "-bad", "not a host name" },
	{ "Sandbox", "Hostname", "a..b", "not a host name" },
	{ "Sandbox", "Hostname", "under_score", "not a host name" },
	{ "Sandbox", "Hostname", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "not a host name" },
	{ "Limits", "Memory", "12Q",
	  "[Limits] Memory=12Q: not a size (use a number with optional K, M, G, T suffix, or infinity)" },
	{ "Limits", "Memory", "-5M", "not a size" },
	{ "Limits", "Memory", "1.5G", "not a size" },
	{ "Limits", "Memory", "4096", "too small (at least 1M, or infinity)" },
	{ "Limits", "Memory", "99999999999999999999", "too large" },
	{ "Limits", "Memory", "2000000T", "too large" },
	{ "Limits", "Memory", "unlimited", "not a size" },
	{ "Limits", "Pids", "ten", "not a number" },
	{ "Limits", "Pids", "4194305", "too large (at most 4194304, or infinity)" },
	{ "Limits", "Pids", "1.5", "not a number" },
	/* Past unsigned long: too large, as for sizes (it said "not a number"). */
	{ "Limits", "Pids", "99999999999999999999", "too large (at most 4194304, or infinity)" },
	{ "Limits", "OpenFiles", "99999999999999999999", "too large" },
	{ "Limits", "CPUs", "-1", "not a decimal number" },
	{ "Limits", "CPUs", "nan", "not a decimal number" },
	{ "Limits", "CPUs", "0.001", "too small" },
	{ "Limits", "CPUs", "1e9", "too large" },
	{ "Limits", "CPUs", "2 cores", "not a decimal number" },
	{ "Limits", "TimeLimit", "1e300", "too large" },
	{ "Limits", "TimeLimit", "30s", "not a decimal number" },
	{ "Limits", "TmpSize", "infinity", "not a size (use a number with optional K, M, G, T suffix)" },
	{ "Limits", "TmpSize", "1K", "too small" },
	{ "Limits", "WorkspaceSize", "0", "too small (at least 1M, or infinity)" },
	{ "Limits", "WorkspaceSize", "512K", "too small" },
	{ "Limits", "FileSize", "big", "not a size" },
	{ "Limits", "OpenFiles", "1048577", "too large" },
	{ "Limits", "OpenFiles", "15", "too small (at least 16: what the sandbox's own setup and runner hold open" },
	{ "Limits", "Pids", "1", "too small (at least 2: the sandbox's pid 1 and its command" },
	{ "Limits", "Cgroups", "yes", "use auto, require or off" },
	{ "Filesystem", "RootFS", "srv/root", "not an absolute path" },
	{ "Filesystem", "Workspace", "/a/../etc", "'..' path components are not allowed" },
	{ "Filesystem", "Bind", "relative", "source: not an absolute path" },
	{ "Filesystem", "Bind", "/a:rel", "destination: not an absolute path" },
	{ "Filesystem", "Bind", "/a:", "empty destination" },
	{ "Filesystem", "Bind", ":/a", "empty source" },
	{ "Filesystem", "Bind", "/a:/", "not allowed" },
	{ "Filesystem", "Bind", "/", "not allowed" },
	{ "Filesystem", "Bind", "/x:/proc", "not allowed" },
	{ "Filesystem", "Bind", "/x:/proc/sys/kernel", "not allowed" },
	{ "Filesystem", "Bind", "/x:/sys", "not allowed" },
	{ "Filesystem", "ReadOnlyBind", "/x://dev/./shm", "not allowed" },
	{ "Filesystem", "ReadOnlyBind", "/x:/a/../proc", "'..'" },
	{ "Filesystem", "ReadOnlyBind", "/x:/q/ /", "path ends in a blank" },
	{ "Filesystem", "Bind", "/q/./ /", "path ends in a blank" },
	{ "Environment", "Set", "NOEQUALS", "not an assignment (use NAME=VALUE)" },
	{ "Environment", "Set", "1A=x", "not a variable name" },
	{ "Environment", "Set", "A-B=x", "not a variable name" },
	{ "Environment", "Set", "=x", "not a variable name" },
	{ "Environment", "Set", "A=\x1b[2J", "control characters are not allowed" },
	{ "Security", "Seccomp", "off", "use enforce or log" },
	{ "Security", "Landlock", "on", "use auto, require or off" },
	{ "Filesystem", "RootFS", "Data", "not an absolute path nor a tree name" },
	{ "Filesystem", "RootFS", "a:b", "not an absolute path nor a tree name" },
	{ "Filesystem", "RootFS", "-x", "not an absolute path nor a tree name" },
	{ "Filesystem", "RootFS", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "tree name" },
	{ "Python", "Preload", "1abc", "'1abc' is not a module name" },
	{ "Python", "Preload", "numpy a..b", "'a..b' is not a module name" },
	{ "Python", "Preload", "a-b", "not a module name" },
	{ "Python", "Preload", "os.", "not a module name" },
	{ "Python", "DistPackages", "maybe", "not a boolean" },
	{ "Python", "DistPackages", "", "empty value" },
	{ "Policy", "Base", "strict", "only allowed as the first setting of a policy file" },
	{ "Limits", "memory", "1G", "[Limits] memory=: unknown key (accepted in [Limits]: Memory, Pids" },
	{ "Limit", "Memory", "1G", "unknown section [Limit] (accepted: [Policy], [Sandbox]" },
};

static void test_keys(void)
{
	struct nsbox_policy p = { 0 }, before = { 0 };
	struct nsbox_err err = { 0 };

	policy_init_builtin(&p, "default", &err);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int r = policy_set(&p, good[i].section, good[i].key, good[i].value, &err);

		check(r == 0, "[%s] %s=%s accepted%s%s", good[i].section, good[i].key, good[i].value,
		   r ? ": " : "", r ? err.msg : "");
	}
	check(policy_validate(&p, &err) == 0, "policy after every good value validates: %s", err.msg);
	check(round_trips(&p, "default"), "policy after every good value round trips");
	policy_free(&p);

	policy_init_builtin(&p, "default", &err);
	policy_init_builtin(&before, "default", &err);
	policy_set(&p, "Filesystem", "Bind", "/taken", &err);
	policy_set(&before, "Filesystem", "Bind", "/taken", &err);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r;

		err_clear(&err);
		r = policy_set(&p, bad[i].section, bad[i].key, bad[i].value, &err);
		/* err.msg shows the value escaped; the raw one may hold escapes. */
		check(r < 0 && strstr(err.msg, bad[i].want) && err.code != 0, "bad case %zu refused: %s", i,
		   err.msg);
	}
	check(policy_equal(&p, &before), "refused values leave the policy unchanged");
	check(policy_set(&p, "Filesystem", "ReadOnlyBind", "/other:/taken/", &err) < 0 &&
		   strstr(err.msg, "already used"),
	   "duplicate destination refused: %s", err.msg);
	check(strncmp(err.msg, "[Filesystem] ReadOnlyBind=/other:/taken/: ", 42) == 0,
	   "policy_set messages start with [Section] Key=value and no file:line");
	check(policy_set(&p, "Limits", "Memory", NULL, &err) < 0, "NULL value refused");
	policy_free(&p);
	policy_free(&before);
}

static void test_good_effects(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };

	policy_init_builtin(&p, "default", &err);
	check(policy_set(&p, "Limits", "Memory", " 256M\t", &err) == 0 && p.memory == 256ULL << 20,
	   "Memory=256M (trimmed) is 256 MiB");
	check(policy_set(&p, "Limits", "Memory", "infinity", &err) == 0 && p.memory == 0,
	   "Memory=infinity is 0 (no limit)");
	check(policy_set(&p, "Limits", "FileSize", "3K", &err) == 0 && p.file_size == 3072, "FileSize=3K");
	check(policy_set(&p, "Limits", "CPUs", "0.25", &err) == 0 && p.cpus == 0.25, "CPUs=0.25");
	check(policy_set(&p, "Limits", "TimeLimit", "2.5", &err) == 0 && p.time_limit == 2.5,
	   "TimeLimit=2.5");
	check(policy_set(&p, "Limits", "CPUs", "0x1p3", &err) < 0 && p.cpus == 0.25 &&
		      policy_set(&p, "Limits", "TimeLimit", "0x10", &err) < 0 && p.time_limit == 2.5 &&
		      strstr(err.msg, "not a decimal number"),
	      "CPUs=0x1p3 and TimeLimit=0x10 (hex floats, which strtod reads) are refused");
	check(policy_set(&p, "Limits", "Pids", "infinity", &err) == 0 && p.pids == 0, "Pids=infinity");
	check(policy_set(&p, "Sandbox", "Uid", "0", &err) == 0 && p.uid == 0, "Uid=0");
	check(policy_set(&p, "Sandbox", "Network", "host", &err) == 0 && p.share_net, "Network=host");
	check(policy_set(&p, "Security", "Seccomp", "log", &err) == 0 && p.seccomp == SECCOMP_LOG,
	   "Seccomp=log");
	check(policy_set(&p, "Python", "DistPackages", "On", &err) == 0 && p.dist_packages,
	   "booleans are case-insensitive");
	check(policy_set(&p, "Filesystem", "Workspace", "//home//u/./w/", &err) == 0 &&
		   str_eq(p.workspace, "/home/u/w"),
	   "paths are normalised: %s", p.workspace);
	check(policy_set(&p, "Filesystem", "Workspace", "", &err) == 0 && !p.workspace,
	   "empty Workspace= clears it");
	check(policy_set(&p, "Filesystem", "Bind", "/srv/data", &err) == 0 && p.n_mounts == 1 &&
		   str_eq(p.mounts[0].src, "/srv/data") && str_eq(p.mounts[0].dst, "/srv/data") &&
		   p.mounts[0].rw,
	   "Bind=SRC mounts SRC at SRC, read-write");
	check(policy_set(&p, "Filesystem", "ReadOnlyBind", "/srv/in:/in", &err) == 0 && p.n_mounts == 2 &&
		   str_eq(p.mounts[1].dst, "/in") && !p.mounts[1].rw,
	   "ReadOnlyBind=SRC:DST appends a read-only mount");
	check(policy_set(&p, "Filesystem", "Bind", "/x:/procfs", &err) == 0,
	   "/procfs is not under /proc");
	check(policy_set(&p, "Environment", "Set", "A=1", &err) == 0 &&
		   policy_set(&p, "Environment", "Set", "B=2", &err) == 0 &&
		   policy_set(&p, "Environment", "Set", "A=3", &err) == 0 && p.n_env == 2 &&
		   str_eq(p.env[0], "A=3") && str_eq(p.env[1], "B=2"),
	   "Set= of the same name replaces in place");
	check(policy_set(&p, "Environment", "Set", "AB=4", &err) == 0 && p.n_env == 3,
	   "Set=AB is not Set=A");
	check(policy_validate(&p, &err) == 0, "validates: %s", err.msg);
	check(round_trips(&p, "strict"), "round trips");
	policy_free(&p);
}

static void test_file_errors(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "[Limits]\nMemory=1G\n\n# c\n\n\nMemory=12Q\n",
		  "t.policy:7: [Limits] Memory=12Q: not a size (use a number with optional K, M, G, T suffix, or infinity)" },
		{ "Memory=1G\n", "t.policy:1: Memory=1G: setting outside a section" },
		{ "# c\n[Limits]\nFoo=1\n", "t.policy:3: [Limits] Foo=: unknown key (accepted in [Limits]: Memory, Pids, CPUs, TimeLimit, TmpSize, WorkspaceSize, FileSize, OpenFiles, Cgroups)" },
		{ "\n\n[Limitz]\n", "t.policy:3: unknown section [Limitz]" },
		{ "[Limits\n", "t.policy:1: bad section header [Limits" },
		{ "[]\n", "t.policy:1: bad section header" },
		{ "[Limits] x\n", "t.policy:1: bad section header" },
		{ "[Limits]\nMemory\n", "t.policy:2: Memory: not a setting (use Key=Value" },
		{ "[Limits]\n=5\n", "t.policy:2: missing key" },
		{ "[Limits]\nMemory=\n", "t.policy:2: [Limits] Memory=: empty value" },
		{ "[Sandbox]\nUid=1\n[Policy]\nBase=strict\n",
		  "t.policy:4: [Policy] Base=strict: must be the first setting of the file" },
		{ "[Policy]\nBase=strict\nBase=default\n", "t.policy:3: [Policy] Base=default: must be the first" },
		{ "[Policy]\nBase=lax\n", "t.policy:2: [Policy] Base=lax: no such built-in policy 'lax'" },
		{ "[Policy]\nName=x\n", "t.policy:2: [Policy] Name=: unknown key (accepted in [Policy]: Base)" },
		{ "[Sandbox]\nBase=strict\n", "t.policy:2: [Sandbox] Base=: unknown key" },
		{ "[Sandbox]\nHostname=a\rb\n", "t.policy:2: [Sandbox] Hostname=a\\x0db: control characters" },
		{ "[Environment]\nSet=A=\x1b]0;pwned\x07\n", "control characters are not allowed" },
		{ "\x01\x02\x03garbage", "t.policy:1: \\x01\\x02\\x03garbage: not a setting" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		policy_init_builtin(&p, "default", &err);
		check(parse_str(&p, cases[i].text, &err) < 0 && strstr(err.msg, cases[i].want),
		   "error case %zu: %s", i, err.msg);
		policy_free(&p);
	}

	/* NUL bytes, long lines: counted by explicit length, not strlen. */
	policy_init_builtin(&p, "default", &err);
	check(policy_parse(&p, "[Limits]\nPids=1\0\n", 16, "n.policy", &err) < 0 &&
		   strstr(err.msg, "n.policy:2: NUL byte"),
	   "embedded NUL refused: %s", err.msg);
	{
		char *big = malloc(5000);

		memcpy(big, "[Limits]\nPids=", 14);
		memset(big + 14, '1', 5000 - 14);
		check(policy_parse(&p, big, 5000, "l.policy", &err) < 0 &&
			   strstr(err.msg, "l.policy:2: line too long (at most 4096 bytes)"),
		   "long line refused: %s", err.msg);
		/* A 4096-byte comment line is still fine. */
		memset(big, ' ', 4096);
		big[0] = '#';
		big[4096] = '\n';
		check(policy_parse(&p, big, 4097, "l.policy", &err) == 0, "4096-byte line accepted");
		free(big);
	}
	check(p.pids == 128, "failed parses left the policy unchanged");

	/* Every wrong line is reported, one per line, in order; the keys of
	 * an unknown section are not reported again; the code is the first's. */
	check(parse_str(&p, "[Limits]\nMemory=lots\nPids=-1\n[Bogus]\nX=1\n[Sandbox]\nnoequals\nUid=abc\n", &err) < 0 &&
		      err.code == EINVAL && !strncmp(err.msg, "t.policy:2: [Limits] Memory=lots: ", 34) &&
		      strstr(err.msg, "\nt.policy:3: [Limits] Pids=-1: ") &&
		      strstr(err.msg, "\nt.policy:4: unknown section [Bogus]") && !strstr(err.msg, ":5:") &&
		      strstr(err.msg, "\nt.policy:7: noequals: ") && strstr(err.msg, "\nt.policy:8: [Sandbox] Uid=abc: "),
	      "every error of a file: %s", err.msg);
	check(p.pids == 128 && p.memory == 512ull << 20, "a file with errors changes nothing, even its good lines");
	{
		char many[4000] = "[Limits]\n";

		for (int i = 0; i < 60; i++)
			strcat(many, "Pids=x\n");
		check(parse_str(&p, many, &err) < 0 && strlen(err.msg) < sizeof(err.msg) - 1 &&
			      strstr(err.msg, "more errors") && !strstr(err.msg, "t.policy:61:"),
		      "more errors than fit are counted, none cut mid-line: ...%s", err.msg + strlen(err.msg) - 40);
	}
	policy_free(&p);
}

static void test_file_good(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };

	policy_init_builtin(&p, "default", &err);
	check(parse_str(&p,
		     "\xef\xbb\xbf# comment\n"
		     "; other comment\n"
		     "   \t\n"
		     "  [Limits]  \n"
		     "  Memory  =  300M  \n"
		     "\t# indented comment\n"
		     "Pids=5\n"
		     "Pids=6\n"
		     "[Sandbox]\n"
		     "Hostname=h # not a comment, so an invalid name\n",
		     &err) < 0 &&
		   strstr(err.msg, "t.policy:10:"),
	   "comments only at line start: %s", err.msg);
	check(p.memory == 512ULL << 20, "failed parse is all or nothing");
	check(parse_str(&p,
		     "\xef\xbb\xbf# comment\n; other\n   \t\n  [Limits]  \n  Memory  =  300M  \n"
		     "\t# indented\nPids=5\nPids=6\n[Limits]\nCPUs=3\n[Filesystem]\nBind=/a\nBind=/b\n",
		     &err) == 0,
	   "comments, blanks, whitespace, BOM, repeated section: %s", err.msg);
	check(p.memory == 300ULL << 20 && p.pids == 6 && p.cpus == 3, "later keys override earlier ones");
	check(p.n_mounts == 2, "Bind= appends");
	check(parse_str(&p, "", &err) == 0 && p.pids == 6, "empty text changes nothing");
	check(parse_str(&p, "[Policy]\nBase=strict\n", &err) == 0 && p.pids == 32 && p.n_mounts == 0 &&
		   str_eq(p.name, "default"),
	   "Base=strict resets to strict (keeping the name)");
	check(parse_str(&p, "# c\n\n[Policy]\n# c\nBase=permissive\n[Limits]\nPids=9\n", &err) == 0 &&
		   p.share_net && p.pids == 9,
	   "Base= after comments, then overrides");
	policy_free(&p);
	check(policy_parse(&p, NULL, 0, NULL, &err) == 0, "NULL text of length 0 on a zeroed policy");
	policy_free(&p);
}

static void test_caps(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	char *text = malloc(64 * 1024);
	size_t o = 0;

	policy_init_builtin(&p, "default", &err);
	o += (size_t)sprintf(text + o, "[Filesystem]\n");
	for (int i = 0; i < POLICY_MAX_MOUNTS; i++)
		o += (size_t)sprintf(text + o, "%s=/src/%d\n", i % 2 ? "Bind" : "ReadOnlyBind", i);
	o += (size_t)sprintf(text + o, "[Environment]\n");
	for (int i = 0; i < POLICY_MAX_ENV; i++)
		o += (size_t)sprintf(text + o, "Set=V%d=%d\n", i, i);
	o += (size_t)sprintf(text + o, "Set=V0=again\n");
	check(policy_parse(&p, text, o, "caps.policy", &err) == 0 && p.n_mounts == POLICY_MAX_MOUNTS &&
		   p.n_env == POLICY_MAX_ENV && str_eq(p.env[0], "V0=again"),
	   "%d mounts and %d variables accepted; replacing one at the cap works: %s",
	   POLICY_MAX_MOUNTS, POLICY_MAX_ENV, err.msg);
	check(policy_validate(&p, &err) == 0, "full policy validates");
	check(round_trips(&p, "default"), "full policy round trips");
	check(parse_str(&p, "[Filesystem]\nBind=/one/more\n", &err) < 0 &&
		   strstr(err.msg, "t.policy:2: [Filesystem] Bind=/one/more: too many mounts (at most 64"),
	   "mount cap: %s", err.msg);
	check(parse_str(&p, "[Environment]\n\nSet=NEW=1\n", &err) < 0 &&
		   strstr(err.msg, "t.policy:3: [Environment] Set=NEW=1: too many variables (at most 64"),
	   "env cap: %s", err.msg);
	check(p.n_mounts == POLICY_MAX_MOUNTS && p.n_env == POLICY_MAX_ENV, "cap errors change nothing");
	policy_free(&p);

	policy_init_builtin(&p, "default", &err);
	memset(text, 'a', 4090);
	memcpy(text, "A=", 2);
	text[4001] = '\0';
	check(policy_set(&p, "Environment", "Set", text, &err) < 0 && strstr(err.msg, "value too long"),
	   "values over 4000 bytes refused: %.60s", err.msg);
	text[4000] = '\0';
	check(policy_set(&p, "Environment", "Set", text, &err) == 0, "a 4000-byte value is accepted");
	check(round_trips(&p, "default"), "and round trips");
	policy_free(&p);
	free(text);
}

static void test_round_trip_full(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	static const double odd[] = { 0.1, 1.0 / 3, 0.01, 12345.678, 0.015, 65536 };

	policy_init_builtin(&p, "default", &err);
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		p.cpus = odd[i];
		p.time_limit = odd[i] * 7;
		check(round_trips(&p, "default"), "decimal %.17g round trips exactly", odd[i]);
	}
	p.memory = 3 * (1ULL << 20) + 1;
	p.file_size = 5ULL << 40;
	p.tmp_size = 1536 * 1024;
	check(round_trips(&p, "default"), "odd sizes round trip");
	{
		char *text = print_to_string(&p);

		check(text && strstr(text, "CPUs=65536\n") && strstr(text, "TimeLimit=458752\n"),
		      "decimals printed in plain notation");
		check(text && strstr(text, "Memory=3145729\n") && strstr(text, "FileSize=5T\n") &&
			   strstr(text, "TmpSize=1536K\n"),
		   "sizes printed in the largest exact unit");
		free(text);
	}
	p.memory = 0;
	p.pids = 0;
	p.file_size = 0;
	p.nofile = 0;
	p.cpus = 0;
	{
		char *text = print_to_string(&p);

		check(text && strstr(text, "Memory=infinity\n") && strstr(text, "Pids=infinity\n") &&
			   strstr(text, "FileSize=infinity\n") && strstr(text, "CPUs=infinity\n") &&
			   strstr(text, "TimeLimit=") && strstr(text, "[Policy]\nBase=default\n"),
		   "no limit printed as infinity");
		free(text);
	}
	check(round_trips(&p, "strict"), "unlimited policy round trips onto strict");
	policy_free(&p);
}

static void write_file_or_die(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
		perror(path);
		exit(2);
	}
	close(fd);
}

static void test_load(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	char path[512], tmpdir[] = "/tmp/test-policy.XXXXXX";

	check(policy_load(&p, "strict", &err) == 0 && str_eq(p.name, "strict") && p.pids == 32,
	   "load a built-in by name");
	policy_free(&p);

	check(policy_load(&p, "nonesuch", &err) < 0 && err.code == ENOENT &&
		   strcmp(err.msg, "policy 'nonesuch': no such built-in policy (default, strict, permissive) "
				   "and no such file") == 0,
	   "missing: %s", err.msg);
	check(p.name == NULL, "failed load leaves *p zeroed");

	snprintf(path, sizeof(path), "%s/full.policy", data_dir());
	check(policy_load(&p, path, &err) == 0, "load %s: %s", path, err.msg);
	check(str_eq(p.name, path), "name is the file path");
	check(p.uid == 2000 && p.gid == 2001 && p.share_net && str_eq(p.hostname, "box-1.example"),
	   "full.policy [Sandbox]");
	check(p.memory == 1ULL << 30 && p.pids == 64 && p.cpus == 1.5 && p.time_limit == 12.5 &&
		   p.tmp_size == 32ULL << 20 && p.file_size == 0 && p.nofile == 512 &&
		   p.cgroups == WANT_OFF,
	   "full.policy [Limits]");
	check(str_eq(p.rootfs, "/srv/rootfs") && str_eq(p.workspace, "/srv/work") && p.n_mounts == 3 &&
		   str_eq(p.mounts[0].dst, "/srv/data") && p.mounts[0].rw &&
		   str_eq(p.mounts[1].src, "/srv/in") && str_eq(p.mounts[1].dst, "/input") &&
		   !p.mounts[2].rw && str_eq(p.mounts[2].dst, "/opt/zoneinfo"),
	   "full.policy [Filesystem]");
	check(p.n_env == 3 && str_eq(p.env[0], "LANG=C.UTF-8") && str_eq(p.env[1], "GREETING=hello world") &&
		   str_eq(p.env[2], "EMPTY="),
	   "full.policy [Environment]");
	check(p.seccomp == SECCOMP_LOG && p.landlock == WANT_OFF && p.dist_packages,
	   "full.policy [Security] [Python]");
	check(policy_validate(&p, &err) == 0, "full.policy validates: %s", err.msg);
	check(round_trips(&p, "default"), "full.policy round trips");
	policy_free(&p);

	snprintf(path, sizeof(path), "%s/bad-memory.policy", data_dir());
	check(policy_load(&p, path, &err) < 0 && strstr(err.msg, "bad-memory.policy:7: [Limits] Memory=12Q: not a size"),
	   "error names file:line: %s", err.msg);
	check(p.name == NULL && p.hostname == NULL, "failed load leaves *p zeroed");
	snprintf(path, sizeof(path), "%s/base-late.policy", data_dir());
	check(policy_load(&p, path, &err) < 0 && strstr(err.msg, "base-late.policy:5: [Policy] Base=strict"),
	   "late Base=: %s", err.msg);
	snprintf(path, sizeof(path), "%s/crlf.policy", data_dir());
	check(policy_load(&p, path, &err) == 0 && p.memory == 300ULL << 20 && p.pids == 7,
	   "CRLF file without a final newline: %s", err.msg);
	policy_free(&p);

	if (!mkdtemp(tmpdir)) {
		check(0, "mkdtemp");
		return;
	}
	check(policy_load(&p, tmpdir, &err) < 0 && strstr(err.msg, "not a regular file"),
	   "directory refused: %s", err.msg);
	snprintf(path, sizeof(path), "%s/fifo", tmpdir);
	if (mkfifo(path, 0600) == 0) {
		check(policy_load(&p, path, &err) < 0 && strstr(err.msg, "not a regular file"),
		   "FIFO refused without blocking: %s", err.msg);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/big.policy", tmpdir);
	{
		size_t n = 1024 * 1024 + 1;
		char *big = malloc(n);

		memset(big, '\n', n);
		write_file_or_die(path, big, n);
		check(policy_load(&p, path, &err) < 0 && strstr(err.msg, "file too large"),
		   "file over 1 MiB refused: %s", err.msg);
		write_file_or_die(path, big, n - 1);
		check(policy_load(&p, path, &err) == 0, "file of exactly 1 MiB accepted");
		policy_free(&p);
		free(big);
		unlink(path);
	}
	rmdir(tmpdir);
}

static void test_validate(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };

	/* Fields set directly, as library users may, bypassing policy_set. */
	policy_init_builtin(&p, "default", &err);
	p.uid = (uid_t)-1;
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "Uid=4294967295"), "uid -1: %s", err.msg);
	p.uid = 0;
	p.gid = (gid_t)-1;
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "Gid="), "gid -1: %s", err.msg);
	p.gid = 0;
	check(policy_validate(&p, &err) == 0, "root inside is allowed (it is unprivileged outside)");

	p.rootfs = strdup("relative/root");
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "RootFS") && strstr(err.msg, "absolute"),
	   "relative RootFS: %s", err.msg);
	free(p.rootfs);
	p.rootfs = strdup("Not_A_Name");
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "RootFS=Not_A_Name") && strstr(err.msg, "tree name"),
	      "bad tree name: %s", err.msg);
	free(p.rootfs);
	p.rootfs = strdup("datascience");
	check(policy_validate(&p, &err) == 0, "RootFS=datascience (a tree name): %s", err.msg);
	free(p.rootfs);
	p.rootfs = NULL;
	p.workspace = strdup("/w/../x");
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "Workspace"), "Workspace with ..: %s", err.msg);
	free(p.workspace);
	p.workspace = strdup("/w");

	p.mounts[0].src = strdup("/a");
	p.mounts[0].dst = strdup("/proc/self");
	p.n_mounts = 1;
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "/proc"), "dst under /proc: %s", err.msg);
	free(p.mounts[0].dst);
	p.mounts[0].dst = strdup("/sys");
	check(policy_validate(&p, &err) < 0, "dst /sys: %s", err.msg);
	free(p.mounts[0].dst);
	p.mounts[0].dst = strdup("//");
	check(policy_validate(&p, &err) < 0, "dst //: %s", err.msg);
	free(p.mounts[0].dst);
	p.mounts[0].dst = strdup("/workspace/");
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "Workspace="), "dst /workspace with Workspace=: %s",
	   err.msg);
	free(p.mounts[0].dst);
	p.mounts[0].dst = strdup("/data");
	p.mounts[1].src = strdup("/b");
	p.mounts[1].dst = strdup("/data/.");
	p.n_mounts = 2;
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "two mounts"), "duplicate dst: %s", err.msg);
	free(p.mounts[1].dst);
	p.mounts[1].dst = strdup("/data2");
	free(p.mounts[1].src);
	p.mounts[1].src = strdup("b");
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "source"), "relative src: %s", err.msg);
	free(p.mounts[1].src);
	p.mounts[1].src = strdup("/b");
	check(policy_validate(&p, &err) == 0, "fixed mounts validate: %s", err.msg);

	p.env[0] = strdup("A=1");
	p.env[1] = strdup("A=2");
	p.n_env = 2;
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "set twice"), "duplicate env: %s", err.msg);
	free(p.env[1]);
	p.env[1] = strdup("no equals");
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "NAME=VALUE"), "bad env: %s", err.msg);
	free(p.env[1]);
	p.env[1] = strdup("B=2");
	free(p.hostname);
	p.hostname = NULL;
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "Hostname"), "missing hostname: %s", err.msg);
	p.hostname = strdup("ok");
	p.cgroups = (enum policy_want)7;
	check(policy_validate(&p, &err) < 0, "out of range enum refused");
	p.cgroups = WANT_AUTO;
	check(policy_validate(&p, &err) == 0, "valid again: %s", err.msg);
	policy_free(&p);
	check(p.name == NULL && p.n_mounts == 0 && p.n_env == 0, "policy_free zeroes");
	policy_free(&p);
	policy_free(NULL);
	check(1, "policy_free accepts a zeroed policy and NULL");
}

/* HostUid=, HostGid=: both or neither; printed only when set, and parsed
 * back (the helper gets the policy as text). */
static void test_host_ids(void)
{
	struct nsbox_policy p = { 0 }, q = { 0 };
	struct nsbox_err err = { 0 };
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	policy_init_builtin(&p, "default", &err);
	check(p.host_uid == 0 && p.host_gid == 0 && policy_validate(&p, &err) == 0, "no host ids by default");
	f = open_memstream(&out, &len);
	policy_print(&p, f);
	fclose(f);
	check(!strstr(out, "HostUid"), "not printed when unset");
	free(out);
	check(policy_set(&p, "Sandbox", "HostUid", "524288", &err) == 0 && p.host_uid == 524288, "HostUid=524288");
	check(policy_validate(&p, &err) < 0 && strstr(err.msg, "both or neither"), "HostUid without HostGid refused");
	check(policy_set(&p, "Sandbox", "HostGid", "524289", &err) == 0 && policy_validate(&p, &err) == 0,
	      "with HostGid valid");
	check(policy_set(&p, "Sandbox", "HostUid", "-1", &err) < 0 &&
		      policy_set(&p, "Sandbox", "HostUid", "4294967295", &err) < 0,
	      "HostUid: not an id refused");
	out = NULL;
	f = open_memstream(&out, &len);
	policy_print(&p, f);
	fclose(f);
	check(policy_from_text(&q, out, len, "printed", &err) == 0 && q.host_uid == 524288 && q.host_gid == 524289,
	      "printed and parsed back");
	free(out);
	policy_free(&p);
	policy_free(&q);
}

int main(void)
{
	test_host_ids();
	test_builtins();
	test_keys();
	test_good_effects();
	test_file_errors();
	test_file_good();
	test_caps();
	test_round_trip_full();
	test_load();
	test_validate();
	tap_done();
}
