/* Code mode: nsbox mcp as the client of the host's other MCP servers
 * (see mcpup.h).  The sandbox never talks to them: the host forwards the
 * calls its code makes, and these servers' processes, credentials and
 * environment stay outside. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "mcpup.h"

#define MCPUP_MAX_PAGES 16 /* tools/list pages */

static const char *const py_keywords[] = {
	"False", "None",     "True",  "and",	"as",	"assert", "async",  "await",	"break",
	"class", "continue", "def",   "del",	"elif", "else",	  "except", "finally",	"for",
	"from",	 "global",   "if",    "import", "in",	"is",	  "lambda", "nonlocal", "not",
	"or",	 "pass",     "raise", "return", "try",	"while",  "with",   "yield",
};

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool is_keyword(const char *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(py_keywords); i++)
		if (!strcmp(s, py_keywords[i]))
			return true;
	return false;
}

static bool ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool is_ident(const char *s)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (const char *p = s; *p; p++)
		if (!ident_char(*p))
			return false;
	return !is_keyword(s);
}

static void gone(struct mcpup *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gone(struct mcpup *u, const char *fmt, ...)
{
	va_list ap;
	int ws;

	if (u->fd >= 0) {
		close(u->fd);
		u->fd = -1;
	}
	free(u->out); /* never to be written */
	u->out = NULL;
	u->out_off = u->out_len = 0;
	va_start(ap, fmt);
	vsnprintf(u->why, sizeof(u->why), fmt, ap);
	va_end(ap);
	/* Reap it when it has exited (EOF usually means it has); a server
	 * that closed stdout but lives on is killed with its group. */
	if (u->pid > 0) {
		pid_t r = waitpid(u->pid, &ws, WNOHANG);

		if (r == 0) {
			kill(-u->pid, SIGKILL);
			r = waitpid(u->pid, &ws, 0);
		}
		if (r == u->pid) {
			size_t n = strlen(u->why);

			if (WIFEXITED(ws))
				snprintf(u->why + n, sizeof(u->why) - n, " (it exited with status %d)",
					 WEXITSTATUS(ws));
			else if (WIFSIGNALED(ws))
				snprintf(u->why + n, sizeof(u->why) - n, " (it was killed by signal %d)", WTERMSIG(ws));
		}
		u->pid = 0;
	}
}

/* Write what the socket takes of the lines waiting (the fd is
 * non-blocking); a write error means the server is gone. */
void mcpup_flush(struct mcpup *u)
{
	while (u->fd >= 0 && u->out_off < u->out_len) {
		ssize_t w = send(u->fd, u->out + u->out_off, u->out_len - u->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w > 0) {
			u->out_off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return;
		gone(u, "it closed its input (%s)", strerror(errno));
	}
	free(u->out);
	u->out = NULL;
	u->out_off = u->out_len = 0;
}

bool mcpup_wants_write(const struct mcpup *u)
{
	return u->fd >= 0 && u->out_off < u->out_len;
}

/* Queue m's line (with its newline) behind the lines waiting and write
 * what the socket takes.  With a deadline (> 0), wait until all is
 * written, or the server is gone at the deadline (it stopped reading);
 * without (0), the rest waits for mcpup_flush: a server busy with a call,
 * not reading meanwhile, is not a server gone.  -1 when it is gone, or
 * (errno ENOBUFS) when m does not fit behind the lines waiting. */
static int send_line(struct mcpup *u, json_t *m, double deadline) /* consumes m */
{
	char *s = m ? json_dumps(m, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	size_t n;

	json_decref(m);
	if (!s || u->fd < 0) {
		free(s);
		return -1;
	}
	n = strlen(s);
	s[n++] = '\n'; /* over the NUL: written by length */
	if (u->out_off == u->out_len) {
		free(u->out);
		u->out = s;
		u->out_off = 0;
		u->out_len = n;
	} else {
		size_t waiting = u->out_len - u->out_off;
		char *q;

		if (waiting + n > MCPUP_MAX_QUEUED) {
			free(s);
			errno = ENOBUFS;
			return -1;
		}
		memmove(u->out, u->out + u->out_off, waiting);
		u->out_off = 0;
		u->out_len = waiting;
		q = realloc(u->out, waiting + n);
		if (!q) {
			free(s);
			errno = ENOMEM;
			return -1;
		}
		memcpy(q + waiting, s, n);
		free(s);
		u->out = q;
		u->out_len = waiting + n;
	}
	mcpup_flush(u);
	while (deadline > 0 && mcpup_wants_write(u)) {
		struct pollfd p = { u->fd, POLLOUT, 0 };
		double left = deadline - mono();

		if (left <= 0) {
			gone(u, "it stopped reading its input");
			return -1;
		}
		poll(&p, 1, cli_poll_ms(left));
		mcpup_flush(u);
	}
	return u->fd >= 0 ? 0 : -1;
}

static void take(struct mcpup *u, const char *line, size_t n, json_t *responses)
{
	json_t *m = json_loadb(line, n, JSON_ALLOW_NUL, NULL), *id;
	const char *method;

	if (!json_is_object(m)) {
		json_decref(m);
		return; /* not JSON-RPC: stdout chatter, ignored */
	}
	method = json_string_value(json_object_get(m, "method"));
	id = json_object_get(m, "id");
	if (method && id) {
		/* A request to us: we declared no client capabilities. */
		if (!strcmp(method, "ping"))
			send_line(u, json_pack("{s:s,s:O,s:{}}", "jsonrpc", "2.0", "id", id, "result"), 0);
		else
			send_line(u,
				  json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id, "error", "code",
					    -32601, "message", "nsbox mcp (code mode) supports no client requests"),
				  0);
	} else if (!method && id && responses) {
		json_array_append(responses, m);
	}
	json_decref(m);
}

/* Append to the line being read, within MCPUP_MAX_LINE.  A message over
 * the cap ends the server: its answer to a call could never be read, and
 * waiting for it would hang. */
static int line_add(struct mcpup *u, const char *p, size_t add)
{
	if (u->len + add > MCPUP_MAX_LINE) {
		gone(u, "it sent a message over %u bytes", MCPUP_MAX_LINE);
		return -1;
	}
	if (u->len + add > u->cap) {
		size_t nc = u->len + add < 65536 ? 65536 : (u->len + add) * 2;
		char *nb;

		if (nc > MCPUP_MAX_LINE)
			nc = MCPUP_MAX_LINE;
		nb = realloc(u->buf, nc);
		if (!nb) {
			gone(u, "out of memory");
			return -1;
		}
		u->buf = nb;
		u->cap = nc;
	}
	memcpy(u->buf + u->len, p, add);
	u->len += add;
	return 0;
}

int mcpup_pump(struct mcpup *u, json_t *responses)
{
	char chunk[65536];
	ssize_t n;
	size_t start = 0;

	if (u->fd < 0)
		return -1;
	n = recv(u->fd, chunk, sizeof(chunk), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n == 0 || (n < 0 && errno == ECONNRESET)) { /* a reset: it exited with our data unread */
		gone(u, "it closed its output");
		return -1;
	}
	if (n < 0) {
		gone(u, "reading it: %s", strerror(errno));
		return -1;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (chunk[i] != '\n')
			continue;
		if (u->len) {
			/* The end of a line begun in an earlier read. */
			if (line_add(u, chunk + start, (size_t)i - start) < 0)
				return -1;
			take(u, u->buf, u->len, responses);
			u->len = 0;
		} else {
			take(u, chunk + start, (size_t)i - start, responses);
		}
		start = (size_t)i + 1;
		if (u->fd < 0)
			return -1;
	}
	if (start < (size_t)n && line_add(u, chunk + start, (size_t)n - start) < 0)
		return -1;
	return 0;
}

/* A request and its response, waiting until the deadline. */
static json_t *request(struct mcpup *u, const char *method, json_t *params, double deadline, char *msg, size_t msz)
{
	long long id = u->next_id++;
	json_t *responses = json_array(), *found = NULL;

	if (send_line(u,
		      json_pack("{s:s,s:I,s:s,s:o}", "jsonrpc", "2.0", "id", (json_int_t)id, "method", method, "params",
				params ? params : json_object()),
		      deadline) < 0) {
		snprintf(msg, msz, "%s: %s", method, u->why[0] ? u->why : "cannot send");
		json_decref(responses);
		return NULL;
	}
	while (!found) {
		struct pollfd p = { u->fd, POLLIN, 0 };
		double left = deadline - mono();
		size_t i;
		json_t *r;

		if (left <= 0) {
			snprintf(msg, msz, "%s: no answer in time", method);
			break;
		}
		if (poll(&p, 1, cli_poll_ms(left)) < 0 && errno != EINTR) {
			snprintf(msg, msz, "poll: %s", strerror(errno));
			break;
		}
		if (p.revents && mcpup_pump(u, responses) < 0) {
			snprintf(msg, msz, "%s: %s", method, u->why);
			break;
		}
		json_array_foreach(responses, i, r)
		{
			if (json_integer_value(json_object_get(r, "id")) == id) {
				found = json_incref(r);
				break;
			}
		}
		json_array_clear(responses);
	}
	json_decref(responses);
	if (found && json_object_get(found, "error")) {
		json_t *e = json_object_get(found, "error");

		snprintf(msg, msz, "%s: error %lld: %.300s", method,
			 (long long)json_integer_value(json_object_get(e, "code")),
			 json_string_value(json_object_get(e, "message")) ?: "");
		json_decref(found);
		return NULL;
	}
	if (found && !json_is_object(json_object_get(found, "result"))) {
		snprintf(msg, msz, "%s: the response has no result object", method);
		json_decref(found);
		return NULL;
	}
	return found;
}

/* The tool's name inside: the server's, made a Python identifier that
 * fits NAME.py in 64 bytes and is unlike the ones before it. */
static char *py_name(const struct mcpup *u, const char *orig)
{
	size_t room = 64 - strlen(u->name) - 1, n = 0;
	char base[65], out[72];

	for (const char *p = orig; *p && n < room; p++)
		base[n++] = ident_char(*p) ? *p : '_';
	base[n] = '\0';
	if (!n || (base[0] >= '0' && base[0] <= '9')) {
		memmove(base + 1, base, n + 1);
		base[0] = '_';
		base[room] = '\0';
	}
	if (is_keyword(base) && strlen(base) < room)
		strcat(base, "_");
	/* A dunder would be the namespace object's own attribute. */
	n = strlen(base);
	if (n > 4 && !strncmp(base, "__", 2) && !strcmp(base + n - 2, "__")) {
		memmove(base + 1, base, n + 1);
		base[0] = 'x';
		base[room] = '\0';
	}
	snprintf(out, sizeof(out), "%s", base);
	for (unsigned k = 2;; k++) {
		bool taken = false;

		for (size_t i = 0; i < u->n_tools && !taken; i++)
			taken = !strcmp(u->tools[i].py, out);
		if (!taken && is_ident(out))
			return strdup(out);
		if (k > MCPUP_MAX_TOOLS + 2)
			return NULL;
		snprintf(out, sizeof(out), "%.*s_%u", (int)(room - 5), base, k);
	}
}

static int add_tools(struct mcpup *u, const json_t *list)
{
	size_t i;
	const json_t *t;

	json_array_foreach(list, i, t)
	{
		const char *orig = json_string_value(json_object_get(t, "name"));
		const char *desc = json_string_value(json_object_get(t, "description"));
		json_t *schema = json_object_get(t, "inputSchema");
		struct mcpup_tool *nt;
		char *dumped;

		/* A name with U+0000 would be called as its prefix: another tool. */
		if (!orig || !*orig || strlen(orig) > 256 ||
		    strlen(orig) != json_string_length(json_object_get(t, "name")))
			continue;
		if (u->n_tools >= MCPUP_MAX_TOOLS) {
			fprintf(stderr,
				"nsbox mcp: warning: --mcp-server %s: more than %d tools; the rest are left out\n",
				u->name, MCPUP_MAX_TOOLS);
			return 0;
		}
		nt = realloc(u->tools, (u->n_tools + 1) * sizeof(*nt));
		if (!nt)
			return -1;
		u->tools = nt;
		nt = &u->tools[u->n_tools];
		*nt = (struct mcpup_tool){ 0 };
		nt->py = py_name(u, orig);
		nt->orig = strdup(orig);
		if (desc)
			nt->description = strndup(desc, cli_utf8_prefix(desc, MCPUP_MAX_DESC));
		if (!nt->py || !nt->orig) {
			free(nt->py);
			free(nt->orig);
			free(nt->description);
			continue;
		}
		{
			const json_t *an = json_object_get(t, "annotations");
			bool ro = json_is_true(json_object_get(an, "readOnlyHint"));

			nt->open_world = !json_is_false(json_object_get(an, "openWorldHint"));
			nt->destructive = !ro && !json_is_false(json_object_get(an, "destructiveHint"));
		}
		/* A schema too large for a signature leaves **kwargs. */
		dumped = json_is_object(schema) ? json_dumps(schema, JSON_COMPACT) : NULL;
		if (dumped && strlen(dumped) <= MCPUP_MAX_SCHEMA)
			nt->schema = json_incref(schema);
		free(dumped);
		u->n_tools++;
	}
	return 0;
}

int mcpup_start(struct mcpup *u, double timeout, char *msg, size_t msz)
{
	double deadline = mono() + timeout;
	int sv[2];
	json_t *r, *cursor = NULL;
	char emsg[512];
	pid_t pid;

	u->fd = -1;
	u->next_id = 1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		snprintf(msg, msz, "socketpair: %s", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(msg, msz, "fork: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (pid == 0) {
		/* Its own process group: stopping it stops what it started. */
		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		if (dup2(sv[1], 0) < 0 || dup2(sv[1], 1) < 0)
			_exit(127);
		execl("/bin/sh", "sh", "-c", u->command, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid); /* either side may win the race */
	close(sv[1]);
	u->pid = pid;
	u->fd = sv[0];
	r = request(u, "initialize",
		    json_pack("{s:s,s:{},s:{s:s,s:s}}", "protocolVersion", "2025-11-25", "capabilities", "clientInfo",
			      "name", "nsbox", "version", "code mode"),
		    deadline, emsg, sizeof(emsg));
	if (!r) {
		snprintf(msg, msz, "%s", emsg);
		mcpup_stop(u);
		return -1;
	}
	json_decref(r);
	send_line(u, json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", "notifications/initialized"), deadline);
	for (int page = 0; page < MCPUP_MAX_PAGES; page++) {
		json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : json_object(), *res;

		json_decref(cursor);
		cursor = NULL;
		r = request(u, "tools/list", params, deadline, emsg, sizeof(emsg));
		if (!r) {
			snprintf(msg, msz, "%s", emsg);
			mcpup_stop(u);
			return -1;
		}
		res = json_object_get(r, "result");
		if (!json_is_array(json_object_get(res, "tools")) || add_tools(u, json_object_get(res, "tools")) < 0) {
			snprintf(msg, msz, "tools/list: no tools array in the result");
			json_decref(r);
			mcpup_stop(u);
			return -1;
		}
		if (json_is_string(json_object_get(res, "nextCursor")))
			cursor = json_incref(json_object_get(res, "nextCursor"));
		json_decref(r);
		if (!cursor)
			break;
	}
	json_decref(cursor);
	return 0;
}

long long mcpup_send_call(struct mcpup *u, const struct mcpup_tool *t, json_t *args, char *msg, size_t msz)
{
	long long id = u->next_id++;

	/* Queued, not waited for: the server may be busy with another call
	 * (the call's own deadline is the caller's). */
	if (u->fd < 0 || send_line(u,
				   json_pack("{s:s,s:I,s:s,s:{s:s,s:O}}", "jsonrpc", "2.0", "id", (json_int_t)id,
					     "method", "tools/call", "params", "name", t->orig, "arguments", args),
				   0) < 0) {
		if (u->fd >= 0)
			snprintf(msg, msz,
				 "%s.%s(): the MCP server %s has not read the calls before it yet (over %u bytes "
				 "waiting)",
				 u->name, t->py, u->name, MCPUP_MAX_QUEUED);
		else
			snprintf(msg, msz, "%s.%s(): the MCP server %s is not running: %s", u->name, t->py, u->name,
				 u->why[0] ? u->why : "?");
		return -1;
	}
	return id;
}

void mcpup_send_cancel(struct mcpup *u, long long id, const char *reason)
{
	if (u->fd >= 0)
		send_line(u,
			  json_pack("{s:s,s:s,s:{s:I,s:s}}", "jsonrpc", "2.0", "method", "notifications/cancelled",
				    "params", "requestId", (json_int_t)id, "reason", reason),
			  0);
}

void mcpup_stop(struct mcpup *u)
{
	if (u->fd >= 0) {
		/* EOF on its stdin is the stdio transport's way to ask it to
		 * end; then SIGTERM, then SIGKILL (the spec's order). */
		shutdown(u->fd, SHUT_WR);
		for (int i = 0; i < 50 && u->pid > 0; i++) {
			if (waitpid(u->pid, NULL, WNOHANG) == u->pid) {
				u->pid = 0;
				break;
			}
			if (i == 20)
				kill(-u->pid, SIGTERM);
			usleep(10000);
		}
		close(u->fd);
		u->fd = -1;
	}
	if (u->pid > 0) {
		kill(-u->pid, SIGKILL);
		waitpid(u->pid, NULL, 0);
		u->pid = 0;
	}
	for (size_t i = 0; i < u->n_tools; i++) {
		free(u->tools[i].py);
		free(u->tools[i].orig);
		free(u->tools[i].description);
		json_decref(u->tools[i].schema);
	}
	free(u->tools);
	u->tools = NULL;
	u->n_tools = 0;
	free(u->buf);
	free(u->out);
	u->out = NULL;
	u->out_off = u->out_len = 0;
	u->buf = NULL;
	u->len = u->cap = 0;
}

/* ---- values --------------------------------------------------------------- */

json_t *mcpup_plain(const json_t *v, const char *where, char *msg, size_t msz, int depth)
{
	const json_t *x;
	const char *k;
	json_t *out;
	size_t i;

	if (depth > 100) {
		snprintf(msg, msz, "%s(): the arguments are nested too deeply", where);
		return NULL;
	}
	if (json_is_array(v) || (json_is_object(v) && json_is_array(json_object_get(v, "$tuple")))) {
		const json_t *a = json_is_array(v) ? v : json_object_get(v, "$tuple");

		out = json_array();
		json_array_foreach(a, i, x)
		{
			json_t *y = mcpup_plain(x, where, msg, msz, depth + 1);

			if (!y) {
				json_decref(out);
				return NULL;
			}
			json_array_append_new(out, y);
		}
		return out;
	}
	if (!json_is_object(v))
		return json_deep_copy(v);
	/* A "$" key makes a tag: a dict with such keys comes wrapped in
	 * {"$dict": {...}} (nsbox-protocol(7), VALUES). */
	json_object_foreach((json_t *)v, k, x)
	{
		if (k[0] == '$')
			break;
	}
	if (k && json_is_object(json_object_get(v, "$dict"))) {
		v = json_object_get(v, "$dict");
	} else if (k) {
		static const struct {
			const char *tag, *what;
		} kinds[] = {
			{ "$float", "nan or infinity" },
			{ "$int", "an integer past 64 bits" },
			{ "$bytes", "bytes" },
			{ "$bytearray", "a bytearray" },
			{ "$set", "a set" },
			{ "$frozenset", "a frozenset" },
			{ "$complex", "a complex" },
			{ "$dict", "a dict whose keys are not all str" },
		};
		const char *what = NULL;

		if (json_is_string(json_object_get(v, "$int"))) {
			const char *d = json_string_value(json_object_get(v, "$int"));
			char *end;
			long long n;

			errno = 0;
			n = strtoll(d, &end, 10);
			if (!errno && *d && !*end)
				return json_integer((json_int_t)n);
		}
		for (size_t j = 0; j < ARRAY_SIZE(kinds) && !what; j++)
			if (json_object_get(v, kinds[j].tag))
				what = kinds[j].what;
		if (json_object_get(v, "$repr"))
			snprintf(msg, msz, "%s(): an argument has no JSON form (a %.100s)", where,
				 json_string_value(json_object_get(v, "$type")) ?: "value");
		else
			snprintf(msg, msz, "%s(): an argument has no JSON form (%s)", where, what ? what : k);
		return NULL;
	}
	out = json_object();
	json_object_foreach((json_t *)v, k, x)
	{
		json_t *y = mcpup_plain(x, where, msg, msz, depth + 1);

		if (!y) {
			json_decref(out);
			return NULL;
		}
		json_object_set_new(out, k, y);
	}
	return out;
}

/* Plain JSON to protocol values: a dict with a "$" key is wrapped, ints
 * past 2**53 become $int. */
static json_t *encode(const json_t *v, int depth)
{
	const json_t *x;
	const char *k;
	json_t *out;
	size_t i;
	bool dollar = false;

	if (depth > 100)
		return json_pack("{s:s,s:s}", "$repr", "...", "$type", "builtins.ellipsis");
	if (json_is_integer(v)) {
		json_int_t n = json_integer_value(v);

		if (n > (1LL << 53) || n < -(1LL << 53)) {
			char d[32];

			snprintf(d, sizeof(d), "%lld", (long long)n);
			return json_pack("{s:s}", "$int", d);
		}
		return json_incref((json_t *)v);
	}
	if (json_is_array(v)) {
		out = json_array();
		json_array_foreach(v, i, x)
		{
			json_array_append_new(out, encode(x, depth + 1));
		}
		return out;
	}
	if (!json_is_object(v))
		return json_incref((json_t *)v);
	out = json_object();
	json_object_foreach((json_t *)v, k, x)
	{
		dollar |= k[0] == '$';
		json_object_set_new(out, k, encode(x, depth + 1));
	}
	return dollar ? json_pack("{s:o}", "$dict", out) : out;
}

json_t *mcpup_result_value(const json_t *response, char *msg, size_t msz)
{
	const json_t *res = json_object_get(response, "result"), *err = json_object_get(response, "error");
	const json_t *content, *sc, *b;
	size_t i, n;

	if (err || !json_is_object(res)) {
		snprintf(msg, msz, "error %lld: %.1500s", (long long)json_integer_value(json_object_get(err, "code")),
			 json_string_value(json_object_get(err, "message")) ?: "the response has no result");
		return NULL;
	}
	content = json_object_get(res, "content");
	n = json_is_array(content) ? json_array_size(content) : 0;
	if (json_is_true(json_object_get(res, "isError"))) {
		size_t off = 0;

		msg[0] = '\0';
		json_array_foreach(content, i, b)
		{
			const char *t = json_string_value(json_object_get(b, "text"));

			if (t && off + 1 < msz)
				off += (size_t)snprintf(msg + off, msz - off, "%s%s", off ? "\n" : "", t);
		}
		if (!msg[0])
			snprintf(msg, msz, "the tool reported an error");
		return NULL;
	}
	sc = json_object_get(res, "structuredContent");
	if (json_is_object(sc))
		return encode(sc, 0);
	if (n == 0)
		return json_null();
	if (n == 1 && json_is_string(json_object_get(json_array_get(content, 0), "text")))
		return json_incref(json_object_get(json_array_get(content, 0), "text"));
	{
		json_t *out = json_array();

		json_array_foreach(content, i, b)
		{
			const json_t *t = json_object_get(b, "text");

			json_array_append_new(out, json_is_string(t) ? json_incref((json_t *)t) : encode(b, 0));
		}
		return out;
	}
}

char *mcpup_signature(const json_t *schema)
{
	const json_t *props = json_object_get(schema, "properties"), *req = json_object_get(schema, "required"), *x;
	char *text = NULL;
	size_t tlen = 0, i;
	const char *k;
	bool first = true, ok = json_is_object(props);
	FILE *f = open_memstream(&text, &tlen);

	if (!f)
		return NULL;
	json_object_foreach((json_t *)props, k, x)
	{
		ok = ok && is_ident(k);
	}
	fputc('(', f);
	if (!ok) {
		fputs("**kwargs", f);
	} else {
		json_array_foreach(req, i, x)
		{
			if (json_is_string(x) && json_object_get(props, json_string_value(x))) {
				fprintf(f, "%s%s", first ? "" : ", ", json_string_value(x));
				first = false;
			}
		}
		json_object_foreach((json_t *)props, k, x)
		{
			bool required = false;
			const json_t *r;

			json_array_foreach(req, i, r)
			{
				required = required || (json_is_string(r) && !strcmp(json_string_value(r), k));
			}
			if (!required) {
				fprintf(f, "%s%s=None", first ? "" : ", ", k);
				first = false;
			}
		}
	}
	if (ok && json_object_get(schema, "additionalProperties") &&
	    !json_is_false(json_object_get(schema, "additionalProperties")))
		fputs(first ? "**kwargs" : ", **kwargs", f);
	fputc(')', f);
	fclose(f);
	return text;
}
