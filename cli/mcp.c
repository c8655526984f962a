/* nsbox mcp [OPTIONS]: a Model Context Protocol server on stdin/stdout
 * (newline-delimited JSON-RPC 2.0, the MCP stdio transport).  Tools run
 * Python in libnsbox sessions; stdout carries only protocol, diagnostics go
 * to stderr.  One thread, one exec at a time: while an exec runs, the loop
 * polls stdin and the session's fd together (nsbox_exec_start/advance), so
 * ping and notifications/cancelled are answered and other requests queue. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <limits.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "args.h"
#include "commands.h"
#include "mcpup.h"

#define MCP_MAX_TOOLS 64
#define MCP_MAX_SESSIONS_CAP 256
#define MCP_STR_(x) #x
#define MCP_STR(x) MCP_STR_(x)
#define MCP_MAX_LINE (8u << 20) /* a request line; code is capped well below */
#define MCP_MAX_CODE (1u << 20) /* bytes of code per run_python */
#define MCP_FILE_CAP (1u << 20) /* bytes per read_file / write_file */
#define MCP_LIST_CAP 1000	/* entries per list_files */
#define MCP_TAIL 512		/* bytes of output carried by a progress notification */
#define MCP_PROGRESS_EVERY 2.0	/* seconds */
#define MCP_STOP_GRACE 1.0	/* seconds a stopping server gives a cancelled exec before the kill */
#define MCP_MAX_PENDING 16	/* code-mode calls in flight per exec (threads inside) */
#define MCP_MAX_VALUES 65536	/* JSON values in one message (a jansson tree costs ~100 bytes each) */
#define MCP_QUEUE_MAX 1024	/* messages waiting while an exec runs ... */
#define MCP_QUEUE_BYTES (64u << 20) /* ... and their weight: then stdin waits */

static const char *const versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };

struct msess {
	char handle[33]; /* "" for the implicit session */
	nsbox_session_t *s;
	double last_used;
	double call_timeout; /* new_session's timeout_s; 0: the server's */
	bool idle_killed;    /* its sandbox killed past the idle timeout while we waited to write */
};

/* A parsed message waiting its turn, or (code != 0) an error to send in
 * its turn, msg its text. */
struct queued {
	json_t *msg;
	int code;
	size_t weight; /* what it holds, about: its line and ~128 bytes a value */
	struct queued *next;
};

struct server {
	int argc; /* the command line, parsed again for each session's policy */
	char **argv;
	struct cli_tool tools[MCP_MAX_TOOLS];
	size_t n_tools;
	double idle_timeout, call_timeout, max_call_timeout, policy_time_limit;
	unsigned max_sessions;
	uint64_t output_limit, max_memory;
	bool share_net, host_writes;
	bool structured;     /* --structured: structuredContent and an outputSchema for run_python */
	bool helper_started; /* a session came from libnsbox's helper: later ones do too */
	bool want_warm;	     /* a client said hello: make the default session while it thinks */
	bool batches;	     /* revision 2025-03-26 was agreed: JSON-RPC batches are answered */
	struct msess implicit;
	struct msess sess[MCP_MAX_SESSIONS_CAP];
	/* stdin */
	char *buf;
	size_t len, cap;
	bool skipping, eof;
	struct queued *qhead, *qtail;
	size_t q_count, q_weight;
	/* the exec in flight */
	json_t *cur_id;
	nsbox_session_t *cur_s;
	bool cur_cancelled;
	/* code mode: the host's other MCP servers, and their calls in flight */
	struct mcpup up[MCPUP_MAX_SERVERS];
	size_t n_up;
	double up_timeout;
	struct pending {
		struct mcpup *u;
		long long rid;	  /* the request id at the server */
		uint64_t call_id; /* the sandbox's */
		double deadline;
		char tool[80];
	} pend[MCP_MAX_PENDING];
	size_t n_pend;
	json_t *up_responses;
};

/* SIGTERM (how a stdio client stops its server), SIGINT or SIGHUP: the
 * loops end, every session is closed (the first one is this process's own
 * sandbox: nobody else would remove its cgroup), the other MCP servers are
 * stopped, and the signal is raised again. */
static volatile sig_atomic_t stop_signal;
/* A pipe the handler writes to, polled beside everything else: a signal
 * that lands between a loop's check of stop_signal and its poll still
 * wakes that poll (it waited for the exec's own deadline, up to 30 s). */
