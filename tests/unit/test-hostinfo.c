/* The host calls of libnsbox (include/nsbox.h, "the host"), through the
 * shared library as a host links it: nsbox_host_info, nsbox_selftest (a
 * real sandbox: needs user namespaces and python3 in /usr), and the checks
 * nsbox_parse_size and nsbox_check_tool_name. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nsbox.h"
#include "tap.h"

static void test_host_info(void)
{
	struct nsbox_host_info h;
	nsbox_error_t *e = NULL;
	int r;

	memset(&h, 0x55, sizeof(h));
	h.struct_size = sizeof(h);
	r = nsbox_host_info(&h, &e);
	ok(r == 0, "nsbox_host_info (%s)", nsbox_error_message(e));
	ok(!strcmp(h.cgroup_mode, "v2") || !strcmp(h.cgroup_mode, "hybrid") || !strcmp(h.cgroup_mode, "v1") ||
		   !strcmp(h.cgroup_mode, "none"),
	   "cgroup mode '%s'", h.cgroup_mode);
	ok(!strcmp(h.cgroup_migration, "none") || !strcmp(h.cgroup_migration, "fast") ||
		   !strcmp(h.cgroup_migration, "slow"),
	   "cgroup migration '%s'", h.cgroup_migration);
	ok(h.landlock_abi >= 0 && h.userns, "Landlock ABI %d, user namespaces usable", h.landlock_abi);
	ok(h.memory.enforced || h.memory.why[0], "memory: enforced, or a reason (%s)", h.memory.why);
	ok(h.runner[0] == '/' && !h.runner_error[0], "the runner is found: %s", h.runner);

	/* An older caller's smaller struct: nothing written beyond it. */
	memset(&h, 0x55, sizeof(h));
	h.struct_size = offsetof(struct nsbox_host_info, runner);
	ok(nsbox_host_info(&h, NULL) == 0 && (unsigned char)h.runner[0] == 0x55 &&
		   h.struct_size == offsetof(struct nsbox_host_info, runner),
	   "a smaller struct_size: the fields beyond it are left alone");
	h.struct_size = 0;
	r = nsbox_host_info(&h, &e);
	ok(r == -EINVAL && strstr(nsbox_error_message(e), "struct_size"), "struct_size 0: -EINVAL (%s)",
	   nsbox_error_message(e));
	nsbox_error_free(e);
	e = NULL;
	ok(nsbox_host_info(NULL, NULL) == -EINVAL, "NULL: -EINVAL");
}

static void test_checks(void)
{
	nsbox_error_t *e = NULL;
	uint64_t v = 7;
	char long_name[80];

	ok(nsbox_parse_size("256M", &v, NULL) == 0 && v == 256ull << 20, "256M");
	ok(nsbox_parse_size("4096", &v, NULL) == 0 && v == 4096, "4096");
	v = 7;
	ok(nsbox_parse_size("12Q", &v, &e) == -EINVAL && v == 7 && strstr(nsbox_error_message(e), "'12Q'"),
	   "12Q: -EINVAL quoting it, output untouched (%s)", nsbox_error_message(e));
	nsbox_error_free(e);
	e = NULL;
	ok(nsbox_parse_size(NULL, &v, NULL) == -EINVAL, "NULL: -EINVAL");
	ok(nsbox_check_tool_name("lookup_2", NULL) == 0, "lookup_2 is a tool name");
	ok(nsbox_check_tool_name("2x", &e) == -EINVAL && strstr(nsbox_error_message(e), "identifier"), "2x is not (%s)",
	   nsbox_error_message(e));
	nsbox_error_free(e);
	e = NULL;
	ok(nsbox_check_tool_name("a-b", NULL) == -EINVAL && nsbox_check_tool_name("", NULL) == -EINVAL &&
		   nsbox_check_tool_name(NULL, NULL) == -EINVAL,
	   "a-b, \"\" and NULL are not");
	ok(nsbox_check_tool_name("gh.create_issue", NULL) == 0 && nsbox_check_tool_name("_a._b2", NULL) == 0,
	   "NS.NAME is a tool name");
	ok(nsbox_check_tool_name("a.b.c", NULL) == -EINVAL && nsbox_check_tool_name(".a", NULL) == -EINVAL &&
		   nsbox_check_tool_name("a.", NULL) == -EINVAL && nsbox_check_tool_name("a..b", NULL) == -EINVAL &&
		   nsbox_check_tool_name("a.2b", NULL) == -EINVAL && nsbox_check_tool_name("1a.b", NULL) == -EINVAL,
	   "a.b.c, .a, a., a..b, a.2b and 1a.b are not");
	ok(nsbox_check_tool_name("len.x", NULL) == -EINVAL && nsbox_check_tool_name("m.class", NULL) == -EINVAL &&
		   nsbox_check_tool_name("m.__doc__", NULL) == -EINVAL && nsbox_check_tool_name("m.open", NULL) == 0 &&
		   nsbox_check_tool_name("m.match", NULL) == 0,
	   "NS.NAME: NS not reserved, NAME not a keyword or dunder (a builtin's or soft keyword's name is fine)");
	memset(long_name, 'a', 64);
	long_name[64] = '\0';
	long_name[10] = '.';
	ok(nsbox_check_tool_name(long_name, NULL) == 0, "64 bytes with a dot is the most");
	long_name[10] = 'a';
	ok(nsbox_check_tool_name(long_name, NULL) == 0, "64 bytes is the most");
	long_name[64] = 'a';
	long_name[65] = '\0';
	ok(nsbox_check_tool_name(long_name, NULL) == -EINVAL, "65 bytes is too long");
	ok(nsbox_check_tool_name("len", &e) == -EINVAL && strstr(nsbox_error_message(e), "builtin"),
	   "len would replace a builtin: refused (%s)", nsbox_error_message(e));
	nsbox_error_free(e);
	e = NULL;
	ok(nsbox_check_tool_name("class", NULL) == -EINVAL && nsbox_check_tool_name("match", NULL) == -EINVAL &&
		   nsbox_check_tool_name("__name__", NULL) == -EINVAL &&
		   nsbox_check_tool_name("print", NULL) == -EINVAL,
	   "a keyword, a soft keyword, a dunder, print: refused");
	ok(nsbox_check_tool_name("lens", NULL) == 0 && nsbox_check_tool_name("quit", NULL) == 0 &&
		   nsbox_check_tool_name("_x", NULL) == 0,
	   "lens, quit (site's, not a builtin) and _x are tool names");
}

