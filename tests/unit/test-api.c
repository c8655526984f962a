/* The public C API (include/nsbox.h) through libnsbox.so, as a host uses
 * it: every function, misuse (NULL arguments, bad names, double
 * registration, use after the sandbox died, tools that fail or answer
 * invalid JSON), cancel from another thread, a multithreaded host, fork,
 * and nsbox_run() both in-process and through the helper.
 * Run under valgrind by `make check-valgrind` (no leaks allowed).
 *
 * `test-api --run CODE [--cold]` runs CODE in one session and prints its
 * stdout, then "value: JSON" (tests/integ/test_runner_exe.py uses it);
 * `test-api --forward MODE DELAY_US` is one case of test_run's (forward_one). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <locale.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "nsbox.h"
#include "tap.h"

#define CHECK(cond, ...)             \
	do {                         \
		bool c_ = (cond);    \
		ok(c_, __VA_ARGS__); \
	} while (0)

static const char *emsg(nsbox_error_t *e)
{
	return e ? nsbox_error_message(e) : "(no error)";
}

static void clear(nsbox_error_t **e)
{
	nsbox_error_free(*e);
	*e = NULL;
}

/* Run code with repl=true; returns the result (caller frees) or NULL. */
static nsbox_result_t *run(nsbox_session_t *s, const char *code, double timeout)
{
	struct nsbox_exec_opts o = { .struct_size = sizeof(o), .repl = true, .timeout = timeout };
	nsbox_result_t *r = NULL;
	nsbox_error_t *e = NULL;

	if (nsbox_exec(s, code, &o, &r, &e) < 0) {
		printf("# exec failed: %s\n", emsg(e));
		nsbox_error_free(e);
		return NULL;
	}
	return r;
}

/* The value of code as JSON, in a static buffer ("ERROR" on failure). */
static const char *value_of(nsbox_session_t *s, const char *code)
{
	static __thread char buf[512];
	nsbox_result_t *r = run(s, code, 0);

	if (!r)
		return "ERROR";
	if (nsbox_result_status(r) != NSBOX_OK)
		snprintf(buf, sizeof(buf), "STATUS %d: %s: %s", nsbox_result_status(r),
			 nsbox_result_error_type(r) ?: "", nsbox_result_error_message(r) ?: "");
	else
		snprintf(buf, sizeof(buf), "%s", nsbox_result_value(r));
	nsbox_result_free(r);
	return buf;
}

/* ---- tools ---- */

static atomic_int calc_calls;

/* calc(a, b, op): arithmetic on two numbers. */
static int calc(void *ud, const char *name, const char *args, char **result, char **error)
{
	double a, b;
	char op[4] = "";

	(void)ud;
	(void)name;
	atomic_fetch_add(&calc_calls, 1);
	if (sscanf(args, "{\"args\":[],\"kwargs\":{\"a\":%lf,\"b\":%lf,\"op\":\"%1[-+*/]\"}}", &a, &b, op) != 3 &&
	    sscanf(args, "{\"args\":[%lf,%lf,\"%1[-+*/]\"]", &a, &b, op) != 3) {
		if (asprintf(error, "calc: cannot parse %s", args) < 0)
			*error = NULL;
		return 1;
	}
	if (op[0] == '/' && b == 0) {
		*error = strdup("division by zero");
		return 1;
	}
	if (asprintf(result, "%.17g", op[0] == '+' ? a + b : op[0] == '-' ? a - b : op[0] == '*' ? a * b : a / b) < 0)
		return 1;
	return 0;
}

static int bad_json(void *ud, const char *name, const char *args, char **result, char **error)
{
	(void)ud;
	(void)name;
	(void)args;
	(void)error;
	*result = strdup("{not json");
	return 0;
}

static int fails_silently(void *ud, const char *name, const char *args, char **result, char **error)
{
	(void)ud;
	(void)name;
	(void)args;
	(void)result;
	(void)error;
	return -1;
}

static int noop(void *ud, const char *name, const char *args, char **result, char **error)
{
	(void)ud;
	(void)name;
	(void)args;
	(void)result;
	(void)error;
	return 0;
}

static int echo(void *ud, const char *name, const char *args, char **result, char **error)
{
	(void)ud;
	(void)name;
	(void)error;
	*result = strdup(args);
	return 0;
}

static const char calc_schema[] =
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"number\"},"
	"\"op\":{\"type\":\"string\",\"description\":\"one of + - * /\"}},\"required\":[\"a\",\"b\",\"op\"]}";

/* ---- output ---- */

struct outbuf {
	char data[256];
	size_t len;
};

static void on_output(void *ud, int stream, const char *data, size_t len)
{
	struct outbuf *o = ud;

	if (stream == 1 && o->len + len < sizeof(o->data)) {
		memcpy(o->data + o->len, data, len);
		o->len += len;
	}
}

/* ---- cases ---- */

static void test_errors_and_version(void)
{
	CHECK(!strcmp(nsbox_version(), "0.5.0"), "nsbox_version is 0.5.0");
	CHECK(nsbox_error_code(NULL) == 0 && !strcmp(nsbox_error_message(NULL), ""), "error accessors accept NULL");
	nsbox_error_free(NULL);
	nsbox_free(NULL);
	nsbox_policy_free(NULL);
	nsbox_session_free(NULL);
	nsbox_result_free(NULL);
	nsbox_cancel(NULL);
	ok(1, "destructors and nsbox_cancel accept NULL");
}

static void test_policy(void)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	char path[] = "/tmp/nsbox-test-api-XXXXXX";
	char *text;
	int fd, r;

	CHECK(nsbox_policy_new(NULL, NULL, &e) == -EINVAL && e && nsbox_error_code(e) == -EINVAL,
	      "policy_new(out=NULL) is -EINVAL with an error object");
	clear(&e);
	r = nsbox_policy_new("no-such-policy", &p, &e);
	CHECK(r == -ENOENT && !p && strstr(emsg(e), "no-such-policy"), "unknown policy: -ENOENT (%s)", emsg(e));
	clear(&e);
	fd = mkstemp(path);
	if (fd >= 0) {
		const char bad[] = "[Limits]\nMemory=lots\n";

		CHECK(write(fd, bad, sizeof(bad) - 1) == (ssize_t)sizeof(bad) - 1, "write a bad policy file");
		close(fd);
		r = nsbox_policy_new(path, &p, &e);
		CHECK(r == -EINVAL && !p && strstr(emsg(e), ":2:"), "bad policy file: -EINVAL naming the line (%s)",
		      emsg(e));
		clear(&e);
		unlink(path);
	}
	r = nsbox_policy_new("strict", &p, &e);
	CHECK(r == 0 && p, "built-in policy strict");
	nsbox_policy_free(p);
	p = NULL;
	r = nsbox_policy_new(NULL, &p, NULL);
	CHECK(r == 0 && p, "NULL name is the default policy, err may be NULL");
	if (!p)
		return;
	/* The host paths it names exist, else -ENOENT naming the key and the
	 * path; only a tree that is not built carries the step "rootfs" (what
	 * a front end leaves to nsboxd). */
	{
		nsbox_policy_t *q = NULL;

		CHECK(nsbox_policy_new(NULL, &q, &e) == 0 && nsbox_policy_set_workspace(q, "/nonexistent-nsbox-ws", &e) == 0,
		      "policy with a missing workspace (%s)", emsg(e));
		r = nsbox_policy_check(q, &e);
		CHECK(r == -ENOENT && !nsbox_error_step(e) &&
			      !strcmp(emsg(e), "[Filesystem] Workspace=/nonexistent-nsbox-ws: No such file or directory"),
		      "policy_check: a missing workspace is -ENOENT naming it, no step (%d %s)", r, emsg(e));
		clear(&e);
		CHECK(nsbox_policy_set_workspace(q, "/etc/passwd", &e) == 0, "workspace /etc/passwd (%s)", emsg(e));
		r = nsbox_policy_check(q, &e);
		CHECK(r == -EINVAL && strstr(emsg(e), "Workspace=/etc/passwd: not a directory"),
		      "policy_check: a file as the workspace is -EINVAL (%s)", emsg(e));
		clear(&e);
		CHECK(nsbox_policy_set_workspace(q, "/usr", &e) == 0 &&
			      nsbox_policy_add_bind(q, "/nonexistent-nsbox-bind", "/x", false, &e) == 0,
		      "policy with a missing bind source (%s)", emsg(e));
		r = nsbox_policy_check(q, &e);
		CHECK(r == -ENOENT && !nsbox_error_step(e) && strstr(emsg(e), "ReadOnlyBind=/nonexistent-nsbox-bind: "),
		      "policy_check: a missing bind source is -ENOENT naming it (%d %s)", r, emsg(e));
		clear(&e);
		nsbox_policy_free(q);
		q = NULL;
		CHECK(nsbox_policy_new(NULL, &q, &e) == 0 &&
			      nsbox_policy_set(q, "Filesystem", "RootFS", "nsbox-unit-no-such-tree", &e) == 0,
		      "policy with an unbuilt tree (%s)", emsg(e));
		r = nsbox_policy_check(q, &e);
		CHECK(r == -ENOENT && nsbox_error_step(e) && !strcmp(nsbox_error_step(e), "rootfs"),
		      "policy_check: an unbuilt tree is -ENOENT in the step rootfs (%d %s)", r, emsg(e));
		clear(&e);
		nsbox_policy_free(q);
	}
	CHECK(nsbox_policy_set(p, "Limits", "Memory", "256M", &e) == 0, "policy_set Limits.Memory=256M");
	CHECK(nsbox_policy_set(p, "Limits", "Nope", "1", &e) == -EINVAL && strstr(emsg(e), "Nope"),
	      "policy_set unknown key: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_policy_set(p, NULL, "Memory", "1", &e) == -EINVAL, "policy_set NULL section: -EINVAL");
	clear(&e);
	CHECK(nsbox_policy_set_memory(p, 300ull << 20, &e) == 0, "set_memory 300M");
	CHECK(nsbox_policy_set_pids(p, 64, &e) == 0, "set_pids 64");
	CHECK(nsbox_policy_set_cpus(p, 1.5, &e) == 0, "set_cpus 1.5");
	CHECK(nsbox_policy_set_cpus(p, -1, &e) == -EINVAL, "set_cpus -1: -EINVAL");
	clear(&e);
	CHECK(nsbox_policy_set_time_limit(p, 20, &e) == 0, "set_time_limit 20");
	CHECK(nsbox_policy_set_tmp_size(p, 32ull << 20, &e) == 0, "set_tmp_size 32M");
	CHECK(nsbox_policy_set_file_size(p, 0, &e) == 0, "set_file_size 0 (no limit)");
	CHECK(nsbox_policy_set_open_files(p, 256, &e) == 0, "set_open_files 256");
	CHECK(nsbox_policy_set_share_net(p, false, &e) == 0, "set_share_net false");
	CHECK(nsbox_policy_set_ids(p, 1000, 1000, &e) == 0, "set_ids 1000 1000");
	CHECK(nsbox_policy_set_ids(p, (uid_t)-1, 5, &e) == -EINVAL, "set_ids -1: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_policy_add_bind(p, "relative", "/x", false, &e) == -EINVAL, "add_bind relative src: -EINVAL (%s)",
	      emsg(e));
	clear(&e);
	CHECK(nsbox_policy_add_bind(p, "/usr/share/zoneinfo", "/data/zoneinfo", false, &e) == 0,
	      "add_bind /usr/share/zoneinfo read-only (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_policy_set_workspace(p, "not/absolute", &e) == -EINVAL, "set_workspace relative: -EINVAL");
	clear(&e);
	CHECK(nsbox_policy_setenv(p, "NSBOX_TEST_VAR", "hello", &e) == 0, "setenv NSBOX_TEST_VAR");
	CHECK(nsbox_policy_setenv(p, "A=B", "x", &e) == -EINVAL, "setenv bad name: -EINVAL");
	clear(&e);
	text = nsbox_policy_to_string(p);
	CHECK(text && strstr(text, "Memory=300M") && strstr(text, "CPUs=1.5") &&
		      strstr(text, "Set=NSBOX_TEST_VAR=hello") &&
		      strstr(text, "ReadOnlyBind=/usr/share/zoneinfo:/data/zoneinfo"),
	      "policy_to_string shows every setting");
	nsbox_free(text);
	CHECK(nsbox_policy_to_string(NULL) == NULL, "policy_to_string(NULL) is NULL");
	nsbox_policy_free(p);
}

/* Until pid is a zombie (the helper reaps it only when asked) or gone. */
static void wait_dead(pid_t pid)
{
	for (int i = 0; i < 500; i++) {
		char path[64], buf[512], *rp;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		f = fopen(path, "re");
		if (!f)
			return;
		rp = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
		fclose(f);
		if (!rp || rp[2] == 'Z' || rp[2] == 'X')
			return;
		usleep(10000);
	}
}

static void test_session_basics(nsbox_policy_t *p, bool cold, const char *tag)
{
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .cold = cold };
	struct nsbox_session_info info = { .struct_size = sizeof(info) };
	nsbox_session_t *s = NULL;
	nsbox_result_t *r;
	nsbox_error_t *e = NULL;
	char *v = NULL;
	size_t n;
	int k;

	k = nsbox_session_new(p, &so, &s, &e);
	CHECK(k == 0 && s, "%s: session_new (%s)", tag, emsg(e));
	if (!s) {
		clear(&e);
		return;
	}
	CHECK(!strcmp(value_of(s, "1+1"), "2"), "%s: 1+1 is 2", tag);
	CHECK(!strcmp(value_of(s, "x = 20\nx + 1"), "21"), "%s: statements then a value", tag);
	CHECK(!strcmp(value_of(s, "x * 2"), "40"), "%s: globals persist", tag);
	CHECK(!strcmp(value_of(s, "(1, 'a', None, 2**64)"),
		      "{\"$tuple\":[1,\"a\",null,{\"$int\":\"18446744073709551616\"}]}"),
	      "%s: values use the protocol encoding", tag);
	CHECK(!strcmp(value_of(s, "import os; os.environ.get('NSBOX_TEST_VAR')"), "\"hello\""),
	      "%s: the policy's environment is the session's", tag);
	CHECK(!strcmp(value_of(s, "sorted(os.listdir('/data/zoneinfo'))[:0]"), "[]"), "%s: the bind is there", tag);

	r = run(s, "print('out'); import sys; print('err', file=sys.stderr)", 0);
	CHECK(r && nsbox_result_status(r) == NSBOX_OK && !strcmp(nsbox_result_stdout(r, &n), "out\n") && n == 4 &&
		      !strcmp(nsbox_result_stderr(r, NULL), "err\n") && !strcmp(nsbox_result_value(r), "null") &&
		      !nsbox_result_error_type(r),
	      "%s: stdout and stderr captured", tag);
	nsbox_result_free(r);
	r = run(s, "def f():\n    return 1/0\nf()", 0);
	CHECK(r && nsbox_result_status(r) == NSBOX_EXCEPTION &&
		      !strcmp(nsbox_result_error_type(r), "ZeroDivisionError") &&
		      strstr(nsbox_result_error_message(r), "division by zero") &&
		      strstr(nsbox_result_traceback(r), "line 2, in f") &&
		      !strstr(nsbox_result_traceback(r), "nsbox-runner"),
	      "%s: an exception: type, message, traceback of the user's lines", tag);
	if (r) {
		double wall = -1, cpu = -1;
		uint64_t peak = 0;
		unsigned calls = 99;

		nsbox_result_usage(r, &wall, &cpu, &peak, &calls);
		CHECK(wall > 0 && cpu >= 0 && calls == 0, "%s: usage: wall %.6f s, cpu %.6f s, %u calls", tag, wall,
		      cpu, calls);
		nsbox_result_usage(r, NULL, NULL, NULL, NULL);
	}
	nsbox_result_free(r);

	/* variables */
	CHECK(nsbox_set_var(s, "data", "{\"k\": [1, 2.5, \"three\"]}", &e) == 0, "%s: set_var", tag);
	CHECK(!strcmp(value_of(s, "data['k'][2]"), "\"three\""), "%s: a set variable is a global", tag);
	CHECK(nsbox_get_var(s, "data", &v, &e) == 0 && v && !strcmp(v, "{\"k\":[1,2.5,\"three\"]}"), "%s: get_var %s",
	      tag, v ? v : emsg(e));
	nsbox_free(v);
	v = NULL;
	CHECK(nsbox_get_var(s, "nope", &v, &e) == -ENOENT && !v, "%s: get_var of a missing name: -ENOENT (%s)", tag,
	      emsg(e));
	clear(&e);
	CHECK(nsbox_set_var(s, "x", "{bad", &e) == -EINVAL, "%s: set_var bad JSON: -EINVAL (%s)", tag, emsg(e));
	clear(&e);
	CHECK(nsbox_set_var(s, "1x", "1", &e) == -EINVAL, "%s: set_var bad name: -EINVAL", tag);
	clear(&e);
	CHECK(nsbox_set_var(s, NULL, "1", &e) == -EINVAL && nsbox_get_var(s, "x", NULL, NULL) == -EINVAL,
	      "%s: NULL name or out: -EINVAL", tag);
	clear(&e);
	CHECK(nsbox_reset(s, &e) == 0, "%s: reset", tag);
	CHECK(nsbox_get_var(s, "data", &v, &e) == -ENOENT, "%s: reset cleared the globals", tag);
	clear(&e);

	/* info */
	k = nsbox_session_info(s, &info, &e);
	CHECK(k == 0 && info.pid > 0 && info.alive && info.memory_limit == 300ull << 20 && info.pids_limit == 64 &&
		      info.cpus_limit == 1.5,
	      "%s: info: pid %d, cgroup '%s', %llu bytes in use", tag, (int)info.pid, info.cgroup,
	      (unsigned long long)info.memory_current);
	{
		struct nsbox_session_info bad = { .struct_size = 0 };

		CHECK(nsbox_session_info(s, &bad, &e) == -EINVAL, "%s: info with struct_size 0: -EINVAL", tag);
		clear(&e);
	}
	/* The random state is the session's own, not the template's. */
	{
		nsbox_session_t *s2 = NULL;

		if (nsbox_session_new(p, &so, &s2, &e) == 0) {
			char a[64];

			snprintf(a, sizeof(a), "%s", value_of(s, "import random; random.random()"));
			CHECK(strcmp(a, value_of(s2, "import random; random.random()")) != 0,
			      "%s: two sessions draw different random numbers", tag);
		} else {
			ok(0, "%s: second session (%s)", tag, emsg(e));
			clear(&e);
		}
		nsbox_session_free(s2);
	}
	/* timeout: the soft deadline */
	r = run(s, "while True: pass", 0.3);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT && strstr(nsbox_result_error_message(r), "time limit"),
	      "%s: a timeout is NSBOX_TIME_LIMIT (%s)", tag, r ? nsbox_result_error_message(r) : "no result");
	nsbox_result_free(r);
	CHECK(!strcmp(value_of(s, "'alive'"), "\"alive\""), "%s: the session survives a soft timeout", tag);

	/* death: kill the sandbox behind the library's back */
	if (info.pid > 0 && kill(info.pid, SIGKILL) == 0)
		wait_dead(info.pid);
	r = run(s, "1", 0);
	CHECK(r && nsbox_result_status(r) == NSBOX_CRASHED && strstr(nsbox_result_error_message(r), "signal 9"),
	      "%s: exec on a killed sandbox: NSBOX_CRASHED (%s)", tag, r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	r = NULL;
	CHECK(nsbox_exec(s, "1", NULL, &r, &e) == -ENOTCONN && !r, "%s: exec after death: -ENOTCONN (%s)", tag,
	      emsg(e));
	clear(&e);
	CHECK(nsbox_set_var(s, "a", "1", &e) == -ENOTCONN, "%s: set_var after death: -ENOTCONN", tag);
	clear(&e);
	CHECK(nsbox_reset(s, &e) == -ENOTCONN, "%s: reset after death: -ENOTCONN", tag);
	clear(&e);
	CHECK(nsbox_session_add_tool(s, "t", NULL, NULL, noop, NULL, &e) == -ENOTCONN,
	      "%s: add_tool after death: -ENOTCONN (%s)", tag, emsg(e));
	clear(&e);
	info.alive = true;
	CHECK(nsbox_session_info(s, &info, &e) == 0 && !info.alive, "%s: info says dead", tag);
	nsbox_session_free(s);
}

