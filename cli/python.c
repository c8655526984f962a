/* nsbox python [OPTIONS] [-c CODE | -m MODULE | FILE | -] [ARG...]
 * Runs Python in a fresh sandboxed session, a thin front end over
 * libnsbox's session API (include/nsbox.h); with no code and a terminal,
 * an interactive REPL whose state lives in the sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "args.h"
#include "commands.h"

#define MAX_TOOLS 64
#define TOOL_OUTPUT_MAX (32u << 20) /* beyond the frame cap: the session refuses it clearly */

static nsbox_session_t *active;
/* Output is shown only for the user's code, not for our own set-up execs. */
static bool show_output;

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
		"  --connect SOCKET      get the sandbox from nsboxd(8) at SOCKET (also $NSBOX_CONNECT)\n"
		"  --quiet               no warnings about limits enforced by a fallback\n"
		"  --list-packages       print the Debian packages the root tree provides (NAME VERSION,\n"
		"                        or a JSON array with --json) and exit\n"
		"With no code and a terminal on stdin: an interactive session.\n%s",
		args_jail_help);
}

/* python's own options, for "did you mean". */
static const char *const py_opts[] = {
	"json", "tool", "output-limit", "connect", "quiet", "list-packages", "help", NULL
};

/* With --json, an error before the code runs is the JSON object on stdout
 * (printed once, at the end: cli_json_error); else a line on stderr. */
static bool json_errors;
static char py_errmsg[1024];

static void __attribute__((format(printf, 1, 2))) py_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (json_errors) {
		size_t n;

		vsnprintf(py_errmsg, sizeof(py_errmsg), fmt, ap);
		n = strlen(py_errmsg);
		if (n && py_errmsg[n - 1] == '\n')
			py_errmsg[n - 1] = '\0';
	} else {
		fputs("nsbox python: ", stderr);
		vfprintf(stderr, fmt, ap);
	}
	va_end(ap);
}

static void py_err_json(int status)
{
	if (json_errors && py_errmsg[0])
		cli_json_error(status == NSBOX_EXIT_USAGE   ? "usage_error"
			       : status == NSBOX_EXIT_SETUP ? "setup_error"
							    : "error",
			       status, py_errmsg);
}

static void on_sigint(int sig)
{
	(void)sig;
	if (active)
		nsbox_cancel(active); /* async-signal-safe */
}

static void on_output(void *ud, int stream, const char *data, size_t len)
{
	FILE *f = stream == 1 ? stdout : stderr;

	(void)ud;
	if (!show_output)
		return;
	fwrite(data, 1, len, f);
	fflush(f);
}

/* A host tool implemented by a command: the call's JSON on its stdin, a
 * JSON value on its stdout.  The command runs on the host, unsandboxed: it
 * is the user's own program. */
int cli_tool_run(void *ud, const char *name, const char *args_json, char **result_json, char **error)
{
	const struct cli_tool *t = ud;
	const char *in = args_json;
	_cleanup_free_ char *out = NULL;
	size_t out_len = 0, in_len, in_done = 0;
	bool overflow = false;
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 };
	json_error_t jerr;
	json_t *check;
	pid_t pid;
	int ws;

	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0)
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
			/* A tool may exit without reading its stdin: that write
			 * is EPIPE here, not a SIGPIPE that kills nsbox (whose
			 * SIGPIPE is SIG_DFL, for `nsbox ... | head`). */
			sigset_t pipe_set, old;
			struct timespec zero = { 0, 0 };
			ssize_t n;

			sigemptyset(&pipe_set);
			sigaddset(&pipe_set, SIGPIPE);
			if (sigprocmask(SIG_BLOCK, &pipe_set, &old) < 0) {
				n = -1; /* no write without the shield: give up feeding */
				errno = EPIPE;
			} else {
				n = write(pin[1], in + in_done, in_len - in_done);
				int werr = errno;

				if (n < 0 && werr == EPIPE)
					(void)sigtimedwait(&pipe_set, NULL, &zero);
				(void)sigprocmask(SIG_SETMASK, &old, NULL); /* undoes the block above */
				errno = werr;
			}

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
					overflow = true; /* keep draining; refused below */
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
	if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
		if (asprintf(error, "tool %s: command failed (%s %d)", name, WIFEXITED(ws) ? "exit status" : "signal",
			     WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws)) < 0)
			*error = NULL;
		return -1;
	}
	if (overflow) {
		if (asprintf(error, "tool %s: the command's output is too large (over %u bytes)", name,
			     TOOL_OUTPUT_MAX) < 0)
			*error = NULL;
		return -1;
	}
	/* Checked here to say which command broke (libnsbox checks it too). */
	check = json_loadb(out ? out : "", out_len, JSON_DECODE_ANY, &jerr);
	if (!check) {
		if (asprintf(error, "tool %s: the command's output is not JSON: %s", name, jerr.text) < 0)
			*error = NULL;
		return -1;
	}
	json_decref(check);
	out[out_len] = '\0';
	*result_json = TAKE_PTR(out);
	return 0;
