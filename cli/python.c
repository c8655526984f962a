/* nsbox python [OPTIONS] [-c CODE | -m MODULE | FILE | -] [ARG...]
 * Runs Python in a fresh sandboxed session (lib/session.h); with no code
 * and a terminal, an interactive REPL whose state lives in the sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "args.h"
#include "commands.h"
#include "session.h"
#include "util.h"

#define MAX_TOOLS 64
#define TOOL_OUTPUT_MAX (32u << 20)	/* beyond the frame cap: the session refuses it clearly */

struct cli_tool {
	const char *name;
	const char *command;
};

static struct nsbox_session *active;

static void py_usage(FILE *f)
{
	fprintf(f,
		"usage: nsbox python [OPTIONS] [-c CODE | -m MODULE | FILE | -] [ARG...]\n"
		"  -c CODE               run CODE\n"
		"  -m MODULE             run a module as __main__ (e.g. -m unittest test.test_json)\n"
		"  --json                print one JSON object: value, stdout, stderr, error, usage\n"
		"  --tool NAME=COMMAND   a host tool: COMMAND gets {\"args\":[...],\"kwargs\":{...}} on stdin\n"
		"                        and prints a JSON result; callable inside as NAME(...)\n"
		"  --output-limit SIZE   cap on captured stdout and stderr each (default 1M)\n"
		"With no code and a terminal on stdin: an interactive session.\n%s",
		args_jail_help);
}

static void on_sigint(int sig)
{
	(void)sig;
	if (active)
		session_cancel(active);
}

static void on_output(void *ctx, int stream, const char *data, size_t len)
{
	FILE *f = stream == 1 ? stdout : stderr;

	(void)ctx;
	fwrite(data, 1, len, f);
	fflush(f);
}

/* A host tool implemented by a command: the call's JSON on its stdin, a
 * JSON value on its stdout.  The command runs on the host, unsandboxed: it
 * is the user's own program. */
static int run_tool(void *ctx, const char *name, json_t *args, json_t *kwargs, json_t **value, char **error)
{
	const struct cli_tool *t = ctx;
	json_t *call = json_pack("{s:O,s:O}", "args", args, "kwargs", kwargs);
	char *in = call ? json_dumps(call, JSON_COMPACT) : NULL;
	_cleanup_free_ char *out = NULL;
	size_t out_len = 0, in_len, in_done = 0;
	bool overflow = false;
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 };
	json_error_t jerr;
	pid_t pid;
	int ws;

	json_decref(call);
	if (!in || pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0)
		goto fail_sys;
	pid = fork();
	if (pid < 0)
		goto fail_sys;
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		if (dup2(pin[0], 0) < 0 || dup2(pout[1], 1) < 0)
			_exit(127);
		execl("/bin/sh", "sh", "-c", t->command, (char *)NULL);
		_exit(127);
	}
	close(pin[0]);
	close(pout[1]);
	pin[0] = pout[1] = -1;
	in_len = strlen(in);
	fcntl(pin[1], F_SETFL, O_NONBLOCK);
	/* Feed stdin and drain stdout together: either may fill a pipe. */
	while (pout[0] >= 0) {
		struct pollfd p[2] = { { pout[0], POLLIN, 0 }, { pin[1], POLLOUT, 0 } };

		if (poll(p, pin[1] >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pin[1] >= 0 && p[1].revents) {
			ssize_t n = write(pin[1], in + in_done, in_len - in_done);

			if (n > 0)
				in_done += (size_t)n;
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				in_done = in_len;
			if (in_done >= in_len) {
				close(pin[1]);
				pin[1] = -1;
			}
		}
		if (p[0].revents) {
			char buf[65536];
			ssize_t n = read(pout[0], buf, sizeof(buf));

			if (n <= 0 && !(n < 0 && errno == EINTR)) {
				close(pout[0]);
				pout[0] = -1;
				break;
			}
			if (n > 0) {
				char *nb;

				if (out_len + (size_t)n > TOOL_OUTPUT_MAX) {
					overflow = true;	/* keep draining; refused below */
					continue;
				}
				nb = realloc(out, out_len + (size_t)n + 1);
				if (!nb)
					continue;
				out = nb;
				memcpy(out + out_len, buf, (size_t)n);
				out_len += (size_t)n;
			}
		}
	}
	if (pin[1] >= 0)
		close(pin[1]);
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	free(in);
	if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
		if (asprintf(error, "tool %s: command failed (%s %d)", name,
			     WIFEXITED(ws) ? "exit status" : "signal", WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws)) < 0)
			*error = NULL;
		return -1;
	}
	if (overflow) {
		if (asprintf(error, "tool %s: the command's output is too large (over %u bytes)", name,
			     TOOL_OUTPUT_MAX) < 0)
			*error = NULL;
		return -1;
	}
	*value = json_loadb(out ? out : "", out_len, JSON_DECODE_ANY, &jerr);
	if (!*value) {
		if (asprintf(error, "tool %s: the command's output is not JSON: %s", name, jerr.text) < 0)
			*error = NULL;
		return -1;
	}
	return 0;
