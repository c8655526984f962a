/* The host side of a session (host/session.c) against the real runner:
 * persistence, variables, reset, ping, tool calls, cancel, a dead session.
 * Runs each case unjailed (the runner as a plain child) and, where the jail
 * can start here, jailed.  Needs build/nsbox-runner (or $NSBOX_RUNNER);
 * without it the test says so and fails rather than skipping silently. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "files.h"
#include "locate.h"
#include "session.h"
#include "tap.h"

#define CHECK(cond, ...)                 \
	do {                             \
		bool c_ = (cond);        \
		ok(c_, __VA_ARGS__);     \
	} while (0)

static int add_tool(void *ctx, const char *name, const char *call_json, json_t **value, char **error)
{
	json_t *call = json_loads(call_json, 0, NULL), *v;
	json_int_t sum = 0;
	size_t i;
	const char *k;

	(void)ctx;
	(void)name;
	json_array_foreach(json_object_get(call, "args"), i, v) {
		if (!json_is_integer(v)) {
			*error = strdup("add: integers only");
			json_decref(call);
			return -1;
		}
		sum += json_integer_value(v);
	}
	json_object_foreach(json_object_get(call, "kwargs"), k, v)
		sum += json_integer_value(v);
	json_decref(call);
	*value = json_integer(sum);
	return 0;
}

static const char *exec_value(struct nsbox_session *s, const char *code, struct session_result *res)
{
	struct session_exec_req req = { .code = code, .want_value = true };
	static struct nsbox_err err;
	static char buf[4096];
	char *d;

	if (session_exec(s, &req, res, &err) < 0)
		return err.msg;
	d = json_dumps(json_object_get(res->result, "value"), JSON_ENCODE_ANY | JSON_COMPACT);
	snprintf(buf, sizeof(buf), "%s", d ? d : "(none)");
	free(d);
	return buf;
}

static void *cancel_later(void *arg)
{
	usleep(300000);
	session_cancel(arg);
	return NULL;
}

static void run_cases(struct nsbox_policy *p, bool unjailed, const char *tag)
{
	struct session_tool tools[] = { { .name = "add", .description = "Add integers.", .fn = add_tool } };
	struct session_opts o = { .policy = p, .tools = tools, .n_tools = 1, .unjailed = unjailed };
	struct nsbox_session *s = NULL;
	struct session_result res;
	struct nsbox_err err = { 0 };
	json_t *v = NULL;
	double rtt = -1;
	const char *got;
	int r;

	r = session_start(&s, &o, &err);
	CHECK(r == 0, "%s: session starts (%s)", tag, r ? err.msg : "ok");
	if (r)
		return;
	got = exec_value(s, "x = 20\ndef double(n):\n    return 2 * n\nx + 1", &res);
	CHECK(!strcmp(got, "21") && res.outcome == SESSION_OK, "%s: first exec value: %s", tag, got);
	session_result_free(&res);
	got = exec_value(s, "double(x)", &res);
	CHECK(!strcmp(got, "40"), "%s: globals persist across execs: %s", tag, got);
	session_result_free(&res);

	v = json_pack("{s:[i,s]}", "k", 1, "two");
	CHECK(session_set_var(s, "cfg", v, &err) == 0, "%s: set_var", tag);
	json_decref(v);
	got = exec_value(s, "cfg['k'][0] + len(cfg['k'][1])", &res);
	CHECK(!strcmp(got, "4"), "%s: set_var value visible: %s", tag, got);
	session_result_free(&res);
	v = NULL;
	CHECK(session_get_var(s, "x", &v, &err) == 0 && json_integer_value(v) == 20, "%s: get_var", tag);
	json_decref(v);
	v = NULL;
	r = session_get_var(s, "nope", &v, &err);
	CHECK(r < 0 && err.code == ENOENT, "%s: get_var of a missing name: %s", tag, err.msg);
	CHECK(session_ping(s, &rtt, &err) == 0 && rtt >= 0, "%s: ping (%.0f us)", tag, rtt * 1e6);

	got = exec_value(s, "add(1, 2, c=3) + tools.add(4) if False else add(1, 2, c=3)", &res);
	CHECK(!strcmp(got, "6") && res.tool_calls == 1, "%s: tool call: %s", tag, got);
	session_result_free(&res);
	got = exec_value(s, "import nsbox\ntry:\n    add('x')\nexcept nsbox.ToolError as e:\n    r = str(e)\nr", &res);
	CHECK(!strcmp(got, "\"add: integers only\""), "%s: ToolError message: %s", tag, got);
	session_result_free(&res);

	CHECK(session_reset(s, &err) == 0, "%s: reset", tag);
	got = exec_value(s, "'x' in globals(), 'add' in globals()", &res);
	CHECK(!strcmp(got, "{\"$tuple\":[false,true]}"), "%s: reset clears globals, keeps tools: %s", tag, got);
	session_result_free(&res);

	{
		pthread_t t;
		struct session_exec_req req = { .code = "import time\ntime.sleep(30)" };

		pthread_create(&t, NULL, cancel_later, s);
		r = session_exec(s, &req, &res, &err);
		pthread_join(t, NULL);
		CHECK(r == 0 && res.outcome == SESSION_CANCELLED && !res.dead,
		      "%s: cancel interrupts time.sleep, session survives (%d %s)", tag, res.outcome, res.message);
		session_result_free(&res);
	}
	{
		struct session_exec_req req = { .code = "while True:\n    pass", .timeout = 0.3 };

		r = session_exec(s, &req, &res, &err);
		CHECK(r == 0 && res.outcome == SESSION_TIMEOUT && !res.dead, "%s: soft timeout in a loop: %s", tag,
		      res.message);
		session_result_free(&res);
	}
	got = exec_value(s, "1 + 1", &res);
	CHECK(!strcmp(got, "2"), "%s: usable after a soft timeout: %s", tag, got);
	session_result_free(&res);
	{
		struct session_exec_req req = {
			/* (A bare `while True: pass` body is not enough: CPython 3.11
			 * lets a signal handler's exception escape such a loop's try.) */
			.code = "while True:\n    try:\n        while True:\n            x = 1\n    except BaseException:\n        pass",
			.timeout = 0.3,
		};

		r = session_exec(s, &req, &res, &err);
		CHECK(r == 0 && res.outcome == SESSION_TIMEOUT && res.dead && res.wall < 3,
		      "%s: swallowed soft timeout ends at the hard deadline (%.2f s, dead=%d)", tag, res.wall, res.dead);
		session_result_free(&res);
	}
	CHECK(!session_alive(s), "%s: session reports dead", tag);
	r = session_exec(s, &(struct session_exec_req){ .code = "1" }, &res, &err);
	CHECK(r < 0, "%s: exec on a dead session fails: %s", tag, err.msg);
	session_close(s, NULL);
}