fail_sys:
	if (asprintf(error, "tool %s: cannot run the command: %s", name, strerror(errno)) < 0)
		*error = NULL;
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

/* An uncaught SystemExit is the script's exit status, not an error to show. */
static bool is_exit(const nsbox_result_t *r)
{
	const char *t = nsbox_result_error_type(r);

	return nsbox_result_status(r) == NSBOX_EXCEPTION && t && !strcmp(t, "SystemExit");
}

static int report(nsbox_session_t *s, const nsbox_result_t *res, bool json_mode, bool streamed)
{
	static const char *const names[] = {
		[NSBOX_OK] = "ok",
		[NSBOX_EXCEPTION] = "exception",
		[NSBOX_TIME_LIMIT] = "timeout",
		[NSBOX_CANCELLED] = "cancelled",
		[NSBOX_MEMORY_LIMIT] = "memory",
		[NSBOX_CRASHED] = "crashed",
		[NSBOX_PROTOCOL_ERROR] = "protocol",
		[NSBOX_INCOMPLETE] = "incomplete",
	};
	enum nsbox_status status = nsbox_result_status(res);
	bool limit = status != NSBOX_OK && status != NSBOX_EXCEPTION;
	json_t *r = json_loads(nsbox_result_json(res), 0, NULL);

	if (json_mode) {
		struct nsbox_session_info info = { .struct_size = sizeof(info) };
		json_t *o = json_object();
		double wall, cpu;
		uint64_t peak;
		unsigned calls;
		json_t *usage;
		const char *keys[] = { "stdout",       "stderr",       "stdout_truncated", "stderr_truncated",
				       "stdout_bytes", "stderr_bytes", "exit_code" };

		nsbox_result_usage(res, &wall, &cpu, &peak, &calls);
		/* The same keys whatever the outcome: those only the runner
		 * knows are null when it could not say (killed at a limit). */
		usage = json_pack("{s:f,s:f,s:I,s:I,s:n,s:n}", "wall", wall, "cpu", cpu, "tool_calls",
				  (json_int_t)calls, "peak_memory", (json_int_t)peak, "max_rss", "duration");
		json_object_set_new(o, "value",
				    json_loads(nsbox_result_value(res), JSON_DECODE_ANY, NULL) ?: json_null());
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
			json_t *v = r ? json_object_get(r, keys[i]) : NULL;

			if (v)
				json_object_set(o, keys[i], v);
			else if (i < 2)
				json_object_set_new(o, keys[i], json_string(""));
			else if (i < 4)
				json_object_set_new(o, keys[i], json_false());
			else if (i < 6)
				json_object_set_new(o, keys[i],
						    json_integer((json_int_t)json_string_length(
							    json_object_get(o, keys[i - 4]))));
			else
				json_object_set_new(o, keys[i], json_integer(nsbox_result_exit_code(res)));
		}
		if (status == NSBOX_OK || (is_exit(res) && nsbox_result_exit_code(res) == 0))
			json_object_set_new(o, "error", json_null()); /* sys.exit(0) is a success */
		else if (r && json_is_object(json_object_get(r, "error")))
			json_object_set(o, "error", json_object_get(r, "error"));
		else if (status != NSBOX_OK)
			json_object_set_new(o, "error",
					    json_pack("{s:s?,s:s?,s:n}", "type", nsbox_result_error_type(res),
						      "message", nsbox_result_error_message(res), "traceback"));
		else
			json_object_set_new(o, "error", json_null());
		if (r && json_is_object(json_object_get(r, "usage")))
			json_object_update(usage, json_object_get(r, "usage"));
		if (r && json_is_number(json_object_get(r, "duration")))
			json_object_set(usage, "duration", json_object_get(r, "duration"));
		json_object_set_new(o, "usage", usage);
		/* sys.exit(N): "exit" with exit_code N, "ok" for 0. */
		json_object_set_new(o, "outcome",
				    json_string(!is_exit(res)			   ? names[status]
						: nsbox_result_exit_code(res) == 0 ? "ok"
										   : "exit"));
		json_object_set_new(o, "message",
				    limit ? json_string(nsbox_result_error_message(res) ?: "") : json_null());
		if (nsbox_session_info(s, &info, NULL) < 0)
			info.alive = false;
		json_object_set_new(o, "session_dead", json_boolean(!info.alive));
		cli_json_dump(o, stdout);
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
		if ((status == NSBOX_EXCEPTION && !is_exit(res)) || status == NSBOX_TIME_LIMIT ||
		    status == NSBOX_CANCELLED)
			print_error(r);
		if (limit)
			fprintf(stderr, "nsbox python: %s\n", nsbox_result_error_message(res) ?: "");
	}
	fflush(stdout);
	json_decref(r);
	return nsbox_result_exit_code(res);
}