static void test_tools(nsbox_policy_t *p)
{
	struct outbuf out = { 0 };
	struct nsbox_session_opts so = {
		.struct_size = sizeof(so), .output = on_output, .output_userdata = &out, .max_tool_calls = 5000
	};
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	nsbox_result_t *r;
	unsigned calls = 0;

	if (nsbox_session_new(p, &so, &s, &e) < 0) {
		ok(0, "tools: session_new (%s)", emsg(e));
		clear(&e);
		return;
	}
	CHECK(nsbox_session_add_tool(s, "calc", calc_schema, "Arithmetic on two numbers.", calc, NULL, &e) == 0,
	      "add_tool calc with a schema (%s)", emsg(e));
	CHECK(nsbox_session_add_tool(s, "calc", NULL, NULL, calc, NULL, &e) == -EEXIST, "add_tool twice: -EEXIST (%s)",
	      emsg(e));
	clear(&e);
	CHECK(nsbox_session_add_tool(s, "not-a-name", NULL, NULL, calc, NULL, &e) == -EINVAL,
	      "add_tool bad name: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_session_add_tool(s, "print", NULL, NULL, calc, NULL, &e) == -EINVAL && strstr(emsg(e), "builtin"),
	      "add_tool named like a builtin: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(!strcmp(value_of(s, "import builtins\nprint is builtins.print"), "true"), "print is still the builtin");
	CHECK(nsbox_session_add_tool(s, "t2", "[1,2]", NULL, calc, NULL, &e) == -EINVAL,
	      "add_tool with a schema that is not an object: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_session_add_tool(s, "t3", "{oops", NULL, calc, NULL, &e) == -EINVAL,
	      "add_tool with a schema that is not JSON: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_session_add_tool(s, NULL, NULL, NULL, noop, NULL, &e) == -EINVAL &&
		      nsbox_session_add_tool(NULL, "t4", NULL, NULL, noop, NULL, NULL) == -EINVAL,
	      "add_tool with NULL name or session: -EINVAL");
	clear(&e);
	CHECK(!strcmp(value_of(s, "calc(6, 7, '*')"), "42"), "calc(6, 7, '*') is 42 (positional -> kwargs)");
	CHECK(!strcmp(value_of(s, "from nsbox import tools\ntools.calc(a=1, b=2, op='+')"), "3"),
	      "the tool is in nsbox.tools too");
	CHECK(strstr(value_of(s, "calc.__doc__"), "Arithmetic on two numbers.") != NULL,
	      "the description is the docstring");
	CHECK(strstr(value_of(
			     s,
			     "try:\n    calc(1, 0, '/')\nexcept Exception as e:\n    r = type(e).__name__ + ': ' + str(e)\nr"),
		     "ToolError: division by zero") != NULL,
	      "a failing callback is nsbox.ToolError with its message");
	CHECK(!strcmp(value_of(s, "total = 0\nfor i in range(200):\n    total = calc(total, 1, '+')\ntotal"), "200"),
	      "200 tool calls in a loop");
	/* Added after the session started, visible from the next exec. */
	{
		int k = nsbox_session_add_tool(s, "broken", NULL, NULL, bad_json, NULL, &e);

		if (k == 0)
			k = nsbox_session_add_tool(s, "quiet_failure", NULL, NULL, fails_silently, NULL, &e);
		if (k == 0)
			k = nsbox_session_add_tool(s, "echo", NULL, "Echo the call.", echo, NULL, &e);
		if (k == 0)
			k = nsbox_session_add_tool(s, "nothing", NULL, NULL, noop, NULL, &e);
		CHECK(k == 0, "tools added after exec (%s)", emsg(e));
		clear(&e);
	}
	CHECK(strstr(value_of(
			     s,
			     "try:\n    broken()\nexcept Exception as e:\n    r = type(e).__name__ + ': ' + str(e)\nr"),
		     "ToolError: tool broken returned invalid JSON") != NULL,
	      "invalid JSON from a callback is a ToolError saying so");
	CHECK(strstr(value_of(s, "try:\n    quiet_failure()\nexcept Exception as e:\n    r = type(e).__name__\nr"),
		     "ToolError") != NULL,
	      "a callback failing without a message is a ToolError");
	CHECK(!strcmp(value_of(s, "echo(1, 'x', k=[True])"), "{\"args\":[1,\"x\"],\"kwargs\":{\"k\":[true]}}"),
	      "the callback gets {\"args\":[...],\"kwargs\":{...}}");
	CHECK(!strcmp(value_of(s, "nothing() is None"), "true"), "a NULL result is None");
	/* NS.NAME: a function in a namespace object NS (nsbox mcp's code mode). */
	CHECK(nsbox_session_add_tool(s, "m.calc", calc_schema, "Arithmetic, namespaced.", calc, NULL, &e) == 0 &&
		      nsbox_session_add_tool(s, "m.echo", NULL, NULL, echo, NULL, &e) == 0,
	      "add_tool m.calc and m.echo (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_session_add_tool(s, "calc.x", NULL, NULL, calc, NULL, &e) == -EEXIST &&
		      strstr(emsg(e), "share the global calc"),
	      "add_tool calc.x beside a tool calc: -EEXIST (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_session_add_tool(s, "m", NULL, NULL, calc, NULL, &e) == -EEXIST,
	      "add_tool m beside m.calc: -EEXIST (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_session_add_tool(s, "m.a.b", NULL, NULL, calc, NULL, &e) == -EINVAL, "add_tool m.a.b: -EINVAL (%s)",
	      emsg(e));
	clear(&e);
	CHECK(!strcmp(value_of(s, "m.calc(6, 7, '*'), m.calc.__name__, m.calc.__qualname__, sorted(m.__all__)"),
		      "{\"$tuple\":[42,\"calc\",\"m.calc\",[\"calc\",\"echo\"]]}"),
	      "m.calc(6, 7, '*') is 42; names and the namespace's __all__ (%s)",
	      value_of(s, "m.calc(6, 7, '*'), m.calc.__name__, m.calc.__qualname__, sorted(m.__all__)"));
	CHECK(!strcmp(value_of(s, "m.echo(k=1)"), "{\"args\":[],\"kwargs\":{\"k\":1}}"),
	      "the callback of m.echo gets its call");
	CHECK(strstr(value_of(s, "try:\n    m.calc(1)\nexcept TypeError as e:\n    r = str(e)\nr"),
		     "m.calc(): missing") != NULL,
	      "a missing argument names m.calc");
	CHECK(!strcmp(value_of(s, "from nsbox import tools\ntools.m.calc(a=1, b=2, op='+')"), "3"),
	      "the namespace is in nsbox.tools too");
	r = run(s, "print('streamed')\ncalc(1, 1, '+')", 0);
	nsbox_result_usage(r, NULL, NULL, NULL, &calls);
	CHECK(r && calls == 1 && out.len == 9 && !memcmp(out.data, "streamed\n", 9),
	      "the output callback gets output as produced; usage counts tool calls (%u)", calls);
	nsbox_result_free(r);
	nsbox_session_free(s);
}

static void *result_json_thread(void *r)
{
	return (void *)nsbox_result_json(r);
}

static void *cancel_later(void *arg)
{
	usleep(300000);
	nsbox_cancel(arg);
	return NULL;
}

static void *exec_slowly(void *arg)
{
	nsbox_result_t *r = run(arg, "import time; time.sleep(1); 5", 0);
	bool good = r && !strcmp(nsbox_result_value(r), "5");

	nsbox_result_free(r);
	return good ? arg : NULL;
}

static void test_cancel_and_busy(nsbox_policy_t *p)
{
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	nsbox_result_t *r;
	pthread_t t;
	void *ret = NULL;
	char *v = NULL;

	if (nsbox_session_new(p, NULL, &s, &e) < 0) {
		ok(0, "cancel: session_new (%s)", emsg(e));
		clear(&e);
		return;
	}
	pthread_create(&t, NULL, cancel_later, s);
	r = run(s, "import time\nfor i in range(100):\n    time.sleep(0.1)", 0);
	pthread_join(t, NULL);
	CHECK(r && nsbox_result_status(r) == NSBOX_CANCELLED && !strcmp(nsbox_result_error_type(r), "nsbox.Cancelled"),
	      "nsbox_cancel from another thread: NSBOX_CANCELLED (%s)", r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	CHECK(!strcmp(value_of(s, "'still here'"), "\"still here\""), "the session survives a cancel");

	pthread_create(&t, NULL, exec_slowly, s);
	usleep(300000);
	CHECK(nsbox_get_var(s, "x", &v, &e) == -EBUSY && !v, "a second call while one runs: -EBUSY (%s)", emsg(e));
	clear(&e);
	pthread_join(t, &ret);
	CHECK(ret == s, "the running exec was not disturbed");
	nsbox_session_free(s);
}

/* ---- exec for event loops ---- */

/* Advance s until an event of kind want (answering nothing), polling its
 * fd; false when the fd stays quiet for 10 s or an error comes. */
static bool next_event(nsbox_session_t *s, struct nsbox_event *ev, enum nsbox_event_kind want)
{
	nsbox_error_t *e = NULL;

	for (;;) {
		struct pollfd pfd = { nsbox_session_fd(s), POLLIN, 0 };
		int k;

		ev->struct_size = sizeof(*ev);
		k = nsbox_exec_advance(s, ev, &e);
		if (k < 0) {
			printf("# advance: %s\n", emsg(e));
			clear(&e);
			return false;
		}
		if (k > 0 && ev->kind == want)
			return true;
		if (k > 0 && ev->kind == NSBOX_EVENT_DONE)
			return false;
		if (k == 0 && poll(&pfd, 1, 10000) != 1) {
			printf("# the session fd stayed quiet for 10 s\n");
			return false;
		}
	}
}

static nsbox_result_t *take_result(nsbox_session_t *s)
{
	nsbox_result_t *r = NULL;
	nsbox_error_t *e = NULL;

	if (nsbox_exec_result(s, &r, &e) < 0) {
		printf("# exec_result: %s\n", emsg(e));
		clear(&e);
	}
	return r;
}

static nsbox_session_t *event_session(nsbox_policy_t *p, const char *what)
{
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;

	if (nsbox_session_new(p, NULL, &s, &e) < 0 ||
	    nsbox_session_add_tool(s, "ask", NULL, "answered through the event API", NULL, NULL, &e) < 0 ||
	    nsbox_session_add_tool(s, "calc", calc_schema, NULL, calc, NULL, &e) < 0) {
		ok(0, "%s: session_new (%s)", what, emsg(e));
		clear(&e);
		nsbox_session_free(s);
		return NULL;
	}
	return s;
}

static void test_events_single(nsbox_policy_t *p)
{
	struct nsbox_exec_opts o = { .struct_size = sizeof(o), .repl = true };
	struct nsbox_event ev = { .struct_size = sizeof(ev) };
	nsbox_session_t *s = event_session(p, "events");
	nsbox_error_t *e = NULL;
	nsbox_result_t *r = NULL;
	uint64_t ask_id;
	int calls0 = atomic_load(&calc_calls);

	if (!s)
		return;
	CHECK(nsbox_session_fd(s) >= 0 && nsbox_session_fd(s) == nsbox_session_fd(s), "nsbox_session_fd: one fd");
	CHECK(nsbox_exec_advance(s, &ev, &e) == -EINVAL, "advance with no exec: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_exec_result(s, &r, &e) == -EINVAL && !r, "exec_result with no exec: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_exec_answer(s, 1, "1", NULL, &e) == -EINVAL, "answer with no exec: -EINVAL (%s)", emsg(e));
	clear(&e);

	CHECK(nsbox_exec_start(s, "ask(1, k='v') + calc(2, 3, '*')", &o, &e) == 0, "exec_start (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_exec_start(s, "1", &o, &e) == -EBUSY, "a second exec_start: -EBUSY (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_exec(s, "1", &o, &r, &e) == -EBUSY && !r, "nsbox_exec during an event exec: -EBUSY (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_exec_result(s, &r, &e) == -EAGAIN && !r, "exec_result before DONE: -EAGAIN (%s)", emsg(e));
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_TOOL_CALL) && !strcmp(ev.tool, "ask") &&
		      !strcmp(ev.args_json, "{\"args\":[1],\"kwargs\":{\"k\":\"v\"}}"),
	      "TOOL_CALL event for a tool without a callback (%s)", ev.args_json ? ev.args_json : "");
	ask_id = ev.call_id;
	CHECK(nsbox_exec_answer(s, ask_id + 1000, "1", NULL, &e) == -EINVAL, "answer with a bogus id: -EINVAL (%s)",
	      emsg(e));
	clear(&e);
	CHECK(nsbox_exec_result(s, &r, &e) == -EAGAIN && !r, "exec_result with a call pending: -EAGAIN");
	clear(&e);
	CHECK(nsbox_exec_answer(s, ask_id, "36", NULL, &e) == 0, "answer the call (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_exec_answer(s, ask_id, "36", NULL, &e) == -EINVAL, "answer it twice: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_TOOL_CALL) && !strcmp(ev.tool, "calc") && ev.call_id != ask_id,
	      "a tool with a callback is an event too");
	CHECK(nsbox_exec_answer(s, ev.call_id, "6", NULL, &e) == 0, "answer calc (%s)", emsg(e));
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE");
	CHECK(nsbox_exec_advance(s, &ev, &e) == -EINVAL, "advance after DONE: -EINVAL (%s)", emsg(e));
	clear(&e);
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_OK && !strcmp(nsbox_result_value(r), "42"),
	      "the answers make the value: %s", r ? nsbox_result_value(r) : "none");
	CHECK(atomic_load(&calc_calls) == calls0, "the callback did not run in an event exec");
	nsbox_result_free(r);
	CHECK(nsbox_exec_result(s, &r, &e) == -EINVAL, "exec_result twice: -EINVAL (%s)", emsg(e));
	clear(&e);

	/* Error answers and invalid JSON become ToolError inside. */
	CHECK(nsbox_exec_start(s,
			       "def f(x):\n    try:\n        return ask(x)\n    except Exception as e:\n"
			       "        return type(e).__name__ + ': ' + str(e)\n[f(0), f(1), f(2)]",
			       &o, &e) == 0,
	      "exec_start with three calls (%s)", emsg(e));
	clear(&e);
	for (int i = 0; i < 3; i++) {
		bool got = next_event(s, &ev, NSBOX_EVENT_TOOL_CALL);

		CHECK(got && nsbox_exec_answer(s, ev.call_id, i == 1 ? "{bad" : "null", i == 0 ? "no such thing" : NULL,
					       &e) == 0,
		      "answer %d (%s)", i, emsg(e));
		clear(&e);
	}
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE");
	r = take_result(s);
	CHECK(r && strstr(nsbox_result_value(r), "\"ToolError: no such thing\"") &&
		      strstr(nsbox_result_value(r), "not valid JSON") && strstr(nsbox_result_value(r), ",null]"),
	      "error answer, invalid JSON and None: %s", r ? nsbox_result_value(r) : "none");
	nsbox_result_free(r);

	/* The blocking nsbox_exec on the same session: a tool without a
	 * callback answers a ToolError, the others run. */
	CHECK(!strcmp(value_of(s, "try:\n    ask(1)\nexcept Exception as e:\n    r = type(e).__name__\nr"),
		      "\"ToolError\""),
	      "nsbox_exec: a call to a tool without a callback is a ToolError");
	CHECK(!strcmp(value_of(s, "calc(20, 22, '+')"), "42"), "nsbox_exec after event execs: %s",
	      value_of(s, "calc(20, 22, '+')"));

	/* A time limit during an event exec: the fd wakes at the deadline. */
	o.timeout = 0.4;
	CHECK(nsbox_exec_start(s, "while True:\n    pass", &o, &e) == 0, "exec_start with a 0.4 s limit");
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE at the time limit, no timer of ours");
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT, "NSBOX_TIME_LIMIT (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	CHECK(!strcmp(value_of(s, "'alive'"), "\"alive\""), "the session survives the soft limit");

	/* The same, polling the fd before any advance (as the header's example
	 * does): the limit must wake the poll by itself. */
	o.timeout = 0.4;
	CHECK(nsbox_exec_start(s, "import time\ntime.sleep(30)", &o, &e) == 0, "exec_start, then poll first");
	clear(&e);
	{
		struct pollfd pfd = { nsbox_session_fd(s), POLLIN, 0 };

		CHECK(poll(&pfd, 1, 20000) == 1, "the fd wakes at the time limit before any advance");
	}
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE at the time limit (poll first)");
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT, "NSBOX_TIME_LIMIT, poll first (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);

	/* nsbox_cancel during an event exec. */
	o.timeout = 0;
	CHECK(nsbox_exec_start(s, "import time\nfor i in range(100):\n    time.sleep(0.1)", &o, &e) == 0,
	      "exec_start a slow loop");
	clear(&e);
	{
		struct pollfd pfd = { nsbox_session_fd(s), POLLIN, 0 };

		CHECK(poll(&pfd, 1, 300) == 0, "the fd is quiet while the code runs");
	}
	nsbox_cancel(s);
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE after nsbox_cancel");
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_CANCELLED, "NSBOX_CANCELLED (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);

	/* A limit the code swallows: the grace's deadline kills the sandbox. */
	o.timeout = 0.3;
	CHECK(nsbox_exec_start(s,
			       "while True:\n    try:\n        while True:\n            pass\n"
			       "    except BaseException:\n        pass",
			       &o, &e) == 0,
	      "exec_start a limit-swallowing loop");
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE at the hard deadline");
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT, "NSBOX_TIME_LIMIT, killed (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	CHECK(nsbox_exec_start(s, "1", &o, &e) == -ENOTCONN, "exec_start on the dead session: -ENOTCONN (%s)", emsg(e));
	clear(&e);
	nsbox_session_free(s);

	/* The sandbox killed mid-exec, with a call pending. */
	s = event_session(p, "events, killed");
	if (!s)
		return;
	o.timeout = 0;
	CHECK(nsbox_exec_start(s, "print('before', flush=True)\nask()", &o, &e) == 0, "exec_start (%s)", emsg(e));
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_TOOL_CALL), "the call");
	{
		struct nsbox_session_info info = { .struct_size = sizeof(info) };

		CHECK(nsbox_session_info(s, &info, &e) == 0 && info.pid > 0 && kill(info.pid, SIGKILL) == 0,
		      "nsbox_session_info during an event exec, and SIGKILL its sandbox (%s)", emsg(e));
		clear(&e);
	}
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE after the sandbox was killed");
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_CRASHED, "NSBOX_CRASHED (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	CHECK(nsbox_exec_answer(s, ev.call_id, "1", NULL, &e) == -EINVAL, "answer after the end: -EINVAL (%s)",
	      emsg(e));
	clear(&e);
	nsbox_session_free(s);

	/* Freeing a session with an event exec running. */
	s = event_session(p, "events, freed");
	if (!s)
		return;
	CHECK(nsbox_exec_start(s, "ask()", &o, &e) == 0, "exec_start, then free with the call pending");
	clear(&e);
	nsbox_session_free(s);
}

