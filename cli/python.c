/* nsbox python [OPTIONS] [-c CODE | -m MODULE | FILE | -] [ARG...]
 * Runs Python in a fresh sandboxed session, a thin front end over
 * libnsbox's session API (include/nsbox.h); with no code and a terminal,
 * an interactive REPL whose state lives in the sandbox. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <editline/readline.h>
#include <jansson.h>

#include "args.h"
#include "commands.h"

#define MAX_TOOLS 64
#define OUTPUT_LIMIT_MAX (64u << 20)
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
		"  -u, -W ARG, -X OPT    as python's (-X: utf8, int_max_str_digits=N, faulthandler,\n"
		"                        tracemalloc[=N]); -B -E -s -S -I -P -R\n"
		"                        are what the sandbox's interpreter does anyway; -V the version\n"
		"  --json                print one JSON object: value, stdout, stderr, error, usage,\n"
		"                        displays, files\n"
		"  --display-dir DIR     write displays (display-001.png, ...) and /out files (DIR/out)\n"
		"  --tool NAME=COMMAND   a host tool: COMMAND gets {\"args\":[...],\"kwargs\":{...}} on stdin\n"
		"                        and prints a JSON result; callable inside as NAME(...)\n"
		"  --output-limit SIZE   --json: cap on the stdout and stderr kept, each (default 1M;\n"
		"                        16 to 64M, or 0 / unlimited: 64M); a cut is flagged and warned\n"
		"                        about.  Output shown as produced is never cut.\n"
		"  --connect SOCKET      get the sandbox from nsboxd(8) at SOCKET (also $NSBOX_CONNECT)\n"
		"  --quiet               no warnings about limits enforced by a fallback\n"
		"  --list-packages       print the Debian packages the root tree provides (NAME VERSION,\n"
		"                        or a JSON array with --json) and exit\n"
		"With no code and a terminal on stdin: an interactive session.\n%s",
		args_jail_help);
}

/* Its own long options that take the next word (args_load_policy). */
static const char *const py_values[] = { "tool", "output-limit", "connect", "display-dir", NULL };

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

static bool in_repl, in_exec;
volatile sig_atomic_t cli_tool_stop;
static volatile sig_atomic_t got_sigint;

/* Ctrl-C: KeyboardInterrupt inside the running code (the runner raises it
 * for a cancel, set up by cli_run), or at the REPL's prompt, a fresh one. */
static void on_sigint(int sig)
{
	if (sig == SIGINT && in_repl && !in_exec) {
		got_sigint = 1;
	} else if (active) {
		cli_tool_stop = 1;    /* a host tool command running now goes first */
		nsbox_cancel(active); /* async-signal-safe */
	}
}

/* The reader of our stdout or stderr went away (`nsbox python ... | head`):
 * the code is cancelled and nsbox exits 141, as a SIGPIPE death would
 * give, but only after the session is freed (a bounded workspace is
 * written back then; SIGPIPE itself would have lost it). */
static volatile sig_atomic_t out_broken;

/* The policy's TimeLimit= (0: none), and when the last exec began. */
static double time_limit;
static unsigned long long exec_t0;

static unsigned long long mono_ns(void);

/* Our writes to stdout and stderr never outlast an exec's time limit.
 * libnsbox checks the deadline between our callbacks, so a caller that
 * reads one pipe to its end before the other (or neither) would hold nsbox
 * in write() past the limit while the sandbox ran on.  Up to the deadline a
 * write waits as python's would; from it on, what the reader has no room
 * for is dropped (ETIME): the code is being stopped for its limit, as
 * python under timeout(1) loses what it has not written.  So too what nsbox
 * prints after the exec (a traceback, "time limit exceeded").  The file
 * description is the caller's, so no O_NONBLOCK on it: a wait for POLLOUT,
 * then at most PIPE_BUF bytes, which a pipe with room takes without
 * blocking.  A regular file or block device never waits on a reader and is
 * written whole. */
static double out_time_left(int fd)
{
	static signed char plain[3] = { -1, -1, -1 };
	double left;

	if (fd >= 0 && fd < 3 && plain[fd] < 0) {
		struct stat st;

		plain[fd] = fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
	}
	if ((fd >= 0 && fd < 3 && plain[fd]) || !active || time_limit <= 0 || !exec_t0)
		return -1;
	/* The running exec's own deadline, else the last one's. */
	left = nsbox_exec_time_left(active);
	if (left < 0) {
		unsigned long long end = exec_t0 + (unsigned long long)(time_limit * 1e9), now = mono_ns();

		left = now < end ? (double)(end - now) / 1e9 : 0;
	}
	return left;
}