fail_sys:
	if (asprintf(error, "tool %s: cannot run the command: %s", name, strerror(errno)) < 0)
		*error = NULL;
	free(in);
	for (int i = 0; i < 2; i++) {
		if (pin[i] >= 0)
			close(pin[i]);
		if (pout[i] >= 0)
			close(pout[i]);
	}
	return -1;
}

static char *read_all(FILE *f, size_t *len)
{
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);

	while (buf) {
		size_t k = fread(buf + n, 1, cap - n - 1, f);

		n += k;
		if (k == 0)
			break;
		if (cap - n < 2) {
			char *nb = realloc(buf, cap * 2);

			if (!nb) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
	}
	if (!buf || ferror(f)) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

static void print_error(const json_t *result)
{
	const json_t *e = json_object_get(result, "error");
	const char *tb = json_string_value(json_object_get(e, "traceback"));

	if (tb)
		fputs(tb, stderr);
	else if (json_is_object(e))
		fprintf(stderr, "%s: %s\n", json_string_value(json_object_get(e, "type")),
			json_string_value(json_object_get(e, "message")));
}

/* After streaming the head of a truncated stream, show the tail. */
static void print_tail(const json_t *result, const char *stream, FILE *f)
{
	char key[32];
	const char *tail;
	long long total;

	snprintf(key, sizeof(key), "%s_truncated", stream);
	if (!json_is_true(json_object_get(result, key)))
		return;
	snprintf(key, sizeof(key), "%s_tail", stream);
	tail = json_string_value(json_object_get(result, key));
	snprintf(key, sizeof(key), "%s_bytes", stream);
	total = (long long)json_integer_value(json_object_get(result, key));
	fprintf(f, "\n[nsbox: %s truncated, %lld bytes in all]\n%s", stream, total, tail ? tail : "");
	fflush(f);
}

static int report(const struct session_result *res, bool json_mode, bool streamed)
{
	const json_t *r = res->result;

	if (json_mode) {
		json_t *o = json_object();
		json_t *usage = json_pack("{s:f,s:I,s:I,s:I}", "wall", res->wall, "tool_calls", (json_int_t)res->tool_calls,
					  "bytes_in", (json_int_t)res->bytes_in, "peak_memory",
					  (json_int_t)res->peak_memory);
		const char *keys[] = { "stdout", "stderr", "stdout_truncated", "stderr_truncated", "stdout_bytes",
				       "stderr_bytes", "exit_code" };
		static const char *const names[] = { "ok", "exception", "timeout", "cancelled", "memory", "crashed",
						     "protocol" };

		json_object_set(o, "value", r && json_object_get(r, "value") ? json_object_get(r, "value") : json_null());
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
			json_t *v = r ? json_object_get(r, keys[i]) : NULL;

			if (v)
				json_object_set(o, keys[i], v);
			else if (i < 2)
				json_object_set_new(o, keys[i], json_string(""));
		}
		if (r && json_is_object(json_object_get(r, "error")))
			json_object_set(o, "error", json_object_get(r, "error"));
		else if (res->outcome != SESSION_OK)
			json_object_set_new(o, "error", json_pack("{s:s,s:s,s:n}", "type",
								  res->outcome == SESSION_TIMEOUT ? "nsbox.TimeLimitExceeded" :
								  res->outcome == SESSION_MEMORY ? "MemoryError" : "nsbox.SandboxError",
								  "message", res->message, "traceback"));
		else
			json_object_set_new(o, "error", json_null());
		if (r && json_is_object(json_object_get(r, "usage")))
			json_object_update(usage, json_object_get(r, "usage"));
		if (r && json_is_number(json_object_get(r, "duration")))
			json_object_set(usage, "duration", json_object_get(r, "duration"));
		json_object_set_new(o, "usage", usage);
		json_object_set_new(o, "outcome", json_string(names[res->outcome]));
		if (res->outcome != SESSION_OK && res->outcome != SESSION_EXCEPTION)
			json_object_set_new(o, "message", json_string(res->message));
		json_object_set_new(o, "session_dead", json_boolean(res->dead));
		json_dumpf(o, stdout, JSON_COMPACT);
		fputc('\n', stdout);
		json_decref(o);
	} else {
		if (r && !streamed) {
			fputs(json_string_value(json_object_get(r, "stdout")) ?: "", stdout);
			fputs(json_string_value(json_object_get(r, "stderr")) ?: "", stderr);
		} else if (r) {
			print_tail(r, "stdout", stdout);
			print_tail(r, "stderr", stderr);
		}
		fflush(stdout);
		if (res->outcome == SESSION_EXCEPTION || res->outcome == SESSION_TIMEOUT ||
		    res->outcome == SESSION_CANCELLED)
			print_error(r);
		if (res->outcome != SESSION_OK && res->outcome != SESSION_EXCEPTION)
			fprintf(stderr, "nsbox python: %s\n", res->message);
	}
	fflush(stdout);
	if (res->outcome == SESSION_OK)
		return res->exit_code;
	return res->exit_code ? res->exit_code : 1;
}