/* ---- the time limit counts tool time (nsbox_exec_time_left) ---- */

static nsbox_session_t *slow_sess;
static double slow_left = -2;

/* A tool that takes 1.2 s: longer than the 0.5 s limits below. */
static int slow_tool(void *ud, const char *name, const char *args, char **result, char **error)
{
	(void)ud, (void)name, (void)args, (void)error;
	slow_left = nsbox_exec_time_left(slow_sess);
	usleep(1200000);
	*result = strdup("7");
	return 0;
}

static void test_tool_time_limit(nsbox_policy_t *p)
{
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .output_limit = 64 };
	struct nsbox_exec_opts o = { .struct_size = sizeof(o), .repl = true, .timeout = 0.5 };
	struct nsbox_event ev = { .struct_size = sizeof(ev) };
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	nsbox_result_t *r = NULL;
	uint64_t total = 0;
	double left;

	if (nsbox_session_new(p, &so, &s, &e) < 0 ||
	    nsbox_session_add_tool(s, "slow", NULL, NULL, slow_tool, NULL, &e) < 0 ||
	    nsbox_session_add_tool(s, "ask", NULL, NULL, NULL, NULL, &e) < 0) {
		ok(0, "tool time: session_new (%s)", emsg(e));
		clear(&e);
		nsbox_session_free(s);
		return;
	}
	slow_sess = s;
	CHECK(nsbox_exec_time_left(s) == -1 && nsbox_exec_time_left(NULL) == -1, "time_left with no exec: -1");

	/* Blocking: a sync callback can't be interrupted; the exec fails when
	 * it returns, and the late value never reaches the code. */
	CHECK(nsbox_exec(s, "got = slow()\ngot", &o, &r, &e) == 0, "nsbox_exec with a slow tool (%s)", emsg(e));
	clear(&e);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT, "a tool past the limit: NSBOX_TIME_LIMIT (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	CHECK(slow_left > 0.3 && slow_left <= 0.5, "nsbox_exec_time_left in the callback: %.3f", slow_left);
	nsbox_result_free(r);
	r = NULL;
	CHECK(!strcmp(value_of(s, "'got' in globals()"), "false"), "the late value did not reach the code");
	CHECK(!strcmp(value_of(s, "'alive'"), "\"alive\""), "the session survives a tool past the limit");
	/* Code that swallows the failure still ends past its limit. */
	r = run(s, "try:\n    slow()\nexcept BaseException:\n    pass\n'finished'", 0.5);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT, "a swallowed late tool: NSBOX_TIME_LIMIT (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	r = NULL;

	/* Event API: the deadline passes with the call outstanding. */
	CHECK(nsbox_exec_start(s, "got = ask()\ngot", &o, &e) == 0, "exec_start (%s)", emsg(e));
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_TOOL_CALL), "the call");
	left = nsbox_exec_time_left(s);
	CHECK(left > 0 && left <= 0.5, "nsbox_exec_time_left during an event exec: %.3f", left);
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE at the deadline with the call unanswered");
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT, "NSBOX_TIME_LIMIT with a call outstanding (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	r = NULL;
	CHECK(nsbox_exec_answer(s, ev.call_id, "1", NULL, &e) == -EINVAL, "a late answer: -EINVAL (%s)", emsg(e));
	clear(&e);
	CHECK(!strcmp(value_of(s, "'got' in globals()"), "false"), "no value reached the code");

	/* Event API: the host answers after the deadline, before advancing. */
	CHECK(nsbox_exec_start(s, "got = ask()\ngot", &o, &e) == 0, "exec_start (%s)", emsg(e));
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_TOOL_CALL), "the call");
	usleep(700000);
	CHECK(nsbox_exec_time_left(s) == 0, "time_left past the deadline: 0");
	CHECK(nsbox_exec_answer(s, ev.call_id, "1", NULL, &e) == 0, "answer past the deadline (%s)", emsg(e));
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE");
	r = take_result(s);
	CHECK(r && nsbox_result_status(r) == NSBOX_TIME_LIMIT, "an answer past the deadline: NSBOX_TIME_LIMIT (%s)",
	      r ? nsbox_result_error_message(r) : "none");
	nsbox_result_free(r);
	r = NULL;
	CHECK(!strcmp(value_of(s, "'got' in globals()"), "false"), "the late answer did not reach the code");
	o.timeout = 0;
	CHECK(nsbox_exec_start(s, "1", &o, &e) == 0 && nsbox_exec_time_left(s) == -1, "time_left with no limit: -1");
	clear(&e);
	CHECK(next_event(s, &ev, NSBOX_EVENT_DONE), "DONE");
	nsbox_result_free(take_result(s));

	/* nsbox_result_truncated, with a 64-byte output limit. */
	r = run(s, "import sys\nprint('x' * 1000)\nprint('e', file=sys.stderr)", 0);
	CHECK(r && nsbox_result_truncated(r, 1, &total) && total == 1001, "stdout truncated, 1001 bytes written (%llu)",
	      (unsigned long long)total);
	CHECK(r && !nsbox_result_truncated(r, 2, &total) && total == 2, "stderr not truncated (%llu)",
	      (unsigned long long)total);
	CHECK(!nsbox_result_truncated(r, 3, NULL) && !nsbox_result_truncated(NULL, 1, &total) && total == 0,
	      "nsbox_result_truncated: a bad stream or NULL is false");
	nsbox_result_free(r);
	slow_sess = NULL;
	nsbox_session_free(s);
}