static int stop_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
	int saved = errno;

	stop_signal = sig;
	cli_tool_stop = 1; /* a --tool command running now is stopped */
	if (stop_pipe[1] >= 0)
		(void)!write(stop_pipe[1], "", 1);
	errno = saved;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Warnings go to stderr only while it has room: a client that pipes our
 * stderr and never reads it (the TypeScript SDK's stderr: "pipe") had a
 * warning per session end fill it (a sandbox's failed write-back; each
 * start's cgroup fallback without delegation), and the next held the
 * server's one thread in write(2) for good.  A line that finds it full is
 * counted, and the count is said with the next that fits.  (A line of at
 * most 2 KiB into a pipe or socket that polls writable does not block.) */
static void mcp_warn(void *ud, const char *msg)
{
	static unsigned long long dropped;
	struct pollfd p = { 2, POLLOUT, 0 };
	char line[2048];
	int n;

	(void)ud;
	if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) {
		dropped++;
		return;
	}
	if (dropped)
		n = snprintf(line, sizeof(line),
			     "nsbox mcp: warning: %llu warnings left out (stderr was full)\nnsbox mcp: warning: %s\n",
			     dropped, msg);
	else
		n = snprintf(line, sizeof(line), "nsbox mcp: warning: %s\n", msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	if (write(2, line, (size_t)n) == n)
		dropped = 0;
	else
		dropped++;
}

/* The length of the UTF-8 sequence at p (n > 0 bytes left): 1 to 4; 0
 * when it is not one (RFC 3629: no overlong form, surrogate or code point
 * past U+10FFFF); -1 when the end cuts it. */
static int utf8_len(const unsigned char *p, size_t n)
{
	int k = p[0] < 0x80 ? 1 : p[0] < 0xC2 ? 0 : p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3 : p[0] < 0xF5 ? 4 : 0;
	unsigned cp;

	if (k <= 1)
		return k;
	cp = p[0] & (0x3Fu >> (k - 1));
	for (int i = 1; i < k; i++) {
		if ((size_t)i >= n)
			return -1;
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3Fu);
	}
	if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return k;
}

/* A string for JSON from bytes that may be cut anywhere (a %.200s of the
 * client's text, a tail of output) or be no UTF-8 at all: a sequence cut
 * at either end is dropped, each byte of an invalid one becomes U+FFFD (as
 * the runner does), U+0000 stays.  Everything quoted in a message goes
 * through here: json_pack refuses invalid UTF-8, and a message it refused
 * was never sent (the request went unanswered). */
static json_t *text_json(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	json_t *j;
	char *buf, *o;

	while (n && (*s & 0xC0) == 0x80) { /* a cut at the start */
		s++;
		n--;
	}
	if ((j = json_stringn((const char *)s, n)))
		return j;
	buf = o = malloc(n * 3 + 1);
	if (!buf)
		return NULL;
	for (size_t i = 0; i < n;) {
		int k = utf8_len(s + i, n - i);

		if (k < 0) /* ... and at the end */
			break;
		if (k == 0) {
			memcpy(o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(o, s + i, (size_t)k);
		o += k;
		i += (size_t)k;
	}
	j = json_stringn(buf, (size_t)(o - buf));
	free(buf);
	return j;
}

/* A JSON string as a C string, or NULL: not a string, or one with U+0000
 * (messages are parsed with JSON_ALLOW_NUL, as RFC 8259 allows it, and a
 * C string would be its prefix: "ping\u0000x" was a ping). */
static const char *cstr(const json_t *v)
{
	const char *s = json_string_value(v);

	return s && strlen(s) == json_string_length(v) ? s : NULL;
}

/* ---- output ------------------------------------------------------------ */

/* A JSON-RPC batch being answered (revision 2025-03-26 allows them): the
 * responses to its requests, encoded, sent as one array when it is done
 * (batch_out, "[" and the responses, each after a comma); its requests'
 * ids, so that anything else (a ping answered during an exec,
 * notifications) still goes out at once.  The array is capped: a line of
 * thousands of calls, each with 64 KiB of output or 8 MiB of images, was
 * held whole (2000 calls: 400 MB). */
#define MCP_BATCH_BYTES (64u << 20)
static char *batch_out;
static size_t batch_len, batch_cap, batch_n;
static json_t *batch_ids;

static bool in_batch(const json_t *m)
{
	const json_t *id = json_object_get(m, "id"), *x;
	size_t i;

	if (!batch_ids || !id || (!json_object_get(m, "result") && !json_object_get(m, "error")))
		return false;
	json_array_foreach(batch_ids, i, x) if (json_equal(x, id)) return true;
	return false;
}

/* Add a response (consumed) to the batch's array.  Past the cap, a
 * result (or a large error) is replaced by an error saying so, and the
 * members left are not run (handle_batch). */
static bool batch_over;

static void batch_add(json_t *m)
{
	char *s = json_dumps(m, JSON_COMPACT | JSON_ENSURE_ASCII);
	size_t n = s ? strlen(s) : 0;

	if (!s || ((batch_over || batch_len + n > MCP_BATCH_BYTES) && (json_object_get(m, "result") || n > 4096))) {
		json_t *e = json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", json_object_get(m, "id"), "error",
				      "code", -32603, "message",
				      "the batch's answer is over 64 MiB: this response was left out (send fewer "
				      "requests per batch)");

		free(s);
		s = e ? json_dumps(e, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
		n = s ? strlen(s) : 0;
		json_decref(e);
		batch_over = true;
	}
	json_decref(m);
	if (!s)
		return;
	if (batch_len + n + 3 > batch_cap) { /* room for ',' or '[', and "]\n" */
		size_t nc = (batch_len + n + 3) * 2;
		char *nb = realloc(batch_out, nc);

		if (!nb) {
			free(s);
			return;
		}
		batch_out = nb;
		batch_cap = nc;
	}
	batch_out[batch_len++] = batch_n++ ? ',' : '[';
	memcpy(batch_out + batch_len, s, n);
	batch_len += n;
	free(s);
}

/* Write s (n bytes, its newline included) to stdout.  The wait for room
 * is a poll beside the stop pipe: a client that stopped reading kept a
 * blocking write(2) waiting, and SA_RESTART restarted it after SIGTERM, so
 * the server never ended (the client's SIGKILL then left the sandbox's
 * cgroup behind).  After POLLOUT a pipe takes PIPE_BUF bytes without
 * waiting; a socket (node's stdio) takes what fits (MSG_DONTWAIT).  Nothing
 * is written after a stop.  Returns 0, or -1 with errno (EINTR: a stop). */
/* The exec in flight, for write_out: its limit holds while the server
 * waits to write (a client that stopped reading held the loop that
 * enforces it, and code with timeout_s 2 ran its 8 s to the end). */
static struct {
	nsbox_session_t *s;
	double kill_at; /* its deadline and the grace a cancel gets */
	bool killed;	/* so: its result says the time limit */
} out_exec;

static struct server *idle_srv; /* for write_out's idle expiry */
static double idle_kill_due(double t);

static int write_out(const char *s, size_t n)
{
	static int sock = -1;

	if (sock < 0) {
		struct stat st;

		sock = fstat(1, &st) == 0 && S_ISSOCK(st.st_mode);
	}
	while (n) {
		struct pollfd p[2] = { { 1, POLLOUT, 0 }, { stop_pipe[0], POLLIN, 0 } };
		ssize_t w;

		int r;

		if (stop_signal) {
			errno = EINTR;
			return -1;
		}
		/* No exec runs: the idle timeout still holds while a client
		 * that stopped reading keeps us here. */
		r = poll(p, 2, out_exec.s ? cli_poll_ms(out_exec.kill_at - now()) : cli_poll_ms(idle_kill_due(now())));
		if (r < 0 && errno != EINTR)
			return -1;
		if (r == 0 && out_exec.s && now() >= out_exec.kill_at) {
			nsbox_session_kill(out_exec.s);
			out_exec.s = NULL;
			out_exec.killed = true;
		}
		if (r <= 0 || !p[0].revents)
			continue;
		w = sock ? send(1, s, n, MSG_DONTWAIT | MSG_NOSIGNAL) : write(1, s, n < PIPE_BUF ? n : PIPE_BUF);
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (w > 0) {
			s += w;
			n -= (size_t)w;
		}
	}
	return 0;
}

/* A message (s, n bytes with its newline) to stdout. */
static void emit(const char *s, size_t n)
{
	if (write_out(s, n) < 0 && errno == EPIPE && !stop_signal)
		stop_signal = SIGPIPE; /* the client is gone: as SIGTERM, then SIGPIPE's own end */
}

static void send_msg(json_t *m) /* consumes m */
{
	char *s;
	size_t n;

	if (in_batch(m)) {
		batch_add(m);
		return;
	}
	s = json_dumps(m, JSON_COMPACT | JSON_ENSURE_ASCII);

	json_decref(m);
	if (!s) {
		fprintf(stderr, "nsbox mcp: cannot encode a message (out of memory?)\n");
		return;
	}
	/* Only protocol on stdout; one message per line (JSON_COMPACT escapes
	 * newlines inside strings). */
	n = strlen(s);
	s[n++] = '\n'; /* over the NUL: written by length */
	emit(s, n);
	free(s);
}

/* The stateless revision: no handshake; each request names the revision
 * and the client's capabilities in its _meta (the "envelope"). */
#define MCP_MODERN "2026-07-28"
#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT "io.modelcontextprotocol/clientInfo"

/* Whether the request being answered came with a 2026-07-28 envelope:
 * its result then says resultType and who answered. */
static bool reply_modern;

static void send_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* result: consumed; NULL (it could not be made) is answered with an
 * internal error, never left unanswered. */
static void send_result_as(json_t *id, json_t *result, bool modern)
{
	if (!result) {
		send_error(id, -32603, "internal error: the answer could not be made (out of memory?)");
		return;
	}
	if (modern && json_is_object(result)) {
		json_t *meta = json_object_get(result, "_meta");

		if (!json_is_object(meta)) {
			meta = json_object();
			json_object_set_new(result, "_meta", meta);
		}
		json_object_set_new(result, "resultType", json_string("complete"));
		json_object_set_new(meta, "io.modelcontextprotocol/serverInfo",
				    json_pack("{s:s,s:s}", "name", "nsbox", "version", nsbox_version()));
	}
	send_msg(json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void send_result(json_t *id, json_t *result)
{
	send_result_as(id, result, reply_modern);
}

static void send_error(json_t *id, int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	send_msg(json_pack("{s:s,s:O,s:{s:i,s:o}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code",
			   code, "message", text_json(msg, strlen(msg)) ?: json_string("")));
}

static int envelope_error(json_t *id, const char *key, const char *problem)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "Invalid _meta envelope for protocol revision " MCP_MODERN ": %s: %s", key, problem);
	send_msg(json_pack("{s:s,s:O,s:{s:i,s:s,s:{s:{s:s,s:s}}}}", "jsonrpc", "2.0", "id", id, "error", "code", -32602,
			   "message", msg, "data", "envelope", "key", key, "problem", problem));
	return -1;
}

/* A request's era: 0 no envelope (the 2025 revisions), 1 a valid
 * 2026-07-28 envelope, -1 a bad one or another revision (answered here
 * with the errors of that revision: -32602, -32022 with the versions). */
static int check_envelope(json_t *id, const json_t *params)
{
	const json_t *meta = json_object_get(params, "_meta");
	const json_t *v = json_object_get(meta, META_VERSION), *caps, *info;

	if (!v)
		return 0;
	if (!json_is_string(v))
		return envelope_error(id, META_VERSION, "expected a string");
	caps = json_object_get(meta, META_CAPS);
	if (!caps)
		return envelope_error(id, META_CAPS, "missing");
	if (!json_is_object(caps))
		return envelope_error(id, META_CAPS, "expected an object");
	info = json_object_get(meta, META_CLIENT);
	if (info &&
	    (!json_is_string(json_object_get(info, "name")) || !json_is_string(json_object_get(info, "version"))))
		return envelope_error(id, META_CLIENT, "expected an object with string name and version");
	if (!cstr(v) || strcmp(cstr(v), MCP_MODERN)) {
		char msg[300];

		snprintf(msg, sizeof(msg), "Unsupported protocol version: %.200s", json_string_value(v));
		send_msg(json_pack("{s:s,s:O,s:{s:i,s:o,s:{s:[s],s:O}}}", "jsonrpc", "2.0", "id", id, "error", "code",
				   -32022, "message", text_json(msg, strlen(msg)) ?: json_string(""), "data",
				   "supported", MCP_MODERN, "requested", v));
		return -1;
	}
	return 1;
}

static json_t *tool_result(const char *text, bool is_error)
{
	return json_pack("{s:[{s:s,s:o}],s:b}", "content", "type", "text", "text",
			 text_json(text, strlen(text)) ?: json_string(""), "isError", is_error);
}

static json_t *tool_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *tool_errorf(const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return tool_result(msg, true);
}

/* ---- sessions ------------------------------------------------------------ */

/* The policy of the command line, parsed afresh (the library copies a
 * policy into each session; there is no policy copy call). */
static int make_policy(struct server *srv, nsbox_policy_t **out, char *msg, size_t msz)
{
	struct cli_err err = { 0 };
	nsbox_policy_t *p = NULL;

	if (args_load_policy(&p, srv->argc, srv->argv, NULL, &err) < 0)
		goto fail;
	for (int i = 1; i < srv->argc; i++)
		if (args_parse_jail_option(p, srv->argc, srv->argv, &i, &err) < 0)
			goto fail;
	*out = p;
	return 0;
fail:
	snprintf(msg, msz, "%s", err.msg);
	nsbox_policy_free(p);
	return -1;
}

static int start_session(struct server *srv, uint64_t memory, nsbox_session_t **out, char *msg, size_t msz)
{
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .warn = mcp_warn };

	/* The server's first session is made from this process (one thread):
	 * no helper to start first, so a new server's first call is as quick
	 * as `nsbox python`.  Later ones come from the helper, whose warm
	 * template and spare make them in about a millisecond. */
	so.in_process = !srv->helper_started && !getenv("NSBOX_CONNECT");
	srv->helper_started = true;
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	nsbox_session_t *s = NULL;

	so.output_limit = srv->output_limit;
	if (make_policy(srv, &p, msg, msz) < 0)
		return -1;
	if (memory && nsbox_policy_set_memory(p, memory, &e) < 0)
		goto fail;
	if (nsbox_session_new(p, &so, &s, &e) < 0)
		goto fail;
	nsbox_policy_free(p);
	for (size_t k = 0; k < srv->n_tools; k++)
		if (nsbox_session_add_tool(s, srv->tools[k].name, NULL, "A host tool (nsbox mcp --tool).", cli_tool_run,
					   &srv->tools[k], &e) < 0) {
			snprintf(msg, msz, "tool %s: %s", srv->tools[k].name, nsbox_error_message(e));
			nsbox_error_free(e);
			nsbox_session_free(s);
			return -1;
		}
	/* Code mode: NAME.tool inside, answered by forwarding (run_exec). */
	for (size_t k = 0; k < srv->n_up; k++)
		for (size_t j = 0; j < srv->up[k].n_tools; j++) {
			const struct mcpup_tool *t = &srv->up[k].tools[j];
			char name[80], *schema = t->schema ? json_dumps(t->schema, JSON_COMPACT) : NULL;
			int r;

			snprintf(name, sizeof(name), "%s.%s", srv->up[k].name, t->py);
			r = nsbox_session_add_tool(s, name, schema, t->description, NULL, NULL, &e);
			free(schema);
			if (r < 0) {
				snprintf(msg, msz, "tool %s: %s", name, nsbox_error_message(e));
				nsbox_error_free(e);
				nsbox_session_free(s);
				return -1;
			}
		}
	*out = s;
	return 0;
fail:
	snprintf(msg, msz, "cannot start a sandbox: %s", nsbox_error_message(e));
	nsbox_error_free(e);
	nsbox_policy_free(p);
	return -1;
}

static void close_msess(struct server *srv, struct msess *m)
{
	/* Killed first: the goodbye was waited for (its BYE up to 1 s, its
	 * exit up to 2 s) on the server's only thread, and a session whose
	 * own code held its interpreter stopped the server 3 s (red team 4).
	 * With a workspace or binds the code's exit may still write to the
	 * host: then it gets its goodbye. */
	if (m->s && !srv->host_writes)
		nsbox_session_kill(m->s);
	nsbox_session_free(m->s);
	m->s = NULL;
	m->handle[0] = '\0';
	m->idle_killed = false;
}

static struct msess *find_handle(struct server *srv, const char *h)
{
	for (unsigned i = 0; i < srv->max_sessions; i++)
		if (srv->sess[i].s && !strcmp(srv->sess[i].handle, h))
			return &srv->sess[i];
	return NULL;
}

static bool alive(nsbox_session_t *s)
{
	struct nsbox_session_info info = { .struct_size = sizeof(info) };

	return nsbox_session_info(s, &info, NULL) == 0 && info.alive;
}

/* While write_out waits for a client that does not read: the sandboxes of
 * sessions idle past the timeout are killed now (what their code left
 * running ends), their handles left for expire_idle to close when the
 * main loop runs again (a request being answered may still hold one).
 * Returns the seconds until the next falls due, or a day (none). */
static double idle_kill_due(double t)
{
	struct server *srv = idle_srv;
	double next = 86400;

	for (unsigned i = 0; srv && i <= srv->max_sessions; i++) {
		struct msess *m = i < srv->max_sessions ? &srv->sess[i] : &srv->implicit;
		double left;

		if (!m->s || m->idle_killed)
			continue;
		left = m->last_used + srv->idle_timeout - t;
		if (left <= 0) {
			nsbox_session_kill(m->s);
			m->idle_killed = true;
		} else if (left < next) {
			next = left;
		}
	}
	return next;
}

/* Close sessions idle for longer than the idle timeout; return the seconds
 * until the next one falls due (-1: none). */
static double expire_idle(struct server *srv)
{
	double t = now(), next = -1;

	for (unsigned i = 0; i <= srv->max_sessions; i++) {
		struct msess *m = i < srv->max_sessions ? &srv->sess[i] : &srv->implicit;
		double left;

		if (!m->s)
			continue;
		left = m->last_used + srv->idle_timeout - t;
		if (left <= 0) {
			fprintf(stderr, "nsbox mcp: closing idle session %s\n",
				m->handle[0] ? m->handle : "(implicit)");
			close_msess(srv, m);
		} else if (next < 0 || left < next) {
			next = left;
		}
	}
	return next;
}

/* ---- stdin ---------------------------------------------------------------- */

static void enqueue(struct server *srv, json_t *msg, int code, size_t weight)
{
	struct queued *q = calloc(1, sizeof(*q));

	if (!q) {
		json_decref(msg);
		return;
	}
	q->msg = msg;
	q->code = code;
	q->weight = weight;
	srv->q_count++;
	srv->q_weight += weight;
	if (srv->qtail)
		srv->qtail->next = q;
	else
		srv->qhead = q;
	srv->qtail = q;
}

static json_t *dequeue(struct server *srv, int *code)
{
	struct queued *q = srv->qhead;
	json_t *m;

	if (!q)
		return NULL;
	srv->qhead = q->next;
	if (!srv->qhead)
		srv->qtail = NULL;
	srv->q_count--;
	srv->q_weight -= q->weight;
	m = q->msg;
	*code = q->code;
	free(q);
	return m;
}

/* Whether stdin should wait: while an exec runs, the messages that come
 * are parsed and queued (ping and cancel are answered at once); a client
 * that sent on and on (a queued parse error costs ~500 bytes for a 2-byte
 * line, a tree ~40 times its line) grew the server by gigabytes. */
static bool queue_full(const struct server *srv)
{
	return srv->q_count >= MCP_QUEUE_MAX || srv->q_weight >= MCP_QUEUE_BYTES;
}

/* The JSON values of a line, about (commas and opening brackets outside
 * strings, plus one), counted before it is parsed. */
static size_t json_values(const char *p, size_t n)
{
	size_t k = 1;
	bool in_str = false;

	for (size_t i = 0; i < n; i++) {
		if (in_str) {
			if (p[i] == '\\')
				i++;
			else if (p[i] == '"')
				in_str = false;
		} else if (p[i] == '"') {
			in_str = true;
		} else if (p[i] == ',' || p[i] == '[' || p[i] == '{') {
			k++;
		}
	}
	return k;
}

static const char *method_of(const json_t *m)
{
	return cstr(json_object_get(m, "method"));
}

/* notifications/cancelled: stop the exec in flight, or drop a queued
 * request (no response to either, as the spec asks). */
static void on_cancelled(struct server *srv, const json_t *m)
{
	const json_t *rid = json_object_get(json_object_get(m, "params"), "requestId");

	if (!rid)
		return;
	if (srv->cur_id && json_equal(srv->cur_id, rid)) {
		srv->cur_cancelled = true;
		nsbox_cancel(srv->cur_s);
		return;
	}
	for (struct queued **pq = &srv->qhead, *prev = NULL; *pq; prev = *pq, pq = &(*pq)->next) {
		struct queued *q = *pq;

		if (!q->code && json_equal(json_object_get(q->msg, "id"), rid) && method_of(q->msg)) {
			*pq = q->next;
			if (srv->qtail == q)
				srv->qtail = prev;
			srv->q_count--;
			srv->q_weight -= q->weight;
			json_decref(q->msg);
			free(q);
			return;
		}
	}
}

static bool is_request_id(const json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

static bool jsonrpc_ok(const json_t *m)
{
	const json_t *v = json_object_get(m, "jsonrpc");

	return cstr(v) && !strcmp(cstr(v), "2.0");
}

/* One complete line.  While an exec runs (busy), ping and cancellation are
 * handled at once; everything else waits in the queue. */
static void take_line(struct server *srv, const char *line, size_t n, bool busy)
{
	json_error_t jerr;
	json_t *m;
	const char *method, *nul;
	size_t values;

	while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	if (!n)
		return;
	/* Counted first: an 8 MiB line of "[]," was a tree of 350 MB. */
	values = json_values(line, n);
	if (values > MCP_MAX_VALUES) {
		m = json_string("invalid request: more than 65536 JSON values in one message");
		if (m)
			enqueue(srv, m, -32600, 512);
		return;
	}
	/* Any JSON value parses: one that isn't an object is an invalid
	 * request (-32600), not a parse error.  jansson's lexer reads a raw NUL
	 * between tokens as a blank, which RFC 8259 does not allow and a
	 * C-string reader in front of us would take as the message's end. */
	nul = memchr(line, '\0', n);
	/* A key given twice is refused: jansson keeps the last, a gateway in
	 * front may judge the first ("method":"tools/list","method":"tools/call"
	 * would pass one that allows listing and run code here). */
	m = nul ? NULL : json_loadb(line, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &jerr);
	if (!m) {
		char msg[512];

		/* Answered in turn, after the requests before it. */
		if (nul)
			snprintf(msg, sizeof(msg), "parse error: a NUL byte in the message (column %d)",
				 (int)(nul - line) + 1);
		else
			snprintf(msg, sizeof(msg), "parse error: %s (column %d)", jerr.text, jerr.column);
		m = json_string(msg);
		if (m)
			enqueue(srv, m, -32700, 512);
		return;
	}
	method = method_of(m);
	/* With an id it is a request, answered in turn (-32601), as
	 * notifications/initialized with one: it went unanswered. */
	if (method && !strcmp(method, "notifications/cancelled") && !json_object_get(m, "id")) {
		on_cancelled(srv, m);
		json_decref(m);
		return;
	}
	if (busy && method && !strcmp(method, "ping") && is_request_id(json_object_get(m, "id")) && jsonrpc_ok(m)) {
		int era = check_envelope(json_object_get(m, "id"), json_object_get(m, "params"));

		if (era >= 0)
			send_result_as(json_object_get(m, "id"), json_object(), era > 0);
		json_decref(m);
		return;
	}
	enqueue(srv, m, 0, n + 128 * values);
}

/* Append to the line being read; false past MCP_MAX_LINE or out of
 * memory (the buffer stays as it was). */
static bool line_add(struct server *srv, const char *p, size_t add)
{
	if (srv->len + add > MCP_MAX_LINE)
		return false;
	if (srv->len + add > srv->cap) {
		size_t nc = (srv->len + add) * 2;
		char *nb = realloc(srv->buf, nc);

		if (!nb)
			return false;
		srv->buf = nb;
		srv->cap = nc;
	}
	memcpy(srv->buf + srv->len, p, add);
	srv->len += add;
	return true;
}

/* Read what stdin has and split it into lines.  Returns -1 at EOF. */
static int read_input(struct server *srv, bool busy)
{
	char chunk[65536];
	ssize_t n = read(0, chunk, sizeof(chunk));
	size_t start = 0;

	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : (srv->eof = true, -1);
	if (n == 0) {
		srv->eof = true;
		return -1;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (chunk[i] != '\n')
			continue;
		if (srv->skipping) {
			srv->skipping = false;
			send_error(NULL, -32600, "message too large (over %u bytes)", MCP_MAX_LINE);
		} else if (srv->len) {
			/* The end of a line begun in an earlier read. */
			if (line_add(srv, chunk + start, (size_t)i - start))
				take_line(srv, srv->buf, srv->len, busy);
			else
				send_error(NULL, -32600, "message too large (over %u bytes) or out of memory",
					   MCP_MAX_LINE);
			srv->len = 0;
		} else {
			take_line(srv, chunk + start, (size_t)i - start, busy);
		}
		start = (size_t)i + 1;
	}
	/* A line too large (or no memory for it) is skipped to its end and
	 * answered with an error there. */
	if (start < (size_t)n && !srv->skipping && !line_add(srv, chunk + start, (size_t)n - start)) {
		srv->skipping = true;
		srv->len = 0;
	}
	return 0;
}

/* ---- running code ------------------------------------------------------- */

struct tail {
	char b[MCP_TAIL];
	size_t n;
};

static void tail_add(struct tail *t, const char *d, size_t n)
{
	if (n >= sizeof(t->b)) {
		memcpy(t->b, d + n - sizeof(t->b), sizeof(t->b));
		t->n = sizeof(t->b);
		return;
	}
	if (t->n + n > sizeof(t->b)) {
		size_t drop = t->n + n - sizeof(t->b);

		memmove(t->b, t->b + drop, t->n - drop);
		t->n -= drop;
	}
	memcpy(t->b + t->n, d, n);
	t->n += n;
}

/* Answer a call from inside with result (JSON) or error (text; made
 * valid UTF-8 here: it quotes the other server's or a host tool's text, cut
 * to a size).  An answer the library refuses is replaced by a plain error:
 * the sandbox waits for one, and a call never answered held its exec until
 * the time limit. */
static void answer(nsbox_session_t *s, uint64_t call_id, const char *tool, const char *result, const char *error)
{
	nsbox_error_t *e = NULL;
	json_t *valid = error ? text_json(error, strlen(error)) : NULL;

	if (valid)
		error = json_string_value(valid);
	if (nsbox_exec_answer(s, call_id, error ? NULL : result, error, &e) < 0) {
		fprintf(stderr, "nsbox mcp: answering tool %s: %s\n", tool, nsbox_error_message(e));
		nsbox_error_free(e);
		nsbox_exec_answer(s, call_id, NULL, "nsbox mcp could not pass on the answer (see its stderr)", NULL);
	}
	json_decref(valid);
}

/* A call to NAME.tool from inside: forwarded to that MCP server as a
 * tools/call; the answer comes in run_exec's loop (settle_up). */
static void forward_call(struct server *srv, nsbox_session_t *s, const struct nsbox_event *ev)
{
	const char *dot = strchr(ev->tool, '.');
	struct mcpup *u = NULL;
	const struct mcpup_tool *t = NULL;
	json_t *call, *kwargs, *args;
	char msg[1024];
	long long rid;

	for (size_t k = 0; k < srv->n_up && !u; k++)
		if (strlen(srv->up[k].name) == (size_t)(dot - ev->tool) &&
		    !strncmp(srv->up[k].name, ev->tool, (size_t)(dot - ev->tool)))
			u = &srv->up[k];
	for (size_t j = 0; u && j < u->n_tools && !t; j++)
		if (!strcmp(u->tools[j].py, dot + 1))
			t = &u->tools[j];
	if (!t) {
		answer(s, ev->call_id, ev->tool, NULL, "no such tool");
		return;
	}
	if (srv->n_pend >= MCP_MAX_PENDING) {
		snprintf(msg, sizeof(msg), "%s(): too many calls in flight (at most %d)", ev->tool, MCP_MAX_PENDING);
		answer(s, ev->call_id, ev->tool, NULL, msg);
		return;
	}
	call = json_loads(ev->args_json, JSON_ALLOW_NUL, NULL);
	kwargs = json_object_get(call, "kwargs");
	if (json_array_size(json_object_get(call, "args"))) {
		snprintf(msg, sizeof(msg), "%s(): pass the arguments by name (MCP tools take keyword arguments)",
			 ev->tool);
		answer(s, ev->call_id, ev->tool, NULL, msg);
		json_decref(call);
		return;
	}
	args = mcpup_plain(json_is_object(kwargs) ? kwargs : json_object(), ev->tool, msg, sizeof(msg), 0);
	json_decref(call);
	if (!args) {
		answer(s, ev->call_id, ev->tool, NULL, msg);
		return;
	}
	rid = mcpup_send_call(u, t, args, msg, sizeof(msg));
	json_decref(args);
	if (rid < 0) {
		answer(s, ev->call_id, ev->tool, NULL, msg);
		return;
	}
	srv->pend[srv->n_pend++] = (struct pending){
		.u = u, .rid = rid, .call_id = ev->call_id, .deadline = now() + srv->up_timeout
	};
	snprintf(srv->pend[srv->n_pend - 1].tool, sizeof(srv->pend[0].tool), "%s", ev->tool);
}

static void drop_pending(struct server *srv, size_t i)
{
	srv->pend[i] = srv->pend[--srv->n_pend];
}

/* Answer the calls in flight whose server answered, died or ran out of
 * time; with why, all of them (the exec ended or was cancelled). */
static void settle_up(struct server *srv, nsbox_session_t *s, const char *why)
{
	for (size_t i = 0; i < srv->n_pend;) {
		struct pending *p = &srv->pend[i];
		json_t *r, *resp = NULL, *v;
		char msg[2048];
		size_t k;

		if (why) {
			mcpup_send_cancel(p->u, p->rid, why);
			if (s) {
				snprintf(msg, sizeof(msg), "%s(): %s", p->tool, why);
				answer(s, p->call_id, p->tool, NULL, msg);
			}
			drop_pending(srv, i);
			continue;
		}
		json_array_foreach(srv->up_responses, k, r)
		{
			if (json_integer_value(json_object_get(r, "_up")) == (json_int_t)(p->u - srv->up) &&
			    json_integer_value(json_object_get(r, "id")) == p->rid) {
				resp = json_incref(r);
				json_array_remove(srv->up_responses, k);
				break;
			}
		}
		if (resp) {
			v = mcpup_result_value(resp, msg + 256, sizeof(msg) - 256);
			if (v) {
				char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

				if (text && strlen(text) <= MCPUP_MAX_RESULT) {
					answer(s, p->call_id, p->tool, text, NULL);
				} else {
					snprintf(msg, sizeof(msg), "%s(): the result is too large (over %u bytes)",
						 p->tool, MCPUP_MAX_RESULT);
					answer(s, p->call_id, p->tool, NULL, msg);
				}
				free(text);
				json_decref(v);
			} else {
				char e[2048];

				snprintf(e, sizeof(e), "%s(): %s", p->tool, msg + 256);
				answer(s, p->call_id, p->tool, NULL, e);
			}
			json_decref(resp);
			drop_pending(srv, i);
		} else if (p->u->fd < 0) {
			snprintf(msg, sizeof(msg), "%s(): the MCP server %s stopped during the call: %s", p->tool,
				 p->u->name, p->u->why);
			answer(s, p->call_id, p->tool, NULL, msg);
			drop_pending(srv, i);
		} else if (now() >= p->deadline) {
			snprintf(msg, sizeof(msg), "%s(): no answer from the MCP server %s in %g s", p->tool,
				 p->u->name, srv->up_timeout);
			mcpup_send_cancel(p->u, p->rid, "timed out");
			answer(s, p->call_id, p->tool, NULL, msg);
			drop_pending(srv, i);
		} else {
			i++;
		}
	}
	json_array_clear(srv->up_responses);
}

/* Read the MCP servers that polled readable (p[0..n_up)), tagging each
 * response with its server. */
static void pump_up(struct server *srv, const struct pollfd *p)
{
	for (size_t k = 0; k < srv->n_up; k++) {
		json_t *got;
		size_t i;
		json_t *r;

		if (srv->up[k].fd < 0 || !p[k].revents)
			continue;
		if (p[k].revents & POLLOUT)
			mcpup_flush(&srv->up[k]);
		got = json_array();
		if (mcpup_pump(&srv->up[k], got) < 0)
			fprintf(stderr, "nsbox mcp: the MCP server %s stopped: %s\n", srv->up[k].name, srv->up[k].why);
		json_array_foreach(got, i, r)
		{
			json_object_set_new(r, "_up", json_integer((json_int_t)k));
			json_array_append(srv->up_responses, r);
		}
		json_decref(got);
	}
}

static void answer_tool_call(struct server *srv, nsbox_session_t *s, const struct nsbox_event *ev)
{
	char *result = NULL, *error = NULL;
	const struct cli_tool *t = NULL;

	if (strchr(ev->tool, '.')) {
		forward_call(srv, s, ev);
		return;
	}

	for (size_t k = 0; k < srv->n_tools; k++)
		if (!strcmp(srv->tools[k].name, ev->tool))
			t = &srv->tools[k];
	/* The command blocks the loop while it runs (host tools are the
	 * user's own, short programs), at most to the exec's time limit or a
	 * stop signal. */
	if (!t)
		error = strdup("no such tool");
	else if (cli_tool_call(t, s, ev->tool, ev->args_json, &result, &error) != 0 && !error)
		error = strdup("the tool failed");
	answer(s, ev->call_id, ev->tool, result, error ? error : result ? NULL : "out of memory");
	free(result);
	free(error);
}

/* Run code on s through the event API, serving stdin meanwhile.  With a
 * progress token, notifications/progress every MCP_PROGRESS_EVERY seconds.
 * Returns 0 with *out, or -1 with msg (nothing ran). */
static int run_exec(struct server *srv, nsbox_session_t *s, const char *code, bool repl, double timeout, json_t *id,
		    json_t *token, nsbox_result_t **out, char *msg, size_t msz)
{
	struct nsbox_exec_opts eo = {
		.struct_size = sizeof(eo), .repl = repl, .timeout = timeout, .filename = "<mcp>"
	};
	struct nsbox_event ev = { .struct_size = sizeof(ev) };
	nsbox_error_t *e = NULL;
	struct tail tail = { .n = 0 };
	double start = now(), next_progress = start + MCP_PROGRESS_EVERY, stop_at = 0;
	int fd = nsbox_session_fd(s), k;
	bool killed = false, no_stdout = false;

	if (fd < 0) {
		snprintf(msg, msz, "session fd: %s", strerror(errno));
		return -1;
	}
	if (nsbox_exec_start(s, code, &eo, &e) < 0) {
		snprintf(msg, msz, "%s", nsbox_error_message(e));
		k = nsbox_error_code(e);
		nsbox_error_free(e);
		return k == -ENOTCONN ? -2 : -1;
	}
	srv->cur_id = id;
	srv->cur_s = s;
	srv->cur_cancelled = false;
	out_exec.s = s;
	out_exec.kill_at = start + timeout + MCP_STOP_GRACE;
	out_exec.killed = false;
	/* Advance before the first poll: deadlines are armed by advancing. */
	for (;;) {
		struct pollfd p[4 + MCPUP_MAX_SERVERS] = { { fd, POLLIN, 0 },
							   { srv->eof || queue_full(srv) ? -1 : 0, POLLIN, 0 } };
		int wait = -1;

		while ((k = nsbox_exec_advance(s, &ev, &e)) > 0) {
			if (ev.kind == NSBOX_EVENT_OUTPUT)
				tail_add(&tail, ev.data, ev.len);
			else if (ev.kind == NSBOX_EVENT_TOOL_CALL)
				answer_tool_call(srv, s, &ev);
			else if (ev.kind == NSBOX_EVENT_DONE)
				break;
		}
		if (k < 0) {
			snprintf(msg, msz, "exec: %s", nsbox_error_message(e));
			nsbox_error_free(e);
			srv->cur_id = NULL;
			srv->cur_s = NULL;
			out_exec.s = NULL;
			settle_up(srv, NULL, "the exec ended");
			return -1;
		}
		if (k > 0) /* DONE */
			break;
		/* A cancelled exec waiting on a code-mode call gets its
		 * answer now (nsbox.ToolError, then Cancelled). */
		if (srv->cur_cancelled && srv->n_pend)
			settle_up(srv, s, "cancelled");
		if (token && now() >= next_progress) {
			double t = now() - start;

			send_msg(json_pack("{s:s,s:s,s:{s:O,s:f,s:o}}", "jsonrpc", "2.0", "method",
					   "notifications/progress", "params", "progressToken", token, "progress",
					   floor(t), "message", text_json(tail.b, tail.n) ?: json_string("")));
			next_progress = now() + MCP_PROGRESS_EVERY;
		}
		if (token) {
			double left = next_progress - now();

			wait = cli_poll_ms(left);
		}
		for (size_t j = 0; j < srv->n_pend; j++) {
			double left = srv->pend[j].deadline - now();
			/* A server found stopped by a write (forward_call's, a
			 * cancel's) is not polled: its calls are answered now,
			 * not at their deadline. */
			int w = srv->pend[j].u->fd < 0 ? 0 : cli_poll_ms(left);

			if (wait < 0 || w < wait)
				wait = w;
		}
		if (stop_at > 0 && !killed) {
			int w = cli_poll_ms(stop_at + MCP_STOP_GRACE - now());

			if (wait < 0 || w < wait)
				wait = w;
		}
		for (size_t j = 0; j < srv->n_up; j++)
			p[2 + j] = (struct pollfd){ srv->up[j].fd,
						    POLLIN | (mcpup_wants_write(&srv->up[j]) ? POLLOUT : 0), 0 };
		/* Until the stop is seen (then the grace's timeout wakes us). */
		p[2 + srv->n_up] = (struct pollfd){ stop_at > 0 ? -1 : stop_pipe[0], POLLIN, 0 };
		/* Our stdout: POLLERR once the client closed its end.  A client
		 * gone was seen only when the answer was written, and the code
		 * ran to its end (up to --max-call-timeout) for nobody. */
		p[3 + srv->n_up] = (struct pollfd){ stop_at > 0 || no_stdout ? -1 : 1, 0, 0 };
		if (poll(p, 4 + srv->n_up, wait) < 0 && errno != EINTR)
			break;
		if ((p[3 + srv->n_up].revents & (POLLERR | POLLHUP)) && !stop_signal)
			stop_signal = SIGPIPE; /* as a write would have found: send_msg's EPIPE */
		no_stdout |= p[3 + srv->n_up].revents & POLLNVAL; /* fd 1 not open: not watched (it would spin) */
		/* A stop is a stop: the exec is cancelled (no answer: the client
		 * is gone), and code that does not take the cancel (a thread of
		 * its own holding the interpreter in C, where the
		 * KeyboardInterrupt never runs) has its sandbox killed. */
		if (stop_signal && stop_at == 0) {
			stop_at = now();
			if (!srv->cur_cancelled) {
				srv->cur_cancelled = true;
				nsbox_cancel(s);
			}
		}
		if (stop_at > 0 && !killed && now() >= stop_at + MCP_STOP_GRACE) {
			nsbox_session_kill(s);
			killed = true;
		}
		pump_up(srv, p + 2);
		/* Also with no call in flight: what a server sent unasked is
		 * dropped now, not kept to the exec's end. */
		settle_up(srv, s, NULL);
		/* At EOF the exec runs on to its end (a piped batch of
		 * requests still gets its answers); a client that stops
		 * waiting sends SIGTERM, as the stdio transport says. */
		if (!srv->eof && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			read_input(srv, true);
	}
	srv->cur_id = NULL;
	srv->cur_s = NULL;
	out_exec.s = NULL;
	/* Calls the sandbox no longer waits for (a limit or a cancel ended
	 * the exec): the servers are told, their late answers dropped. */
	settle_up(srv, NULL, "the exec ended");
	if (nsbox_exec_result(s, out, &e) < 0) {
		snprintf(msg, msz, "exec result: %s", nsbox_error_message(e));
		nsbox_error_free(e);
		return -1;
	}
	return 0;
}

static void put_stream(json_t *r, const char *name, const char *fallback, size_t flen, FILE *f)
{
	char key[32];
	const json_t *t = json_object_get(r, name);
	const char *text = json_string_value(t);
	size_t n = text ? json_string_length(t) : flen; /* U+0000 is output too */

	if (!text)
		text = fallback;
	if (!n)
		return;
	fprintf(f, "[%s]\n", name);
	fwrite(text, 1, n, f);
	if (text[n - 1] != '\n')
		fputc('\n', f);
	snprintf(key, sizeof(key), "%s_truncated", name);
	if (json_is_true(json_object_get(r, key))) {
		snprintf(key, sizeof(key), "%s_bytes", name);
		fprintf(f, "[%s truncated: %lld bytes in all]\n", name,
			(long long)json_integer_value(json_object_get(r, key)));
	}
}

/* The value of one base64 digit, -1 for anything else. */
static int b64_digit(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Canonical base64 (RFC 4648, padded, no line breaks, unused bits zero)
 * to a new buffer, or NULL. */
static char *b64_decode(const char *s, size_t n, size_t *olen)
{
	size_t pad = n >= 1 && s[n - 1] == '=' ? (n >= 2 && s[n - 2] == '=' ? 2 : 1) : 0, len = 0;
	unsigned acc = 0;
	int bits = 0;
	char *out;

	if (n % 4)
		return NULL;
	out = malloc(n / 4 * 3 + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n - pad; i++) {
		int d = b64_digit(s[i]);

		if (d < 0) {
			free(out);
			return NULL;
		}
		acc = ((acc << 6) | (unsigned)d) & 0xffffu;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[len++] = (char)(acc >> bits);
		}
	}
	if (acc & ((1u << bits) - 1)) {
		free(out);
		return NULL;
	}
	*olen = len;
	return out;
}

/* The value's repr is held to the output limit, as stdout is: a value such
 * as b'\x80' * 12_000_000 rendered to 48 MB and went to the client whole
 * (twice with --structured).  Rendering stops once past it (value_over). */
static size_t value_cap = 64 << 10;
static bool value_over;

struct capped {
	char *buf;
	size_t len, cap;
};

static ssize_t capped_write(void *c, const char *b, size_t n)
{
	struct capped *k = c;
	size_t take = k->len < k->cap ? (n < k->cap - k->len ? n : k->cap - k->len) : 0;

	memcpy(k->buf + k->len, b, take);
	k->len += take;
	if (take < n)
		value_over = true;
	return (ssize_t)n;
}

static void put_repr(const json_t *v, FILE *f, int depth);

/* v's repr, at most value_cap bytes (cut at a character's start) and a
 * note when cut; NULL when out of memory.  Free it. */
static char *value_repr(const json_t *v, size_t *len)
{
	static const char note[] = " [... the rest of the value is left out: over the output limit]";
	struct capped k = { .cap = value_cap };
	cookie_io_functions_t io = { .write = capped_write };
	FILE *f;

	k.buf = malloc(value_cap + sizeof(note));
	if (!k.buf)
		return NULL;
	value_over = false;
	f = fopencookie(&k, "w", io);
	if (!f) {
		free(k.buf);
		return NULL;
	}
	put_repr(v, f, 0);
	fclose(f);
	if (value_over) {
		while (k.len && ((unsigned char)k.buf[k.len - 1] & 0xc0) == 0x80)
			k.len--;
		if (k.len && (unsigned char)k.buf[k.len - 1] >= 0xc0)
			k.len--;
		memcpy(k.buf + k.len, note, sizeof(note) - 1);
		k.len += sizeof(note) - 1;
	}
	value_over = false;
	k.buf[k.len] = '\0';
	*len = k.len;
	return k.buf;
}

/* {"$bytes": base64} as Python shows bytes: b'...' ("bytearray(b'...')"
 * for $bytearray), in double quotes when they hold ' and no ". */
static void put_bytes(const char *b64, bool array, FILE *f)
{
	size_t n = strlen(b64), len = 0;
	unsigned char *buf = malloc(n / 4 * 3 + 3);
	unsigned acc = 0;
	int bits = 0, d;
	char q;

	if (!buf) {
		fputs("b'...'", f);
		return;
	}
	for (; *b64 && (d = b64_digit(*b64)) >= 0; b64++) {
		acc = ((acc << 6) | (unsigned)d) & 0xffffu;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[len++] = (unsigned char)(acc >> bits);
		}
	}
	q = memchr(buf, '\'', len) && !memchr(buf, '"', len) ? '"' : '\'';
	fprintf(f, "%sb%c", array ? "bytearray(" : "", q);
	for (size_t i = 0; i < len && !value_over; i++) {
		unsigned char c = buf[i];

		if (c == '\\' || c == (unsigned char)q)
			fprintf(f, "\\%c", c);
		else if (c == '\n' || c == '\r' || c == '\t')
			fprintf(f, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
		else if (c >= 0x20 && c < 0x7f)
			fputc(c, f);
		else
			fprintf(f, "\\x%02x", c);
	}
	fprintf(f, "%c%s", q, array ? ")" : "");
	free(buf);
}

/* The items of a $tuple, $set or $frozenset list, comma-separated. */
static void put_items(const json_t *a, FILE *f, int depth)
{
	const json_t *y;
	size_t i;

	json_array_foreach(a, i, y)
	{
		if (value_over)
			break;
		fputs(i ? ", " : "", f);
		put_repr(y, f, depth + 1);
	}
}

/* A protocol-encoded value (nsbox-protocol(7), VALUES) as Python's repr
 * would show it, near enough: $repr as is, containers rebuilt. */
static void put_repr(const json_t *v, FILE *f, int depth)
{
	const json_t *x;
	const char *k;
	size_t i;

	if (value_over) {
		return;
	} else if (depth > 100) {
		fputs("...", f);
	} else if (json_is_null(v)) {
		fputs("None", f);
	} else if (json_is_true(v) || json_is_false(v)) {
		fputs(json_is_true(v) ? "True" : "False", f);
	} else if (json_is_integer(v)) {
		fprintf(f, "%lld", (long long)json_integer_value(v));
	} else if (json_is_real(v)) {
		double d = json_real_value(v);

		fprintf(f, d == floor(d) && fabs(d) < 1e16 ? "%.1f" : "%.17g", d);
	} else if (json_is_string(v)) {
		const char *s = json_string_value(v), *end = s + json_string_length(v);
		char q = memchr(s, '\'', (size_t)(end - s)) && !memchr(s, '"', (size_t)(end - s)) ? '"' : '\'';

		fputc(q, f);
		for (; s < end; s++) {
			if (*s == q || *s == '\\')
				fprintf(f, "\\%c", *s);
			else if (*s == '\n')
				fputs("\\n", f);
			else if (*s == '\t')
				fputs("\\t", f);
			else if ((unsigned char)*s < 0x20)
				fprintf(f, "\\x%02x", (unsigned char)*s);
			else
				fputc(*s, f);
		}
		fputc(q, f);
	} else if (json_is_array(v)) {
		fputc('[', f);
		json_array_foreach(v, i, x)
		{
			fputs(i ? ", " : "", f);
			put_repr(x, f, depth + 1);
		}
		fputc(']', f);
	} else if ((x = json_object_get(v, "$repr")) && json_is_string(x)) {
		fputs(json_string_value(x), f);
	} else if ((x = json_object_get(v, "$int")) && json_is_string(x)) {
		fputs(json_string_value(x), f);
	} else if ((x = json_object_get(v, "$float")) && json_is_string(x)) {
		fprintf(f, "float('%s')", json_string_value(x));
	} else if ((x = json_object_get(v, "$tuple")) && json_is_array(x)) {
		fputc('(', f);
		put_items(x, f, depth);
		fputs(json_array_size(x) == 1 ? ",)" : ")", f);
	} else if ((x = json_object_get(v, "$set")) && json_is_array(x)) {
		if (json_array_size(x)) {
			fputc('{', f);
			put_items(x, f, depth);
			fputc('}', f);
		} else {
			fputs("set()", f);
		}
	} else if ((x = json_object_get(v, "$frozenset")) && json_is_array(x)) {
		fputs("frozenset(", f);
		if (json_array_size(x)) {
			fputc('{', f);
			put_items(x, f, depth);
			fputc('}', f);
		}
		fputc(')', f);
	} else if ((x = json_object_get(v, "$bytes")) && json_is_string(x)) {
		put_bytes(json_string_value(x), false, f);
	} else if ((x = json_object_get(v, "$bytearray")) && json_is_string(x)) {
		put_bytes(json_string_value(x), true, f);
	} else if ((x = json_object_get(v, "$complex")) && json_is_array(x) && json_array_size(x) == 2) {
		fputs("complex(", f);
		put_items(x, f, depth);
		fputc(')', f);
	} else if ((x = json_object_get(v, "$dict")) && json_is_array(x)) {
		const json_t *pair;

		fputc('{', f);
		json_array_foreach(x, i, pair)
		{
			if (value_over)
				break;
			fputs(i ? ", " : "", f);
			put_repr(json_array_get(pair, 0), f, depth + 1);
			fputs(": ", f);
			put_repr(json_array_get(pair, 1), f, depth + 1);
		}
		fputc('}', f);
	} else {
		const json_t *d = json_object_get(v, "$dict") ?: v;
		bool first = true;

		fputc('{', f);
		json_object_foreach((json_t *)d, k, x)
		{
			json_t *key = json_string(k);

			fputs(first ? "" : ", ", f);
			first = false;
			put_repr(key, f, depth + 1);
			fputs(": ", f);
			put_repr(x, f, depth + 1);
			json_decref(key);
		}
		fputc('}', f);
	}
}

static void put_value(const nsbox_result_t *res, FILE *f)
{
	json_t *v = json_loads(nsbox_result_value(res), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);

	if (v && !json_is_null(v)) {
		size_t n = 0;
		char *t = value_repr(v, &n);

		if (t)
			fwrite(t, 1, n, f);
		fputc('\n', f);
		free(t);
	}
	json_decref(v);
}

static const char *limit_name(enum nsbox_status st)
{
	switch (st) {
	case NSBOX_TIME_LIMIT:
		return "time limit";
	case NSBOX_MEMORY_LIMIT:
		return "memory limit";
	case NSBOX_CRASHED:
		return "crash";
	case NSBOX_PROTOCOL_ERROR:
		return "protocol error";
	default:
		return NULL;
	}
}

static const char *status_name(enum nsbox_status st)
{
	switch (st) {
	case NSBOX_OK:
		return "ok";
	case NSBOX_EXCEPTION:
		return "exception";
	case NSBOX_TIME_LIMIT:
		return "time_limit";
	case NSBOX_CANCELLED:
		return "cancelled";
	case NSBOX_MEMORY_LIMIT:
		return "memory_limit";
	case NSBOX_CRASHED:
		return "crashed";
	default:
		return "protocol_error";
	}
}

/* --structured: the same result as data (the outputSchema of tools_list). */
static json_t *structured_result(const nsbox_result_t *res, bool dead)
{
	enum nsbox_status st = nsbox_result_status(res);
	json_t *r = json_loads(nsbox_result_json(res), JSON_ALLOW_NUL, NULL), *v, *out;
	size_t olen = 0, elen = 0;
	const char *o = nsbox_result_stdout(res, &olen), *er = nsbox_result_stderr(res, &elen);
	char *repr = NULL;
	size_t rlen = 0;

	v = st == NSBOX_OK ? json_loads(nsbox_result_value(res), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
	if (v && !json_is_null(v))
		repr = value_repr(v, &rlen);
	json_decref(v);
	out = json_pack("{s:s,s:o,s:o,s:b,s:b,s:o,s:b}", "status", status_name(st), "stdout",
			text_json(o ? o : "", o ? olen : 0) ?: json_string(""), "stderr",
			text_json(er ? er : "", er ? elen : 0) ?: json_string(""), "stdout_truncated",
			json_is_true(json_object_get(r, "stdout_truncated")), "stderr_truncated",
			json_is_true(json_object_get(r, "stderr_truncated")), "value",
			repr ? text_json(repr, rlen) ?: json_null() : json_null(), "session_ended", dead);
	free(repr);
	if (out && st != NSBOX_OK)
		json_object_set_new(out, "error",
				    json_pack("{s:s,s:s,s:s}", "type", nsbox_result_error_type(res) ?: status_name(st),
					      "message", nsbox_result_error_message(res) ?: "", "traceback",
					      nsbox_result_traceback(res) ?: ""));
	json_decref(r);
	return out;
}

/* ---- rich results: figures and /out files -------------------------------- */

#define MCP_IMAGE_CAP (8u << 20)    /* bytes of base64 in image blocks per result (the runner's cap) */
#define MCP_RESOURCE_CAP (8u << 20) /* bytes per resources/read */
#define MCP_URI_PREFIX "nsbox://session/"

static char *b64_encode(const void *data, size_t n, size_t *olen)
{
	static const char dig[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = data;
	char *out = malloc(n / 3 * 4 + 5), *o = out;

	if (!out)
		return NULL;
	for (; n >= 3; n -= 3, p += 3) {
		*o++ = dig[p[0] >> 2];
		*o++ = dig[(p[0] & 3) << 4 | p[1] >> 4];
		*o++ = dig[(p[1] & 15) << 2 | p[2] >> 6];
		*o++ = dig[p[2] & 63];
	}
	if (n) {
		*o++ = dig[p[0] >> 2];
		*o++ = dig[(p[0] & 3) << 4 | (n > 1 ? p[1] >> 4 : 0)];
		*o++ = n > 1 ? dig[(p[1] & 15) << 2] : '=';
		*o++ = '=';
	}
	*o = '\0';
	if (olen)
		*olen = (size_t)(o - out);
	return out;
}

/* A MIME type for an /out file, from its extension. */
static const char *mime_of_name(const char *name)
{
	static const char *const map[][2] = {
		{ "png", "image/png" },	      { "jpg", "image/jpeg" },
		{ "jpeg", "image/jpeg" },     { "gif", "image/gif" },
		{ "webp", "image/webp" },     { "svg", "image/svg+xml" },
		{ "pdf", "application/pdf" }, { "json", "application/json" },
		{ "csv", "text/csv" },	      { "tsv", "text/tab-separated-values" },
		{ "txt", "text/plain" },      { "log", "text/plain" },
		{ "md", "text/markdown" },    { "html", "text/html" },
		{ "htm", "text/html" },	      { "xml", "application/xml" },
		{ "py", "text/x-python" },    { "zip", "application/zip" },
		{ "gz", "application/gzip" }, { "wav", "audio/wav" },
		{ "mp3", "audio/mpeg" },
	};
	const char *dot = strrchr(name, '.');

	if (dot && dot != name)
		for (size_t i = 0; i < ARRAY_SIZE(map); i++)
			if (!strcasecmp(dot + 1, map[i][0]))
				return map[i][1];
	return "application/octet-stream";
}

static bool text_mime(const char *mime)
{
	return !strncmp(mime, "text/", 5) || !strcmp(mime, "application/json") || !strcmp(mime, "application/xml") ||
	       !strcmp(mime, "image/svg+xml");
}

/* nsbox://session/<handle, or "default">/out/<name, percent-encoded>. */
static char *out_uri(const char *handle, const char *name)
{
	char *uri = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&uri, &n);

	if (!f)
		return NULL;
	fprintf(f, MCP_URI_PREFIX "%s/out/", *handle ? handle : "default");
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p))
			fputc(*p, f);
		else
			fprintf(f, "%%%02X", *p);
	fclose(f);
	return uri;
}

/* /out file i of res as {name, uri, mimeType, size} (resources/read
 * resolves the uri), or NULL. */
static json_t *file_link(const nsbox_result_t *res, size_t i, const char *handle)
{
	const char *name = nsbox_result_file_name(res, i);
	uint64_t size = 0;
	char *uri = name ? out_uri(handle, name) : NULL;
	json_t *link;

	if (!uri)
		return NULL;
	nsbox_result_file_data(res, i, NULL, &size);
	link = json_pack("{s:s,s:s,s:s,s:I}", "name", name, "uri", uri, "mimeType", mime_of_name(name), "size",
			 (json_int_t)size);
	free(uri);
	return link;
}

/* The blocks after the text block: an image block per display with an
 * image (a raster type first, else SVG), a text block for a display
 * without one (text/markdown, else text/plain), a resource_link per /out
 * file (none when handle is NULL: the session died).  What was left out
 * is said in f (the text block). */
static json_t *rich_blocks(const nsbox_result_t *res, const char *handle, FILE *f)
{
	static const char *const images[] = { "image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml" };
	json_t *blocks = json_array();
	size_t budget = MCP_IMAGE_CAP, cut = 0;
	/* A last expression with rich representations (a DataFrame) comes as
	 * the last bundle too, and its repr is in the text block already: the
	 * value is then a $repr, the bundle's text/plain the same repr. */
	size_t n_text = nsbox_result_display_count(res);
	json_t *v = nsbox_result_status(res) == NSBOX_OK
			    ? json_loads(nsbox_result_value(res), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL)
			    : NULL;
	const char *vrepr = json_string_value(json_object_get(v, "$repr")), *last;
	size_t llen = 0;

	if (n_text && vrepr && (last = nsbox_result_display_data(res, n_text - 1, "text/plain", &llen)) &&
	    llen == strlen(vrepr) && !memcmp(last, vrepr, llen))
		n_text--;
	json_decref(v);

	for (size_t i = 0; blocks && i < nsbox_result_display_count(res); i++) {
		const char *mime = NULL, *data = NULL;
		size_t len = 0;

		for (size_t k = 0; k < ARRAY_SIZE(images) && !data; k++)
			if ((data = nsbox_result_display_data(res, i, images[k], &len)))
				mime = images[k];
		if (data) {
			size_t blen = 0;
			char *b = len / 3 * 4 + 4 <= budget ? b64_encode(data, len, &blen) : NULL;

			if (!b) {
				cut++;
				continue;
			}
			budget -= blen;
			json_array_append_new(blocks, json_pack("{s:s,s:s%,s:s}", "type", "image", "data", b, blen,
								"mimeType", mime));
			free(b);
			continue;
		}
		if (i >= n_text)
			continue;
		if (!(data = nsbox_result_display_data(res, i, "text/markdown", &len)))
			data = nsbox_result_display_data(res, i, "text/plain", &len);
		if (data)
			json_array_append_new(blocks, json_pack("{s:s,s:o}", "type", "text", "text",
								text_json(data, len) ?: json_string("")));
	}
	if (cut)
		fprintf(f, "nsbox: %zu image%s left out (over %u MiB of images per result)\n", cut, cut == 1 ? "" : "s",
			MCP_IMAGE_CAP >> 20);
	if (nsbox_result_displays_truncated(res))
		fputs("nsbox: some displays were left out or cut down (the sandbox's caps: 64 per result, 8 MiB in all)\n",
		      f);
	if (!handle && nsbox_result_file_count(res)) /* the session died: no link would resolve */
		fprintf(f, "nsbox: %zu file%s written to /out went with the session\n", nsbox_result_file_count(res),
			nsbox_result_file_count(res) == 1 ? "" : "s");
	for (size_t i = 0; handle && blocks && i < nsbox_result_file_count(res); i++) {
		json_t *link = file_link(res, i, handle);

		if (link && json_object_set_new(link, "type", json_string("resource_link")) == 0)
			json_array_append_new(blocks, link);
		else
			json_decref(link);
	}
	if (nsbox_result_files_truncated(res))
		fputs("nsbox: some files in /out were left out of this list (the sandbox's caps: 64 files per result)\n",
		      f);
	return blocks;
}

/* --structured: what the rich blocks are, without the data. */
static void structured_rich(json_t *out, const nsbox_result_t *res, const char *handle)
{
	json_t *d = json_array(), *fl = json_array();

	for (size_t i = 0; d && i < nsbox_result_display_count(res); i++) {
		json_t *m = json_array();

		for (size_t j = 0; m && j < nsbox_result_display_mime_count(res, i); j++)
			json_array_append_new(m, json_string(nsbox_result_display_mime(res, i, j)));
		json_array_append_new(d, json_pack("{s:o}", "mimeTypes", m ?: json_array()));
	}
	for (size_t i = 0; handle && fl && i < nsbox_result_file_count(res); i++)
		json_array_append_new(fl, file_link(res, i, handle));
	json_object_set_new(out, "displays", d ?: json_array());
	json_object_set_new(out, "displays_truncated", json_boolean(nsbox_result_displays_truncated(res)));
	json_object_set_new(out, "files", fl ?: json_array());
	json_object_set_new(out, "files_truncated", json_boolean(nsbox_result_files_truncated(res)));
}

/* A text block: stdout, stderr, the last expression's value or the
 * exception; a dead session is said so (and forgotten by the caller).
 * With rich (run_python), the blocks of rich_blocks follow it; with
 * structured, the same as structuredContent too. */
static json_t *format_result(const nsbox_result_t *res, bool dead, const char *handle, bool rich, bool structured)
{
	enum nsbox_status st = nsbox_result_status(res);
	json_t *r = json_loads(nsbox_result_json(res), JSON_ALLOW_NUL, NULL);
	char *text = NULL;
	size_t tlen = 0, olen, elen;
	const char *o = nsbox_result_stdout(res, &olen), *er = nsbox_result_stderr(res, &elen);
	FILE *f = open_memstream(&text, &tlen);
	bool is_error = st != NSBOX_OK, implicit = !*handle;
	json_t *out, *blocks = NULL;

	if (!f) {
		json_decref(r);
		return tool_errorf("out of memory");
	}
	put_stream(r, "stdout", o ? o : "", o ? olen : 0, f);
	put_stream(r, "stderr", er ? er : "", er ? elen : 0, f);
	if (st == NSBOX_OK) {
		put_value(res, f);
	} else if (st == NSBOX_EXCEPTION) {
		const char *tb = nsbox_result_traceback(res);

		if (tb && *tb)
			fputs(tb, f);
		else
			fprintf(f, "%s: %s\n", nsbox_result_error_type(res) ?: "Exception",
				nsbox_result_error_message(res) ?: "");
	} else if (st == NSBOX_CANCELLED) {
		fputs("cancelled\n", f);
	} else if (st == NSBOX_CRASHED && out_exec.killed) {
		fputs("nsbox: stopped by the time limit: the server was waiting to write to its client, and the "
		      "sandbox was killed at the call's limit\n",
		      f);
	} else {
		fprintf(f, "nsbox: stopped by the %s: %s\n", limit_name(st) ?: "sandbox",
			nsbox_result_error_message(res) ?: "");
	}
	if (rich)
		blocks = rich_blocks(res, dead ? NULL : handle, f);
	if (dead)
		fprintf(f, "nsbox: the session ended and its state is lost; %s\n",
			implicit ? "the next call starts a fresh session"
				 : "its handle is closed (make another with new_session)");
	if (ftell(f) == 0)
		fputs(json_array_size(blocks) ? "(no text output)\n" : "(no output)\n", f);
	fclose(f);
	json_decref(r);
	if (tlen && text[tlen - 1] == '\n')
		text[--tlen] = '\0';
	out = json_pack("{s:[{s:s,s:o}],s:b}", "content", "type", "text", "text",
			text_json(text, tlen) ?: json_string(""), "isError", is_error);
	free(text);
	if (out && blocks)
		json_array_extend(json_object_get(out, "content"), blocks);
	json_decref(blocks);
	if (out && structured) {
		json_t *sc = structured_result(res, dead);

		if (sc)
			structured_rich(sc, res, dead ? NULL : handle);
		json_object_set_new(out, "structuredContent", sc);
	}
	return out;
}

/* ---- tools ----------------------------------------------------------------- */

/* Arguments: -1 sets msg for a -32602 error.  A string with U+0000 is
 * refused (code, paths and handles are C strings), unless len is given:
 * then *len is its length (write_file's text). */
static int arg_text(json_t *args, const char *name, bool required, const char **out, size_t *len, char *msg,
		    size_t msz)
{
	json_t *v = json_object_get(args, name);

	*out = NULL;
	if (!v || json_is_null(v)) {
		if (required) {
			snprintf(msg, msz, "missing argument '%s' (a string)", name);
			return -1;
		}
		return 0;
	}
	if (!json_is_string(v)) {
		snprintf(msg, msz, "argument '%s' must be a string", name);
		return -1;
	}
	if (!len && !cstr(v)) {
		snprintf(msg, msz, "argument '%s' must not contain U+0000", name);
		return -1;
	}
	*out = json_string_value(v);
	if (len)
		*len = json_string_length(v);
	return 0;
}

static int arg_string(json_t *args, const char *name, bool required, const char **out, char *msg, size_t msz)
{
	return arg_text(args, name, required, out, NULL, msg, msz);
}

static int arg_number(json_t *args, const char *name, double min, double max, double *out, char *msg, size_t msz)
{
	json_t *v = json_object_get(args, name);

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v) || json_number_value(v) < min || json_number_value(v) > max) {
		snprintf(msg, msz, "argument '%s' must be a number from %g to %g", name, min, max);
		return -1;
	}
	*out = json_number_value(v);
	return 0;
}

/* The session a call names (NULL: the implicit one, started on first use).
 * Returns NULL with *err set to a tool result when there is none. */
static struct msess *pick_session(struct server *srv, const char *handle, json_t **err)
{
	char msg[1024];

	if (handle) {
		struct msess *m = find_handle(srv, handle);

		if (!m)
			*err = tool_errorf(
				"unknown or expired session '%.64s' (sessions close after %g s idle, "
				"or when a limit kills them): make one with new_session, or omit "
				"'session' to use the default session",
				handle, srv->idle_timeout);
		return m;
	}
	if (!srv->implicit.s && start_session(srv, 0, &srv->implicit.s, msg, sizeof(msg)) < 0) {
		*err = tool_errorf("%s", msg);
		return NULL;
	}
	srv->implicit.last_used = now();
	return &srv->implicit;
}

static double call_timeout(struct server *srv, const struct msess *m, double asked)
{
	double t = asked > 0 ? asked : m->call_timeout > 0 ? m->call_timeout : srv->call_timeout;

	if (t > srv->max_call_timeout)
		t = srv->max_call_timeout;
	/* The policy's own TimeLimit always holds. */
	if (srv->policy_time_limit > 0 && t > srv->policy_time_limit)
		t = srv->policy_time_limit;
	return t;
}

/* Run code on m and make the tool result; *suppress when the request was
 * cancelled (no response then).  Forgets m when its sandbox died. */
static json_t *exec_on(struct server *srv, struct msess *m, const char *code, bool repl, double timeout, json_t *id,
		       json_t *token, bool *suppress, nsbox_result_t **keep)
{
	nsbox_result_t *res = NULL;
	char msg[1024];
	bool dead;
	json_t *out;
	int r;

	r = run_exec(srv, m->s, code, repl, timeout, id, token, &res, msg, sizeof(msg));
	if (r == -2 && !m->handle[0]) { /* the implicit sandbox died idle: once more, afresh */
		close_msess(srv, m);
		if (start_session(srv, 0, &m->s, msg, sizeof(msg)) < 0)
			return tool_errorf("%s", msg);
		r = run_exec(srv, m->s, code, repl, timeout, id, token, &res, msg, sizeof(msg));
	}
	m->last_used = now();
	if (r < 0) {
		if (!alive(m->s))
			close_msess(srv, m);
		return tool_errorf("%s", msg);
	}
	*suppress = srv->cur_cancelled;
	dead = !alive(m->s);
	/* Only run_python's results follow its outputSchema (keep != NULL:
	 * a file tool's). */
	out = format_result(res, dead, m->handle, !keep, srv->structured && !keep);
	if (dead)
		close_msess(srv, m);
	if (keep)
		*keep = res;
	else
		nsbox_result_free(res);
	return out;
}

static json_t *tool_run_python(struct server *srv, json_t *args, json_t *id, json_t *token, bool *suppress, char *msg,
			       size_t msz)
{
	const char *code, *handle;
	double timeout;
	struct msess *m;
	json_t *err = NULL;

	if (arg_string(args, "code", true, &code, msg, msz) < 0 ||
	    arg_string(args, "session", false, &handle, msg, msz) < 0 ||
	    arg_number(args, "timeout_s", 0.001, 1e6, &timeout, msg, msz) < 0)
		return NULL;
	if (strlen(code) > MCP_MAX_CODE) {
		snprintf(msg, msz, "argument 'code' is too long (%zu bytes; at most %u)", strlen(code), MCP_MAX_CODE);
		return NULL;
	}
	m = pick_session(srv, handle, &err);
	if (!m)
		return err;
	return exec_on(srv, m, code, true, call_timeout(srv, m, timeout), id, token, suppress, NULL);
}

static json_t *tool_new_session(struct server *srv, json_t *args, char *msg, size_t msz)
{
	double mem, timeout;
	unsigned char rnd[16];
	struct msess *m = NULL;
	char emsg[1024];

	if (arg_number(args, "memory_mb", 16, (double)(srv->max_memory >> 20), &mem, msg, msz) < 0 ||
	    arg_number(args, "timeout_s", 0.001, srv->max_call_timeout, &timeout, msg, msz) < 0)
		return NULL;
	for (unsigned i = 0; i < srv->max_sessions && !m; i++)
		if (!srv->sess[i].s)
			m = &srv->sess[i];
	if (!m)
		return tool_errorf("too many sessions (at most %u): close one with close_session", srv->max_sessions);
	/* Unguessable: a handle is the only key to a session's state. */
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return tool_errorf("getrandom: %s", strerror(errno));
	if (start_session(srv, (uint64_t)mem << 20, &m->s, emsg, sizeof(emsg)) < 0)
		return tool_errorf("%s", emsg);
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(m->handle + 2 * i, 3, "%02x", rnd[i]);
	m->last_used = now();
	m->call_timeout = timeout;
	snprintf(emsg, sizeof(emsg),
		 "{\"session\": \"%s\", \"idle_timeout_s\": %g}\nPass this session to run_python and the file "
		 "tools; it closes after %g s without a call, or with close_session.",
		 m->handle, srv->idle_timeout, srv->idle_timeout);
	return tool_result(emsg, false);
}

static json_t *tool_close_session(struct server *srv, json_t *args, char *msg, size_t msz)
{
	const char *handle;
	struct msess *m;

	if (arg_string(args, "session", true, &handle, msg, msz) < 0)
		return NULL;
	m = find_handle(srv, handle);
	if (!m)
		return tool_errorf("unknown or expired session '%.64s'", handle);
	close_msess(srv, m);
	return tool_result("closed", false);
}

/* File operations as fixed snippets, each defining _nsbox_mcp_op(args);
 * file_op appends the arguments' JSON in a base64 literal (its alphabet
 * can't end the string: nothing the client sent is ever code) and the
 * call, whose expression pops both names so the user's globals are left
 * as they were.  One exec, driven like run_python's: a runner held by the
 * sandbox's own code keeps the tool waiting (until its timeout), not the
 * server (a set_var before it waited on the loop's thread). */
static const char read_snippet[] =
	"def _nsbox_mcp_op(a):\n"
	"    import base64\n"
	"    with open(a['path'], 'rb') as f:\n"
	"        data = f.read(a['cap'] + 1)\n"
	"    if len(data) > a['cap']:\n"
	"        raise ValueError('file too large (over %d bytes)' % a['cap'])\n"
	"    try:\n"
	"        return {'text': data.decode('utf-8'), 'size': len(data)}\n"
	"    except UnicodeDecodeError:\n"
	"        return {'base64': base64.b64encode(data).decode('ascii'), 'size': len(data)}\n";
static const char write_snippet[] =
	"def _nsbox_mcp_op(a):\n"
	"    import base64, os\n"
	"    data = base64.b64decode(a['data'], validate=True) if a['b64'] else a['data'].encode('utf-8')\n"
	"    d = os.path.dirname(a['path'])\n"
	"    if d:\n"
	"        os.makedirs(d, exist_ok=True)\n"
	"    with open(a['path'], 'wb') as f:\n"
	"        f.write(data)\n"
	"    return {'size': len(data), 'path': os.path.abspath(a['path'])}\n";
static const char list_snippet[] =
	"def _nsbox_mcp_op(a):\n"
	"    import os\n"
	"    out = []\n"
	"    with os.scandir(a['path']) as it:\n"
	"        for e in it:\n"
	"            if len(out) >= a['cap']:\n"
	"                break\n"
	"            st = e.stat(follow_symlinks=False)\n"
	"            kind = 'dir' if e.is_dir(follow_symlinks=False) else 'link' if e.is_symlink() else 'file'\n"
	"            out.append([e.name, kind, st.st_size])\n"
	"    return {'path': os.path.abspath(a['path']), 'entries': sorted(out)}\n";

/* resources/read's: the file's bytes in base64 (decoded and checked here),
 * or {"gone"}, or {"big"}; a fifo or device is an error, never waited on
 * (O_NONBLOCK, then fstat), as in nsbox-protocol(7), FILES. */
static const char resource_snippet[] =
	"def _nsbox_mcp_op(a):\n"
	"    import base64, os, stat\n"
	"    try:\n"
	"        fd = os.open(a['path'], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)\n"
	"    except FileNotFoundError:\n"
	"        return {'gone': True}\n"
	"    except OSError as e:\n"
	"        return {'error': str(e)}\n"
	"    if not stat.S_ISREG(os.fstat(fd).st_mode):\n"
	"        os.close(fd)\n"
	"        return {'error': 'not a regular file'}\n"
	"    with open(fd, 'rb') as f:\n"
	"        try:\n"
	"            data = f.read(a['cap'] + 1)\n"
	"        except OSError as e:\n"
	"            return {'error': str(e)}\n"
	"    if len(data) > a['cap']:\n"
	"        return {'big': True}\n"
	"    return {'b64': base64.b64encode(data).decode('ascii')}\n";

/* One file snippet run on session m (file_op). */
static json_t *file_op_on(struct server *srv, struct msess *m, const char *snippet, json_t *fargs, json_t *id,
			  bool *suppress, json_t **value)
{
	json_t *out;
	nsbox_result_t *res = NULL;
	char *text;
	char *code = NULL, *b64;

	text = json_dumps(fargs, JSON_COMPACT);
	json_decref(fargs);
	b64 = text ? b64_encode(text, strlen(text), NULL) : NULL;
	free(text);
	/* The arguments on a line of their own: a traceback through the
	 * call quotes the call's line, not up to a megabyte of base64. */
	if (!b64 || asprintf(&code, "%s_nsbox_mcp_args = '%s'\n"
				   "globals().pop('_nsbox_mcp_op')(__import__('json').loads(__import__('base64')."
				   "b64decode(globals().pop('_nsbox_mcp_args'))))\n", snippet, b64) < 0) {
		free(b64);
		return tool_errorf("out of memory");
	}
	free(b64);
	out = exec_on(srv, m, code, true, call_timeout(srv, m, 30), id, NULL, suppress, &res);
	free(code);
	if (res && nsbox_result_status(res) == NSBOX_OK) {
		*value = json_loads(nsbox_result_value(res), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (*value) {
			json_decref(out);
			out = NULL;
		}
	}
	nsbox_result_free(res);
	return out;
}

static json_t *file_op(struct server *srv, const char *handle, const char *snippet, json_t *fargs, json_t *id,
		       json_t **value)
{
	json_t *err = NULL;
	struct msess *m = pick_session(srv, handle, &err);
	bool suppress = false;

	if (!m) {
		json_decref(fargs);
		return err;
	}
	return file_op_on(srv, m, snippet, fargs, id, &suppress, value);
}

static json_t *tool_read_file(struct server *srv, json_t *args, json_t *id, char *msg, size_t msz)
{
	const char *handle, *path;
	json_t *v = NULL, *out;

	if (arg_string(args, "session", false, &handle, msg, msz) < 0 ||
	    arg_string(args, "path", true, &path, msg, msz) < 0)
		return NULL;
	out = file_op(srv, handle, read_snippet, json_pack("{s:s,s:i}", "path", path, "cap", MCP_FILE_CAP), id, &v);
	if (out)
		return out;
	/* What the sandbox's snippet answered: its own code may have changed
	 * it, so anything but {"text": str} or {"base64": str} is the tool's
	 * error, not the client's. */
	if (json_is_string(json_object_get(v, "text"))) {
		json_t *t = json_object_get(v, "text"); /* the file's U+0000 included */

		out = json_pack("{s:[{s:s,s:o}],s:b}", "content", "type", "text", "text",
				text_json(json_string_value(t), json_string_length(t)) ?: json_string(""), "isError",
				0);
	} else if (!json_is_string(json_object_get(v, "base64"))) {
		out = tool_result("read_file: the sandbox answered something else than the file's content", true);
	} else {
		out = json_pack("{s:[{s:s,s:s},{s:s,s:O}],s:b}", "content", "type", "text", "text",
				"not UTF-8 text: the content follows in base64", "type", "text", "text",
				json_object_get(v, "base64"), "isError", 0);
	}
	json_decref(v);
	return out;
}

static json_t *tool_write_file(struct server *srv, json_t *args, json_t *id, char *msg, size_t msz)
{
	const char *handle, *path, *text, *b64;
	json_t *v = NULL, *out;
	char buf[4200];
	size_t tlen = 0;

	if (arg_string(args, "session", false, &handle, msg, msz) < 0 ||
	    arg_string(args, "path", true, &path, msg, msz) < 0 ||
	    arg_text(args, "text", false, &text, &tlen, msg, msz) < 0 ||
	    arg_string(args, "base64", false, &b64, msg, msz) < 0)
		return NULL;
	if (!text == !b64) {
		snprintf(msg, msz, "give exactly one of the arguments 'text' and 'base64'");
		return NULL;
	}
	if (text ? tlen > MCP_FILE_CAP : strlen(b64) > MCP_FILE_CAP / 3 * 4 + 4) {
		snprintf(msg, msz, "argument '%s' is too long (at most %u bytes of content)", text ? "text" : "base64",
			 MCP_FILE_CAP);
		return NULL;
	}
	/* The text with its U+0000, by length. */
	out = file_op(srv, handle, write_snippet,
		      json_pack("{s:s,s:s%,s:b}", "path", path, "data", text ? text : b64, text ? tlen : strlen(b64),
				"b64", !text),
		      id, &v);
	if (out)
		return out;
	snprintf(buf, sizeof(buf), "wrote %lld bytes to %.4000s",
		 (long long)json_integer_value(json_object_get(v, "size")),
		 json_string_value(json_object_get(v, "path")) ?: path);
	json_decref(v);
	return tool_result(buf, false);
}

static json_t *tool_list_files(struct server *srv, json_t *args, json_t *id, char *msg, size_t msz)
{
	const char *handle, *path;
	json_t *v = NULL, *out, *ent;
	char *text = NULL;
	size_t tlen = 0, i;
	FILE *f;

	if (arg_string(args, "session", false, &handle, msg, msz) < 0 ||
	    arg_string(args, "path", false, &path, msg, msz) < 0)
		return NULL;
	out = file_op(srv, handle, list_snippet, json_pack("{s:s,s:i}", "path", path ? path : ".", "cap", MCP_LIST_CAP),
		      id, &v);
	if (out)
		return out;
	f = open_memstream(&text, &tlen);
	if (!f) {
		json_decref(v);
		return tool_errorf("out of memory");
	}
	fprintf(f, "%s:\n", json_string_value(json_object_get(v, "path")) ?: "");
	json_array_foreach(json_object_get(v, "entries"), i, ent)
	{
		const char *kind = json_string_value(json_array_get(ent, 1)) ?: "";

		fprintf(f, "%s%s", json_string_value(json_array_get(ent, 0)) ?: "",
			!strcmp(kind, "dir")	? "/"
			: !strcmp(kind, "link") ? "@"
						: "");
		if (!strcmp(kind, "file"))
			fprintf(f, "\t%lld bytes", (long long)json_integer_value(json_array_get(ent, 2)));
		fputc('\n', f);
	}
	if (i >= MCP_LIST_CAP)
		fprintf(f, "(the first %u entries)\n", MCP_LIST_CAP);
	fclose(f);
	json_decref(v);
	out = tool_result(text ? text : "", false);
	free(text);
	return out;
}

/* run_python's description: what it does, and the functions callable
 * inside (--tool, and code mode's NAME.tool with signature and the first
 * line of the tool's description), within MCP_DESC_MAX bytes. */
#define MCP_DESC_MAX (32u << 10)
static char *run_python_description(const struct server *srv)
{
	char *text = NULL;
	size_t tlen = 0;
	FILE *f = open_memstream(&text, &tlen);

	if (!f)
		return NULL;
	fprintf(f,
		"Run Python code in a kernel-isolated sandbox (nsbox). Globals persist between calls on the same "
		"session. Returns stdout, stderr and the value of the last expression, or the exception with its "
		"traceback. Network: %s.",
		srv->share_net ? "the host's" : "none");
	if (srv->n_tools) {
		fputs(" Host functions callable inside:", f);
		for (size_t k = 0; k < srv->n_tools; k++)
			fprintf(f, " %s(...)", srv->tools[k].name);
		fputs(" (JSON-serialisable arguments and results).", f);
	}
	if (srv->n_up) {
		fputs("\n\nTools of other MCP servers, callable inside as Python functions (keyword arguments; a "
		      "result is a str for text, a dict for structured content; a failure raises nsbox.ToolError; "
		      "NAME.tool.__doc__ is a tool's full description). Call them in loops and return only what "
		      "matters:",
		      f);
		for (size_t k = 0; k < srv->n_up; k++)
			for (size_t j = 0; j < srv->up[k].n_tools; j++) {
				const struct mcpup_tool *t = &srv->up[k].tools[j];
				char *sig = mcpup_signature(t->schema);
				const char *d = t->description ? t->description : "";
				size_t n = strcspn(d, "\n");

				if (n > 200)
					n = cli_utf8_prefix(d, 200);

				if (ftell(f) > (long)MCP_DESC_MAX - 512) {
					fputs("\n(more: dir(NAME) inside lists them)", f);
					free(sig);
					goto done;
				}
				fprintf(f, "\n- %s.%s%s%s%.*s", srv->up[k].name, t->py, sig ? sig : "(**kwargs)",
					n ? ": " : "", (int)n, d);
				free(sig);
			}
	}
done:
	fclose(f);
	return text;
}

static json_t *tools_list(const struct server *srv)
{
	char *desc = run_python_description(srv);
	bool open_world = srv->share_net, destructive = srv->host_writes;
	json_t *session = json_pack("{s:s,s:s}", "type", "string", "description",
				    "a handle from new_session; omit it for the server's default session");

	/* Code mode reaches what the other servers' tools reach. */
	for (size_t k = 0; k < srv->n_up; k++)
		for (size_t j = 0; j < srv->up[k].n_tools; j++) {
			open_world |= srv->up[k].tools[j].open_world;
			destructive |= srv->up[k].tools[j].destructive;
		}
	json_t *list;

	list = json_pack(
		"{s:[{s:s,s:s,s:s,s:{s:s,s:{s:{s:s,s:s},s:O,s:{s:s,s:s,s:f}},s:[s],s:b},s:{s:s,s:b,s:b,s:b,s:b}},"
		"{s:s,s:s,s:s,s:{s:s,s:{s:{s:s,s:s,s:i},s:{s:s,s:s,s:f}},s:b},s:{s:s,s:b,s:b,s:b,s:b}},"
		"{s:s,s:s,s:s,s:{s:s,s:{s:{s:s,s:s}},s:[s],s:b},s:{s:s,s:b,s:b,s:b,s:b}},"
		"{s:s,s:s,s:s,s:{s:s,s:{s:O,s:{s:s,s:s}},s:[s],s:b},s:{s:s,s:b,s:b,s:b,s:b}},"
		"{s:s,s:s,s:s,s:{s:s,s:{s:O,s:{s:s,s:s},s:{s:s,s:s},s:{s:s,s:s}},s:[s],s:b},"
		"s:{s:s,s:b,s:b,s:b,s:b}},"
		"{s:s,s:s,s:s,s:{s:s,s:{s:O,s:{s:s,s:s}},s:b},s:{s:s,s:b,s:b,s:b,s:b}}]}",
		"tools",
		/* run_python */
		"name", "run_python", "title", "Run Python", "description", desc ? desc : "Run Python code.",
		"inputSchema", "type", "object", "properties", "code", "type", "string", "description",
		"Python source; at most 1 MiB", "session", session, "timeout_s", "type", "number", "description",
		"wall-clock limit for this call, seconds", "exclusiveMinimum", 0.0, "required", "code",
		"additionalProperties", 0, "annotations", "title", "Run Python", "readOnlyHint", 0, "destructiveHint",
		destructive, "idempotentHint", 0, "openWorldHint", open_world,
		/* new_session */
		"name", "new_session", "title", "New session", "description",
		"Start a new sandboxed Python session and return its handle. It closes when idle for the "
		"server's idle timeout (stated in the result) or with close_session.",
		"inputSchema", "type", "object", "properties", "memory_mb", "type", "integer", "description",
		"memory limit in MiB", "minimum", 16, "timeout_s", "type", "number", "description",
		"default wall-clock limit per call, seconds", "exclusiveMinimum", 0.0, "additionalProperties", 0,
		"annotations", "title", "New session", "readOnlyHint", 0, "destructiveHint", 0, "idempotentHint", 0,
		"openWorldHint", 0,
		/* close_session */
		"name", "close_session", "title", "Close session", "description",
		"Close a session made by new_session; its state is lost.", "inputSchema", "type", "object",
		"properties", "session", "type", "string", "description", "the handle", "required", "session",
		"additionalProperties", 0, "annotations", "title", "Close session", "readOnlyHint", 0,
		"destructiveHint", 1, "idempotentHint", 1, "openWorldHint", 0,
		/* read_file */
		"name", "read_file", "title", "Read file", "description",
		"Read a file inside the session's sandbox (at most 1 MiB): UTF-8 text as is, else base64.",
		"inputSchema", "type", "object", "properties", "session", session, "path", "type", "string",
		"description", "a path inside the sandbox", "required", "path", "additionalProperties", 0,
		"annotations", "title", "Read file", "readOnlyHint", 1, "destructiveHint", 0, "idempotentHint", 1,
		"openWorldHint", 0,
		/* write_file */
		"name", "write_file", "title", "Write file", "description",
		"Write a file inside the session's sandbox (at most 1 MiB), making its directories; give text or "
		"base64.",
		"inputSchema", "type", "object", "properties", "session", session, "path", "type", "string",
		"description", "a path inside the sandbox", "text", "type", "string", "description",
		"the content as UTF-8 text", "base64", "type", "string", "description",
		"the content in base64, for bytes", "required", "path", "additionalProperties", 0, "annotations",
		"title", "Write file", "readOnlyHint", 0, "destructiveHint", srv->host_writes, "idempotentHint", 1,
		"openWorldHint", 0,
		/* list_files */
		"name", "list_files", "title", "List files", "description",
		"List a directory inside the session's sandbox (default: the working directory).", "inputSchema",
		"type", "object", "properties", "session", session, "path", "type", "string", "description",
		"a directory inside the sandbox", "additionalProperties", 0, "annotations", "title", "List files",
		"readOnlyHint", 1, "destructiveHint", 0, "idempotentHint", 1, "openWorldHint", 0);
	/* Each use took a reference of its own (O). */
	json_decref(session);
	free(desc);
	/* Only when asked: several clients drop every other content block
	 * when a result has structured content. */
	if (srv->structured && list)
		json_object_set_new(
			json_array_get(json_object_get(list, "tools"), 0), "outputSchema",
			json_pack("{s:s,s:{s:{s:s,s:[s,s,s,s,s,s,s]},s:{s:s},s:{s:s},s:{s:s},s:{s:s},s:{s:[s,s]},"
				  "s:{s:s},s:{s:s,s:{s:{s:s},s:{s:s},s:{s:s}}}},s:[s,s,s,s]}",
				  "type", "object", "properties", "status", "type", "string", "enum", "ok", "exception",
				  "time_limit", "cancelled", "memory_limit", "crashed", "protocol_error", "stdout",
				  "type", "string", "stderr", "type", "string", "stdout_truncated", "type", "boolean",
				  "stderr_truncated", "type", "boolean", "value", "type", "string", "null",
				  "session_ended", "type", "boolean", "error", "type", "object", "properties", "type",
				  "type", "string", "message", "type", "string", "traceback", "type", "string",
				  "required", "status", "stdout", "stderr", "session_ended"));
	if (srv->structured && list) {
		json_t *props = json_object_get(json_object_get(json_array_get(json_object_get(list, "tools"), 0),
								"outputSchema"),
						"properties");

		json_object_set_new(props, "displays",
				    json_pack("{s:s,s:{s:s,s:{s:{s:s,s:{s:s}}}}}", "type", "array", "items", "type",
					      "object", "properties", "mimeTypes", "type", "array", "items", "type",
					      "string"));
		json_object_set_new(props, "files",
				    json_pack("{s:s,s:{s:s,s:{s:{s:s},s:{s:s},s:{s:s},s:{s:s}}}}", "type", "array",
					      "items", "type", "object", "properties", "name", "type", "string", "uri",
					      "type", "string", "mimeType", "type", "string", "size", "type",
					      "integer"));
		json_object_set_new(props, "displays_truncated", json_pack("{s:s}", "type", "boolean"));
		json_object_set_new(props, "files_truncated", json_pack("{s:s}", "type", "boolean"));
	}
	return list;
}

/* ---- dispatch ----------------------------------------------------------- */

static void handle_call(struct server *srv, json_t *id, json_t *params)
{
	const char *name = cstr(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments");
	json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
	char msg[1024] = "";
	bool suppress = false;
	json_t *res;

	if (!name) {
		send_error(id, -32602, "tools/call: missing 'name' (a string without U+0000)");
		return;
	}
	if (args && !json_is_object(args)) {
		send_error(id, -32602, "tools/call %s: 'arguments' must be an object", name);
		return;
	}
	if (!args)
		args = json_object_get(params, "arguments"); /* NULL: json_object_get(NULL, ...) is NULL */
	if (token && !json_is_string(token) && !json_is_integer(token))
		token = NULL;
	/* Set by a cancel of this call's exec: the file tools' too (they
	 * answered a cancelled call with "cancelled"). */
	srv->cur_cancelled = false;
	if (!strcmp(name, "run_python"))
		res = tool_run_python(srv, args, id, token, &suppress, msg, sizeof(msg));
	else if (!strcmp(name, "new_session"))
		res = tool_new_session(srv, args, msg, sizeof(msg));
	else if (!strcmp(name, "close_session"))
		res = tool_close_session(srv, args, msg, sizeof(msg));
	else if (!strcmp(name, "read_file"))
		res = tool_read_file(srv, args, id, msg, sizeof(msg));
	else if (!strcmp(name, "write_file"))
		res = tool_write_file(srv, args, id, msg, sizeof(msg));
	else if (!strcmp(name, "list_files"))
		res = tool_list_files(srv, args, id, msg, sizeof(msg));
	else {
		send_error(id, -32602, "unknown tool '%.200s'", name);
		return;
	}
	if (!res) {
		send_error(id, -32602, "tools/call %s: %s", name, msg);
		return;
	}
	if (suppress || srv->cur_cancelled) { /* cancelled: the spec asks for no response */
		json_decref(res);
		return;
	}
	send_result(id, res);
}

static const char instructions[] =
	"Runs Python in kernel-isolated sandboxes (nsbox). run_python keeps globals between calls in a default "
	"session; new_session makes more, each with its own state. Sessions close when idle; a limit kill ends a "
	"session. Use the file tools to move files in and out of a session.";
/* resources/read of a resource_link run_python gave: the file read back
 * from the session, now.  The URI is parsed here, never trusted as a path:
 * one name, no '/', not "." or "..", no control characters. */
static void handle_read(struct server *srv, json_t *id, const json_t *params)
{
	const char *uri = cstr(json_object_get(params, "uri"));
	const char *h, *slash;
	char handle[40], name[256], path[300], *data = NULL;
	size_t n = 0, len = 0;
	struct msess *m = NULL;
	json_t *c, *out, *ans = NULL;
	const char *b64;
	bool suppress = false;

	if (!uri) {
		send_error(id, -32602, "resources/read: missing 'uri' (a string without U+0000)");
		return;
	}
	if (strncmp(uri, MCP_URI_PREFIX, strlen(MCP_URI_PREFIX)) ||
	    !(slash = strchr(h = uri + strlen(MCP_URI_PREFIX), '/')) || (size_t)(slash - h) >= sizeof(handle) ||
	    strncmp(slash, "/out/", 5))
		goto bad;
	memcpy(handle, h, (size_t)(slash - h));
	handle[slash - h] = '\0';
	for (const char *p = slash + 5; *p; p++) {
		unsigned v;

		if (n + 1 >= sizeof(name))
			goto bad;
		if (*p == '%') {
			if (sscanf(p + 1, "%2x", &v) != 1 || !isxdigit((unsigned char)p[1]) ||
			    !isxdigit((unsigned char)p[2]))
				goto bad;
			p += 2;
		} else {
			v = (unsigned char)*p;
		}
		if (v < 0x20 || v == 0x7f || v == '/')
			goto bad;
		name[n++] = (char)v;
	}
	name[n] = '\0';
	if (!n || !strcmp(name, ".") || !strcmp(name, ".."))
		goto bad;
	if (!strcmp(handle, "default"))
		m = srv->implicit.s ? &srv->implicit : NULL;
	else if (handle[0])
		m = find_handle(srv, handle);
	if (!m) {
		send_error(id, -32002, "resource not found: %.300s (its session is closed or expired)", uri);
		return;
	}
	snprintf(path, sizeof(path), "/out/%s", name);
	/* One exec, driven like run_python's: nsbox_read_file waited on the
	 * server's only thread, and a session whose own thread held its
	 * interpreter kept every other request (a ping) waiting for up to
	 * the control timeout (red team 4). */
	out = file_op_on(srv, m, resource_snippet,
			 json_pack("{s:s,s:I}", "path", path, "cap", (json_int_t)MCP_RESOURCE_CAP), id, &suppress, &ans);
	b64 = json_string_value(json_object_get(ans, "b64"));
	if (suppress) {
		/* cancelled: no answer */
	} else if (out) {
		const char *t = json_string_value(json_object_get(json_array_get(json_object_get(out, "content"), 0),
								  "text"));

		send_error(id, -32603, "resources/read %.300s: %.600s", uri, t ? t : "failed");
	} else if (json_is_string(json_object_get(ans, "error"))) {
		const char *why = json_string_value(json_object_get(ans, "error"));

		send_error(id, -32603, "resources/read %.300s: %.300s", uri, cli_text_inert(why) ? why : "failed");
	} else if (json_is_true(json_object_get(ans, "gone"))) {
		send_error(id, -32002, "resources/read %.300s: resource not found (the file is gone)", uri);
	} else if (json_is_true(json_object_get(ans, "big"))) {
		send_error(id, -32603,
			   "resources/read %.300s: the file is larger than %u MiB: read it in parts with "
			   "run_python",
			   uri, MCP_RESOURCE_CAP >> 20);
	} else if (!b64 || !(data = b64_decode(b64, json_string_length(json_object_get(ans, "b64")), &len)) ||
		   len > MCP_RESOURCE_CAP) {
		/* The sandbox's own code may have changed what the snippet
		 * calls: anything else is its error. */
		send_error(id, -32603, "resources/read %.300s: the sandbox answered something else than the "
			   "file's content", uri);
	} else {
		const char *mime = mime_of_name(name);
		json_t *t = text_mime(mime) && !memchr(data, '\0', len) ? json_stringn(data, len) : NULL;

		if (t) {
			c = json_pack("{s:s,s:s,s:o}", "uri", uri, "mimeType", mime, "text", t);
		} else {
			char *b = b64_encode(data, len, NULL);

			c = b ? json_pack("{s:s,s:s,s:s}", "uri", uri, "mimeType", mime, "blob", b) : NULL;
			free(b);
		}
		if (c)
			send_result(id, json_pack("{s:[o]}", "contents", c));
		else
			send_error(id, -32603, "resources/read: out of memory");
	}
	free(data);
	json_decref(out);
	json_decref(ans);
	return;
bad:
	send_error(id, -32602,
		   "resources/read: not a URI this server gave: %.300s (expected " MCP_URI_PREFIX "SESSION/out/NAME)",
		   uri);
}

static void handle(struct server *srv, json_t *m);

/* A batch: each member handled in order (an exec runs to its end before
 * the next member), the responses sent together as one array; none for a
 * batch of notifications; an empty one is an invalid request. */
static void handle_batch(struct server *srv, json_t *m)
{
	json_t *x;
	size_t i;

	if (!json_array_size(m)) {
		send_error(NULL, -32600, "invalid request: an empty batch");
		return;
	}
	batch_ids = json_array();
	if (!batch_ids) {
		send_error(NULL, -32603, "out of memory for a batch");
		return;
	}
	json_array_foreach(m, i, x) if (json_is_object(x) && json_object_get(x, "id"))
		json_array_append(batch_ids, json_object_get(x, "id"));
	json_array_append_new(batch_ids, json_null()); /* the errors that can't name a request */
	json_array_foreach(m, i, x)
	{
		if (stop_signal)
			break;
		if (batch_over && json_is_object(x) && is_request_id(json_object_get(x, "id")) && method_of(x))
			send_error(json_object_get(x, "id"), -32603,
				   "the batch's answer is over 64 MiB: this request was not run (send fewer requests "
				   "per batch)");
		else
			handle(srv, x);
	}
	json_decref(batch_ids);
	batch_ids = NULL;
	if (batch_n) {
		batch_out[batch_len++] = ']';
		batch_out[batch_len++] = '\n';
		emit(batch_out, batch_len);
	}
	free(batch_out);
	batch_out = NULL;
	batch_len = batch_cap = batch_n = 0;
	batch_over = false;
}

static void handle(struct server *srv, json_t *m)
{
	const char *method = method_of(m);
	json_t *id = json_object_get(m, "id");
	json_t *params = json_object_get(m, "params");
	int era;

	if (json_is_array(m) && srv->batches && !batch_ids) {
		handle_batch(srv, m);
		return;
	}
	if (!json_is_object(m)) {
		send_error(NULL, -32600, "invalid request: %s",
			   json_is_array(m) ? (batch_ids ? "a batch inside a batch"
							 : "batches are not supported in this protocol revision")
					    : "not an object");
		return;
	}
	if (!jsonrpc_ok(m)) {
		send_error(is_request_id(id) ? id : NULL, -32600, "invalid request: jsonrpc must be \"2.0\"");
		return;
	}
	if (!method) {
		if (json_object_get(m, "method"))
			send_error(is_request_id(id) ? id : NULL, -32600,
				   "invalid request: method must be a string without U+0000");
		else if (!json_object_get(m, "result") && !json_object_get(m, "error"))
			send_error(id, -32600, "invalid request: no method");
		return; /* a response: this server sends no requests */
	}
	if (id && !is_request_id(id)) {
		send_error(NULL, -32600, "invalid request: id must be a string or an integer");
		return;
	}
	if (!id) /* a notification: initialized, cancelled (handled on arrival), others ignored */
		return;
	era = check_envelope(id, params);
	if (era < 0)
		return;
	reply_modern = era > 0;
	if (!strcmp(method, "initialize") || !strcmp(method, "server/discover") || !strcmp(method, "tools/list"))
		srv->want_warm = true;
	if (!strcmp(method, "initialize") && era) {
		send_error(id, -32601,
			   "method not found: initialize (protocol revision " MCP_MODERN
			   " has no handshake: use server/discover)");
	} else if (!strcmp(method, "server/discover")) {
		if (!era)
			send_error(id, -32602,
				   "server/discover needs the _meta envelope of protocol revision " MCP_MODERN
				   " (" META_VERSION ", " META_CAPS ")");
		else
			send_result(id, json_pack("{s:[s],s:{s:{s:b},s:{s:b}},s:s,s:i,s:s}", "supportedVersions",
						  MCP_MODERN, "capabilities", "tools", "listChanged", 0, "resources",
						  "listChanged", 0, "instructions", instructions, "ttlMs", 0,
						  "cacheScope", "private"));
	} else if (!strcmp(method, "initialize")) {
		const char *asked = cstr(json_object_get(params, "protocolVersion"));
		const char *v = versions[0];

		for (size_t i = 0; asked && i < ARRAY_SIZE(versions); i++)
			if (!strcmp(asked, versions[i]))
				v = versions[i];
		srv->batches = !strcmp(v, "2025-03-26");
		send_result(id, json_pack("{s:s,s:{s:{s:b},s:{s:b}},s:{s:s,s:s,s:s},s:s}", "protocolVersion", v,
					  "capabilities", "tools", "listChanged", 0, "resources", "listChanged", 0,
					  "serverInfo", "name", "nsbox", "title", "nsbox", "version", nsbox_version(),
					  "instructions", instructions));
	} else if (!strcmp(method, "ping")) {
		send_result(id, json_object());
	} else if (!strcmp(method, "tools/list")) {
		json_t *list = tools_list(srv);

		/* The revision's cache hints: the list is fixed for the
		 * process, but a client must not keep it past a restart. */
		if (era && list) {
			json_object_set_new(list, "ttlMs", json_integer(0));
			json_object_set_new(list, "cacheScope", json_string("private"));
		}
		send_result(id, list);
	} else if (!strcmp(method, "resources/list") || !strcmp(method, "resources/templates/list")) {
		/* Nothing to list: the only resources are the /out files a
		 * run_python result links to. */
		send_result(id,
			    json_pack("{s:[]}", strcmp(method, "resources/list") ? "resourceTemplates" : "resources"));
	} else if (!strcmp(method, "resources/read")) {
		handle_read(srv, id, params);
	} else if (!strcmp(method, "tools/call")) {
		if (params && !json_is_object(params))
			send_error(id, -32602, "tools/call: 'params' must be an object");
		else
			handle_call(srv, id, params);
	} else {
		send_error(id, -32601, "method not found: %.200s", method);
	}
	reply_modern = false;
}

/* The message (or error) first in the queue. */
static void handle_next(struct server *srv)
{
	int code = 0;
	json_t *m = dequeue(srv, &code);

	if (code)
		send_error(NULL, code, "%s", json_string_value(m));
	else
		handle(srv, m);
	json_decref(m);
}

/* ---- main ------------------------------------------------------------------ */

static void mcp_usage(FILE *f)
{
	fprintf(f,
		"usage: nsbox mcp [OPTIONS]\n"
		"A Model Context Protocol server on stdin/stdout (stdio transport).\n"
		"  --tool NAME=COMMAND     a host tool callable inside as NAME(...) (see nsbox python)\n"
		"  --mcp-server NAME=COMMAND  start another MCP server (stdio) on the host; its tools are\n"
		"                          callable inside as NAME.tool(...) (code mode; repeatable)\n"
		"  --mcp-timeout SECONDS   the most its start or one call may take (default 60)\n"
		"  --structured            run_python results as structuredContent too, with an outputSchema\n"
		"  --idle-timeout SECONDS  close sessions idle this long (default 600)\n"
		"  --max-sessions N        sessions made with new_session, at most (default 8)\n"
		"  --call-timeout SECONDS  a call's wall-clock limit unless it asks (default 60)\n"
		"  --max-call-timeout SECONDS  what a call may ask for, at most (default 600)\n"
		"  --max-memory SIZE       what new_session may ask for, at most (default --memory's, else 4G)\n"
		"  --output-limit SIZE     stdout and stderr kept per call, each (default 64K)\n%s",
		args_jail_help);
}

static int opt_value(int argc, char **argv, int *i, const char *name, const char **v)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (strncmp(a, name, n) || (a[n] && a[n] != '='))
		return 0;
	*v = a[n] == '=' ? a + n + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
	return 1;
}

/* Seconds as a plain decimal ("30", "0.5", "1e3"): no blanks, no sign, no
 * hex float (strtod's "0x1p3"), above 0 and at most MCP_SECONDS_MAX. */
#define MCP_SECONDS_MAX 1e7
static int parse_seconds(const char *v, double *out)
{
	char *end;
	double d;

	if (!v || !(isdigit((unsigned char)v[0]) || v[0] == '.') || v[strspn(v, "0123456789.eE+-")])
		return -1;
	d = strtod(v, &end);
	if (*end || !(d > 0) || d > MCP_SECONDS_MAX)
		return -1;
	*out = d;
	return 0;
}

/* The bits of the effective policy the tool annotations state. */
static void read_policy_facts(struct server *srv, const nsbox_policy_t *p)
{
	char *text = nsbox_policy_to_string(p);
	char *line, *save = NULL;

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "Network=", 8))
			srv->share_net = strcmp(line + 8, "none") != 0;
		else if (!strncmp(line, "Bind=", 5) || !strncmp(line, "Workspace=", 10))
			srv->host_writes = true;
	}
	nsbox_free(text);
	srv->policy_time_limit = cli_policy_time_limit(p);
}

