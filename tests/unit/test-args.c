/* cli/args.c: the command line's jail options as policy settings, the
 * --policy lookup, and the errors a user sees (each names its flag).  Over
 * the public API only, like the front end itself. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "nsbox.h"
#include "tap.h"

#define MAX_ARGS 16

struct parsed {
	int rc;	      /* 0 all parsed, -1 an error, 1 stopped at a non-option */
	int stop;     /* index where parsing stopped */
	char *policy; /* the effective policy's text, or NULL */
	struct cli_err err;
};

/* Parse argv as `nsbox policy show` does: args_load_policy(), then every
 * option through args_parse_jail_option() until "--" or a non-option. */
static struct parsed parse_v(const char *first, va_list ap)
{
	char *argv[MAX_ARGS + 2] = { "cmd" };
	int argc = 1, i;
	struct parsed out = { 0 };
	nsbox_policy_t *p = NULL;

	for (const char *a = first; a && argc <= MAX_ARGS; a = va_arg(ap, const char *))
		argv[argc++] = (char *)a;
	argv[argc] = NULL;
	if (args_load_policy(&p, argc, argv, NULL, &out.err) < 0) {
		out.rc = -1;
		return out;
	}
	for (i = 1; i < argc; i++) {
		int r;

		if (strcmp(argv[i], "--") == 0) {
			out.rc = 1;
			break;
		}
		r = args_parse_jail_option(p, argc, argv, &i, &out.err);
		if (r < 0) {
			out.rc = -1;
			break;
		}
		if (r == 0) {
			out.rc = 1;
			break;
		}
	}
	out.stop = i;
	if (out.rc >= 0)
		out.policy = nsbox_policy_to_string(p);
	nsbox_policy_free(p);
	return out;
}

static struct parsed parse(const char *first, ...)
{
	struct parsed out;
	va_list ap;