#define N_EV 8
#define N_CALLS 4

struct ev_sess {
	nsbox_session_t *s;
	char out[256];
	size_t out_len;
	nsbox_result_t *r;
	int calls;
};

struct late_call {
	int sess;
	uint64_t id;
	long long arg;
	int round;
};

/* One thread, N_EV sessions, poll() over their fds.  Each exec makes
 * N_CALLS tool calls with output between them; every call is answered a
 * round late, newest first, after the other sessions have progressed. */
static void test_events_many(nsbox_policy_t *p)
{
	struct nsbox_exec_opts o = { .struct_size = sizeof(o), .repl = true };
	struct ev_sess ss[N_EV] = { 0 };
	struct late_call late[N_EV];
	int n_late = 0, done = 0, round = 0, max_late = 0;
	bool ok_all = true;
	nsbox_error_t *e = NULL;

	for (int i = 0; i < N_EV; i++) {
		char code[512];

		ss[i].s = event_session(p, "many");
		if (!ss[i].s) {
			ok_all = false;
			continue;
		}
		snprintf(code, sizeof(code),
			 "t = 0\nfor k in range(%d):\n    print('s%d', k, flush=True)\n    t += ask(%d * 100 + k)\nt",
			 N_CALLS, i, i);
		if (nsbox_exec_start(ss[i].s, code, &o, &e) < 0) {
			printf("# start %d: %s\n", i, emsg(e));
			clear(&e);
			ok_all = false;
			nsbox_session_free(ss[i].s);
			ss[i].s = NULL;
		}
	}
	CHECK(ok_all, "%d sessions, %d event execs started", N_EV, N_EV);
	for (int i = 0; i < N_EV; i++)
		done += !ss[i].s;
	while (done < N_EV && round < 2000) {
		struct pollfd pfd[N_EV];
		int k;

		round++;
		for (int i = 0; i < N_EV; i++)
			pfd[i] = (struct pollfd){ ss[i].s && !ss[i].r ? nsbox_session_fd(ss[i].s) : -1, POLLIN, 0 };
		k = poll(pfd, N_EV, n_late ? 20 : 10000);
		if (k == 0 && !n_late) {
			printf("# no session fd became readable in 10 s\n");
			break;
		}
		for (int i = 0; i < N_EV; i++) {
			struct nsbox_event ev = { .struct_size = sizeof(ev) };

			if (!(pfd[i].revents & POLLIN))
				continue;
			while ((k = nsbox_exec_advance(ss[i].s, &ev, &e)) > 0) {
				if (ev.kind == NSBOX_EVENT_OUTPUT && ss[i].out_len + ev.len < sizeof(ss[i].out)) {
					memcpy(ss[i].out + ss[i].out_len, ev.data, ev.len);
					ss[i].out_len += ev.len;
				} else if (ev.kind == NSBOX_EVENT_TOOL_CALL && n_late < N_EV) {
					late[n_late++] = (struct late_call){ i, ev.call_id, atoll(ev.args_json + 9),
									     round };
					ss[i].calls++;
				} else if (ev.kind == NSBOX_EVENT_DONE) {
					ss[i].r = take_result(ss[i].s);
					done++;
					break;
				}
			}
			if (k < 0) {
				printf("# advance %d: %s\n", i, emsg(e));
				clear(&e);
				ok_all = false;
				ss[i].r = NULL;
				done++;
			}
		}
		/* Answer the calls of earlier rounds, newest first. */
		for (int j = n_late - 1; j >= 0; j--) {
			char ans[32];

			if (late[j].round == round)
				continue;
			if (n_late > max_late)
				max_late = n_late;
			snprintf(ans, sizeof(ans), "%lld", late[j].arg);
			if (nsbox_exec_answer(ss[late[j].sess].s, late[j].id, ans, NULL, &e) < 0) {
				printf("# answer: %s\n", emsg(e));
				clear(&e);
				ok_all = false;
			}
			late[j] = late[--n_late];
		}
	}
	CHECK(ok_all && done == N_EV, "all %d execs ended (%d rounds, up to %d calls waiting at once)", N_EV, round,
	      max_late);
	for (int i = 0; i < N_EV; i++) {
		char want_out[128] = "", want_val[32];
		size_t n = 0;

		for (int k = 0; k < N_CALLS; k++)
			n += (size_t)snprintf(want_out + n, sizeof(want_out) - n, "s%d %d\n", i, k);
		snprintf(want_val, sizeof(want_val), "%d", N_CALLS * 100 * i + N_CALLS * (N_CALLS - 1) / 2);
		CHECK(ss[i].r && nsbox_result_status(ss[i].r) == NSBOX_OK &&
			      !strcmp(nsbox_result_value(ss[i].r), want_val) && ss[i].calls == N_CALLS &&
			      ss[i].out_len == n && !memcmp(ss[i].out, want_out, n),
		      "session %d: value %s (want %s), %d calls, output as events", i,
		      ss[i].r ? nsbox_result_value(ss[i].r) : "none", want_val, ss[i].calls);
		nsbox_result_free(ss[i].r);
		nsbox_session_free(ss[i].s);
	}
}

/* ---- a multithreaded host ---- */

struct worker {
	nsbox_policy_t *p;
	int id;
	int good;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (int round = 0; round < 2; round++) {
		nsbox_session_t *s = NULL;
		nsbox_error_t *e = NULL;

		if (nsbox_session_new(w->p, NULL, &s, &e) < 0) {
			printf("# worker %d: %s\n", w->id, emsg(e));
			nsbox_error_free(e);
			continue;
		}
		if (nsbox_session_add_tool(s, "calc", calc_schema, NULL, calc, NULL, &e) < 0) {
			nsbox_error_free(e);
			nsbox_session_free(s);
			continue;
		}
		for (int i = 0; i < 10; i++) {
			char code[128], want[32];

			snprintf(code, sizeof(code), "calc(%d, %d, '*') + %d", w->id, i, round);
			snprintf(want, sizeof(want), "%d", w->id * i + round);
			if (!strcmp(value_of(s, code), want))
				w->good++;
		}
		nsbox_session_free(s);
	}
	return NULL;
}

static void test_threads(nsbox_policy_t *p)
{
	struct worker w[4];
	pthread_t t[4];
	int good = 0;

	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .p = p, .id = i + 1 };
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		good += w[i].good;
	}
	CHECK(good == 4 * 2 * 10, "4 threads x 2 sessions x 10 execs with tool calls at once: %d/80 right", good);
}

/* A forked child must not reuse its parent's helper; it gets its own. */
static void test_fork(nsbox_policy_t *p)
{
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	pid_t pid;
	int st = -1;

	if (nsbox_session_new(p, NULL, &s, &e) < 0) {
		ok(0, "fork: session_new (%s)", emsg(e));
		clear(&e);
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		nsbox_session_t *c = NULL;
		nsbox_result_t *r = NULL;
		int rc = 1;

		/* The parent's session is not ours: refused, and freeing it
		 * must leave the parent's sandbox alone. */
		nsbox_error_t *ce = NULL;
		const char *v = "";

		if (nsbox_exec(s, "1", NULL, &r, NULL) != -ENOTCONN)
			printf("# child: the parent's session was usable\n");
		else if (nsbox_session_new(p, NULL, &c, &ce) < 0)
			printf("# child: session_new: %s\n", emsg(ce));
		else if (strcmp((v = value_of(c, "6*7")), "42"))
			printf("# child: 6*7 is %s\n", v);
		else
			rc = 0;
		nsbox_error_free(ce);
		nsbox_result_free(r);
		fflush(stdout);
		nsbox_session_free(c);
		nsbox_session_free(s);
		_exit(rc);
	}
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a forked child starts its own helper and session");
	CHECK(!strcmp(value_of(s, "'parent ok'"), "\"parent ok\""), "the parent's session is untouched by the child");
	nsbox_session_free(s);
}