static int repl(nsbox_session_t *s)
{
	char *line = NULL, *buf = NULL;
	size_t cap = 0, len = 0;
	struct nsbox_session_info info = { .struct_size = sizeof(info) };
	struct nsbox_exec_opts eo = { .struct_size = sizeof(eo), .interactive = true, .filename = "<stdin>" };

	if (nsbox_session_info(s, &info, NULL) < 0)
		info.python[0] = '\0';
	fprintf(stderr, "Python %s in an nsbox sandbox; state lives inside. Ctrl-D to quit.\n", info.python);
	for (;;) {
		nsbox_error_t *e = NULL;
		nsbox_result_t *res = NULL;
		ssize_t n;
		char *nb;
		bool dead;

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
		if (nsbox_exec(s, buf, &eo, &res, &e) < 0) {
			fprintf(stderr, "nsbox python: %s\n", nsbox_error_message(e));
			dead = nsbox_error_code(e) == -ENOTCONN;
			nsbox_error_free(e);
			len = 0;
			if (dead)
				break;
			continue;
		}
		if (nsbox_result_status(res) == NSBOX_INCOMPLETE) {
			nsbox_result_free(res);
			continue;
		}
		len = 0;
		report(s, res, false, true);
		nsbox_result_free(res);
		if (nsbox_session_info(s, &info, NULL) < 0 || !info.alive) {
			fprintf(stderr, "nsbox python: the session has ended\n");
			break;
		}
	}
	free(line);
	free(buf);
	return 0;
}