static int repl(struct nsbox_session *s)
{
	char *line = NULL, *buf = NULL;
	size_t cap = 0, len = 0;
	struct nsbox_err err = { 0 };

	fprintf(stderr, "Python %s in an nsbox sandbox; state lives inside. Ctrl-D to quit.\n",
		json_string_value(json_object_get(session_hello(s), "python")) ?: "");
	for (;;) {
		ssize_t n;
		struct session_exec_req req = { .display = true, .stream = true, .check_complete = true,
						.filename = "<stdin>" };
		struct session_result res;
		char *nb;

		fputs(len ? "... " : ">>> ", stdout);
		fflush(stdout);
		n = getline(&line, &cap, stdin);
		if (n < 0) {
			fputc('\n', stdout);
			break;
		}
		nb = realloc(buf, len + (size_t)n + 1);
		if (!nb)
			break;
		buf = nb;
		memcpy(buf + len, line, (size_t)n + 1);
		len += (size_t)n;
		req.code = buf;
		if (session_exec(s, &req, &res, &err) < 0) {
			fprintf(stderr, "nsbox python: %s\n", err.msg);
			len = 0;
			continue;
		}
		if (res.result && json_is_true(json_object_get(res.result, "incomplete"))) {
			session_result_free(&res);
			continue;
		}
		len = 0;
		report(&res, false, true);
		session_result_free(&res);
		if (res.dead) {
			fprintf(stderr, "nsbox python: the session has ended\n");
			break;
		}
	}
	free(line);
	free(buf);
	return 0;
}