static void test_misuse(nsbox_policy_t *p)
{
	struct nsbox_session_opts bad = { .struct_size = 0 };
	struct nsbox_exec_opts badx = { .struct_size = 0 };
	nsbox_session_t *s = NULL;
	nsbox_result_t *r = NULL;
	nsbox_error_t *e = NULL;

	CHECK(nsbox_session_new(NULL, NULL, &s, &e) == -EINVAL && !s, "session_new without a policy: -EINVAL");
	clear(&e);
	CHECK(nsbox_session_new(p, NULL, NULL, &e) == -EINVAL, "session_new without out: -EINVAL");
	clear(&e);
	CHECK(nsbox_session_new(p, &bad, &s, &e) == -EINVAL && !s, "session_new with struct_size 0: -EINVAL (%s)",
	      emsg(e));
	clear(&e);
	CHECK(nsbox_exec(NULL, "1", NULL, &r, &e) == -EINVAL && !r, "exec on NULL: -EINVAL");
	clear(&e);
	if (nsbox_session_new(p, NULL, &s, &e) == 0) {
		CHECK(nsbox_exec(s, NULL, NULL, &r, &e) == -EINVAL, "exec NULL code: -EINVAL");
		clear(&e);
		CHECK(nsbox_exec(s, "1", &badx, &r, &e) == -EINVAL, "exec with struct_size 0: -EINVAL");
		clear(&e);
		CHECK(nsbox_exec(s, "\xff\xfe", NULL, &r, &e) == -EINVAL && !r, "exec of invalid UTF-8: -EINVAL (%s)",
		      emsg(e));
		clear(&e);
		/* The deadline is in nanoseconds: an infinite or huge timeout
		 * wrapped it into the past, and the code was killed at once. */
		for (int i = 0; i < 2; i++) {
			struct nsbox_exec_opts big = { .struct_size = sizeof(big), .timeout = i ? 1e300 : INFINITY };

			CHECK(nsbox_exec(s, "1", &big, &r, &e) == -EINVAL && !r && strstr(emsg(e), "timeout"),
			      "exec with timeout %g: -EINVAL (%s)", big.timeout, emsg(e));
			clear(&e);
			CHECK(nsbox_exec_start(s, "1", &big, &e) == -EINVAL && strstr(emsg(e), "out of range"),
			      "exec_start with timeout %g: -EINVAL (%s)", big.timeout, emsg(e));
			clear(&e);
		}
		CHECK(!strcmp(value_of(s, "'fine'"), "\"fine\""), "the session is fine after misuse");
	}
	nsbox_session_free(s);
}

/* ---- nsbox_run ---- */

struct warnings {
	int n;
	char first[400];
};

static void collect_warning(void *ud, const char *msg)
{
	struct warnings *w = ud;

	if (w->n++ == 0)
		snprintf(w->first, sizeof(w->first), "%s", msg);
}