	va_start(ap, first);
	out = parse_v(first, ap);
	va_end(ap);
	return out;
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; p && (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return true;
	return false;
}

static bool starts(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void free_parsed(struct parsed *p)
{
	nsbox_free(p->policy);
	p->policy = NULL;
}

static void test_values(void)
{
	struct parsed r = parse("--memory", "256M", "--pids=7", "--cpus", "0.5", "--time-limit=10", "--tmp-size", "16M",
				"--uid", "4242", "--gid=4343", "--hostname", "box", NULL);

	ok(r.rc == 0 && r.policy, "size, count, fraction, time and id options parse (%s)", r.err.msg);
	if (r.policy) {
		ok(has_line(r.policy, "Memory=256M"), "--memory 256M: Memory=256M");
		ok(has_line(r.policy, "Pids=7"), "--pids=7 (inline value)");
		ok(has_line(r.policy, "CPUs=0.5"), "--cpus 0.5");
		ok(has_line(r.policy, "TimeLimit=10"), "--time-limit=10");
		ok(has_line(r.policy, "TmpSize=16M"), "--tmp-size 16M");
		ok(has_line(r.policy, "Uid=4242") && has_line(r.policy, "Gid=4343"), "--uid and --gid=");
		ok(has_line(r.policy, "Hostname=box"), "--hostname box");
	}
	free_parsed(&r);
}

static void test_flags(void)
{
	struct parsed r = parse("--share-net", "--seccomp-log", "--dist-packages", NULL);

	ok(r.rc == 0 && r.policy, "flags without a value parse (%s)", r.err.msg);
	if (r.policy) {
		ok(has_line(r.policy, "Network=host"), "--share-net: Network=host");
		ok(has_line(r.policy, "Seccomp=log"), "--seccomp-log: Seccomp=log");
		ok(has_line(r.policy, "DistPackages=yes"), "--dist-packages: DistPackages=yes");
	}
	free_parsed(&r);
	r = parse("--share-net=yes", NULL);
	ok(r.rc == -1 && strcmp(r.err.msg, "--share-net takes no value") == 0, "--share-net=yes: '%s'", r.err.msg);
}

static void test_bad_values(void)
{
	struct parsed r = parse("--memory", "lots", NULL);

	ok(r.rc == -1 && starts(r.err.msg, "--memory: ") && strstr(r.err.msg, "lots"),
	   "a bad size names the flag and the value: '%s'", r.err.msg);
	r = parse("--pids=-3", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--pids: "), "a bad count names the flag: '%s'", r.err.msg);
	r = parse("--cpus", "1,5", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--cpus: "), "a comma decimal is refused: '%s'", r.err.msg);
	r = parse("--landlock", "sometimes", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--landlock: "), "a bad keyword names the flag: '%s'", r.err.msg);
	r = parse("--memory", NULL);
	ok(r.rc == -1 && strcmp(r.err.msg, "--memory needs a value") == 0, "a missing value: '%s'", r.err.msg);
	r = parse("--setenv", NULL);
	ok(r.rc == -1 && strcmp(r.err.msg, "--setenv needs a value") == 0, "--setenv without a value: '%s'", r.err.msg);
}

static void test_repeated(void)
{
	struct parsed r = parse("--memory", "1M", "--memory=2M", "--setenv", "A=1", "--setenv", "B=2", "--bind",
				"/tmp:/a", "--bind", "/tmp:/b", NULL);

	ok(r.rc == 0 && r.policy, "repeated options parse (%s)", r.err.msg);
	if (r.policy) {
		ok(has_line(r.policy, "Memory=2M") && !has_line(r.policy, "Memory=1M"),
		   "a repeated limit: the last wins");
		ok(has_line(r.policy, "Set=A=1") && has_line(r.policy, "Set=B=2"), "repeated --setenv: both kept");
		ok(has_line(r.policy, "Bind=/tmp:/a") && has_line(r.policy, "Bind=/tmp:/b"),
		   "repeated --bind: both kept");
	}
	free_parsed(&r);
}

static void test_paths(void)
{
	char dir[] = "/tmp/nsbox-test-args-XXXXXX", cwd[PATH_MAX], want[PATH_MAX + 32], real[PATH_MAX];
	struct parsed r;

	if (!mkdtemp(dir) || !getcwd(cwd, sizeof(cwd)) || !realpath(dir, real) || chdir(real) < 0) {
		ok(0, "set up a directory to work in");
		return;
	}
	if (mkdir("sub", 0700) < 0) {
		ok(0, "mkdir sub");
		return;
	}
	r = parse("--workspace", "sub", "--bind", "sub", "--ro-bind=sub:/data", NULL);
	ok(r.rc == 0 && r.policy, "relative paths parse (%s)", r.err.msg);
	if (r.policy) {
		snprintf(want, sizeof(want), "Workspace=%s/sub", real);
		ok(has_line(r.policy, want), "--workspace sub is made absolute: %s", want);
		snprintf(want, sizeof(want), "Bind=%s/sub:%s/sub", real, real);
		ok(has_line(r.policy, want), "--bind SRC without DST: SRC:SRC, absolute");
		snprintf(want, sizeof(want), "ReadOnlyBind=%s/sub:/data", real);
		ok(has_line(r.policy, want), "--ro-bind=SRC:DST: SRC absolute, DST as given");
	}
	free_parsed(&r);
	r = parse("--workspace", "nope", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--workspace: nope: ") && strstr(r.err.msg, "No such file"),
	   "a missing workspace: '%s'", r.err.msg);
	r = parse("--bind", "nope:/x", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--bind nope: "), "a missing bind source: '%s'", r.err.msg);
	r = parse("--ro-bind", ":/x", NULL);
	ok(r.rc == -1 && strcmp(r.err.msg, "--ro-bind :/x: expected SRC[:DST]") == 0, "an empty bind source: '%s'",
	   r.err.msg);
	rmdir("sub");
	if (chdir(cwd) < 0 || rmdir(dir) < 0)
		ok(0, "clean up %s", dir);
}

static void test_policy(void)
{
	struct parsed r = parse(NULL);

	ok(r.rc == 0 && r.policy && strstr(r.policy, "# nsbox policy: default "), "no --policy: the default policy");
	free_parsed(&r);
	r = parse("--memory", "8M", "--policy", "strict", NULL);
	ok(r.rc == 0 && r.policy && strstr(r.policy, "# nsbox policy: strict ") &&
		   has_line(r.policy, "Cgroups=require") && has_line(r.policy, "Memory=8M"),
	   "--policy is applied first, wherever it stands; flags then override it");
	free_parsed(&r);
	r = parse("--policy=permissive", NULL);
	ok(r.rc == 0 && r.policy && strstr(r.policy, "# nsbox policy: permissive "), "--policy=NAME");
	free_parsed(&r);
	r = parse("--policy", NULL);
	ok(r.rc == -1 && strcmp(r.err.msg, "--policy needs a value") == 0, "--policy without a value: '%s'", r.err.msg);
	r = parse("--policy", "/nonexistent/nsbox.policy", NULL);
	ok(r.rc == -1 && strstr(r.err.msg, "/nonexistent/nsbox.policy"), "a missing policy file is named: '%s'",
	   r.err.msg);
}

/* Which policy args_load_policy picks for a front end with a command or
 * program after its options (own: its value-taking options). */
static const char *picked(const char *const *own, const char *const *words)
{
	static char name[32];
	char *argv[16] = { "cmd" };
	int argc = 1;
	nsbox_policy_t *p = NULL;
	struct cli_err err = { 0 };
	char *text;

	for (; *words && argc < 15; words++)
		argv[argc++] = (char *)*words;
	if (args_load_policy(&p, argc, argv, own, &err) < 0)
		return "error";
	text = nsbox_policy_to_string(p);
	snprintf(name, sizeof(name), "%s", text && strstr(text, "# nsbox policy: strict ") ? "strict" : "default");
	free(text);
	nsbox_policy_free(p);
	return name;
}

static void test_policy_ends_with_the_options(void)
{
	static const char *const own[] = { "tool", "json-status", NULL };
	static const struct {
		const char *words[8], *want;
	} cases[] = {
		{ { "-c", "code", "--policy", "strict" }, "default" },
		{ { "-uc", "code", "--policy", "strict" }, "default" },
		{ { "script.py", "--policy=strict" }, "default" },
		{ { "--memory", "64M", "/bin/echo", "--policy", "strict" }, "default" },
		{ { "--tool", "t=cmd", "--policy", "strict", "x.py" }, "strict" },
		{ { "-W", "error", "--policy", "strict", "-c", "x" }, "strict" },
		{ { "--share-net", "--policy", "strict", "cmd" }, "strict" },
		{ { "--json-status", "f", "--policy", "strict", "cmd" }, "strict" },
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const char *got = picked(own, cases[k].words);

		ok(!strcmp(got, cases[k].want), "case %zu (%s %s ...): --policy %s (got %s)", k, cases[k].words[0],
		   cases[k].words[1], !strcmp(cases[k].want, "strict") ? "is nsbox's" : "belongs to the program", got);
	}
}

static void test_stops(void)
{
	struct parsed r = parse("--memory", "8M", "--", "--policy", "strict", "--memory", "bogus", NULL);

	ok(r.rc == 1 && r.stop == 3, "parsing stops at \"--\" (index %d)", r.stop);
	ok(r.policy && strstr(r.policy, "# nsbox policy: default ") && has_line(r.policy, "Memory=8M"),
	   "a --policy after \"--\" belongs to the command, not to nsbox");
	free_parsed(&r);
	r = parse("--pids", "5", "python3", "--memory", "bogus", NULL);
	ok(r.rc == 1 && r.stop == 3, "a non-option is left to the caller (index %d)", r.stop);
	free_parsed(&r);
	r = parse("--no-such-flag", NULL);
	ok(r.rc == 1 && r.stop == 1, "an unknown option is not a jail option (the caller reports it)");
	free_parsed(&r);
	r = parse("--mem", "1M", NULL);
	ok(r.rc == 1 && r.stop == 1, "no prefix matching: --mem is not --memory");
	free_parsed(&r);
	r = parse("--memoryx=1M", NULL);
	ok(r.rc == 1 && r.stop == 1, "--memoryx=1M is not --memory");
	free_parsed(&r);
}

static void test_bwrap_habits(void)
{
	struct parsed r;

	setenv("NSBOX_TEST_PASS", "from host", 1);
	unsetenv("NSBOX_TEST_UNSET");
	r = parse("--chdir", "/usr/bin", "--tmpfs", "/scratch:8M", "--tmpfs=/cache", "--unsetenv", "LANG", "--env",
		  "NSBOX_TEST_PASS", "--env", "NSBOX_TEST_UNSET", "--env=A=1", NULL);
	ok(r.rc == 0 && r.policy, "--chdir, --tmpfs, --unsetenv, --env parse (%s)", r.err.msg);
	if (r.policy) {
		ok(has_line(r.policy, "WorkDir=/usr/bin"), "--chdir: WorkDir=");
		ok(has_line(r.policy, "TmpFS=/scratch:8388608") && has_line(r.policy, "TmpFS=/cache"),
		   "--tmpfs PATH[:SIZE]: TmpFS=");
		ok(has_line(r.policy, "Unset=LANG"), "--unsetenv: Unset=");
		ok(has_line(r.policy, "Set=NSBOX_TEST_PASS=from host"), "--env NAME takes the host's value");
		ok(!strstr(r.policy, "NSBOX_TEST_UNSET"), "--env NAME not set on the host: nothing");
		ok(has_line(r.policy, "Set=A=1"), "--env NAME=VALUE is --setenv");
	}
	free_parsed(&r);
	r = parse("--unsetenv", "A", "--setenv", "A=2", NULL);
	ok(r.rc == 0 && r.policy && has_line(r.policy, "Set=A=2") && !has_line(r.policy, "Unset=A"),
	   "a later --setenv replaces an --unsetenv of the same name");
	free_parsed(&r);
	r = parse("--setenv", "A=2", "--unsetenv", "A", NULL);
	ok(r.rc == 0 && r.policy && has_line(r.policy, "Unset=A") && !has_line(r.policy, "Set=A=2"),
	   "a later --unsetenv replaces a --setenv");
	free_parsed(&r);
	r = parse("--env", "1BAD", NULL);
	ok(r.rc == -1 && !strcmp(r.err.msg, "--env 1BAD: not a variable name"), "'%s'", r.err.msg);
	r = parse("--chdir", "rel", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--chdir: ") && strstr(r.err.msg, "absolute"), "'%s'", r.err.msg);
	r = parse("--tmpfs", "/proc/x", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--tmpfs: ") && strstr(r.err.msg, "not allowed"), "'%s'", r.err.msg);
	r = parse("--tmpfs", "/tmp", NULL);
	ok(r.rc == -1 && strstr(r.err.msg, "not allowed"), "--tmpfs /tmp: '%s'", r.err.msg);
	r = parse("--tmpfs", "/x:1K", NULL);
	ok(r.rc == -1 && strstr(r.err.msg, "at least 1M"), "'%s'", r.err.msg);
	r = parse("--tmpfs", "/x", "--tmpfs", "/x/", NULL);
	ok(r.rc == -1 && strstr(r.err.msg, "already used"), "'%s'", r.err.msg);
	r = parse("--unsetenv", "A=B", NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--unsetenv: "), "'%s'", r.err.msg);
}

static void test_dirs(void)
{
	char dir[] = "/tmp/nsbox-test-args-XXXXXX", file[64];
	struct parsed r;
	FILE *f;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	snprintf(file, sizeof(file), "%s/README.md", dir);
	f = fopen(file, "w");
	if (f)
		fclose(f);
	r = parse("--workspace", file, NULL);
	ok(r.rc == -1 && strstr(r.err.msg, "--workspace ") && strstr(r.err.msg, ": not a directory"),
	   "--workspace FILE: not a directory, named: '%s'", r.err.msg);
	r = parse("--rootfs", file, NULL);
	ok(r.rc == -1 && starts(r.err.msg, "--rootfs ") && strstr(r.err.msg, "not a directory"),
	   "--rootfs FILE: not a directory: '%s'", r.err.msg);
	if (geteuid() != 0 && chmod(dir, 0) == 0) {
		r = parse("--workspace", dir, NULL);
		ok(r.rc == -1 && strstr(r.err.msg, "not accessible to uid"), "a directory we can't enter: '%s'",
		   r.err.msg);
		chmod(dir, 0700);
	} else {
		ok(1, "# SKIP as root every directory is accessible");
	}
	unlink(file);
	rmdir(dir);
}

static void test_suggest(void)
{
	static const char *const extra[] = { "json", "tool", "output-limit", NULL };
	struct cli_err err = { 0 };
	const struct {
		const char *arg, *want;
	} cases[] = {
		{ "--memroy", "memory" },
		{ "--memory-limit=1G", NULL },
		{ "--mem", "memory" },
		{ "--workspce", "workspace" },
		{ "--jsno", "json" },
		{ "--tol", "tool" },
		{ "--output-limt=5", "output-limit" },
		{ "--polcy", "policy" },
		{ "--zzqqxxyy", NULL },
		{ "--x", NULL },
		{ "--", NULL },
		{ "--share_net", "share-net" },
	};

	for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
		const char *got = args_suggest(cases[k].arg, extra);

		ok(cases[k].want ? got && !strcmp(got, cases[k].want) : !got, "suggest %s: %s (want %s)", cases[k].arg,
		   got ? got : "none", cases[k].want ? cases[k].want : "none");
	}
	ok(!args_suggest("--jsno", NULL) || strcmp(args_suggest("--jsno", NULL), "json") != 0,
	   "a command's own option is suggested only when it is given");
	args_unknown_option("run", "--memroy", NULL, &err);
	ok(!strcmp(err.msg, "unknown option '--memroy'; did you mean --memory? (see nsbox run --help)"), "'%s'",
	   err.msg);
	args_unknown_option("run", "--zzqqxxyy", NULL, &err);
	ok(!strcmp(err.msg, "unknown option '--zzqqxxyy' (see nsbox run --help)"), "'%s'", err.msg);
}

static void test_commands(void)
{
	struct cli_err err = { 0 };
	const struct {
		const char *cmd;
		int rc;
		const char *msg;
	} cases[] = {
		{ "cat", 0, NULL },
		{ "  sh -c 'exit 0'", 0, NULL },
		{ "/bin/cat --x", 0, NULL },
		{ "exec cat", 0, NULL },
		{ "(cat)", 0, NULL },
		{ "A=1 cat", 0, NULL },
		{ "\"quoted\" x", 0, NULL },
		{ "no-such-command-xyz arg", -1, "no-such-command-xyz: command not found in PATH" },
		{ "/etc/passwd", -1, "/etc/passwd: not an executable file" },
		{ "/tmp", -1, "/tmp: not an executable file" },
		{ "/no/such", -1, "/no/such: No such file or directory" },
		{ "   ", -1, "empty command" },
	};

	for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
		int rc = args_check_command(cases[k].cmd, &err);

		ok(rc == cases[k].rc && (rc == 0 || !strcmp(err.msg, cases[k].msg)), "command '%s': %d %s",
		   cases[k].cmd, rc, rc ? err.msg : "");
	}
	/* As execvp: a PATH without the command's directory does not find it. */
	{
		char *old = getenv("PATH") ? strdup(getenv("PATH")) : NULL;

		setenv("PATH", "/nonexistent:/usr/sbin", 1);
		ok(args_check_command("cat", &err) < 0, "cat is not found through PATH=/nonexistent:/usr/sbin");
		setenv("PATH", "/nonexistent::/bin", 1);
		ok(args_check_command("cat", &err) == 0, "an empty PATH entry is searched, /bin has cat");
		if (old)
			setenv("PATH", old, 1);
		free(old);
	}
}

static void test_help(void)
{
	char flags[] =
		"--policy --memory --pids --cpus --time-limit --tmp-size --file-size --open-files --cgroups "
		"--uid --gid --hostname --share-net --bind --ro-bind --workspace --rootfs --setenv --seccomp-log --chdir "
		"--tmpfs --env --unsetenv "
		"--landlock --dist-packages";
	char *save = NULL;
	int missing = 0;

	for (char *f = strtok_r(flags, " ", &save); f; f = strtok_r(NULL, " ", &save))
		if (!strstr(args_jail_help, f)) {
			printf("# %s is not in the help\n", f);
			missing++;
		}
	ok(missing == 0, "the help names every jail option");
}

int main(void)
{
	test_values();
	test_flags();
	test_bad_values();
	test_repeated();
	test_paths();
	test_policy();
	test_policy_ends_with_the_options();
	test_stops();
	test_dirs();
	test_bwrap_habits();
	test_suggest();
	test_commands();
	test_help();
	tap_done();
}