int cmd_python(int argc, char **argv)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	struct cli_tool ctools[MAX_TOOLS];
	struct session_tool stools[MAX_TOOLS];
	size_t n_tools = 0;
	const char *code = NULL, *module = NULL, *file = NULL;
	_cleanup_free_ char *owned_code = NULL;
	bool json_mode = false;
	unsigned long long out_limit = 0;
	struct session_opts o = { 0 };
	struct nsbox_session *s = NULL;
	struct session_result res;
	struct session_exec_req req = { 0 };
	json_t *sys_argv;
	int i, rc;

	if (args_load_policy(&p, argc, argv, &err) < 0) {
		fprintf(stderr, "nsbox python: %s\n", err.msg);
		return NSBOX_EXIT_USAGE;
	}
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		int r;

		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-' || !strcmp(a, "-"))
			break;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			py_usage(stdout);
			policy_free(&p);
			return 0;
		}
		if (!strcmp(a, "-c") || !strcmp(a, "-m")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "nsbox python: %s needs an argument\n", a);
				goto usage;
			}
			if (a[1] == 'c')
				code = argv[++i];
			else
				module = argv[++i];
			i++;
			break;
		}
		if (!strcmp(a, "--json")) {
			json_mode = true;
			continue;
		}
		if (!strcmp(a, "--output-limit") || !strncmp(a, "--output-limit=", 15)) {
			const char *v = a[14] == '=' ? a + 15 : (i + 1 < argc ? argv[++i] : NULL);

			if (!v || parse_size(v, &out_limit) < 0 || out_limit < 16 || out_limit > (64u << 20)) {
				fprintf(stderr, "nsbox python: --output-limit: expected a size from 16 to 64M\n");
				goto usage;
			}
			continue;
		}
		if (!strcmp(a, "--tool") || !strncmp(a, "--tool=", 7)) {
			const char *v = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
			const char *eq = v ? strchr(v, '=') : NULL;
			char *name;

			if (!eq || eq == v || !eq[1] || n_tools >= MAX_TOOLS) {
				fprintf(stderr, "nsbox python: --tool: expected NAME=COMMAND (at most %d)\n", MAX_TOOLS);
				goto usage;
			}
			name = strndup(v, (size_t)(eq - v));
			ctools[n_tools] = (struct cli_tool){ name, eq + 1 };
			stools[n_tools] = (struct session_tool){ .name = name, .fn = run_tool, .ctx = &ctools[n_tools],
								 .description = "A host tool (nsbox python --tool)." };
			n_tools++;
			continue;
		}
		r = args_parse_jail_option(&p, argc, argv, &i, &err);
		if (r < 0) {
			fprintf(stderr, "nsbox python: %s\n", err.msg);
			goto usage_quiet;
		}
		if (r == 0) {
			fprintf(stderr, "nsbox python: unknown option '%s'\n", a);
			goto usage;
		}
	}
	if (!code && !module && i < argc)
		file = argv[i++];
	/* sys.argv as Python would set it. */
	sys_argv = json_array();
	json_array_append_new(sys_argv, json_string(code ? "-c" : module ? module : file ? file : ""));
	for (int k = i; k < argc; k++)
		json_array_append_new(sys_argv, json_string(argv[k]));

	if (file) {
		FILE *f = strcmp(file, "-") ? fopen(file, "re") : stdin;
		size_t len;

		if (!f) {
			fprintf(stderr, "nsbox python: cannot open %s: %s\n", file, strerror(errno));
			json_decref(sys_argv);
			policy_free(&p);
			return NSBOX_EXIT_USAGE;
		}
		owned_code = read_all(f, &len);
		if (f != stdin)
			fclose(f);
		if (!owned_code || strlen(owned_code) != len) {
			fprintf(stderr, "nsbox python: cannot read %s (or it holds a NUL byte)\n", file);
			json_decref(sys_argv);
			policy_free(&p);
			return NSBOX_EXIT_USAGE;
		}
		code = owned_code;
	} else if (!code && !module && !isatty(0)) {
		size_t len;

		owned_code = read_all(stdin, &len);
		if (!owned_code) {
			fprintf(stderr, "nsbox python: cannot read stdin\n");
			json_decref(sys_argv);
			policy_free(&p);
			return NSBOX_EXIT_USAGE;
		}
		code = owned_code;
		file = "<stdin>";
	}

	o.policy = &p;
	o.tools = stools;
	o.n_tools = n_tools;
	o.output_limit = out_limit;
	o.output = on_output;
	o.warn = cli_warn;
	/* Handshake and variable requests: generous for a cold start, but
	 * never longer than a limit the user asked for (plus slack). */
	o.control_timeout = p.time_limit > 0 ? (p.time_limit + 5 < 30 ? p.time_limit + 5 : 30) : 30;
	if (session_start(&s, &o, &err) < 0) {
		cli_print_error("python", &err);
		json_decref(sys_argv);
		rc = NSBOX_EXIT_SETUP;
		goto out;
	}
	active = s;
	{
		struct sigaction sa = { .sa_handler = on_sigint };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	if (session_set_var(s, "__nsbox_argv__", sys_argv, &err) < 0) {
		json_decref(sys_argv);
		fprintf(stderr, "nsbox python: %s\n", err.msg);
		rc = NSBOX_EXIT_PROTOCOL;
		goto out;
	}
	json_decref(sys_argv);
	{
		struct session_exec_req pre = {
			.code = "import sys\nsys.argv = __nsbox_argv__\ndel __nsbox_argv__, sys\n",
			.filename = "<nsbox>",
		};

		if (session_exec(s, &pre, &res, &err) < 0) {
			fprintf(stderr, "nsbox python: %s\n", err.msg);
			rc = NSBOX_EXIT_PROTOCOL;
			goto out;
		}
		if (res.outcome != SESSION_OK) {
			rc = report(&res, json_mode, false);
			session_result_free(&res);
			goto out;
		}
		session_result_free(&res);
	}
	if (!code && !module) {
		rc = repl(s);
		goto out;
	}
	if (module) {
		json_t *name = json_string(module);

		if (!name || session_set_var(s, "__nsbox_module__", name, &err) < 0) {
			json_decref(name);
			fprintf(stderr, "nsbox python: %s\n", err.msg);
			rc = NSBOX_EXIT_PROTOCOL;
			goto out;
		}
		json_decref(name);
		code = "import runpy as __nsbox_runpy__\n"
		       "__nsbox_runpy__.run_module(__nsbox_module__, run_name='__main__', alter_sys=True)\n";
		file = "<nsbox -m>";
	}
	req.code = code;
	req.filename = file ? file : "<string>";
	req.want_value = json_mode;
	req.stream = !json_mode;
	if (session_exec(s, &req, &res, &err) < 0) {
		fprintf(stderr, "nsbox python: %s\n", err.msg);
		rc = NSBOX_EXIT_USAGE;
		goto out;
	}
	rc = report(&res, json_mode, !json_mode);
	session_result_free(&res);
out:
	active = NULL;
	session_close(s, NULL);
	for (size_t k = 0; k < n_tools; k++)
		free((char *)ctools[k].name);
	policy_free(&p);
	return rc;
usage:
	py_usage(stderr);
usage_quiet:
	for (size_t k = 0; k < n_tools; k++)
		free((char *)ctools[k].name);
	policy_free(&p);
	return NSBOX_EXIT_USAGE;
}