/* Run argv with stdout and stderr into a pipe; the output in out. */
static int run_cmd(const nsbox_policy_t *p, char *const argv[], bool in_process, struct nsbox_run_status *st, char *out,
		   size_t out_size, struct warnings *w, nsbox_error_t **e)
{
	int pfd[2], devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct nsbox_run_opts o = {
		.struct_size = sizeof(o), .in_process = in_process, .warn = collect_warning, .warn_userdata = w
	};
	size_t n = 0;
	ssize_t k;
	int r;

	if (devnull < 0 || pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	o.stdio = (const int[3]){ devnull, pfd[1], pfd[1] };
	memset(st, 0, sizeof(*st));
	st->struct_size = sizeof(*st);
	r = nsbox_run(p, argv, &o, st, e);
	close(pfd[1]);
	close(devnull);
	while (n + 1 < out_size && (k = read(pfd[0], out + n, out_size - n - 1)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(pfd[0]);
	return r;
}

static void *raise_term_later(void *arg)
{
	(void)arg;
	usleep(400 * 1000);
	kill(getpid(), SIGTERM);
	return NULL;
}

/* valgrind has no clone3: the in-process launch can't run under it (the
 * helper, a separate process, is not traced). */
static bool under_valgrind(void)
{
	const char *pre = getenv("LD_PRELOAD");

	return pre && strstr(pre, "vgpreload");
}

static void test_run(nsbox_policy_t *p, bool in_process)
{
	const char *tag = in_process ? "run in-process" : "run via helper";
	char *sh_exit[] = { "/bin/sh", "-c", "echo out; echo err >&2; exit 7", NULL };
	char *nosuch[] = { "/no/such/command", NULL };
	char *killself[] = { "/bin/sh", "-c", "kill -TERM $$", NULL };
	char *sleeper[] = { "/bin/sleep", "30", NULL };
	char *truecmd[] = { "/bin/true", NULL };
	struct nsbox_run_status st;
	struct warnings w = { 0 };
	nsbox_policy_t *q = NULL;
	nsbox_error_t *e = NULL;
	char out[256], mode[16];
	int r;

	if (in_process && under_valgrind()) {
		ok(1, "# SKIP %s: valgrind does not emulate clone3 (run by make check-unit)", tag);
		return;
	}
	r = run_cmd(p, sh_exit, in_process, &st, out, sizeof(out), &w, &e);
	CHECK(r == 0 && st.exited && st.exit_status == 7 && st.exit_code == 7 && !strcmp(out, "out\nerr\n"),
	      "%s: exit status 7, stdout and stderr into the given fds (%d, %s, %zu bytes)", tag, r, emsg(e),
	      strlen(out));
	CHECK(st.wall > 0 && st.peak_memory > 0 && st.cgroup_mode[0], "%s: wall %.4f s, peak %llu, cgroups %s", tag,
	      st.wall, (unsigned long long)st.peak_memory, st.cgroup_mode);
	snprintf(mode, sizeof(mode), "%s", st.cgroup_mode);
	clear(&e);
	r = run_cmd(p, nosuch, in_process, &st, out, sizeof(out), &w, &e);
	CHECK(r == 0 && st.exec_errno == ENOENT && st.exit_code == 127 && !strcmp(st.cgroup_mode, mode),
	      "%s: a missing command is 127, ENOENT (%d %d), cgroups %s", tag, st.exec_errno, st.exit_code,
	      st.cgroup_mode);
	clear(&e);
	r = run_cmd(p, killself, in_process, &st, out, sizeof(out), &w, &e);
	CHECK(r == 0 && !st.exited && st.term_signal == SIGTERM && st.exit_code == 128 + SIGTERM,
	      "%s: killed by SIGTERM is 143 (%d)", tag, st.exit_code);
	clear(&e);

	/* The time limit holds whichever way the sandbox was made. */
	if (nsbox_policy_new(NULL, &q, &e) == 0 && nsbox_policy_set_time_limit(q, 0.5, &e) == 0) {
		r = run_cmd(q, sleeper, in_process, &st, out, sizeof(out), &w, &e);
		CHECK(r == 0 && st.time_limit && st.exit_code == 124 && st.wall < 10,
		      "%s: sleep 30 under TimeLimit=0.5 is killed: 124 after %.2f s", tag, st.wall);
	} else {
		CHECK(0, "%s: time-limit policy (%s)", tag, emsg(e));
	}
	nsbox_policy_free(q);
	q = NULL;
	clear(&e);

	/* Cgroups=off is an explicit choice: its rlimit fallbacks are silent. */
	if (nsbox_policy_new(NULL, &q, &e) == 0 && nsbox_policy_set(q, "Limits", "Cgroups", "off", &e) == 0 &&
	    nsbox_policy_set_pids(q, 50, &e) == 0) {
		memset(&w, 0, sizeof(w));
		r = run_cmd(q, truecmd, in_process, &st, out, sizeof(out), &w, &e);
		CHECK(r == 0 && st.exit_code == 0 && w.n == 0, "%s: Cgroups=off runs without a warning (%d: %s)", tag,
		      w.n, w.n ? w.first : "");
	} else {
		CHECK(0, "%s: Cgroups=off policy (%s)", tag, emsg(e));
	}
	nsbox_policy_free(q);
	q = NULL;
	clear(&e);

	/* Warnings come back through the callback, from the helper too: a
	 * host where the pids cgroup cannot be used falls back with one. */
	{
		struct nsbox_host_info h = { .struct_size = sizeof(h) };

		if (nsbox_host_info(&h, NULL) < 0 || h.pids.enforced) {
			ok(1, "# SKIP %s: the pids cgroup is usable here, no fallback warning to relay", tag);
		} else if (nsbox_policy_new(NULL, &q, &e) == 0 && nsbox_policy_set_pids(q, 50, &e) == 0) {
			memset(&w, 0, sizeof(w));
			r = run_cmd(q, truecmd, in_process, &st, out, sizeof(out), &w, &e);
			CHECK(r == 0 && st.exit_code == 0 && w.n >= 1 && strstr(w.first, "not enforced by a cgroup"),
			      "%s: a cgroup fallback warns through the callback (%d: %s)", tag, w.n, w.first);
		} else {
			CHECK(0, "%s: pids policy (%s)", tag, emsg(e));
		}
	}
	nsbox_policy_free(q);
	q = NULL;
	clear(&e);

	/* Signals to the caller reach the command. */
	{
		struct nsbox_run_opts o = { .struct_size = sizeof(o),
					    .in_process = in_process,
					    .forward_signals = true };
		struct sigaction now;
		pthread_t t;

		memset(&st, 0, sizeof(st));
		st.struct_size = sizeof(st);
		if (!in_process && pthread_create(&t, NULL, raise_term_later, NULL) == 0) {
			r = nsbox_run(p, sleeper, &o, &st, &e);
			pthread_join(t, NULL);
			sigaction(SIGTERM, NULL, &now);
			CHECK(r == 0 && st.term_signal == SIGTERM && st.exit_code == 143 && now.sa_handler == SIG_DFL,
			      "%s: SIGTERM to the host is forwarded (%d, %s), the handler restored", tag, st.exit_code,
			      emsg(e));
			clear(&e);
		}
	}

	/* ... also when they come while the sandbox is being built, each run
	 * in a fresh process (forward_one).  Our own path from readlink:
	 * under valgrind an exec of /proc/self/exe would start valgrind's. */
	for (int k = 0; k < 3; k++) {
		static const char *const delays[] = { "0", "5000", "50000" };
		char self[4096];
		ssize_t sn = readlink("/proc/self/exe", self, sizeof(self) - 1);
		int ws = -1;
		pid_t c = sn > 0 ? fork() : -1;

		if (c == 0) {
			self[sn] = '\0';
			execl(self, "test-api", "--forward", in_process ? "in-process" : "helper", delays[k],
			      (char *)NULL);
			_exit(127);
		}
		if (c > 0)
			while (waitpid(c, &ws, 0) < 0 && errno == EINTR)
				;
		CHECK(c > 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 128 + SIGHUP,
		      "%s: SIGHUP %s us after the run's first child appears is forwarded: 129 (wait status 0x%x)", tag,
		      delays[k], ws);
	}

	/* A policy that can't work is refused before anything starts. */
	if (nsbox_policy_new(NULL, &q, &e) == 0 && nsbox_policy_set_workspace(q, "/tmp", &e) == 0 &&
	    nsbox_policy_add_bind(q, "/usr/share", "/workspace/share", false, &e) == 0) {
		CHECK(nsbox_policy_check(q, &e) == -EINVAL, "policy_check: a bind inside the workspace (%s)", emsg(e));
		clear(&e);
		CHECK(run_cmd(q, truecmd, in_process, &st, out, sizeof(out), &w, &e) == -EINVAL,
		      "%s: refuses that policy (%s)", tag, emsg(e));
	} else {
		CHECK(0, "%s: bad-bind policy (%s)", tag, emsg(e));
	}
	nsbox_policy_free(q);
	clear(&e);
	CHECK(nsbox_run(p, (char *[]){ NULL }, NULL, &st, &e) == -EINVAL, "%s: empty argv: -EINVAL", tag);
	clear(&e);
	CHECK(nsbox_run(NULL, truecmd, NULL, &st, &e) == -EINVAL, "%s: NULL policy: -EINVAL", tag);
	clear(&e);
}

/* Review findings: a bad request must never take the helper (and every
 * other session of the process) down, nor close the caller's own fds. */
/* ---- nsbox_run_opts.net_audit: the egress audit as a callback ---- */

/* An HTTP upstream on the host's 127.0.0.2 (named by an explicit rule, so
 * the proxy may reach it), in a child process: answers one request. */
struct upstream {
	int fd, port, served;
};

static void upstream_serve(struct upstream *u)
{
	struct pollfd pf = { u->fd, POLLIN, 0 };
	char buf[4096];
	size_t have = 0;
	int c;

	if (poll(&pf, 1, 30000) != 1 || (c = accept4(u->fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		return;
	while (have < sizeof(buf) - 1) {
		ssize_t n = read(c, buf + have, sizeof(buf) - 1 - have);

		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		if (strstr(buf, "\r\n\r\n")) {
			static const char reply[] = "HTTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\nupstream\n";

			if (write(c, reply, sizeof(reply) - 1) == (ssize_t)sizeof(reply) - 1)
				u->served++;
			break;
		}
	}
	close(c);
}

struct audit_seen {
	pthread_t caller;
	int n, other_thread, allowed, denied_http, denied_dns, bad_len;
	char denied_reason[128];
};

static void on_audit(void *ud, const char *rec, size_t len)
{
	struct audit_seen *a = ud;
	const char *r;

	a->n++;
	if (!pthread_equal(pthread_self(), a->caller))
		a->other_thread++;
	if (strlen(rec) != len || rec[0] != '{' || rec[len - 1] != '}')
		a->bad_len++;
	if (strstr(rec, "\"kind\":\"http\"") && strstr(rec, "\"host\":\"127.0.0.2\"") &&
	    strstr(rec, "\"decision\":\"allow\""))
		a->allowed++;
	if (strstr(rec, "\"host\":\"denied.example\"") && strstr(rec, "\"decision\":\"deny\"")) {
		if (strstr(rec, "\"kind\":\"dns\""))
			a->denied_dns++;
		if (strstr(rec, "\"kind\":\"http\"")) {
			a->denied_http++;
			if ((r = strstr(rec, "\"reason\":\"")))
				snprintf(a->denied_reason, sizeof(a->denied_reason), "%.*s",
					 (int)strcspn(r + 10, "\""), r + 10);
		}
	}
}

static void test_run_net_audit(bool in_process)
{
	const char *tag = in_process ? "run net_audit in-process" : "run net_audit via helper";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002) };
	socklen_t sl = sizeof(sa);
	struct upstream u = { .fd = -1 };
	struct audit_seen a = { .caller = pthread_self() };
	struct nsbox_run_status st = { .struct_size = sizeof(st) };
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	pid_t up;
	char rule[64], code[1024];
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC), logp[2] = { -1, -1 }, log_fd, r, ws = 0;
	char lines[8192];
	size_t have = 0;
	ssize_t k;

	u.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (devnull < 0 || u.fd < 0 || bind(u.fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(u.fd, 4) < 0 ||
	    getsockname(u.fd, (struct sockaddr *)&sa, &sl) < 0 || pipe2(logp, O_CLOEXEC) < 0) {
		ok(0, "%s: upstream on 127.0.0.2 (%s)", tag, strerror(errno));
		return;
	}
	u.port = ntohs(sa.sin_port);
	log_fd = logp[1];
	snprintf(rule, sizeof(rule), "127.0.0.2:%d", u.port);
	CHECK(nsbox_policy_new(NULL, &p, &e) == 0 && nsbox_policy_set(p, "Network", "Allow", rule, &e) == 0,
	      "%s: policy with Allow=%s (%s)", tag, rule, emsg(e));
	clear(&e);
	/* Inside: the allowed fetch through HTTP_PROXY, and a name off the
	 * list at the DNS responder and at the proxy (403). */
	snprintf(code, sizeof(code),
		 "import socket, sys, urllib.request, urllib.error\n"
		 "b = urllib.request.urlopen('http://127.0.0.2:%d/', timeout=10).read()\n"
		 "try:\n    socket.getaddrinfo('denied.example', 80)\n    sys.exit(3)\n"
		 "except socket.gaierror:\n    pass\n"
		 "try:\n    urllib.request.urlopen('http://denied.example/', timeout=10)\n    sys.exit(4)\n"
		 "except urllib.error.HTTPError as e:\n    sys.exit(0 if b == b'upstream\\n' and e.code == 403 else 5)\n",
		 u.port);
	/* A process, not a thread: in_process wants a single-threaded caller.
	 * Flushed first: the child must not write our buffered TAP lines again
	 * (valgrind's exit does flush stdio). */
	fflush(NULL);
	up = fork();
	if (up == 0) {
		upstream_serve(&u);
		_exit(u.served == 1 ? 0 : 1);
	}
	{
		char *argv[] = { "/usr/bin/python3.11", "-c", code, NULL };
		struct nsbox_run_opts o = { .struct_size = sizeof(o),
					    .stdio = (const int[3]){ devnull, devnull, devnull },
					    .in_process = in_process,
					    .net_log_fd = &log_fd,
					    .net_audit = on_audit,
					    .net_audit_userdata = &a };

		r = nsbox_run(p, argv, &o, &st, &e);
	}
	/* The upstream ends after one request; if none came, the shutdown
	 * ends its wait. */
	shutdown(u.fd, SHUT_RDWR);
	while (up > 0 && waitpid(up, &ws, 0) < 0 && errno == EINTR)
		;
	u.served = up > 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
	close(u.fd);
	close(logp[1]);
	while (have + 1 < sizeof(lines) && (k = read(logp[0], lines + have, sizeof(lines) - 1 - have)) > 0)
		have += (size_t)k;
	lines[have] = '\0';
	close(logp[0]);
	CHECK(r == 0 && st.exit_code == 0, "%s: the command fetched and was refused as expected (r %d, exit %d, %s)",
	      tag, r, st.exit_code, emsg(e));
	clear(&e);
	CHECK(u.served == 1, "%s: the upstream served the allowed request (%d)", tag, u.served);
	CHECK(a.allowed == 1, "%s: one allow record for the fetch (%d)", tag, a.allowed);
	CHECK(a.denied_dns >= 1 && a.denied_http == 1, "%s: deny records at the DNS responder (%d) and the proxy (%d)", tag,
	      a.denied_dns, a.denied_http);
	CHECK(!strcmp(a.denied_reason, "name not on the allowlist"), "%s: the denial's reason (%s)", tag,
	      a.denied_reason);
	CHECK(a.other_thread == 0 && a.bad_len == 0, "%s: every record on the calling thread, whole (%d, %d)", tag,
	      a.other_thread, a.bad_len);
	{
		/* net_log_fd got the same records as the callback. */
		int n = 0;

		for (char *l = lines; (l = strchr(l, '\n')); l++)
			n++;
		CHECK(n == a.n && a.n >= 3, "%s: net_log_fd has as many lines as the callback got (%d, %d)", tag, n,
		      a.n);
	}
	nsbox_policy_free(p);
	close(devnull);
}

static void test_run_bad_requests(nsbox_policy_t *p)
{
	char *truecmd[] = { "/bin/true", NULL };
	struct nsbox_session_opts so = { .struct_size = sizeof(so) };
	struct nsbox_run_status st = { .struct_size = sizeof(st) };
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	int r;

	if (nsbox_session_new(p, &so, &s, &e) < 0) {
		CHECK(0, "bad requests: a session to keep alive (%s)", emsg(e));
		clear(&e);
		return;
	}
	/* controlling_tty: a pty made for the run, never anything else. */
	{
		int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
		struct nsbox_run_opts o = { .struct_size = sizeof(o),
					    .stdio = (const int[3]){ nul, nul, nul },
					    .controlling_tty = true };

		r = nsbox_run(p, truecmd, &o, &st, &e);
		CHECK(r == -EINVAL && strstr(emsg(e), "needs in_process"), "controlling_tty with the helper: %d (%s)",
		      r, emsg(e));
		clear(&e);
		o.in_process = true;
		r = nsbox_run(p, truecmd, &o, &st, &e);
		CHECK(r == -EINVAL && strstr(emsg(e), "not a terminal"), "controlling_tty on /dev/null: %d (%s)", r,
		      emsg(e));
		clear(&e);
		close(nul);
	}
	for (int in_process = 0; in_process < 2; in_process++) {
		struct nsbox_run_opts o = { .struct_size = sizeof(o),
					    .stdio = (const int[3]){ 0, 1, 987 },
					    .in_process = in_process };

		if (in_process && under_valgrind())
			continue;
		r = nsbox_run(p, truecmd, &o, &st, &e);
		CHECK(r == -EBADF && fcntl(1, F_GETFD) >= 0 && fcntl(2, F_GETFD) >= 0,
		      "run %s with a closed stdio fd: -EBADF, our stdout/stderr intact (%s)",
		      in_process ? "in-process" : "via helper", emsg(e));
		clear(&e);
	}
	{
		/* Over the helper's message size: E2BIG up front. */
		enum {
			N = 2000
		};
		char *big[N + 2];
		char arg[128];

		memset(arg, 'a', sizeof(arg) - 1);
		arg[sizeof(arg) - 1] = '\0';
		big[0] = "/bin/true";
		for (int i = 1; i <= N; i++)
			big[i] = arg;
		big[N + 1] = NULL;
		r = nsbox_run(p, big, NULL, &st, &e);
		CHECK(r == -E2BIG, "run via helper with 250 KB of argv: -E2BIG (%s)", emsg(e));
		clear(&e);
	}
	{
		/* A daemon with stdin closed: the command gets /dev/null there. */
		int saved = fcntl(0, F_DUPFD_CLOEXEC, 3);
		char *readin[] = { "/bin/sh", "-c", "test -c /proc/self/fd/0 && ! read x", NULL };

		close(0);
		r = nsbox_run(p, readin, NULL, &st, &e);
		if (saved >= 0) {
			dup2(saved, 0);
			close(saved);
		}
		CHECK(r == 0 && st.exit_code == 0, "run via helper with our fd 0 closed: stdin is /dev/null (%d, %s)",
		      st.exit_code, emsg(e));
		clear(&e);
	}
	CHECK(!strcmp(value_of(s, "6*7"), "42"), "the other session survived every bad request");
	nsbox_session_free(s);
}

/* A host in a comma-decimal locale: numbers still cross as JSON and as
 * policy values.  Needs localedef and the de_DE source (package locales);
 * skipped without them. */
static void test_comma_locale(nsbox_policy_t *p)
{
	char dir[] = "/tmp/nsbox-test-locale-XXXXXX", cmd[256];
	struct nsbox_exec_opts eo = { .struct_size = sizeof(eo), .timeout = 1.5 };
	struct nsbox_session_opts so = { .struct_size = sizeof(so) };
	nsbox_policy_t *q = NULL;
	nsbox_session_t *s = NULL;
	nsbox_result_t *r = NULL;
	nsbox_error_t *e = NULL;
	char *text;

	if (!mkdtemp(dir) || access("/usr/share/i18n/locales/de_DE", R_OK) != 0) {
		ok(1, "# SKIP comma-decimal locale: no de_DE locale source (package locales)");
		rmdir(dir);
		return;
	}
	snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
	setenv("LOCPATH", dir, 1);
	if (system(cmd) != 0 || !setlocale(LC_ALL, "de_DE.UTF-8")) {
		ok(1, "# SKIP comma-decimal locale: localedef failed");
		goto out;
	}
	CHECK(nsbox_policy_new(NULL, &q, &e) == 0 && nsbox_policy_set_cpus(q, 1.5, &e) == 0 &&
		      nsbox_policy_set(q, "Limits", "TimeLimit", "2.5", &e) == 0,
	      "de_DE: policy values 1.5 and \"2.5\" accepted (%s)", emsg(e));
	clear(&e);
	text = q ? nsbox_policy_to_string(q) : NULL;
	CHECK(text && strstr(text, "CPUs=1.5") && strstr(text, "TimeLimit=2.5"), "de_DE: the policy prints with dots");
	nsbox_free(text);
	CHECK(nsbox_session_new(q ? q : p, &so, &s, &e) == 0, "de_DE: session (%s)", emsg(e));
	clear(&e);
	if (s) {
		CHECK(nsbox_exec(s, "print(1)", &eo, &r, &e) == 0 && nsbox_result_status(r) == NSBOX_OK,
		      "de_DE: exec with timeout 1.5 (%s)", r ? nsbox_result_error_message(r) ?: "ok" : emsg(e));
		nsbox_result_free(r);
		clear(&e);
	}
	nsbox_session_free(s);
	nsbox_policy_free(q);
out:
	setlocale(LC_ALL, "C");
	unsetenv("LOCPATH");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
}

static void *run_in_process_from_thread(void *arg)
{
	char *truecmd[] = { "/bin/true", NULL };
	struct nsbox_run_opts o = { .struct_size = sizeof(o), .in_process = true };
	struct nsbox_run_status st = { .struct_size = sizeof(st) };
	nsbox_error_t *e = NULL;
	int r = nsbox_run(arg, truecmd, &o, &st, &e);

	CHECK(r == -EINVAL && strstr(emsg(e), "single-threaded"), "in_process from a second thread: -EINVAL (%s)",
	      emsg(e));
	nsbox_error_free(e);
	return NULL;
}

/* Options of 0.2: interactive execs, exit codes, the RESULT JSON, the
 * Python version, spares. */
static void test_session_extras(nsbox_policy_t *p)
{
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .spare = true };
	struct nsbox_exec_opts io = { .struct_size = sizeof(io), .interactive = true, .filename = "<stdin>" };
	struct nsbox_session_info info = { .struct_size = sizeof(info) };
	nsbox_session_t *s = NULL, *s2 = NULL;
	nsbox_result_t *r = NULL;
	nsbox_error_t *e = NULL;
	size_t n;

	CHECK(nsbox_session_new(p, &so, &s, &e) == 0, "spare: first session (%s)", emsg(e));
	clear(&e);
	if (!s)
		return;
	CHECK(nsbox_exec(s, "if True:\n", &io, &r, &e) == 0 && nsbox_result_status(r) == NSBOX_INCOMPLETE,
	      "interactive: an open block is NSBOX_INCOMPLETE");
	nsbox_result_free(r);
	r = NULL;
	clear(&e);
	CHECK(nsbox_exec(s, "6*7\n", &io, &r, &e) == 0 && nsbox_result_status(r) == NSBOX_OK &&
		      !strcmp(nsbox_result_stdout(r, &n), "42\n"),
	      "interactive: an expression is displayed (%zu bytes)", r ? n : 0);
	CHECK(r && strstr(nsbox_result_json(r), "\"stdout_truncated\":false"), "result_json has the RESULT fields");
	nsbox_result_free(r);
	r = NULL;
	clear(&e);
	/* The text is made on demand, once, whichever thread asks first. */
	if (nsbox_exec(s, "{'a': [1, 2.5, None], 'b': 'x'}\n", &io, &r, &e) == 0) {
		pthread_t th[4];
		const char *got[4] = { NULL };

		for (int i = 0; i < 4; i++)
			pthread_create(&th[i], NULL, result_json_thread, r);
		for (int i = 0; i < 4; i++)
			pthread_join(th[i], (void **)&got[i]);
		CHECK(got[0] && got[0] == got[1] && got[1] == got[2] && got[2] == got[3] &&
			      got[0] == nsbox_result_json(r) &&
			      strstr(got[0], "\"stdout\":\"{'a': [1, 2.5, None], 'b': 'x'}\\n\""),
		      "result_json from 4 threads at once: one text (%s)", got[0] ? got[0] : "NULL");
	} else {
		CHECK(0, "exec for result_json threads (%s)", emsg(e));
	}
	nsbox_result_free(r);
	r = NULL;
	clear(&e);
	r = run(s, "import sys; sys.exit(3)", 0);
	CHECK(r && nsbox_result_exit_code(r) == 3 && nsbox_result_status(r) == NSBOX_EXCEPTION,
	      "SystemExit(3): exit code 3");
	nsbox_result_free(r);
	r = run(s, "1/0", 0);
	CHECK(r && nsbox_result_exit_code(r) == 1, "an exception: exit code 1");
	nsbox_result_free(r);
	r = run(s, "None", 0);
	CHECK(r && nsbox_result_exit_code(r) == 0 && !strcmp(nsbox_result_json(NULL), "{}"),
	      "success: exit code 0; result_json(NULL) is {}");
	nsbox_result_free(r);
	CHECK(nsbox_session_info(s, &info, &e) == 0 && !strncmp(info.python, "3.11.", 5) && !strchr(info.python, ' '),
	      "info: python %s", info.python);
	clear(&e);
	/* The spare made after the first session serves the second. */
	CHECK(nsbox_session_new(p, &so, &s2, &e) == 0 && !strcmp(value_of(s2, "1+2"), "3"),
	      "spare: second session works (%s)", emsg(e));
	clear(&e);
	nsbox_session_free(s2);
	nsbox_session_free(s);
}

static int run_one(const char *code, bool cold)
{
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .cold = cold };
	nsbox_policy_t *p = NULL;
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	nsbox_result_t *r = NULL;
	int rc = 1;

	if (nsbox_policy_new(NULL, &p, &e) < 0 || nsbox_session_new(p, &so, &s, &e) < 0 ||
	    nsbox_exec(s, code,
		       &(struct nsbox_exec_opts){ .struct_size = sizeof(struct nsbox_exec_opts), .repl = true }, &r,
		       &e) < 0) {
		fprintf(stderr, "test-api --run: %s\n", emsg(e));
	} else {
		fputs(nsbox_result_stdout(r, NULL), stdout);
		fputs(nsbox_result_stderr(r, NULL), stderr);
		printf("value: %s\n", nsbox_result_value(r));
		if (nsbox_result_traceback(r))
			fputs(nsbox_result_traceback(r), stderr);
		rc = nsbox_result_status(r) == NSBOX_OK ? 0 : 1;
	}
	nsbox_result_free(r);
	nsbox_error_free(e);
	nsbox_session_free(s);
	nsbox_policy_free(p);
	return rc;
}

/* `test-api --forward in-process|helper DELAY_US`: a fresh process (no
 * helper yet; SIGHUP at its default, whatever ours was) runs sleep 30 with
 * forward_signals while a forked watcher sends it SIGHUP DELAY_US after the
 * run's first child appears (the helper, or the sandbox's pid 1 for an
 * in-process run): at 0 and 5 ms the sandbox is still being built.  Exits
 * with the run's exit code (129: the forwarded SIGHUP ended sleep), 1 when
 * nsbox_run failed; killed by SIGHUP if it reached this process. */
static int forward_one(const char *mode, const char *delay)
{
	struct nsbox_run_opts o = { .struct_size = sizeof(o),
				    .in_process = !strcmp(mode, "in-process"),
				    .forward_signals = true };
	struct nsbox_run_status st = { .struct_size = sizeof(st) };
	char *sleeper[] = { "/bin/sleep", "30", NULL };
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	pid_t me = getpid(), w;
	int r = -1;

	signal(SIGHUP, SIG_DFL);
	w = fork();
	if (w == 0) {
		char path[64], buf[512], *q, *end;

		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)me, (int)me);
		for (;;) {
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

			if (fd >= 0)
				close(fd);
			if (n < 0 || getppid() != me)
				_exit(1);
			buf[n] = '\0';
			for (q = buf;; q = end) {
				long c = strtol(q, &end, 10);

				if (end == q)
					break;
				if (c != (long)getpid())
					goto found;
			}
			usleep(200);
		}
found:
		usleep((useconds_t)atol(delay));
		kill(me, SIGHUP);
		_exit(0);
	}
	if (w > 0 && nsbox_policy_new(NULL, &p, &e) == 0)
		r = nsbox_run(p, sleeper, &o, &st, &e);
	if (w > 0)
		waitpid(w, NULL, 0);
	printf("# --forward %s %s: %d, exit code %d, signal %d, %.3f s (%s)\n", mode, delay, r, st.exit_code,
	       st.term_signal, st.wall, emsg(e));
	nsbox_error_free(e);
	nsbox_policy_free(p);
	return r == 0 && st.wall < 20 ? st.exit_code : 1;
}