/* A tree operation's deadline in all (files.h, SESSION_TREE_TIMEOUTS): a
 * runner answering each listing just inside the control timeout, with a
 * subdirectory every time, held download_dir for depth x the timeout (and
 * 100000 entries would be days).  Control timeout 1 s here: the whole
 * download gives up at 20 s, where the depth cap (64 levels, 0.5 s each)
 * would come at 32 s. */
static void tree_deadline(struct nsbox_policy *p)
{
	struct session_opts o = { .policy = p, .unjailed = true, .control_timeout = 1.0 };
	struct nsbox_session *s = NULL;
	struct session_result res;
	struct nsbox_err err = { 0 };
	char dir[] = "/tmp/nsbox-tree-XXXXXX", local[64], cmd[96];
	struct timespec t0, t1;
	uint64_t files = 0;
	const char *got;
	double took;
	int r;

	if (session_start(&s, &o, &err) < 0) {
		ok(0, "tree deadline: session starts (%s)", err.msg);
		return;
	}
	got = exec_value(s,
			 "import sys, time\nR = sys.modules['_nsbox_runner']\n"
			 "def slow(msg):\n    time.sleep(0.5)\n"
			 "    return {'entries': [{'name': 'd', 'type': 'dir', 'size': 0}], 'truncated': False}\n"
			 "R._file_list = slow\n1",
			 &res);
	session_result_free(&res);
	if (!mkdtemp(dir)) {
		ok(0, "tree deadline: mkdtemp");
		session_close(s, NULL);
		return;
	}
	snprintf(local, sizeof(local), "%s/out", dir);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = session_download_dir(s, "/tmp", local, 1 << 20, 1000, 1 << 20, &files, &err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	ok(!strcmp(got, "1") && r < 0 && err.code == ETIMEDOUT && strstr(err.msg, "download_dir: not done within 20 s"),
	   "tree deadline: download_dir gives up in all (%s, after %.1f s)", err.msg, took);
	session_close(s, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		ok(0, "tree deadline: clean up %s", dir);
}

int main(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	char path[4096];

	if (runner_locate(path, sizeof(path), &err) < 0) {
		ok(0, "nsbox-runner not found (build it: make build/nsbox-runner): %s", err.msg);
		tap_done();
	}
	if (policy_init_builtin(&p, "default", &err) < 0) {
		ok(0, "default policy: %s", err.msg);
		tap_done();
	}
	run_cases(&p, true, "unjailed");
	run_cases(&p, false, "jailed");
	tree_deadline(&p);
	policy_free(&p);
	tap_done();
}