int cmd_mcp(int argc, char **argv)
{
	static struct server srv;
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	struct cli_err err = { 0 };
	int rc = NSBOX_EXIT_USAGE;
	uint64_t cli_memory = 0;
	bool max_memory_given = false;

	srv.argc = argc;
	srv.argv = argv;
	srv.idle_timeout = 600;
	idle_srv = &srv;
	srv.call_timeout = 60;
	srv.max_call_timeout = 600;
	srv.max_sessions = 8;
	srv.max_memory = 4ULL << 30;
	srv.output_limit = 64 << 10;
	srv.up_timeout = 60;
	if (args_load_policy(&p, argc, argv, NULL, &err) < 0) {
		fprintf(stderr, "nsbox mcp: %s\n", err.msg);
		return NSBOX_EXIT_USAGE;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		int r;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			mcp_usage(stdout);
			rc = 0;
			goto out;
		}
		const char *want = "seconds, above 0 and at most 1e7";

		if (opt_value(argc, argv, &i, "--idle-timeout", &v)) {
			if (parse_seconds(v, &srv.idle_timeout) < 0)
				goto bad_value;
			continue;
		}
		if (opt_value(argc, argv, &i, "--call-timeout", &v)) {
			if (parse_seconds(v, &srv.call_timeout) < 0)
				goto bad_value;
			continue;
		}
		if (opt_value(argc, argv, &i, "--max-call-timeout", &v)) {
			if (parse_seconds(v, &srv.max_call_timeout) < 0)
				goto bad_value;
			continue;
		}
		if (opt_value(argc, argv, &i, "--max-sessions", &v)) {
			char *end;
			unsigned long n = v ? strtoul(v, &end, 10) : 0;

			want = "a whole number from 1 to " MCP_STR(MCP_MAX_SESSIONS_CAP);
			if (!v || !isdigit((unsigned char)v[0]) || *end || n < 1 || n > MCP_MAX_SESSIONS_CAP)
				goto bad_value;
			srv.max_sessions = (unsigned)n;
			continue;
		}
		if (opt_value(argc, argv, &i, "--max-memory", &v)) {
			want = "a size of at least 16M (K, M, G, T: powers of 1024)";
			if (!v || nsbox_parse_size(v, &srv.max_memory, NULL) < 0 || srv.max_memory < (16u << 20))
				goto bad_value;
			max_memory_given = true;
			continue;
		}
		if (opt_value(argc, argv, &i, "--output-limit", &v)) {
			want = "a size from 16 to 16M";
			if (!v || nsbox_parse_size(v, &srv.output_limit, NULL) < 0 || srv.output_limit < 16 ||
			    srv.output_limit > (16u << 20))
				goto bad_value;
			continue;
		}
		if (!strcmp(a, "--structured")) {
			srv.structured = true;
			continue;
		}
		if (opt_value(argc, argv, &i, "--mcp-timeout", &v)) {
			if (parse_seconds(v, &srv.up_timeout) < 0)
				goto bad_value;
			continue;
		}
		if (opt_value(argc, argv, &i, "--mcp-server", &v)) {
			const char *eq = v ? strchr(v, '=') : NULL;
			struct mcpup *u = &srv.up[srv.n_up];

			if (!eq || eq == v || !eq[1] || srv.n_up >= MCPUP_MAX_SERVERS) {
				fprintf(stderr, "nsbox mcp: --mcp-server: expected NAME=COMMAND (at most %d)\n",
					MCPUP_MAX_SERVERS);
				goto out;
			}
			*u = (struct mcpup){ .name = strndup(v, (size_t)(eq - v)), .command = eq + 1, .fd = -1 };
			srv.n_up++;
			/* NAME becomes a global inside: a plain identifier of its own. */
			if (!u->name || nsbox_check_tool_name(u->name, &e) < 0 || strchr(u->name, '.') ||
			    strlen(u->name) > 32) {
				/* Not the tool rule's message: its length cap is another. */
				fprintf(stderr,
					"nsbox mcp: --mcp-server %.*s: NAME must be a Python identifier of at most 32 "
					"characters, not a keyword, builtin or dunder (it is a global inside)\n",
					(int)(eq - v), v);
				nsbox_error_free(e);
				goto out;
			}
			for (size_t k = 0; k + 1 < srv.n_up; k++)
				if (!strcmp(srv.up[k].name, u->name)) {
					fprintf(stderr, "nsbox mcp: --mcp-server %s: given twice\n", u->name);
					goto out;
				}
			continue;
		}
		if (opt_value(argc, argv, &i, "--tool", &v)) {
			const char *eq = v ? strchr(v, '=') : NULL;
			char *name;

			if (!eq || eq == v || !eq[1] || srv.n_tools >= MCP_MAX_TOOLS) {
				fprintf(stderr, "nsbox mcp: --tool: expected NAME=COMMAND (at most %d)\n",
					MCP_MAX_TOOLS);
				goto out;
			}
			name = strndup(v, (size_t)(eq - v));
			if (!name || nsbox_check_tool_name(name, &e) < 0) {
				fprintf(stderr, "nsbox mcp: --tool %s\n", e ? nsbox_error_message(e) : "out of memory");
				nsbox_error_free(e);
				free(name);
				goto out;
			}
			/* As nsbox python: refused up front, not when called. */
			for (size_t k = 0; k < srv.n_tools && name; k++)
				if (!strcmp(srv.tools[k].name, name)) {
					fprintf(stderr, "nsbox mcp: --tool %s: given twice\n", name);
					free(name);
					goto out;
				}
			if (args_check_command(eq + 1, &err) < 0) {
				fprintf(stderr, "nsbox mcp: --tool %s: %s\n", name, err.msg);
				free(name);
				goto out;
			}
			srv.tools[srv.n_tools++] = (struct cli_tool){ name, eq + 1 };
			continue;
		}
		r = args_parse_jail_option(p, argc, argv, &i, &err);
		if (r < 0) {
			fprintf(stderr, "nsbox mcp: %s\n", err.msg);
			goto out;
		}
		/* --memory (taken by the policy above, its value now at
		 * argv[i]) is also what new_session may ask for, unless
		 * --max-memory says otherwise: the README's client setup caps
		 * every session with it. */
		if (r > 0 && (!strcmp(a, "--memory") || !strncmp(a, "--memory=", 9))) {
			uint64_t m;

			if (nsbox_parse_size(a[8] == '=' ? a + 9 : argv[i], &m, NULL) == 0 && m)
				cli_memory = m;
		}
		if (r == 0) {
			static const char *const own[] = { "tool",
							   "idle-timeout",
							   "max-sessions",
							   "call-timeout",
							   "max-call-timeout",
							   "max-memory",
							   "output-limit",
							   "mcp-server",
							   "mcp-timeout",
							   "structured",
							   "help",
							   NULL };

			args_unknown_option("mcp", a, own, &err);
			fprintf(stderr, "nsbox mcp: %s\n", err.msg);
			goto out;
		}
		continue;
bad_value:
		/* The option's name as given, without its "=value". */
		fprintf(stderr, "nsbox mcp: %.*s: %s '%s' (expected %s)\n", (int)strcspn(a, "="), a,
			v ? "bad value" : "needs a value", v ? v : "", want);
		goto out;
	}
	if (srv.call_timeout > srv.max_call_timeout) {
		/* Cut to the cap at each call before, without a word. */
		fprintf(stderr, "nsbox mcp: --call-timeout %g is above --max-call-timeout %g\n", srv.call_timeout,
			srv.max_call_timeout);
		goto out;
	}
	if (!max_memory_given && cli_memory)
		srv.max_memory = cli_memory < (16u << 20) ? 16u << 20 : cli_memory;
	/* Through nsboxd ($NSBOX_CONNECT) a tree's name is the service's to
	 * resolve among its own builds: this host need not have it.  Only that
	 * is left to it (args_left_to_service). */
	int checked = nsbox_policy_check(p, &e);
	if (args_left_to_service(checked, e)) {
		nsbox_error_free(e);
		e = NULL;
	} else if (checked < 0) {
		fprintf(stderr, "nsbox mcp: %s\n", nsbox_error_message(e));
		nsbox_error_free(e);
		goto out;
	}
	/* As nsbox python: a tool's program the sandbox may rewrite is refused,
	 * and so is another MCP server's (it runs on the host too). */
	for (size_t t = 0; t < srv.n_tools + srv.n_up; t++) {
		const char *cmd = t < srv.n_tools ? srv.tools[t].command : srv.up[t - srv.n_tools].command;

		if (args_check_command_places(cmd, p, &e) < 0) {
			fprintf(stderr, "nsbox mcp: %s %s: %s\n", t < srv.n_tools ? "--tool" : "--mcp-server",
				t < srv.n_tools ? srv.tools[t].name : srv.up[t - srv.n_tools].name, nsbox_error_message(e));
			nsbox_error_free(e);
			goto out;
		}
	}
	for (size_t k = 0; k < srv.n_up; k++)
		for (size_t t = 0; t < srv.n_tools; t++)
			if (!strcmp(srv.up[k].name, srv.tools[t].name)) {
				fprintf(stderr, "nsbox mcp: --mcp-server %s: a --tool has that name\n", srv.up[k].name);
				goto out;
			}
	read_policy_facts(&srv, p);
	/* A session's policy is parsed again from the same argv: skip our own
	 * options there (they are not jail options). */
	{
		char **jail = calloc((size_t)argc + 1, sizeof(*jail));
		int n = 0;

		if (!jail)
			goto out;
		jail[n++] = argv[0];
		for (int i = 1; i < argc; i++) {
			const char *v;
			int j = i;

			if (opt_value(argc, argv, &j, "--idle-timeout", &v) ||
			    opt_value(argc, argv, &j, "--call-timeout", &v) ||
			    opt_value(argc, argv, &j, "--max-call-timeout", &v) ||
			    opt_value(argc, argv, &j, "--max-sessions", &v) ||
			    opt_value(argc, argv, &j, "--max-memory", &v) ||
			    opt_value(argc, argv, &j, "--output-limit", &v) ||
			    opt_value(argc, argv, &j, "--tool", &v) || opt_value(argc, argv, &j, "--mcp-server", &v) ||
			    opt_value(argc, argv, &j, "--mcp-timeout", &v) || !strcmp(argv[i], "--structured")) {
				i = j;
				continue;
			}
			jail[n++] = argv[i];
		}
		srv.argv = jail;
		srv.argc = n;
	}
	srv.up_responses = json_array();
	if (!srv.up_responses)
		goto out;
	for (size_t k = 0; k < srv.n_up; k++) {
		char msg[1024];

		if (mcpup_start(&srv.up[k], srv.up_timeout, msg, sizeof(msg)) < 0) {
			fprintf(stderr, "nsbox mcp: --mcp-server %s: cannot start it: %s\n", srv.up[k].name, msg);
			rc = NSBOX_EXIT_SETUP;
			goto out;
		}
		fprintf(stderr, "nsbox mcp: --mcp-server %s: %zu tools\n", srv.up[k].name, srv.up[k].n_tools);
	}
	{
		struct sigaction sa = { .sa_handler = on_stop_signal, .sa_flags = SA_RESTART };

		sigemptyset(&sa.sa_mask);
		if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
			fprintf(stderr, "nsbox mcp: pipe: %s\n", strerror(errno));
			rc = NSBOX_EXIT_SETUP;
			goto out;
		}
		value_cap = (size_t)srv.output_limit;
		/* A client that closed our stdout: EPIPE (send_msg), so that the
		 * sessions are closed before nsbox dies of it. */
		signal(SIGPIPE, SIG_IGN);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
	}
	fprintf(stderr, "nsbox mcp %s: serving MCP on stdin/stdout\n", nsbox_version());
	for (;;) {
		double next;
		struct pollfd pf[2 + MCPUP_MAX_SERVERS] = { { 0, POLLIN, 0 } };

		while (!stop_signal && srv.qhead)
			handle_next(&srv);
		if (srv.eof || stop_signal)
			break;
		/* A client that has said hello will run code soon, after its
		 * model has written some: make the default session now, when
		 * nothing waits, so that the first run_python finds it. */
		if (srv.want_warm && !srv.implicit.s) {
			struct pollfd q = { 0, POLLIN, 0 };
			char msg[1024];

			srv.want_warm = false;
			if (poll(&q, 1, 0) == 0) {
				if (start_session(&srv, 0, &srv.implicit.s, msg, sizeof(msg)) < 0)
					fprintf(stderr, "nsbox mcp: the default session: %s\n", msg);
				else
					srv.implicit.last_used = now();
			}
		}
		next = expire_idle(&srv);
		/* The other servers are read between calls too: their
		 * notifications must not fill the socket. */
		for (size_t k = 0; k < srv.n_up; k++)
			pf[1 + k] = (struct pollfd){ srv.up[k].fd, POLLIN | (mcpup_wants_write(&srv.up[k]) ? POLLOUT : 0),
						     0 };
		pf[1 + srv.n_up] = (struct pollfd){ stop_pipe[0], POLLIN, 0 };
		if (poll(pf, 2 + srv.n_up, next < 0 ? -1 : cli_poll_ms(next)) < 0 && errno != EINTR)
			break;
		pump_up(&srv, pf + 1);
		if (pf[1 + srv.n_up].revents) { /* stop_signal is set: only emptied */
			char drain[16];

			while (read(stop_pipe[0], drain, sizeof(drain)) > 0)
				;
		}
		json_array_clear(srv.up_responses); /* late answers to calls given up */
		if (pf[0].revents)
			read_input(&srv, false);
	}
	if (srv.len && !srv.skipping && !stop_signal) /* a last line without its newline */
		take_line(&srv, srv.buf, srv.len, false);
	while (srv.qhead && !stop_signal)
		handle_next(&srv);
	while (srv.qhead) { /* left by a stop signal */
		int code = 0;

		json_decref(dequeue(&srv, &code));
	}
	rc = 0;
	for (unsigned i = 0; i < srv.max_sessions; i++)
		close_msess(&srv, &srv.sess[i]);
	close_msess(&srv, &srv.implicit);
	free(srv.buf);
out:
	if (srv.argv != argv) /* the jail options' copy */
		free(srv.argv);
	for (size_t k = 0; k < srv.n_up; k++) {
		mcpup_stop(&srv.up[k]);
		free(srv.up[k].name);
	}
	json_decref(srv.up_responses);
	for (size_t k = 0; k < srv.n_tools; k++)
		free(srv.tools[k].name);
	nsbox_policy_free(p);
	if (stop_signal) {
		signal(stop_signal, SIG_DFL);
		raise(stop_signal);
	}
	return rc;
}