static bool file_is(const char *path, const char *want)
{
	char buf[256] = { 0 };
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	return n >= 0 && !strcmp(buf, want);
}

/* nsbox_upload_dir / nsbox_download_dir: a tree both ways; the host's
 * symlinks are not followed up, the sandbox's not down, nothing on the
 * host is overwritten, the caps hold. */
static void test_dirs(nsbox_session_t *s)
{
	char top[] = "/tmp/nsbox-test-dirs.XXXXXX", path[256], cmd[600];
	nsbox_error_t *e = NULL;
	struct stat st;
	int k;

	/* valgrind (3.19, Debian 12's) does not know openat2(2), which the
	 * host side needs; every kernel nsbox runs on has it.  Only there is
	 * this skipped: anywhere else ENOSYS fails below. */
	k = (int)syscall(SYS_openat2, AT_FDCWD, "/", &(struct open_how){ .flags = O_RDONLY | O_CLOEXEC },
			 sizeof(struct open_how));
	if (k >= 0) {
		close(k);
	} else if (errno == ENOSYS && getenv("NSBOX_UNDER_VALGRIND")) {
		ok(1, "dirs: # SKIP openat2(2) is unknown to valgrind");
		return;
	}
	if (!mkdtemp(top)) {
		ok(0, "dirs: mkdtemp");
		return;
	}
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; mkdir -p up/sub/deep; printf 1 > up/a; printf 2 > up/sub/b; printf 3 > up/sub/deep/c; "
		 "ln -s /etc/passwd up/link; mkfifo up/fifo; mkdir down; ln -s /etc down/planted",
		 top);
	CHECK(system(cmd) == 0, "dirs: a host tree");
	snprintf(path, sizeof(path), "%s/up", top);
	k = nsbox_upload_dir(s, path, "/tmp/up", &e);
	CHECK(k == 3, "dirs: upload_dir copies 3 files, not the symlink or fifo (%d, %s)", k, emsg(e));
	clear(&e);
	CHECK(!strcmp(value_of(s, "import os; sorted(os.listdir('/tmp/up')) + sorted(os.listdir('/tmp/up/sub'))"),
		      "[\"a\",\"sub\",\"b\",\"deep\"]"),
	      "dirs: the tree inside (%s)", value_of(s, "sorted(os.listdir('/tmp/up'))"));
	value_of(s,
		 "os.symlink('/etc/shadow', '/tmp/up/evil'); os.mkfifo('/tmp/up/sub/ff'); "
		 "os.symlink('/etc', '/tmp/up/planted'); open('/tmp/up/x\\ny', 'w').write('ctl')");
	snprintf(path, sizeof(path), "%s/down", top);
	k = nsbox_download_dir(s, "/tmp/up", path, 0, 0, &e);
	CHECK(k == 3, "dirs: download_dir copies the 3 files back (%d, %s)", k, emsg(e));
	clear(&e);
	snprintf(path, sizeof(path), "%s/down/sub/deep/c", top);
	CHECK(file_is(path, "3"), "dirs: a file 3 levels down came back");
	snprintf(path, sizeof(path), "%s/down/evil", top);
	CHECK(lstat(path, &st) < 0, "dirs: the sandbox's symlink is not made on the host");
	snprintf(path, sizeof(path), "%s/down/x\ny", top);
	CHECK(lstat(path, &st) < 0, "dirs: a name with a control character is skipped");
	snprintf(path, sizeof(path), "%s/down/planted", top);
	CHECK(lstat(path, &st) == 0 && S_ISLNK(st.st_mode), "dirs: the host's own symlink is still there, untouched");
	snprintf(path, sizeof(path), "%s/down", top);
	k = nsbox_download_dir(s, "/tmp/up", path, 0, 0, &e);
	CHECK(k == -EEXIST, "dirs: a second download overwrites nothing: -EEXIST (%s)", emsg(e));
	clear(&e);
	snprintf(path, sizeof(path), "%s/down2", top);
	k = nsbox_download_dir(s, "/tmp/up", path, 2, 0, &e);
	CHECK(k == -EFBIG, "dirs: max_bytes holds: -EFBIG (%s)", emsg(e));
	clear(&e);
	snprintf(path, sizeof(path), "%s/down3", top);
	k = nsbox_download_dir(s, "/tmp/up", path, 0, 2, &e);
	CHECK(k == -EFBIG, "dirs: max_files holds: -EFBIG (%s)", emsg(e));
	clear(&e);
	/* max_bytes is the host's disk: a directory costs a block there
	 * (nothing of its own in the sandbox's listing). */
	value_of(s, "import os\nfor i in range(50):\n    os.makedirs(f'/tmp/dd/d{i}')\n");
	snprintf(path, sizeof(path), "%s/down5", top);
	k = nsbox_download_dir(s, "/tmp/dd", path, 10 * 4096, 0, &e);
	CHECK(k == -EFBIG, "dirs: directories count against max_bytes, a block each: -EFBIG (%s)", emsg(e));
	clear(&e);
	{
		DIR *dd = opendir(path);
		int n = 0;

		for (struct dirent *de; dd && (de = readdir(dd));)
			n += de->d_name[0] != '.';
		if (dd)
			closedir(dd);
		CHECK(dd && n <= 10, "dirs: at most 10 of the 50 directories made on the host (%d)", n);
	}
	/* The sandbox makes a directory a symlink to the host's /etc (a path
	 * there): the host makes a directory of its own, beneath. */
	value_of(s, "import shutil; shutil.rmtree('/tmp/up/sub'); os.symlink('/etc', '/tmp/up/sub')");
	snprintf(path, sizeof(path), "%s/down4", top);
	k = nsbox_download_dir(s, "/tmp/up", path, 0, 0, &e);
	CHECK(k == 1 && file_is(strcat(path, "/a"), "1"), "dirs: a symlinked directory inside is skipped (%d, %s)", k,
	      emsg(e));
	clear(&e);
	CHECK(nsbox_download_dir(s, "/tmp/up", NULL, 0, 0, &e) == -EINVAL &&
		      nsbox_upload_dir(s, "/nonexistent-nsbox", "/tmp/x", NULL) == -ENOENT,
	      "dirs: bad arguments");
	clear(&e);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
	CHECK(system(cmd) == 0, "dirs: clean up");
}