/* Set a global from a JSON value (consumed).  Returns 0 or -1 (printed). */
static int set_json_var(nsbox_session_t *s, const char *name, json_t *v)
{
	nsbox_error_t *e = NULL;
	char *text = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	int r;

	json_decref(v);
	if (!text) {
		fprintf(stderr, "nsbox python: out of memory\n");
		return -1;
	}
	r = nsbox_set_var(s, name, text, &e);
	free(text);
	if (r < 0) {
		fprintf(stderr, "nsbox python: %s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		return -1;
	}
	return 0;
}

static void free_tools(struct cli_tool *t, size_t n)
{
	for (size_t k = 0; k < n; k++)
		free(t[k].name);
}

/* --list-packages: what the policy's root tree provides (its dpkg status
 * file, read on the host by the library). */
static int print_packages(const nsbox_policy_t *p, bool json_mode)
{
	nsbox_error_t *e = NULL;
	char *json = NULL;
	json_t *arr, *pkg;
	size_t k;

	if (nsbox_policy_packages(p, &json, &e) < 0) {
		fprintf(stderr, "nsbox python: --list-packages: %s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		return NSBOX_EXIT_USAGE;
	}
	if (json_mode) {
		printf("%s\n", json);
		nsbox_free(json);
		return 0;
	}
	arr = json_loads(json, 0, NULL);
	nsbox_free(json);
	if (!arr) {
		fprintf(stderr, "nsbox python: --list-packages: out of memory\n");
		return NSBOX_EXIT_SETUP;
	}
	json_array_foreach(arr, k, pkg) printf("%s %s\n", json_string_value(json_object_get(pkg, "name")),
					       json_string_value(json_object_get(pkg, "version")));
	json_decref(arr);
	return 0;
}

int cmd_python(int argc, char **argv)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	struct cli_err err = { 0 };
	struct cli_tool ctools[MAX_TOOLS];
	size_t n_tools = 0;
	const char *code = NULL, *module = NULL, *file = NULL;
	_cleanup_free_ char *owned_code = NULL;
	bool json_mode = false, list_packages = false;
	uint64_t out_limit = 0;
	/* The CLI is single-threaded: the sandbox is made here (no helper to
	 * start), and CPython starts cold in it. */
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .warn = cli_warn, .in_process = true };
	struct nsbox_exec_opts eo = { .struct_size = sizeof(eo) };
	nsbox_session_t *s = NULL;
	nsbox_result_t *res = NULL;
	const char **py_argv = NULL;
	int i, r, rc;

	for (i = 1; i < argc && strcmp(argv[i], "--") && strcmp(argv[i], "-c") && strcmp(argv[i], "-m"); i++)
		json_errors |= !strcmp(argv[i], "--json");
	if (args_load_policy(&p, argc, argv, &err) < 0) {
		py_err("%s\n", err.msg);
		py_err_json(NSBOX_EXIT_USAGE);
		return NSBOX_EXIT_USAGE;
	}
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-' || !strcmp(a, "-"))
			break;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			py_usage(stdout);
			nsbox_policy_free(p);
			return 0;
		}
		if (!strcmp(a, "-c") || !strcmp(a, "-m")) {
			if (i + 1 >= argc) {
				py_err("%s needs an argument\n", a);
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
		if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
			so.warn = NULL;
			continue;
		}
		if (!strcmp(a, "--list-packages")) {
			list_packages = true;
			continue;
		}
		if (!strcmp(a, "--connect") || !strncmp(a, "--connect=", 10)) {
			const char *v = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);

			if (!v || !*v) {
				py_err("--connect needs nsboxd's socket path\n");
				goto usage;
			}
			/* libnsbox reads it at nsbox_session_new (nsbox_session_opts.connect). */
			setenv("NSBOX_CONNECT", v, 1);
			continue;
		}
		if (!strcmp(a, "--output-limit") || !strncmp(a, "--output-limit=", 15)) {
			const char *v = a[14] == '=' ? a + 15 : (i + 1 < argc ? argv[++i] : NULL);

			if (!v || nsbox_parse_size(v, &out_limit, NULL) < 0 || out_limit < 16 ||
			    out_limit > (64u << 20)) {
				py_err("--output-limit: expected a size from 16 to 64M\n");
				goto usage;
			}
			continue;
		}
		if (!strcmp(a, "--tool") || !strncmp(a, "--tool=", 7)) {
			const char *v = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
			const char *eq = v ? strchr(v, '=') : NULL;
			char *name;

			if (!eq || eq == v || !eq[1] || n_tools >= MAX_TOOLS) {
				py_err("--tool: expected NAME=COMMAND (at most %d)\n", MAX_TOOLS);
				goto usage;
			}
			name = strndup(v, (size_t)(eq - v));
			if (!name) {
				py_err("out of memory\n");
				goto usage_quiet;
			}
			/* The protocol's rule, checked before a sandbox is started
			 * for nothing. */
			if (nsbox_check_tool_name(name, &e) < 0) {
				py_err("--tool %s\n", nsbox_error_message(e));
				nsbox_error_free(e);
				e = NULL;
				free(name);
				goto usage_quiet;
			}
			/* Both would be registered; the session would refuse the
			 * second as a protocol error. */
			for (size_t k = 0; k < n_tools; k++)
				if (!strcmp(ctools[k].name, name)) {
					py_err("--tool %s: given twice\n", name);
					free(name);
					goto usage_quiet;
				}
			if (args_check_command(eq + 1, &err) < 0) {
				py_err("--tool %s: %s\n", name, err.msg);
				free(name);
				goto usage_quiet;
			}
			ctools[n_tools++] = (struct cli_tool){ name, eq + 1 };
			continue;
		}
		r = args_parse_jail_option(p, argc, argv, &i, &err);
		if (r < 0) {
			py_err("%s\n", err.msg);
			goto usage_quiet;
		}
		if (r == 0) {
			args_unknown_option("python", a, py_opts, &err);
			py_err("%s\n", err.msg);
			goto usage_quiet;
		}
	}
	if (nsbox_policy_check(p, &e) < 0) {
		py_err("%s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		goto usage_quiet;
	}
	if (list_packages) {
		rc = print_packages(p, json_mode);
		free_tools(ctools, n_tools);
		nsbox_policy_free(p);
		return rc;
	}
	if (!code && !module && i < argc)
		file = argv[i++];
	/* sys.argv as Python would set it, sent with the handshake. */
	py_argv = calloc((size_t)(argc - i) + 2, sizeof(*py_argv));
	if (!py_argv) {
		py_err("out of memory\n");
		goto usage_quiet;
	}
	py_argv[0] = code ? "-c" : module ? module : file ? file : "";
	for (int k = i; k < argc; k++)
		py_argv[1 + k - i] = argv[k];

	if (file) {
		FILE *f = strcmp(file, "-") ? fopen(file, "re") : stdin;
		size_t len;

		if (!f) {
			py_err("cannot open %s: %s\n", file, strerror(errno));
			free(py_argv);
			goto usage_quiet;
		}
		owned_code = read_all(f, &len);
		if (f != stdin)
			fclose(f);
		if (!owned_code || strlen(owned_code) != len) {
			py_err("cannot read %s (or it holds a NUL byte)\n", file);
			free(py_argv);
			goto usage_quiet;
		}
		code = owned_code;
	} else if (!code && !module && !isatty(0)) {
		size_t len;

		owned_code = read_all(stdin, &len);
		if (!owned_code) {
			py_err("cannot read stdin\n");
			free(py_argv);
			goto usage_quiet;
		}
		code = owned_code;
		file = "<stdin>";
	}

	so.output_limit = out_limit;
	so.output = json_mode ? NULL : on_output;
	so.argv = py_argv;
	r = nsbox_session_new(p, &so, &s, &e);
	free(py_argv);
	py_argv = NULL;
	if (r < 0) {
		py_err("%s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		rc = NSBOX_EXIT_SETUP;
		goto out;
	}
	for (size_t k = 0; k < n_tools; k++)
		if (nsbox_session_add_tool(s, ctools[k].name, NULL, "A host tool (nsbox python --tool).", cli_tool_run,
					   &ctools[k], &e) < 0) {
			py_err("--tool %s: %s\n", ctools[k].name, nsbox_error_message(e));
			rc = nsbox_error_code(e) == -EINVAL ? NSBOX_EXIT_USAGE : NSBOX_EXIT_PROTOCOL;
			nsbox_error_free(e);
			goto out;
		}
	active = s;
	{
		struct sigaction sa = { .sa_handler = on_sigint };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	show_output = true;
	if (!code && !module) {
		rc = repl(s);
		goto out;
	}
	if (module) {
		if (set_json_var(s, "__nsbox_module__", json_string(module)) < 0) {
			rc = NSBOX_EXIT_PROTOCOL;
			goto out;
		}
		code = "import runpy as __nsbox_runpy__\n"
		       "__nsbox_runpy__.run_module(__nsbox_module__, run_name='__main__', alter_sys=True)\n";
		file = "<nsbox -m>";
	}
	eo.filename = file ? file : "<string>";
	eo.repl = json_mode;
	if (nsbox_exec(s, code, &eo, &res, &e) < 0) {
		py_err("%s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		rc = NSBOX_EXIT_USAGE;
		goto out;
	}
	rc = report(s, res, json_mode, !json_mode);
out:
	py_err_json(rc);
	active = NULL;
	nsbox_result_free(res);
	nsbox_session_free(s);
	free_tools(ctools, n_tools);
	nsbox_policy_free(p);
	return rc;
usage:
	if (!json_errors)
		fputs("(see nsbox python --help)\n", stderr);
usage_quiet:
	py_err_json(NSBOX_EXIT_USAGE);
	free_tools(ctools, n_tools);
	nsbox_policy_free(p);
	return NSBOX_EXIT_USAGE;
}