struct seen {
	unsigned n, escaped;
	bool net_escaped;
};

static void on_probe(void *ud, const char *probe, bool escaped, const char *detail)
{
	struct seen *s = ud;

	s->n++;
	s->escaped += escaped;
	if (!strcmp(probe, "network: only lo"))
		s->net_escaped = escaped;
	if (escaped)
		printf("# escaped: %s (%s)\n", probe, detail);
}

static void test_selftest(void)
{
	struct seen seen = { 0 };
	struct nsbox_selftest_opts o = { .struct_size = sizeof(o), .probe = on_probe, .probe_userdata = &seen };
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	char root[] = "/tmp/nsbox-test-hostinfo-XXXXXX";
	unsigned escaped = 99;
	int r;

	r = nsbox_selftest(&o, &escaped, &e);
	ok(r == 0 && escaped == 0 && seen.n == 17 && seen.escaped == 0,
	   "the default policy: 17 probes, none got out (r %d, %u escaped, %s)", r, escaped, nsbox_error_message(e));
	nsbox_error_free(e);
	e = NULL;
	ok(nsbox_selftest(NULL, NULL, NULL) == 0, "opts and outputs may be NULL");

	/* A probe that gets out is reported: the host's network, shared. */
	if (nsbox_policy_new(NULL, &p, &e) < 0 || nsbox_policy_set_share_net(p, true, &e) < 0 ||
	    nsbox_policy_set_time_limit(p, 20, &e) < 0) {
		ok(0, "policy: %s", nsbox_error_message(e));
		nsbox_error_free(e);
		return;
	}
	memset(&seen, 0, sizeof(seen));
	o.policy = p;
	r = nsbox_selftest(&o, &escaped, &e);
	ok(r == 0 && escaped >= 1 && seen.net_escaped, "--share-net: the network probe got out (r %d, %u escaped)", r,
	   escaped);

	/* No python3 in the sandbox (an empty root): said so, not a pass. */
	nsbox_policy_set_share_net(p, false, NULL);
	if (!mkdtemp(root) || chmod(root, 0755) < 0) {
		ok(0, "mkdtemp");
		nsbox_policy_free(p);
		return;
	}
	ok(nsbox_policy_set(p, "Filesystem", "RootFS", root, &e) == 0, "RootFS=%s", root);
	escaped = 99;
	r = nsbox_selftest(&o, &escaped, &e);
	ok(r == -ENOENT && escaped == 99 && strstr(nsbox_error_message(e), "python3"),
	   "no python3: -ENOENT, *escaped untouched (%s)", nsbox_error_message(e));
	nsbox_error_free(e);
	rmdir(root);
	nsbox_policy_free(p);
	o.struct_size = 1;
	ok(nsbox_selftest(&o, NULL, NULL) == -EINVAL, "a bad struct_size: -EINVAL");
}

int main(void)
{
	test_host_info();
	test_checks();
	test_selftest();
	tap_done();
}