/* Session files (since 0.5.0): the C calls, their errno set, the cap. */
static void test_files(nsbox_policy_t *p)
{
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	char *data = NULL, *json = NULL;
	size_t n = 0;
	int k;

	if (nsbox_session_new(p, NULL, &s, &e) < 0) {
		ok(0, "files: session_new (%s)", emsg(e));
		clear(&e);
		return;
	}
	k = nsbox_write_file(s, "/tmp/f.bin", "a\0b", 3, 0600, &e);
	CHECK(k == 0, "files: write_file (%s)", emsg(e));
	clear(&e);
	k = nsbox_read_file(s, "/tmp/f.bin", &data, &n, 0, &e);
	CHECK(k == 0 && n == 3 && !memcmp(data, "a\0b", 4), "files: read_file gives the bytes back, NUL-terminated");
	nsbox_free(data);
	data = NULL;
	clear(&e);
	CHECK(!strcmp(value_of(s, "import os; oct(os.stat('/tmp/f.bin').st_mode & 0o777)"), "\"0o600\""),
	      "files: the mode is applied");
	k = nsbox_list_files(s, "/tmp", &json, &e);
	CHECK(k == 0 && json && strstr(json, "{\"type\":\"file\",\"size\":3,\"name\":\"f.bin\"}"),
	      "files: list_files (%s)", json ? json : emsg(e));
	nsbox_free(json);
	clear(&e);
	CHECK(nsbox_read_file(s, "/nope", &data, &n, 0, &e) == -ENOENT && e && nsbox_error_code(e) == -ENOENT,
	      "files: a missing file is -ENOENT (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_read_file(s, "/tmp", &data, &n, 0, &e) == -EISDIR, "files: a directory is -EISDIR (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_read_file(s, "/tmp/f.bin", &data, &n, 2, &e) == -EFBIG, "files: over max is -EFBIG (%s)", emsg(e));
	clear(&e);
	value_of(s, "os.mkfifo('/tmp/ff')");
	CHECK(nsbox_read_file(s, "/tmp/ff", &data, &n, 0, &e) == -EINVAL, "files: a fifo is -EINVAL, no hang (%s)",
	      emsg(e));
	clear(&e);
	CHECK(nsbox_make_dir(s, "/tmp/a/b", -1, &e) == 0 && nsbox_write_file(s, "/tmp/a/b/c", "", 0, -1, &e) == 0,
	      "files: make_dir with parents, an empty file (%s)", emsg(e));
	clear(&e);
	CHECK(nsbox_write_file(s, NULL, "", 0, -1, &e) == -EINVAL &&
		      nsbox_read_file(s, "x", NULL, &n, 0, NULL) == -EINVAL,
	      "files: bad arguments are -EINVAL");
	clear(&e);
	CHECK(!strcmp(value_of(s, "1+1"), "2"), "files: the session still works");
	test_dirs(s);
	nsbox_session_free(s);
}

/* Rich results through the C accessors: display() bundles (binary data
 * decoded, text as is), the last expression's bundle, /out files, the
 * caps' truncation flags, and indexes out of range. */
static void test_rich(nsbox_policy_t *p)
{
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;
	nsbox_result_t *r;
	const char *d;
	size_t n;
	uint64_t size;

	if (nsbox_session_new(p, NULL, &s, &e) < 0) {
		ok(0, "rich: session_new (%s)", emsg(e));
		nsbox_error_free(e);
		return;
	}
	r = run(s,
		"class R:\n"
		"    def _repr_png_(self): return b'\\x89PNG\\r\\n\\x1a\\n\\x00binary'\n"
		"    def _repr_html_(self): return '<b>R</b>'\n"
		"    def _repr_markdown_(self): return '**R**'\n"
		"    def _repr_json_(self): return {'r': [1, 2]}\n"
		"    def __repr__(self): return 'R()'\n"
		"display(R())\n"
		"display({'text/html': '<i>raw</i>', 'image/x-thing': b'\\x00\\x01'}, raw=True)\n"
		"open('/out/a.bin', 'wb').write(bytes(range(256)))\n"
		"R()\n",
		0);
	CHECK(r && nsbox_result_status(r) == NSBOX_OK && nsbox_result_display_count(r) == 3,
	      "rich: two display() calls and the value's bundle (%zu)", r ? nsbox_result_display_count(r) : 0);
	d = nsbox_result_display_data(r, 0, "image/png", &n);
	CHECK(d && n == 15 && !memcmp(d, "\x89PNG\r\n\x1a\n\0binary", 15), "rich: image/png decoded to its bytes");
	d = nsbox_result_display_data(r, 0, "text/html", &n);
	CHECK(d && n == 8 && !strcmp(d, "<b>R</b>"), "rich: text/html as text");
	d = nsbox_result_display_data(r, 0, "application/json", &n);
	CHECK(d && !strcmp(d, "{\"r\":[1,2]}"), "rich: application/json as JSON text (%s)", d ? d : "NULL");
	CHECK(!strcmp(nsbox_result_display_data(r, 0, "text/markdown", NULL) ?: "", "**R**") &&
		      !strcmp(nsbox_result_display_data(r, 0, "text/plain", NULL) ?: "", "R()"),
	      "rich: markdown and text/plain");
	CHECK(nsbox_result_display_mime_count(r, 0) == 5 && nsbox_result_display_mime(r, 0, 4) &&
		      !nsbox_result_display_mime(r, 0, 5),
	      "rich: five MIME types in the first bundle");
	d = nsbox_result_display_data(r, 1, "image/x-thing", &n);
	CHECK(d && n == 2 && d[0] == 0 && d[1] == 1 && nsbox_result_display_mime_count(r, 1) == 2,
	      "rich: a raw bundle with an unknown binary type");
	CHECK(!strcmp(nsbox_result_display_data(r, 2, "text/html", NULL) ?: "", "<b>R</b>"),
	      "rich: the last expression's bundle comes last");
	CHECK(!nsbox_result_display_data(r, 3, "text/plain", &n) && n == 0 && !nsbox_result_display_mime(r, 9, 0) &&
		      !nsbox_result_display_data(r, 0, "image/gif", NULL) && !nsbox_result_displays_truncated(r),
	      "rich: out of range and absent types are NULL; nothing truncated");
	d = nsbox_result_file_data(r, 0, &n, &size);
	CHECK(nsbox_result_file_count(r) == 1 && !strcmp(nsbox_result_file_name(r, 0) ?: "", "a.bin") && d &&
		      n == 256 && size == 256 && (unsigned char)d[255] == 255 && !nsbox_result_files_truncated(r),
	      "rich: the /out file with its data");
	CHECK(!nsbox_result_file_name(r, 1) && !nsbox_result_file_data(r, 1, &n, &size) && n == 0 && size == 0,
	      "rich: no second file");
	nsbox_result_free(r);

	r = run(s, "1 + 1", 0);
	CHECK(r && nsbox_result_display_count(r) == 0 && nsbox_result_file_count(r) == 0,
	      "rich: an unchanged /out is not sent again");
	nsbox_result_free(r);

	r = run(s,
		"for i in range(70): display(i)\n"
		"open('/out/big', 'wb').write(b'x' * (9 << 20))\n",
		0);
	d = r ? nsbox_result_file_data(r, 0, &n, &size) : NULL;
	CHECK(r && nsbox_result_display_count(r) == 64 && nsbox_result_displays_truncated(r) &&
		      nsbox_result_file_count(r) == 1 && !d && size == 9u << 20 && nsbox_result_files_truncated(r),
	      "rich: 64 displays of 70 and a 9 MiB file without its data, both flagged");
	nsbox_result_free(r);
	/* An interactive line runs on runner.py's own path (do_exec). */
	{
		struct nsbox_exec_opts o = { .struct_size = sizeof(o), .interactive = true };

		r = NULL;
		if (nsbox_exec(s, "display('i'); open('/out/i.txt', 'w').write('i')", &o, &r, &e) < 0)
			clear(&e);
		CHECK(r && nsbox_result_display_count(r) == 1 &&
			      !strcmp(nsbox_result_display_data(r, 0, "text/plain", NULL) ?: "", "'i'") &&
			      nsbox_result_file_count(r) == 1 && !strcmp(nsbox_result_file_name(r, 0) ?: "", "i.txt"),
		      "rich: an interactive exec (the Python path) returns displays and files");
		nsbox_result_free(r);
		r = run(s, "2", 0);
		CHECK(r && nsbox_result_file_count(r) == 0, "rich: ... and the fast path does not send them again");
		nsbox_result_free(r);
	}
	CHECK(nsbox_result_display_count(NULL) == 0 && !nsbox_result_displays_truncated(NULL) &&
		      nsbox_result_file_count(NULL) == 0 && !nsbox_result_display_data(NULL, 0, "text/plain", NULL),
	      "rich: NULL results are empty");
	{
		/* NSBOX_EXEC_PLAIN: no rich results made.  A caller of the
		 * 0.2.0 struct (struct_size up to interactive) with junk in its
		 * tail padding still gets them: flags lies past what it covers. */
		struct nsbox_exec_opts o;
		const char *code = "display('d')\n'v'";

		memset(&o, 0xff, sizeof(o));
		o.struct_size = offsetof(struct nsbox_exec_opts, interactive) + sizeof(bool) + 7;
		o.timeout = 0;
		o.repl = true;
		o.filename = NULL;
		o.interactive = false;
		r = NULL;
		CHECK(nsbox_exec(s, code, &o, &r, &e) == 0 && nsbox_result_display_count(r) == 1,
		      "rich: a 0.2.0-sized opts struct with junk padding gets rich results (%s)", emsg(e));
		clear(&e);
		nsbox_result_free(r);
		memset(&o, 0, sizeof(o));
		o.struct_size = sizeof(o);
		o.repl = true;
		o.flags = NSBOX_EXEC_PLAIN;
		r = NULL;
		CHECK(nsbox_exec(s, code, &o, &r, &e) == 0 && nsbox_result_display_count(r) == 0 &&
			      !strcmp(nsbox_result_value(r), "\"v\""),
		      "rich: NSBOX_EXEC_PLAIN: the value and no displays (%s)", emsg(e));
		clear(&e);
		nsbox_result_free(r);
	}
	nsbox_session_free(s);
}

static void *small_stack_thread(void *arg)
{
	return arg;
}

/* libnsbox's static TLS is in every thread of every program that links
 * it, on that thread's stack.  pid 1's network thread (jail/net.c) and the
 * runner's io thread (runner/io.c) run on 64 KiB stacks: a 64 KiB __thread
 * buffer (host/session-service.c) made pthread_create fail with EINVAL
 * there, so the network namespace was made inline, 0.6 ms on every start,
 * silently.  A thread with such a stack must be creatable here. */
static void test_small_thread_stack(void)
{
	static int token;
	pthread_attr_t a;
	pthread_t t;
	void *ret = NULL;
	int r;

	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 * 1024);
	r = pthread_create(&t, &a, small_stack_thread, &token);
	pthread_attr_destroy(&a);
	if (r == 0)
		pthread_join(t, &ret);
	ok(r == 0 && ret == &token, "a thread with a 64 KiB stack starts in a program linking libnsbox (%s)",
	   strerror(r));
}

int main(int argc, char **argv)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;

	if (argc >= 3 && !strcmp(argv[1], "--run"))
		return run_one(argv[2], argc > 3 && !strcmp(argv[3], "--cold"));
	if (argc == 4 && !strcmp(argv[1], "--forward"))
		return forward_one(argv[2], argv[3]);
	test_errors_and_version();
	test_small_thread_stack();
	test_policy();
	if (nsbox_policy_new(NULL, &p, &e) < 0) {
		ok(0, "default policy (%s)", emsg(e));
		nsbox_error_free(e);
		tap_done();
	}
	nsbox_policy_set_memory(p, 300ull << 20, NULL);
	nsbox_policy_set_pids(p, 64, NULL);
	nsbox_policy_set_cpus(p, 1.5, NULL);
	nsbox_policy_setenv(p, "NSBOX_TEST_VAR", "hello", NULL);
	nsbox_policy_add_bind(p, "/usr/share/zoneinfo", "/data/zoneinfo", false, NULL);
	test_run(p, true);
	test_run(p, false);
	{
		pthread_t t;

		if (pthread_create(&t, NULL, run_in_process_from_thread, p) == 0)
			pthread_join(t, NULL);
	}
	test_run_bad_requests(p);
	if (!under_valgrind())
		test_run_net_audit(true);
	test_run_net_audit(false);
	test_comma_locale(p);
	test_session_basics(p, false, "template");
	test_session_extras(p);
	test_session_basics(p, true, "cold");
	test_tools(p);
	test_cancel_and_busy(p);
	test_events_single(p);
	test_events_many(p);
	test_tool_time_limit(p);
	test_misuse(p);
	test_threads(p);
	test_fork(p);
	test_files(p);
	test_rich(p);
	nsbox_policy_free(p);
	tap_done();
}