static int out_write(int fd, const char *data, size_t len)
{
	while (len) {
		double left = out_time_left(fd);
		size_t chunk = len;
		ssize_t n;

		if (left >= 0) {
			struct pollfd pf = { fd, POLLOUT, 0 };
			int r = poll(&pf, 1, left >= 1 ? 1000 : (int)(left * 1000));

			if (r < 0 && errno == EINTR && !cli_tool_stop)
				continue;
			if (r < 0)
				return -1;
			if (r == 0) {
				if (left > 0)
					continue; /* the time left is read again */
				errno = ETIME;
				return -1;
			}
			if (chunk > PIPE_BUF)
				chunk = PIPE_BUF;
		}
		n = write(fd, data, chunk);
		if (n < 0 && errno == EINTR && !cli_tool_stop)
			continue;
		if (n < 0)
			return -1;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

static void __attribute__((format(printf, 2, 3))) out_printf(int fd, const char *fmt, ...)
{
	char *text = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&text, fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)out_write(fd, text, (size_t)n);
	free(text);
}

static void on_output(void *ud, int stream, const char *data, size_t len)
{
	(void)ud;
	if (!show_output)
		return;
	if (out_write(stream == 1 ? 1 : 2, data, len) < 0 && errno == EPIPE) {
		out_broken = 1;
		show_output = false;
		if (active)
			nsbox_cancel(active);
	}
}

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

int cli_tool_run(void *ud, const char *name, const char *args_json, char **result_json, char **error)
{
	return cli_tool_call(ud, active, name, args_json, result_json, error);
}

/* A host tool implemented by a command: the call's JSON on its stdin, a
 * JSON value on its stdout.  The command runs on the host, unsandboxed: it
 * is the user's own program, but the sandbox chooses when to call it and
 * with what, so it is bounded like the exec: at the exec's time limit, or
 * on a stop (cli_tool_stop), its process group is killed. */
int cli_tool_call(const struct cli_tool *t, nsbox_session_t *s, const char *name, const char *args_json,
		  char **result_json, char **error)
{
	const char *in = args_json;
	_cleanup_free_ char *out = NULL, *one_line = NULL;
	size_t out_len = 0, in_len, in_done = 0;
	bool overflow = false;
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 };
	double left = s ? nsbox_exec_time_left(s) : -1;
	unsigned long long deadline = left >= 0 ? mono_ns() + (unsigned long long)(left * 1e9) : 0;
	const char *stopped = NULL;
	sigset_t stop_set, old_mask;
	json_error_t jerr;
	json_t *check;
	pid_t pid;
	int ws;

	/* The call is the sandbox's own spelling (libnsbox hands it on): a
	 * line break between its tokens is made one line again, as a tool
	 * reading one line of JSON expects (inside a string it is escaped). */
	if (strpbrk(args_json, "\r\n")) {
		json_t *v = json_loads(args_json, JSON_ALLOW_NUL, NULL);

		one_line = v ? json_dumps(v, JSON_COMPACT) : NULL;
		json_decref(v);
		if (one_line)
			in = one_line;
	}
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0)
		goto fail_sys;
	/* The stop signals are taken only inside ppoll below, so that one
	 * that comes before it still ends the wait. */
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGINT);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &stop_set, &old_mask) < 0)
		goto fail_sys;
	pid = fork();
	if (pid < 0) {
		int saved = errno;

		(void)sigprocmask(SIG_SETMASK, &old_mask, NULL);
		errno = saved;
		goto fail_sys;
	}
	if (pid == 0) {
		/* Its own process group: what it starts goes with it. */
		(void)setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		(void)sigprocmask(SIG_SETMASK, &old_mask, NULL);
		if (dup2(pin[0], 0) < 0 || dup2(pout[1], 1) < 0)
			_exit(127);
		execl("/bin/sh", "sh", "-c", t->command, (char *)NULL);
		_exit(127);
	}
	(void)setpgid(pid, pid); /* as the child does: whichever runs first */
	close(pin[0]);
	close(pout[1]);
	pin[0] = pout[1] = -1;
	in_len = strlen(in);
	fcntl(pin[1], F_SETFL, O_NONBLOCK);
	/* Feed stdin and drain stdout together: either may fill a pipe. */
	while (pout[0] >= 0) {
		struct pollfd p[2] = { { pout[0], POLLIN, 0 }, { pin[1], POLLOUT, 0 } };
		unsigned long long now = mono_ns();
		struct timespec wait;
		int k;

		if (cli_tool_stop || (deadline && now >= deadline)) {
			stopped = cli_tool_stop ? "interrupted" : "stopped at the exec's time limit";
			kill(-pid, SIGKILL);
			break;
		}
		if (deadline) {
			wait.tv_sec = (time_t)((deadline - now) / 1000000000ull);
			wait.tv_nsec = (long)((deadline - now) % 1000000000ull);
		}
		k = ppoll(p, pin[1] >= 0 ? 2 : 1, deadline ? &wait : NULL, &old_mask);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			kill(-pid, SIGKILL); /* no way to wait for it: it must not outlive the call */
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
	if (pout[0] >= 0)
		close(pout[0]);
	/* Its stdout is at its end, but the command may live on (one that
	 * closed its stdout, or daemonised its work): it is waited for under
	 * the same deadline and stops.  Then what is left of its process
	 * group is killed, before the leader is reaped (until then the group's
	 * id is its own): nothing a call started outlives it. */
	if (!stopped) {
		int pfd = (int)syscall(SYS_pidfd_open, pid, 0);

		while (pfd >= 0) {
			struct pollfd q = { pfd, POLLIN, 0 };
			unsigned long long now = mono_ns();
			struct timespec wait;
			int k;

			if (cli_tool_stop || (deadline && now >= deadline)) {
				stopped = cli_tool_stop ? "interrupted" : "stopped at the exec's time limit";
				break;
			}
			if (deadline) {
				wait.tv_sec = (time_t)((deadline - now) / 1000000000ull);
				wait.tv_nsec = (long)((deadline - now) % 1000000000ull);
			}
			k = ppoll(&q, 1, deadline ? &wait : NULL, &old_mask);
			if (k > 0 || (k < 0 && errno != EINTR))
				break;
		}
		if (pfd >= 0)
			close(pfd);
		else { /* no pidfd_open (before Linux 5.3): waited for as before, not reaped */
			siginfo_t si;

			while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
				;
		}
	}
	kill(-pid, SIGKILL);
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	(void)sigprocmask(SIG_SETMASK, &old_mask, NULL);
	if (stopped) {
		if (asprintf(error, "tool %s: the command was %s (its process group killed)", name, stopped) < 0)
			*error = NULL;
		return -1;
	}
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
	check = json_loadb(out ? out : "", out_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
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

/* Code and a script's source travel in one frame, at most 16 MiB
 * (nsbox-protocol(7)): reading more (a /dev/zero, an endless pipe) only
 * grows the host's memory until malloc fails. */
#define PY_SOURCE_MAX (16u << 20)

/* All of f, NUL-terminated; NULL with errno EFBIG past PY_SOURCE_MAX. */
static char *read_all(FILE *f, size_t *len)
{
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);

	while (buf) {
		size_t k = fread(buf + n, 1, cap - n - 1, f);

		n += k;
		if (k == 0)
			break;
		if (n > PY_SOURCE_MAX) {
			free(buf);
			errno = EFBIG;
			return NULL;
		}
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
		(void)out_write(2, tb, strlen(tb));
	else if (json_is_object(e))
		out_printf(2, "%s: %s\n", json_string_value(json_object_get(e, "type")),
			   json_string_value(json_object_get(e, "message")));
}

/* An uncaught SystemExit is the script's exit status, not an error to show. */
static bool is_exit(const nsbox_result_t *r)
{
	const char *t = nsbox_result_error_type(r);

	return nsbox_result_status(r) == NSBOX_EXCEPTION && t && !strcmp(t, "SystemExit");
}

/* --display-dir: where each result's displays and /out files go. */
static int display_fd = -1;
static const char *display_dir;
static unsigned display_seq;

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
	json_t *r = json_loads(nsbox_result_json(res), JSON_ALLOW_NUL, NULL);
	const char *etype = nsbox_result_error_type(res);
	int rc = nsbox_result_exit_code(res);

	/* python's status for a KeyboardInterrupt (it ends by SIGINT). */
	if (status == NSBOX_EXCEPTION && etype && !strcmp(etype, "KeyboardInterrupt"))
		rc = 130;
	/* Never a silent cut: the JSON says stdout_truncated, and so does stderr. */
	for (int k = 0; k < 2 && r && !streamed; k++) {
		const char *name = k ? "stderr" : "stdout";
		char key[32];

		snprintf(key, sizeof(key), "%s_truncated", name);
		if (json_is_true(json_object_get(r, key))) {
			snprintf(key, sizeof(key), "%s_bytes", name);
			fprintf(stderr,
				"nsbox python: warning: %s cut to the output limit (%lld bytes written; see --output-limit)\n",
				name, (long long)json_integer_value(json_object_get(r, key)));
		}
	}

	/* Saved first: a failure here is part of the status --json reports. */
	if (display_fd >= 0 && cli_display_save(display_fd, display_dir, res, &display_seq) < 0 && rc == 0)
		rc = 1;
	if (json_mode) {
		struct nsbox_session_info info = { .struct_size = sizeof(info) };
		json_t *o = json_object();
		double wall, cpu;
		uint64_t peak;
		unsigned calls;
		json_t *usage;
		const char *keys[] = {
			"stdout",	  "stderr",    "stdout_truncated", "stderr_truncated",	 "stdout_bytes",
			"stderr_bytes",	  "exit_code", "displays",	   "displays_truncated", "files",
			"files_truncated"
		};

		nsbox_result_usage(res, &wall, &cpu, &peak, &calls);
		/* The same keys whatever the outcome: those only the runner
		 * knows are null when it could not say (killed at a limit). */
		usage = json_pack("{s:f,s:f,s:I,s:I,s:n,s:n}", "wall", wall, "cpu", cpu, "tool_calls",
				  (json_int_t)calls, "peak_memory", (json_int_t)peak, "max_rss", "duration");
		json_object_set_new(o, "value",
				    json_loads(nsbox_result_value(res), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL)
					    ?: json_null());
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
			else if (i == 6)
				json_object_set_new(o, keys[i], json_integer(nsbox_result_exit_code(res)));
			else if (i == 7 || i == 9)
				json_object_set_new(o, keys[i], json_array()); /* displays, files: none */
			else
				json_object_set_new(o, keys[i], json_false()); /* their _truncated flags */
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
		/* nsbox's own status (130 for a KeyboardInterrupt, 1 when the
		 * displays could not be saved), as nsbox(1) says. */
		json_object_set_new(o, "exit_code", json_integer(rc));
		cli_json_dump(o, stdout);
		fputc('\n', stdout);
		json_decref(o);
	} else {
		/* Streamed: all of it went to on_output as produced (stream_all). */
		if (r && !streamed) {
			json_t *so = json_object_get(r, "stdout"), *se = json_object_get(r, "stderr");

			fwrite(json_string_value(so) ?: "", 1, json_string_length(so), stdout);
			fwrite(json_string_value(se) ?: "", 1, json_string_length(se), stderr);
		}
		fflush(stdout);
		if ((status == NSBOX_EXCEPTION && !is_exit(res)) || status == NSBOX_TIME_LIMIT ||
		    status == NSBOX_CANCELLED)
			print_error(r);
		if (limit)
			out_printf(2, "nsbox python: %s\n", nsbox_result_error_message(res) ?: "");
	}
	fflush(stdout);
	json_decref(r);
	return rc;
}

/* ---- the REPL: libedit for line editing, history and completion ---- */

/* libedit is opened when the REPL starts, not linked: its four libraries
 * (libedit, libtinfo, libbsd, libmd) cost every nsbox process about a
 * quarter of a millisecond to map and relocate, and each sandbox's pid 1,
 * a clone of this process, as much again.  The header gives the types. */
/* clang-format off */
#define EDIT_FUNCS(X) \
	X(rl_callback_handler_install) X(rl_callback_handler_remove) X(rl_callback_read_char) \
	X(rl_free_line_state) X(rl_cleanup_after_signal) X(rl_completion_matches) X(rl_bind_key) \
	X(using_history) X(stifle_history) X(read_history) X(write_history) X(add_history)
#define EDIT_VARS(X) \
	X(rl_readline_name) X(rl_catch_signals) X(rl_attempted_completion_function) \
	X(rl_basic_word_break_characters) X(rl_completion_append_character)
/* clang-format on */
static struct {
#define FN(n) __typeof__(&n) n;
#define VAR(n) __typeof__(n) *n;
	EDIT_FUNCS(FN) EDIT_VARS(VAR)
#undef FN
#undef VAR
} ed;

/* 0, or -1 with a message on stderr naming what is missing. */
static int edit_open(void)
{
	void *h = dlopen("libedit.so.2", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "nsbox python: the REPL needs libedit (Debian's libedit2): %s\n", dlerror());
		return -1;
	}
#define LOAD(n)                                                                                              \
	if (!(*(void **)&ed.n = dlsym(h, #n))) {                                                             \
		fprintf(stderr, "nsbox python: the REPL needs libedit: %s has no %s\n", "libedit.so.2", #n); \
		return -1;                                                                                   \
	}
	EDIT_FUNCS(LOAD)
	EDIT_VARS(LOAD)
#undef LOAD
	return 0;
}

static char *repl_line;
static bool repl_done;

static void on_line(char *line)
{
	repl_line = line;
	repl_done = true;
	/* Until the next prompt: output of the exec must not be redrawn
	 * around a half-installed line. */
	ed.rl_callback_handler_remove();
}

/* One line with a prompt, as python's readline module reads it: the
 * callback interface under our own poll, so that Ctrl-C at the prompt
 * comes back here (-2) instead of killing or being lost.  NULL at EOF. */
static char *read_line(const char *prompt, int *why)
{
	repl_done = false;
	repl_line = NULL;
	got_sigint = 0;
	ed.rl_callback_handler_install(prompt, on_line);
	while (!repl_done) {
		struct pollfd pfd = { 0, POLLIN, 0 };
		int k = poll(&pfd, 1, -1);

		if (got_sigint) {
			ed.rl_free_line_state();
			ed.rl_cleanup_after_signal();
			ed.rl_callback_handler_remove();
			*why = -2;
			return NULL;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			ed.rl_callback_handler_remove();
			break;
		}
		ed.rl_callback_read_char();
		if (got_sigint) {
			ed.rl_free_line_state();
			ed.rl_callback_handler_remove();
			*why = -2;
			return NULL;
		}
	}
	*why = repl_line ? 0 : -1;
	return repl_line;
}

/* ^C as a key: libedit's line mode reads it as a character (no ISIG
 * while editing), where python's readline gets SIGINT. */
static int on_ctrl_c(int count, int key)
{
	(void)count;
	(void)key;
	got_sigint = 1;
	return 0;
}

static nsbox_session_t *complete_session;

/* Tab: the sandbox's names, from rlcompleter inside (the runner's
 * complete(), run as an exec whose output is not shown). */
static json_t *complete_list(const char *text)
{
	struct nsbox_exec_opts eo = {
		.struct_size = sizeof(eo), .repl = true, .filename = "<nsbox-runner>", .timeout = 5
	};
	static const char pre[] = "__import__('_nsbox_runner').complete(";
	nsbox_result_t *res = NULL;
	nsbox_error_t *e = NULL;
	json_t *t = json_string(text), *v = NULL;
	char *arg = t ? json_dumps(t, JSON_ENCODE_ANY) : NULL, *code = NULL;

	json_decref(t);
	if (arg && asprintf(&code, "%s%s)\n", pre, arg) >= 0 &&
	    nsbox_exec(complete_session, code, &eo, &res, &e) == 0 && nsbox_result_status(res) == NSBOX_OK)
		v = json_loads(nsbox_result_value(res), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	nsbox_error_free(e);
	nsbox_result_free(res);
	free(arg);
	free(code);
	if (v && !json_is_array(v)) {
		json_decref(v);
		v = NULL;
	}
	return v;
}

static char *complete_gen(const char *text, int state)
{
	static json_t *matches;
	static size_t next;
	const char *m;

	if (state == 0) {
		json_decref(matches);
		matches = complete_list(text);
		next = 0;
	}
	/* The sandbox chose these names (its globals): one that could move
	 * the cursor, retitle or recolour the terminal when libedit lists it
	 * is left out. */
	while (matches && next < json_array_size(matches)) {
		json_t *s = json_array_get(matches, next++);

		m = json_string_value(s);
		if (m && strlen(m) == json_string_length(s) && strlen(m) <= 1024 && cli_text_inert(m))
			return strdup(m);
	}
	return NULL;
}

static char **complete(const char *text, int start, int end)
{
	(void)start;
	(void)end;
	*ed.rl_completion_append_character = '\0';
	return ed.rl_completion_matches(text, complete_gen);
}

static char *history_path(void)
{
	const char *home = getenv("HOME");
	char *p = NULL;

	if (!home || !*home || asprintf(&p, "%s/.nsbox_history", home) < 0)
		return NULL;
	return p;
}

/* The REPL's status: 0 at EOF (Ctrl-D), exit()'s code, -1 with the
 * session lost, or -2 when libedit can't be opened. */
static int repl(nsbox_session_t *s)
{
	char *buf = NULL;
	size_t len = 0;
	struct nsbox_session_info info = { .struct_size = sizeof(info) };
	struct nsbox_exec_opts eo = { .struct_size = sizeof(eo), .interactive = true, .filename = "<stdin>" };
	_cleanup_free_ char *hist = history_path();
	int rc = 0;

	if (edit_open() < 0)
		return -2;
	if (nsbox_session_info(s, &info, NULL) < 0)
		info.python[0] = '\0';
	fprintf(stderr,
		"Python %s in an nsbox sandbox; state lives inside.\n"
		"Type \"help\", \"copyright\", \"credits\" or \"license\" for more information.\n",
		info.python);
	complete_session = s;
	*ed.rl_readline_name = "python";
	*ed.rl_catch_signals = 0;
	ed.rl_bind_key(3, on_ctrl_c);
	*ed.rl_attempted_completion_function = complete;
	/* rlcompleter's delimiters: a dotted name is one word. */
	*ed.rl_basic_word_break_characters = " \t\n`~!@#$%^&*()-=+[{]}\\|;:'\",<>/?";
	ed.using_history();
	ed.stifle_history(1000);
	if (hist)
		ed.read_history(hist);
	for (;;) {
		nsbox_error_t *e = NULL;
		nsbox_result_t *res = NULL;
		char *line, *nb;
		size_t n;
		int why;
		bool dead;

		line = read_line(len ? "... " : ">>> ", &why);
		if (why == -2) {
			/* python's REPL: the input so far is dropped, the session stays. */
			fputs("\nKeyboardInterrupt\n", stderr);
			len = 0;
			continue;
		}
		if (!line) {
			fputc('\n', stdout);
			break;
		}
		if (*line)
			ed.add_history(line);
		n = strlen(line);
		nb = realloc(buf, len + n + 2);
		if (!nb) {
			free(line);
			break;
		}
		buf = nb;
		memcpy(buf + len, line, n);
		len += n;
		buf[len++] = '\n';
		buf[len] = '\0';
		free(line);
		in_exec = true;
		got_sigint = 0;
		cli_tool_stop = 0;
		exec_t0 = mono_ns();
		if (nsbox_exec(s, buf, &eo, &res, &e) < 0) {
			in_exec = false;
			fprintf(stderr, "nsbox python: %s\n", nsbox_error_message(e));
			dead = nsbox_error_code(e) == -ENOTCONN;
			nsbox_error_free(e);
			len = 0;
			if (dead) {
				rc = -1;
				break;
			}
			continue;
		}
		in_exec = false;
		if (nsbox_result_status(res) == NSBOX_INCOMPLETE) {
			nsbox_result_free(res);
			continue;
		}
		len = 0;
		if (is_exit(res)) {
			rc = nsbox_result_exit_code(res);
			nsbox_result_free(res);
			break;
		}
		report(s, res, false, true);
		nsbox_result_free(res);
		if (nsbox_session_info(s, &info, NULL) < 0 || !info.alive) {
			fprintf(stderr, "nsbox python: the session has ended\n");
			rc = -1;
			break;
		}
	}
	if (hist)
		ed.write_history(hist);
	free(buf);
	return rc;
}

/* bytes as a JSON string of the code points 0-255 (latin-1). */
static json_t *latin1_json(const char *b, size_t n)
{
	_cleanup_free_ char *u = malloc(2 * n + 1);
	size_t k = 0;

	if (!u)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)b[i];

		if (c < 0x80) {
			u[k++] = (char)c;
		} else {
			u[k++] = (char)(0xc0 | (c >> 6));
			u[k++] = (char)(0x80 | (c & 0x3f));
		}
	}
	return json_stringn(u, k);
}

/* Where the file is inside the sandbox: under /workspace when it lies
 * in the policy's workspace, else NULL (not visible inside). */
static char *sandbox_path(const nsbox_policy_t *p, const char *file)
{
	_cleanup_free_ char *real = realpath(file, NULL);
	_cleanup_free_ char *text = nsbox_policy_to_string(p);
	_cleanup_free_ char *ws = NULL;
	char *out = NULL, *w, *end;
	size_t n;

	/* The policy's text (nsbox-policy(5)) is the public view of it. */
	w = text ? strstr(text, "\nWorkspace=") : NULL;
	if (!real || !w)
		return NULL;
	w += strlen("\nWorkspace=");
	end = strchr(w, '\n');
	if (end)
		*end = '\0';
	if (!*w || !(ws = realpath(w, NULL)))
		return NULL;
	n = strlen(ws);
	if (strncmp(real, ws, n) || (real[n] != '/' && real[n] != '\0'))
		return NULL;
	if (asprintf(&out, "/workspace%s", real + n) < 0)
		return NULL;
	return out;
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

/* nsbox_exec refused to run the code: the input's fault (too large for a
 * frame, not UTF-8) is a usage error, FILE or -c alike; a session that
 * is gone is the runner's. */
static int exec_fail_status(const nsbox_error_t *e)
{
	int c = nsbox_error_code(e);

	return c == -EINVAL || c == -EMSGSIZE ? NSBOX_EXIT_USAGE : NSBOX_EXIT_PROTOCOL;
}

/* python's one-letter options, as python parses them: clustered ("-uc
 * CODE", "-Wd"), an argument either attached or the next word.  What the
 * sandbox's interpreter already does is accepted as it is: -B (it writes no
 * bytecode), -E, -s, -S, -I and -P (it is isolated: no environment, no user
 * site, no site, no script directory), -R (hashes are randomised) and -q.
 * What it can take after initialisation is passed on: -u, -W, and the -X
 * options the runtime can still set.  The rest would need the interpreter
 * initialised with them, which the sandbox's was before these flags were
 * known: refused, saying so, not ignored. */
struct py_flags {
	bool unbuffered, version, help, quiet;
	const char *code, *module;
	json_t *warnoptions, *xoptions;
};

static void py_flags_free(struct py_flags *f)
{
	json_decref(f->warnoptions);
	json_decref(f->xoptions);
}

/* Whether a is a cluster whose -c or -m ends nsbox's options (what follows
 * is the program's); -W and -X take the rest of theirs. */
static bool py_cluster_ends(const char *a)
{
	if (a[0] != '-' || a[1] == '-')
		return false;
	for (const char *c = a + 1; *c && *c != 'W' && *c != 'X'; c++)
		if (*c == 'c' || *c == 'm')
			return true;
	return false;
}

static int py_cluster(int argc, char **argv, int *i, struct py_flags *f)
{
	const char *a = argv[*i];

	for (const char *c = a + 1; *c; c++) {
		const char *val;

		switch (*c) {
		case 'B':
		case 'E':
		case 's':
		case 'S':
		case 'I':
		case 'P':
		case 'R':
			continue;
		case 'q':
			f->quiet = true;
			continue;
		case 'u':
			f->unbuffered = true;
			continue;
		case 'V':
			f->version = true;
			continue;
		case 'h':
		case '?':
			f->help = true;
			continue;
		case 'c':
		case 'm':
		case 'W':
		case 'X':
			if (c[1])
				val = c + 1;
			else if (*i + 1 < argc)
				val = argv[++*i];
			else {
				py_err("-%c needs an argument\n", *c);
				return -1;
			}
			if (*c == 'c')
				f->code = val;
			else if (*c == 'm')
				f->module = val;
			else if (json_array_append_new(*c == 'W' ? f->warnoptions : f->xoptions, json_string(val)) <
				 0) {
				py_err("-%c %s: not UTF-8\n", *c, val);
				return -1;
			}
			if (*c == 'X' && strcmp(val, "utf8") && strcmp(val, "utf8=1") &&
			    strncmp(val, "int_max_str_digits=", 19) && strcmp(val, "faulthandler") &&
			    strcmp(val, "tracemalloc") && strncmp(val, "tracemalloc=", 12)) {
				py_err("-X %s: not supported: the sandbox's interpreter is initialised before this flag is "
				       "known (supported: utf8, int_max_str_digits=N, faulthandler, tracemalloc[=N])\n",
				       val);
				return -1;
			}
			return 0;
		case 'O':
		case 'b':
		case 'd':
		case 'i':
		case 'v':
		case 'x':
			py_err("-%c: not supported: the sandbox's interpreter is initialised before this flag is known\n",
			       *c);
			return -1;
		default:
			py_err("unknown option -%c\n", *c);
			return -1;
		}
	}
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
	json_t *cli = NULL;
	_cleanup_free_ char *launcher = NULL;
	bool pass_stdin = false, launch;
	/* Freed on every return (cleanup): the early ones too. */
	struct py_flags pyf
		__attribute__((cleanup(py_flags_free))) = { .warnoptions = json_array(), .xoptions = json_array() };
	int i, r, rc;

	/* EPIPE, not SIGPIPE: see out_broken.  The sandbox's processes start
	 * with every signal at its default (jail/payload.c). */
	signal(SIGPIPE, SIG_IGN);
	for (i = 1; i < argc && strcmp(argv[i], "--") && !py_cluster_ends(argv[i]); i++)
		json_errors |= !strcmp(argv[i], "--json");
	if (args_load_policy(&p, argc, argv, py_values, &err) < 0) {
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
		if (a[1] != '-') {
			if (py_cluster(argc, argv, &i, &pyf) < 0)
				goto usage;
			if (pyf.help) {
				py_usage(stdout);
				nsbox_policy_free(p);
				return 0;
			}
			if (pyf.quiet)
				so.warn = NULL;
			if (pyf.code || pyf.module) {
				code = pyf.code;
				module = pyf.module;
				i++;
				break;
			}
			continue;
		}
		if (!strcmp(a, "--version")) {
			pyf.version = true;
			continue;
		}
		if (!strcmp(a, "--help")) {
			py_usage(stdout);
			nsbox_policy_free(p);
			return 0;
		}
		if (!strcmp(a, "--json")) {
			json_mode = true;
			continue;
		}
		if (!strcmp(a, "--display-dir") || !strncmp(a, "--display-dir=", 14)) {
			const char *v = a[13] == '=' ? a + 14 : (i + 1 < argc ? argv[++i] : NULL);

			if (!v || !*v) {
				py_err("--display-dir needs a directory\n");
				goto usage;
			}
			if (display_fd >= 0)
				close(display_fd);
			char eb[512];

			if ((display_fd = cli_display_open(v, eb, sizeof(eb))) < 0) {
				py_err("%s\n", eb);
				goto usage_quiet;
			}
			display_dir = v;
			continue;
		}
		if (!strcmp(a, "--quiet")) {
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

			if (v && (!strcmp(v, "unlimited") || !strcmp(v, "0")))
				out_limit = OUTPUT_LIMIT_MAX;
			else if (!v || nsbox_parse_size(v, &out_limit, NULL) < 0 || out_limit < 16 ||
				 out_limit > OUTPUT_LIMIT_MAX) {
				py_err("--output-limit: expected a size from 16 to 64M, 0 or unlimited\n");
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
	/* Through nsboxd a tree's name is the service's to resolve, among its
	 * own builds: this host need not have it.  Only that is left to it. */
	r = nsbox_policy_check(p, &e);
	if (!list_packages && args_left_to_service(r, e)) {
		nsbox_error_free(e);
		e = NULL;
	} else if (r < 0) {
		py_err("%s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		goto usage_quiet;
	}
	/* A tool's program runs on the host, outside any sandbox: one the
	 * sandbox may rewrite (in its workspace, live or written back, or a
	 * writable bind) would be the sandbox's code run there. */
	for (size_t k = 0; k < n_tools; k++) {
		if (args_check_command_places(ctools[k].command, p, &e) < 0) {
			py_err("--tool %s: %s\n", ctools[k].name, nsbox_error_message(e));
			nsbox_error_free(e);
			goto usage_quiet;
		}
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

	cli = json_object();
	if (!cli) {
		free(py_argv);
		goto usage_quiet;
	}
	if (file && strcmp(file, "-")) {
		/* Bytes: the runner compiles them as such, so that CPython
		 * decodes by PEP 263; they travel as latin-1 text (one code point
		 * per byte) in a JSON string. */
		FILE *f = fopen(file, "re");
		size_t len;
		_cleanup_free_ char *raw = NULL;
		_cleanup_free_ char *inside = NULL;
		const char *slash;
		int read_errno;

		if (!f) {
			py_err("can't open file '%s': %s\n", file, strerror(errno));
			py_err_json(2);
			free(py_argv);
			json_decref(cli);
			return 2; /* python's status for a missing script */
		}
		errno = 0;
		raw = read_all(f, &len);
		read_errno = errno;
		fclose(f);
		if (!raw) {
			if (read_errno == EFBIG)
				py_err("%s: exceeds the frame limit of one exec (%u MiB)\n", file, PY_SOURCE_MAX >> 20);
			else
				py_err("cannot read %s: %s\n", file, read_errno ? strerror(read_errno) : "read failed");
			free(py_argv);
			json_decref(cli);
			goto usage_quiet;
		}
		inside = sandbox_path(p, file);
		/* Outside the workspace the sandbox gets the file's name alone
		 * (as __file__, sys.argv[0], in tracebacks): its host path names
		 * host users and directories the user did not share. */
		if (!inside && (slash = strrchr(file, '/')))
			py_argv[0] = file = slash + 1;
		json_object_set_new(cli, "mode", json_string("file"));
		json_object_set_new(cli, "name", json_string(file) ?: json_null());
		json_object_set_new(cli, "path", inside ? json_string(inside) : json_null());
		json_object_set_new(cli, "source", latin1_json(raw, len));
		pass_stdin = true;
	} else if (!pyf.version && (file || (!code && !module && !isatty(0)))) {
		size_t len;

		owned_code = read_all(stdin, &len);
		if (!owned_code || strlen(owned_code) != len) {
			if (!owned_code && errno == EFBIG)
				py_err("the code from stdin exceeds the frame limit of one exec (%u MiB)\n",
				       PY_SOURCE_MAX >> 20);
			else
				py_err("cannot read the code from stdin (or it holds a NUL byte)\n");
			free(py_argv);
			json_decref(cli);
			goto usage_quiet;
		}
		code = owned_code;
		file = "<stdin>";
		json_object_set_new(cli, "mode", json_string("c"));
	} else if (module) {
		json_object_set_new(cli, "mode", json_string("m"));
		json_object_set_new(cli, "name", json_string(module));
		pass_stdin = true;
	} else if (code) {
		json_object_set_new(cli, "mode", json_string("c"));
		pass_stdin = true;
	} else {
		json_object_set_new(cli, "mode", json_string("repl"));
	}
	if (pyf.unbuffered)
		json_object_set_new(cli, "unbuffered", json_true());
	if (json_array_size(pyf.warnoptions))
		json_object_set(cli, "warnoptions", pyf.warnoptions);
	if (json_array_size(pyf.xoptions))
		json_object_set(cli, "xoptions", pyf.xoptions);

	/* Without --json all output is shown as produced and RESULT's copy
	 * is never read: keep little of it (the runner copies each chunk into
	 * it, and the host parses it whole).  Not through nsboxd: its warm
	 * pool's sandboxes have the default limit, and an OPEN asking for
	 * another gets a sandbox made for it (9 ms, not 0.3). */
	so.output_limit = json_mode ? out_limit : getenv("NSBOX_CONNECT") ? 0 : 4096;
	so.output = json_mode ? NULL : on_output;
	/* Shown as produced, so all of it, as python would write it (the
	 * cap is for results kept in memory: --json). */
	so.stream_all = !json_mode;
	if (!json_mode)
		so.max_bytes = UINT64_MAX;
	so.pass_stdin = pass_stdin;
	so.argv = py_argv;
	time_limit = cli_policy_time_limit(p);
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
	if (pyf.version) {
		/* python -V: the version of the interpreter that would run. */
		struct nsbox_session_info info = { .struct_size = sizeof(info) };

		if (nsbox_session_info(s, &info, &e) < 0) {
			py_err("%s\n", nsbox_error_message(e));
			nsbox_error_free(e);
			rc = NSBOX_EXIT_PROTOCOL;
		} else {
			printf("Python %s\n", info.python);
			rc = 0;
		}
		goto out;
	}
	active = s;
	{
		struct sigaction sa = { .sa_handler = on_sigint };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	/* sys.path, __file__, KeyboardInterrupt for Ctrl-C, and FILE or -m
	 * itself: the runner's cli_run (runner/runner.py), in an exec whose
	 * frames are hidden from tracebacks. */
	{
		/* The settings travel in the exec's code (one round trip, none
		 * before the EXEC): a JSON text as a Python string literal, which
		 * JSON's string escapes are. */
		char *text = json_dumps(cli, JSON_COMPACT);
		json_t *lit = text ? json_string(text) : NULL;
		char *arg = lit ? json_dumps(lit, JSON_ENCODE_ANY) : NULL;

		free(text);
		json_decref(lit);
		if (!arg || asprintf(&launcher, "__import__('_nsbox_runner').cli_run(%s)\n", arg) < 0) {
			free(arg);
			py_err("out of memory\n");
			rc = NSBOX_EXIT_USAGE;
			goto out;
		}
		free(arg);
	}
	launch = !code && (module || file); /* FILE and -m run in the launcher; -c, stdin and the REPL after it */
	/* Shown in every mode: what cli_run prints (an invalid -W, a bad -X
	 * value) is python's own start-up complaint. */
	show_output = true;
	eo.filename = "<nsbox-runner>";
	eo.repl = false;
	exec_t0 = mono_ns();
	if (nsbox_exec(s, launcher, &eo, &res, &e) < 0) {
		py_err("%s\n", nsbox_error_message(e));
		rc = exec_fail_status(e);
		nsbox_error_free(e);
		goto out;
	}
	if (!launch) {
		if (nsbox_result_status(res) != NSBOX_OK) {
			rc = report(s, res, json_mode, !json_mode);
			goto out;
		}
		nsbox_result_free(res);
		res = NULL;
	}
	if (!code && !module && !file) {
		in_repl = true;
		rc = repl(s);
		if (rc < 0)
			rc = rc == -2 ? NSBOX_EXIT_SETUP : NSBOX_EXIT_PROTOCOL;
		goto out;
	}
	if (!launch) {
		eo.filename = file ? file : "<string>";
		eo.repl = json_mode;
		exec_t0 = mono_ns();
		if (nsbox_exec(s, code, &eo, &res, &e) < 0) {
			py_err("%s\n", nsbox_error_message(e));
			rc = exec_fail_status(e);
			nsbox_error_free(e);
			goto out;
		}
	}
	rc = out_broken ? 128 + SIGPIPE : report(s, res, json_mode, !json_mode);
out:
	py_err_json(rc);
	/* What nsbox printed itself (--json, a non-streamed result) may not
	 * have reached its reader either: never a silent 0. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		struct pollfd pf = { 1, POLLOUT, 0 };

		/* A pipe whose reader is gone polls POLLERR (stdio's errno is
		 * long gone by now). */
		rc = poll(&pf, 1, 0) == 1 && (pf.revents & POLLERR) ? 128 + SIGPIPE : rc ? rc : 1;
	}
	active = NULL;
	json_decref(cli);
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
