/* Host side of the runner protocol.  Everything the runner sends is
 * hostile input: each frame is size-checked before allocation
 * (proto_reader), parsed and schema-checked (proto_msg_parse), matched
 * against what we are waiting for, and counted against per-exec caps.  Every
 * wait has a deadline and watches the sandbox's pidfd, so a runner that
 * stops answering, floods, or dies never hangs the host.
 *
 * An exec is a state machine (struct exec_state): session_exec_start()
 * sends it, session_exec_step() advances it one event at a time, blocking
 * (session_exec, which spins briefly before sleeping) or not (an event
 * loop polling session_fd()).  Where the sandbox comes from is the
 * backend's business (session-backend.h). */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "frame.h"
#include "locate.h"
#include "netaudit.h"
#include "proto.h"
#include "session-backend.h"
#include "util.h"

/* Frames one non-blocking step handles without an event before it
 * returns (session_exec_step). */
#define SESSION_STEP_FRAMES 64
#define DEF_OUTPUT (1u << 20)
#define DEF_TOOL_CALLS 1000
#define DEF_MAX_BYTES (256ull << 20)
#define DEF_CONTROL 30.0
#define REAP_WAIT_NS 2000000000ull
/* The marker between a truncated stream's head and tail ("\n[... N bytes
 * truncated ...]\n"), in code points, with room to spare. */
#define TRUNC_MARKER_SLACK 64
/* A frame this big leaves glibc's heap fragmented: trim after freeing. */
#define TRIM_FRAME (1u << 20)

/* What one exec keeps between steps. */
struct exec_state {
	bool active; /* started, result not yet taken */
	bool done;   /* ended: res is final */
	uint32_t id;
	double timeout, grace;
	unsigned long long t0, soft, hard; /* ns; 0: none */
	bool soft_sent, cancelled;
	/* The runner's socket ended (EOF) in a non-blocking step: by when
	 * the sandbox must have ended by itself (proc_finish's wait, kept
	 * off the caller's thread); 0: not so. */
	unsigned long long gone;
	uint64_t out_bytes;
	struct pending_call {
		uint32_t id;
		uint32_t bytes;	  /* its CALL's payload */
		const char *tool; /* its name, for messages (the tool's own string: lives with the session) */
	} *pending;			   /* CALLs not yet answered */
	size_t n_pending, cap_pending;
	uint64_t pending_bytes; /* their payloads together: at most the frame limit */
	struct proto_frame cur_frame; /* the last event's frame and message, */
	json_t *cur_msg;	      /* which its borrowed pointers point into */
	struct session_result res;
};

struct nsbox_session {
	struct session_opts o;
	unsigned long long op_deadline; /* session_op_deadline(); 0: none */
	double op_seconds;
	const char *op_what;
	struct session_tool *tools;
	struct frame_io io;
	int cancel_fd; /* eventfd: session_cancel() */
	atomic_bool cancel_req;
	int epoll_fd, timer_fd;		/* session_fd(), made on first use */
	uint32_t sock_events;		/* what epoll_fd waits for on the socket: EPOLLIN, or
					 * EPOLLOUT while frames are queued (frame_queued) */
	unsigned long long timer_armed; /* the deadline timer_fd is armed to (0: disarmed) */
	struct sandbox sb;
	bool dead;
	bool trim; /* a big frame was freed since the last malloc_trim */
	bool in_call; /* session_call_begin(): a cancel from before the call was dropped */
	bool big;  /* a big frame came during the session */
	uint32_t next_id;
	json_t *hello;
	struct exec_state x;
	struct netaudit *audit; /* opts.net_audit's pipe; NULL: none */
};

/* ---- the egress audit (netaudit.h) ---- */

/* Hand over the records waiting in the pipe, and warn about dropped ones. */
static void audit_drain(struct nsbox_session *s)
{
	if (!s->audit || s->audit->eof)
		return;
	/* At EOF (the proxy is gone) the pipe stays readable: out of the
	 * session fd, or an event loop would spin on it. */
	if (netaudit_drain(s->audit) && s->epoll_fd >= 0)
		(void)epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, s->audit->fd, NULL);
	netaudit_warn(s->audit, s->o.warn, s->o.warn_ctx);
}

/* The sandbox and its proxy are stopped: the rest of the records, to EOF. */
static void audit_finish(struct nsbox_session *s)
{
	if (!s->audit || s->audit->fd < 0)
		return;
	netaudit_finish(s->audit, now_ns() + NETAUDIT_FINISH_NS);
	netaudit_warn(s->audit, s->o.warn, s->o.warn_ctx);
}

/* The pipe for opts.net_audit and the descriptors for the proxy, when the
 * policy has an allowlist.  Fills fds (borrowed by the backend's start;
 * *wr is the pipe's write end, the caller closes it after the start). */
static int audit_setup(struct nsbox_session *s, int fds[EGRESS_AUDIT_FDS], size_t *n, int *wr, struct nsbox_err *err)
{
	const struct nsbox_policy *p = s->o.policy;

	*n = 0;
	*wr = -1;
	if (!p->n_net_allow || p->share_net || (!s->o.net_audit && s->o.net_log_fd < 0))
		return 0;
	/* Through nsboxd these travel in OPEN (host/session-service.c). */
	if (s->o.net_log_fd >= 0)
		fds[(*n)++] = s->o.net_log_fd;
	if (!s->o.net_audit)
		return 0;
	s->audit = calloc(1, sizeof(*s->audit));
	if (!s->audit)
		return err_set(err, ENOMEM, "session");
	if (netaudit_open(s->audit, s->o.net_audit, s->o.net_audit_ctx, wr, err) < 0)
		return -1;
	fds[(*n)++] = *wr;
	return 0;
}

int session_net_audit_drain(struct nsbox_session *s)
{
	uint64_t before;

	if (!s->audit)
		return 0;
	before = s->audit->delivered;
	audit_drain(s);
	return (int)(s->audit->delivered - before > INT_MAX ? INT_MAX : s->audit->delivered - before);
}

/* ---- process control ---- */

/* Wait up to REAP_WAIT_NS for the process to end by itself (the OOM
 * killer's status must be read, not replaced by ours), then kill and reap. */
static void proc_finish(struct nsbox_session *s, bool kill_now)
{
	unsigned long long end = now_ns() + (kill_now ? 0 : REAP_WAIT_NS);

	if (!s->sb.priv) {
		s->sb.reaped = true;
		return;
	}
	while (!s->sb.ops->try_reap(&s->sb)) {
		/* Code inside that waits for the network (a thread the runner
		 * joins as it exits) waits for the proxy, which waits for us. */
		struct pollfd p[2] = { { s->sb.pidfd, POLLIN, 0 },
				       { s->audit && !s->audit->eof ? s->audit->fd : -1, POLLIN, 0 } };

		audit_drain(s);
		if (now_ns() >= end) {
			s->sb.ops->destroy(&s->sb);
			break;
		}
		poll(p, 2, 20);
	}
}

/* ---- start ---- */

/* The tools from index from on, as HELLO and TOOLS carry them. */
static json_t *tools_json(const struct nsbox_session *s, size_t from)
{
	json_t *tools = json_array();

	for (size_t i = from; tools && i < s->o.n_tools; i++) {
		const struct session_tool *t = &s->tools[i];
		json_t *o = json_pack("{s:s}", "name", t->name);

		if (!o) {
			json_decref(tools);
			return NULL;
		}
		if (t->description)
			json_object_set_new(o, "description", json_string(t->description));
		if (t->schema)
			json_object_set(o, "schema", t->schema);
		json_array_append_new(tools, o);
	}
	return tools;
}

/* sys.argv for the HELLO: UTF-8 arguments as strings, others (argv is
 * bytes) as {"$bytes": hex}, which the runner decodes as CPython decodes
 * its own argv (surrogateescape). */
static json_t *argv_json(const char *const *argv)
{
	json_t *a = json_array();

	for (size_t i = 0; a && argv[i]; i++) {
		size_t n = strlen(argv[i]);
		json_t *v;

		if (proto_utf8_valid(argv[i], n)) {
			v = json_stringn(argv[i], n);
		} else {
			char *hex = malloc(2 * n + 1);

			for (size_t k = 0; hex && k < n; k++)
				snprintf(hex + 2 * k, 3, "%02x", (unsigned char)argv[i][k]);
			if (hex)
				hex[2 * n] = '\0';
			v = hex ? json_pack("{s:s}", "$bytes", hex) : NULL;
			free(hex);
		}
		if (!v || json_array_append_new(a, v) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *hello_msg(const struct nsbox_session *s)
{
	json_t *tools = tools_json(s, 0);
	json_t *m;

	if (!tools)
		return NULL;
	m = json_pack("{s:i,s:[sss],s:o,s:{s:I,s:I}}", "version", NSBOX_PROTO_VERSION, "capabilities", "exec", "tools",
		      "cancel", "tools", tools, "limits", "output", (json_int_t)s->o.output_limit, "max_frame",
		      (json_int_t)s->o.max_frame);
	if (m && s->o.argv && json_object_set_new(m, "argv", argv_json(s->o.argv)) < 0) {
		json_decref(m);
		return NULL;
	}
	return m;
}

/* A tool's name: an identifier, or NS.NAME, that replaces nothing of Python's. */
static int check_tool_name(const char *n, struct nsbox_err *err)
{
	if (!proto_is_tool_name(n))
		return err_set(err, EINVAL, "tool name '%s' is not a Python identifier or NS.NAME", n ? n : "");
	if (proto_tool_name_reserved(n))
		return err_set(err, EINVAL,
			       "tool name '%s' is a Python keyword, builtin or dunder: a tool by that name would "
			       "replace it inside (choose another name)",
			       n);
	return 0;
}

/* ---- the EXEC frame, written directly ----
 * The one message sent per exec, built with proto_buf instead of a
 * jansson tree and dump (a few microseconds of the round trip).  What it
 * writes is what proto_encode() of the same object would, less key order
 * and escape spelling. */

/* The EXEC frame for req (header included) in a malloc'd *out. */
static int exec_frame(const struct session_exec_req *req, uint32_t id, double timeout, uint32_t max_frame,
		      bool stream_all, char **out, size_t *out_len, struct nsbox_err *err)
{
	const char *filename = req->filename ? req->filename : "<exec>";
	struct proto_hdr h = { .magic = NSBOX_PROTO_MAGIC, .type = PROTO_EXEC, .id = id };
	struct proto_buf b = { 0 };
	char num[40];

	if (!proto_utf8_valid(req->code, strlen(req->code)) || !proto_utf8_valid(filename, strlen(filename)))
		return err_set(err, EINVAL, "code is not valid UTF-8");
	proto_buf_put(&b, (const char[NSBOX_PROTO_HDR_SIZE]){ 0 }, NSBOX_PROTO_HDR_SIZE);
	proto_buf_puts(&b, "{\"code\":");
	proto_buf_json_str(&b, req->code, strlen(req->code));
	proto_buf_puts(&b, ",\"filename\":");
	proto_buf_json_str(&b, filename, strlen(filename));
	proto_buf_puts(&b, req->want_value ? ",\"want_value\":true" : ",\"want_value\":false");
	proto_buf_puts(&b, req->stream ? ",\"stream\":true" : ",\"stream\":false");
	if (req->stream && stream_all)
		proto_buf_puts(&b, ",\"stream_all\":true");
	proto_buf_puts(&b, req->display ? ",\"display\":true" : ",\"display\":false");
	proto_buf_puts(&b, req->check_complete ? ",\"check_complete\":true" : ",\"check_complete\":false");
	if (req->plain)
		proto_buf_puts(&b, ",\"rich\":false");
	/* A finite timeout only, as json_real() would take. */
	if (timeout > 0 && timeout <= 1e300) {
		format_double_c(num, sizeof(num), "%.17g", 0, timeout);
		proto_buf_puts(&b, ",\"timeout\":");
		proto_buf_puts(&b, num);
		if (!strpbrk(num, ".e"))
			proto_buf_puts(&b, ".0");
	}
	proto_buf_put(&b, "}", 1);
	if (b.bad) {
		free(b.p);
		return err_set(err, ENOMEM, "EXEC frame");
	}
	if (b.len - NSBOX_PROTO_HDR_SIZE > max_frame) {
		free(b.p);
		return err_set(err, EMSGSIZE, "EXEC message of %zu bytes exceeds the frame limit of %u bytes",
			       b.len - NSBOX_PROTO_HDR_SIZE, max_frame);
	}
	h.len = (uint32_t)(b.len - NSBOX_PROTO_HDR_SIZE);
	proto_hdr_encode((uint8_t *)b.p, &h);
	*out = b.p;
	*out_len = b.len;
	return 0;
}

/* Free the current frame and its message.  After a big one, give the
 * memory back: its parse is millions of small blocks that glibc keeps
 * (fragmented, under live ones) instead of returning to the system. */
static void release_frame(struct nsbox_session *s)
{
	struct exec_state *x = &s->x;

	if (x->cur_frame.payload && x->cur_frame.hdr.len >= TRIM_FRAME)
		s->trim = s->big = true;
	proto_frame_free(&x->cur_frame);
	json_decref(x->cur_msg);
	x->cur_msg = NULL;
	if (s->trim) {
		s->trim = false;
		malloc_trim(0);
	}
}

static void exec_clear(struct exec_state *x)
{
	proto_frame_free(&x->cur_frame);
	json_decref(x->cur_msg);
	x->cur_msg = NULL;
	free(x->pending);
	session_result_free(&x->res);
	memset(x, 0, sizeof(*x));
}

static void session_free(struct nsbox_session *s)
{
	if (!s)
		return;
	exec_clear(&s->x);
	if (s->io.sock >= 0)
		close(s->io.sock);
	if (s->cancel_fd >= 0)
		close(s->cancel_fd);
	if (s->epoll_fd >= 0)
		close(s->epoll_fd);
	if (s->timer_fd >= 0)
		close(s->timer_fd);
	s->sb.closing = true;
	if (s->sb.priv)
		s->sb.ops->destroy(&s->sb);
	free(s->sb.priv);
	frame_io_release(&s->io);
	if (s->io.rd) {
		proto_reader_free(s->io.rd);
		free(s->io.rd);
	}
	if (s->audit && s->audit->fd >= 0)
		close(s->audit->fd);
	free(s->audit);
	json_decref(s->hello);
	free(s->tools);
	free(s);
}

static const struct session_backend_ops *backend_of(const struct session_opts *o)
{
	if (o->connect)
		return &session_backend_service;
	if (o->use_helper)
		return &session_backend_helper;
	return o->unjailed ? &session_backend_unjailed : &session_backend_local;
}

/* Our HELLO (tools, limits), then the runner's. */
static int handshake(struct nsbox_session *s, struct nsbox_err *err)
{
	unsigned long long deadline = now_ns() + (unsigned long long)(s->o.control_timeout * 1e9);
	_cleanup_frame_ struct proto_frame f = { 0 };
	json_auto_t *m = hello_msg(s);
	json_t *h;
	pid_t pid;
	int k;

	s->o.argv = NULL; /* borrowed for the HELLO only */
	if (!m)
		return err_set(err, ENOMEM, "HELLO");
	if (frame_send_msg(&s->io, PROTO_HELLO, 0, m, deadline, err) < 0)
		return -1;
	pid = pidfd_pid(s->sb.pidfd);
	/* The runner's processes are the sandbox's host user's, who may stop
	 * them (under nsboxd with a workspace, a client): a stopped one ends
	 * the wait at once instead of holding an nsboxd worker for the whole
	 * control timeout (red team 6).  Looked for every 50 ms; the reader
	 * keeps a frame read in part across the slices. */
	for (;;) {
		unsigned long long slice = now_ns() + 50000000ULL;

		k = frame_wait(&s->io, s->sb.pidfd, -1, slice < deadline ? slice : deadline, &f, err);
		if (k != W_TIMEOUT || now_ns() >= deadline)
			break;
		if (pid > 0 && proc_tree_stopped(pid))
			return err_set(err, EINTR, "the runner was stopped (SIGSTOP) before the handshake");
	}
	if (k == W_TIMEOUT)
		return err_set(err, ETIMEDOUT, "the runner did not answer the handshake within %.0f s",
			       s->o.control_timeout);
	if (k == W_DEAD) {
		proc_finish(s, false);
		if (s->sb.st.exited)
			return err_set(err, 0, "the runner exited with status %d before the handshake%s",
				       s->sb.st.exit_code, s->sb.st.exit_code == 127 ? " (could not execute it)" : "");
		return err_set(err, 0, "the runner was killed by signal %d before the handshake", s->sb.st.term_signal);
	}
	if (k != W_FRAME)
		return -1;
	h = frame_parse(&f, err);
	if (!h)
		return -1;
	if (f.hdr.type == PROTO_ERROR) {
		const char *why = json_string_value(json_object_get(h, "message"));
		char q[512];

		err_set(err, 0, "the runner failed to start: %s", why ? proto_text_inert(why, q, sizeof(q)) : "(no message)");
		json_decref(h);
		return -1;
	}
	if (f.hdr.type != PROTO_HELLO || json_integer_value(json_object_get(h, "version")) != NSBOX_PROTO_VERSION) {
		err_set(err, EPROTO, "the runner answered %s (protocol version %lld), expected HELLO version %d",
			proto_type_name(f.hdr.type), (long long)json_integer_value(json_object_get(h, "version")),
			NSBOX_PROTO_VERSION);
		json_decref(h);
		return -1;
	}
	s->hello = h;
	return 0;
}

static int control(struct nsbox_session *s, uint16_t type, json_t *msg, uint16_t want, json_t **answer,
		   struct nsbox_err *err);

/* A sandbox whose HELLO went long before (nsboxd's pool): what our HELLO
 * would have carried, sent now.  Tools travel in TOOLS; sys.argv is set by
 * a SET_VAR of a private name and one line of code, run as an exec. */
static int adopted_setup(struct nsbox_session *s, struct nsbox_err *err)
{
	json_t *a = NULL;

	s->next_id = 1;
	if (s->o.n_tools) {
		json_t *list = tools_json(s, 0);

		if (!list || control(s, PROTO_TOOLS, json_pack("{s:o}", "tools", list), PROTO_VALUE, &a, err) < 0)
			return -1;
		json_decref(a);
	}
	if (s->o.argv) {
		json_t *av = argv_json(s->o.argv);
		struct session_exec_req req = {
			.code = "import sys as _s; _s.argv = list(__nsbox_argv); del _s, __nsbox_argv"
		};
		struct session_result res;

		if (!av || control(s, PROTO_SET_VAR, json_pack("{s:s,s:o}", "name", "__nsbox_argv", "value", av),
				   PROTO_VALUE, &a, err) < 0)
			return -1;
		json_decref(a);
		if (session_exec(s, &req, &res, err) < 0)
			return -1;
		if (res.outcome != SESSION_OK) {
			err_set(err, EPROTO, "setting sys.argv: %s", res.message);
			session_result_free(&res);
			return -1;
		}
		session_result_free(&res);
	}
	s->o.argv = NULL;
	return 0;
}

int session_start(struct nsbox_session **out, const struct session_opts *opts, struct nsbox_err *err)
{
	struct nsbox_session *s;
	char path[PATH_MAX] = "nsbox-runner";
	int sv[2], spare_sock = -1;
	char *argv[7] = { "nsbox-runner", NULL, NULL, NULL, NULL, NULL, NULL };
	int ac = 1, audit_fds[EGRESS_AUDIT_FDS], audit_wr = -1;
	size_t n_audit = 0;
	struct sandbox_spec spec;
	int k;

	if (!opts || !opts->policy)
		return err_set(err, EINVAL, "session: no policy");
	for (size_t i = 0; i < opts->n_tools; i++)
		if (check_tool_name(opts->tools[i].name, err) < 0)
			return -1;
	s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(err, ENOMEM, "session");
	s->io.sock = s->cancel_fd = s->epoll_fd = s->timer_fd = s->sb.pidfd = -1;
	s->sb.ops = backend_of(opts);
	s->sb.warn = opts->warn;
	s->sb.warn_ctx = opts->warn_ctx;
	s->o = *opts;
	if (!s->o.output_limit)
		s->o.output_limit = DEF_OUTPUT;
	if (!s->o.max_frame || s->o.max_frame > NSBOX_PROTO_MAX_FRAME)
		s->o.max_frame = NSBOX_PROTO_MAX_FRAME;
	if (!s->o.max_tool_calls)
		s->o.max_tool_calls = DEF_TOOL_CALLS;
	if (!s->o.max_bytes)
		s->o.max_bytes = DEF_MAX_BYTES;
	if (s->o.control_timeout <= 0)
		s->o.control_timeout = DEF_CONTROL;
	s->io.max_frame = s->o.max_frame;
	s->tools = calloc(opts->n_tools ? opts->n_tools : 1, sizeof(*s->tools));
	s->io.rd = malloc(sizeof(*s->io.rd));
	if (!s->tools || !s->io.rd) {
		session_free(s);
		return err_set(err, ENOMEM, "session");
	}
	if (opts->n_tools)
		memcpy(s->tools, opts->tools, opts->n_tools * sizeof(*s->tools));
	s->o.tools = s->tools;
	proto_reader_init(s->io.rd, s->o.max_frame);

	s->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->cancel_fd < 0) {
		err_sys(err, "eventfd");
		session_free(s);
		return -1;
	}
	if (!opts->use_helper && (s->o.runner_path ? (snprintf(path, sizeof(path), "%s", s->o.runner_path), 0)
						   : runner_locate(path, sizeof(path), err)) < 0) {
		session_free(s);
		return -1;
	}
	/* argv[0] names the file (tests pick an evil runner's mode by it). */
	argv[0] = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (opts->policy->dist_packages)
		argv[ac++] = "--dist-packages";
	if (opts->policy->preload && *opts->policy->preload) {
		argv[ac++] = "--preload";
		argv[ac++] = opts->policy->preload;
	}
	if (opts->pass_stdin && !opts->use_helper && isatty(0) != 1)
		argv[ac++] = "--stdin";
	if (audit_setup(s, audit_fds, &n_audit, &audit_wr, err) < 0) {
		session_free(s);
		return err_step(err, "egress");
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		err_sys(err, "socketpair");
		if (audit_wr >= 0)
			close(audit_wr);
		session_free(s);
		return -1;
	}
	/* Nothing the sandbox sends on it reaches us as a descriptor (older
	 * kernels: the reader closes them, proto_reader_read). */
	(void)sock_refuse_fds(sv[0]);
	spec = (struct sandbox_spec){ .policy = opts->policy,
				      .sock = sv[1],
				      .path = path,
				      .argv = argv,
				      .cold = opts->cold,
				      .spare = opts->spare && !n_audit,
				      .warn = opts->warn,
				      .warn_ctx = opts->warn_ctx,
				      .connect = opts->connect,
				      .output_limit = opts->output_limit,
				      .net_audit_fds = audit_fds,
				      .n_net_audit_fds = n_audit };
	k = s->sb.ops->start(&s->sb, &spec, &spare_sock, err);
	close(sv[1]);
	/* Only the proxy keeps the write end: EOF once it is gone. */
	if (audit_wr >= 0)
		close(audit_wr);
	s->io.sock = sv[0];
	if (k < 0) {
		/* Nothing runs: the backend cleaned up after itself. */
		s->sb.reaped = true;
		session_free(s);
		return -1;
	}
	/* A spare sandbox, made before we asked: its socket is ours. */
	if (spare_sock >= 0) {
		close(s->io.sock);
		s->io.sock = spare_sock;
	}
	if (fcntl(s->io.sock, F_SETFL, O_NONBLOCK) < 0) {
		err_sys(err, "fcntl");
		goto fail;
	}
	if (s->sb.hello) {
		/* The service made the sandbox and did the handshake. */
		s->hello = s->sb.hello;
		s->sb.hello = NULL;
		if (adopted_setup(s, err) < 0)
			goto fail;
	} else if (handshake(s, err) < 0) {
		goto fail;
	}
	s->next_id = s->next_id ? s->next_id : 1;
	*out = s;
	return 0;
fail:
	proc_finish(s, true);
	session_free(s);
	return err_step(err, "runner");
}

/* ---- exec ---- */

static void result_msg(struct session_result *res, enum session_outcome o, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void result_msg(struct session_result *res, enum session_outcome o, int code, const char *fmt, ...)
{
	va_list ap;

	res->outcome = o;
	res->exit_code = code;
	va_start(ap, fmt);
	vsnprintf(res->message, sizeof(res->message), fmt, ap);
	va_end(ap);
}

/* The runner is gone or must go: kill, reap, and say why. */
static void end_session(struct nsbox_session *s, struct session_result *res, bool kill_now)
{
	s->dead = true;
	proc_finish(s, kill_now);
	res->dead = true;
	res->peak_memory = s->sb.st.peak_memory;
	/* The host's own reason to kill stands (on_deadline: a cancel the
	 * code did not heed was reported as "killed by signal 9"). */
	if (res->outcome == SESSION_TIMEOUT || res->outcome == SESSION_PROTOCOL || res->outcome == SESSION_CANCELLED)
		return;
	if (s->sb.st.oom_killed) {
		result_msg(res, SESSION_MEMORY, NSBOX_EXIT_MEMORY, "memory limit exceeded (peak %.1f MiB)",
			   (double)s->sb.st.peak_memory / (1 << 20));
	} else if (!s->sb.st.exited) {
		result_msg(res, SESSION_CRASHED, 128 + s->sb.st.term_signal, "the runner was killed by signal %d",
			   s->sb.st.term_signal);
	} else {
		/* Its own status, 0 too, as python's when code calls os._exit(N):
		 * the outcome (crashed) says the session is gone. */
		result_msg(res, SESSION_CRASHED, s->sb.st.exit_code, "the runner exited with status %d",
			   s->sb.st.exit_code);
	}
}

static void protocol_error(struct nsbox_session *s, struct session_result *res, const char *what)
{
	json_auto_t *m = json_pack("{s:s}", "message", what);

	/* Best effort: tell the runner why, then kill it.  Never waited
	 * for (a runner that stopped reading held the caller 100 ms). */
	if (m && !frame_queued(&s->io))
		frame_queue_msg(&s->io, PROTO_ERROR, 0, m, 0, NULL);
	result_msg(res, SESSION_PROTOCOL, NSBOX_EXIT_PROTOCOL, "protocol error: %s", what);
	end_session(s, res, true);
}

static const struct session_tool *find_tool(const struct nsbox_session *s, const char *name)
{
	for (size_t i = 0; i < s->o.n_tools; i++)
		if (!strcmp(s->tools[i].name, name))
			return &s->tools[i];
	return NULL;
}

/* Whether name and a registered tool would need the same global: a plain
 * tool NS beside a namespaced NS.NAME. */
static bool clashes(const struct nsbox_session *s, const char *name)
{
	size_t n = strcspn(name, ".");

	for (size_t i = 0; i < s->o.n_tools; i++) {
		const char *o = s->tools[i].name;
		size_t m = strcspn(o, ".");

		if (n == m && !memcmp(o, name, n) && !name[n] != !o[m])
			return true;
	}
	return false;
}

static double dmax(double a, double b)
{
	return a > b ? a : b;
}

static double exec_timeout(const struct nsbox_session *s, const struct session_exec_req *req)
{
	if (req->timeout > 0)
		return req->timeout;
	return s->o.policy->time_limit > 0 ? s->o.policy->time_limit : 0;
}

/* The exec has ended: its wall time, and a wake-up for an event loop
 * when that happened outside a step (an answer that could not be sent). */
static void exec_done(struct nsbox_session *s)
{
	s->x.done = true;
	s->x.n_pending = 0;
	s->x.pending_bytes = 0;
	s->x.res.wall = (double)(now_ns() - s->x.t0) / 1e9;
}

/* The exec ends here, as an event: its sandbox gone (its status read, or
 * killed first with kill_now) or, given why, a protocol error.  Returns 1. */
static int exec_ends(struct nsbox_session *s, struct session_event *ev, const char *why, bool kill_now)
{
	if (why)
		protocol_error(s, &s->x.res, why);
	else
		end_session(s, &s->x.res, kill_now);
	exec_done(s);
	ev->kind = SESSION_EV_DONE;
	return 1;
}

static void wake(struct nsbox_session *s)
{
	uint64_t one = 1;

	if (write(s->cancel_fd, &one, sizeof(one)) < 0) {
		/* Counter full: a wake-up is pending anyway. */
	}
}

static void arm_timer(struct nsbox_session *s, unsigned long long deadline);

/* The exec's next deadline (0: none): its time limit, or sooner the one
 * by which the runner must take what is queued for it (frame_queue_buf);
 * once CANCEL is on its way, the grace after it and nothing else (the
 * exec then ends as timed out or cancelled, the sandbox killed). */
static unsigned long long next_deadline(const struct nsbox_session *s)
{
	const struct exec_state *x = &s->x;
	unsigned long long d = x->soft_sent ? x->hard : x->soft;
	unsigned long long q = frame_queued(&s->io) && !x->soft_sent ? s->io.out_deadline : 0;

	if (x->gone)
		return x->gone;

	return q && (!d || q < d) ? q : d;
}

/* Before an event loop waits on the session fd again: the timer at the
 * next deadline, and the socket watched for what the exec waits for,
 * room to send while frames are queued (not readable: the step reads no
 * frame then, and a readable socket would wake the loop for nothing). */
static void step_pause(struct nsbox_session *s)
{
	uint32_t want = s->x.gone ? 0 : frame_queued(&s->io) ? EPOLLOUT : EPOLLIN;

	arm_timer(s, next_deadline(s));
	if (s->epoll_fd >= 0 && s->sock_events != want) {
		struct epoll_event e = { .events = want, .data.fd = s->io.sock };

		/* A socket at its end is always ready (EPOLLHUP even with no
		 * events asked): out of the set, the pidfd and the timer wake
		 * the caller. */
		if (epoll_ctl(s->epoll_fd, want ? EPOLL_CTL_MOD : EPOLL_CTL_DEL, s->io.sock, &e) == 0)
			s->sock_events = want;
	}
}

int session_exec_start(struct nsbox_session *s, const struct session_exec_req *req, struct nsbox_err *err)
{
	struct exec_state *x = &s->x;
	/* Sending is bounded by the control timeout. */
	unsigned long long d = now_ns() + (unsigned long long)(s->o.control_timeout * 1e9);
	_cleanup_free_ char *frame = NULL;
	double timeout;
	size_t flen = 0;
	uint64_t drain;

	if (x->active)
		return err_set(err, EBUSY, "an exec is in progress");
	if (s->dead)
		return err_set(err, EPIPE, "the session has ended");
	if (!req->code)
		return err_set(err, EINVAL, "no code");
	timeout = exec_timeout(s, req);
	if (exec_frame(req, s->next_id, timeout, s->o.max_frame, s->o.stream_all, &frame, &flen, err) < 0)
		return -1;
	exec_clear(x);
	x->active = true;
	x->timeout = timeout;
	x->grace = s->o.grace > 0 ? s->o.grace : dmax(0.5, timeout * 0.1);
	x->t0 = now_ns();
	x->soft = timeout > 0 ? x->t0 + (unsigned long long)(timeout * 1e9) : 0;
	x->id = s->next_id++;
	if (frame_queue_buf(&s->io, PROTO_EXEC, frame, flen, d, err) < 0) {
		/* A runner that died is reported as such (signal, OOM). */
		if (err->code == EPIPE || err->code == ECONNRESET) {
			end_session(s, &x->res, false);
		} else {
			result_msg(&x->res, SESSION_PROTOCOL, NSBOX_EXIT_PROTOCOL, "sending EXEC: %s", err->msg);
			end_session(s, &x->res, true);
		}
		exec_done(s);
		wake(s);
		return 0;
	}
	/* An event-loop caller polls the session fd before its first
	 * advance: the time limit must be able to wake it (no timerfd, and
	 * nothing to do, on the blocking path). */
	step_pause(s);
	/* A cancel before this exec is not for it (no read() when there was
	 * none: this is on every exec's round trip). */
	if (atomic_exchange(&s->cancel_req, false))
		while (read(s->cancel_fd, &drain, sizeof(drain)) > 0)
			;
	return 0;
}

/* Queue the answer to CALL id (sent as the runner takes it, by the
 * caller's deadline).  -1 with err when the session must end. */
static int send_answer(struct nsbox_session *s, uint32_t id, const char *name, uint16_t type, json_t *ans,
		       struct nsbox_err *err)
{
	struct exec_state *x = &s->x;
	unsigned long long deadline = x->hard	? x->hard
				      : x->soft ? x->soft + 1000000000ull
						: now_ns() + (unsigned long long)(s->o.control_timeout * 1e9);
	char buf[256];
	int r;

	if (!ans)
		return err_set(err, ENOMEM, "tool answer");
	r = frame_queue_msg(&s->io, type, id, ans, deadline, err);
	if (r < 0 && err->code == EMSGSIZE) {
		/* The host's answer is too big for a frame: the caller inside
		 * gets a clear ToolError instead. */
		json_auto_t *small = NULL;

		snprintf(buf, sizeof(buf), "the answer of tool '%.64s' is too large (over %u bytes)", name,
			 s->o.max_frame);
		small = json_pack("{s:s}", "message", buf);
		if (!small)
			return err_set(err, ENOMEM, "tool answer");
		r = frame_queue_msg(&s->io, PROTO_RAISE, id, small, deadline, err);
	}
	return r;
}

static int raise_in(struct nsbox_session *s, uint32_t id, const char *name, const char *msg, struct nsbox_err *err)
{
	json_auto_t *ans = json_pack("{s:s}", "message", msg);

	return send_answer(s, id, name, PROTO_RAISE, ans, err);
}

/* A CALL that can only fail (unknown tool, over the cap), answered with
 * RAISE.  0, or -1 with err when the session must end. */
static int refuse_call(struct nsbox_session *s, uint32_t id, const char *name, struct nsbox_err *err)
{
	struct exec_state *x = &s->x;
	char buf[512], inert[4 * PROTO_TOOL_NAME_MAX + 8];

	x->res.tool_calls++;
	if (x->res.tool_calls > s->o.max_tool_calls) {
		snprintf(buf, sizeof(buf), "tool call limit exceeded (%u per exec)", s->o.max_tool_calls);
		return raise_in(s, id, name, buf, err);
	}
	/* The sandbox's name, cut at 64 bytes: maybe inside a character,
	 * which would make the answer invalid UTF-8 (and end the exec). */
	snprintf(buf, sizeof(buf), "unknown tool '%s'", proto_text_inert(name, inert, sizeof(inert)));
	return raise_in(s, id, name, buf, err);
}

/* The call's text for the host, {"args":[...],"kwargs":{...}} (the two in
 * the sandbox's order), written over its own payload p: each span moves
 * towards the start, past nothing that is still to be read, and the text
 * is shorter than the payload ("name" is gone).  Returns p. */
static const char *call_text(char *p, const struct proto_call *c)
{
	bool args_first = c->args_off < c->kwargs_off;
	const char *k1 = args_first ? "{\"args\":" : "{\"kwargs\":", *k2 = args_first ? ",\"kwargs\":" : ",\"args\":";
	size_t o1 = args_first ? c->args_off : c->kwargs_off, n1 = args_first ? c->args_len : c->kwargs_len;
	size_t o2 = args_first ? c->kwargs_off : c->args_off, n2 = args_first ? c->kwargs_len : c->args_len;
	size_t w1 = strlen(k1), w2 = w1 + n1 + strlen(k2);

	memmove(p + w1, p + o1, n1);
	memmove(p + w2, p + o2, n2);
	memcpy(p, k1, strlen(k1));
	memcpy(p + w1 + n1, k2, strlen(k2));
	p[w2 + n2] = '}';
	p[w2 + n2 + 1] = '\0';
	return p;
}

/* One CALL of bytes payload: answered at once when it can only fail (over
 * the cap, unknown tool, too much in flight: returns 0), else pending and
 * reported (returns 1).  -1 with err when the session must end. */
static int on_call(struct nsbox_session *s, uint32_t id, uint32_t bytes, const struct proto_call *c,
		   struct session_event *ev, struct nsbox_err *err)
{
	struct exec_state *x = &s->x;
	const char *name = c->name;
	const struct session_tool *t = c->name_cut ? NULL : find_tool(s, name);

	if (!t || x->res.tool_calls >= s->o.max_tool_calls)
		return refuse_call(s, id, name, err);
	x->res.tool_calls++;
	for (size_t i = 0; i < x->n_pending; i++)
		if (x->pending[i].id == id)
			return err_set(err, EPROTO, "CALL %u while call %u is unanswered", id, id);
	/* What the caller holds for the calls in flight (their arguments,
	 * decoded: an event loop's pending tasks) is bounded like one frame,
	 * not by the calls' count times the frame limit. */
	if (x->n_pending && x->pending_bytes + bytes > s->o.max_frame) {
		char buf[256];

		snprintf(buf, sizeof(buf),
			 "the tool calls in flight hold more than %u bytes of arguments: wait for some to return",
			 s->o.max_frame);
		return raise_in(s, id, name, buf, err);
	}
	if (x->n_pending == x->cap_pending) {
		size_t cap = x->cap_pending ? 2 * x->cap_pending : 4;
		struct pending_call *p = realloc(x->pending, cap * sizeof(*p));

		if (!p)
			return err_set(err, ENOMEM, "tool call");
		x->pending = p;
		x->cap_pending = cap;
	}
	x->pending[x->n_pending++] = (struct pending_call){ id, bytes, t->name };
	x->pending_bytes += bytes;
	ev->kind = SESSION_EV_CALL;
	ev->call_id = id;
	ev->tool = t;
	ev->call_json = call_text(x->cur_frame.payload, c);
	return 1;
}

/* The time limit, or a cancel's grace, fell due. */
static void on_deadline(struct nsbox_session *s)
{
	struct exec_state *x = &s->x;

	if (!x->soft_sent) {
		json_auto_t *c = json_pack("{s:s}", "reason", "timeout");

		x->soft_sent = true;
		x->hard = now_ns() + (unsigned long long)(x->grace * 1e9);
		if (c)
			frame_queue_msg(&s->io, PROTO_CANCEL, x->id, c, x->hard, NULL);
		return;
	}
	if (x->cancelled && !(x->soft && now_ns() >= x->soft))
		result_msg(&x->res, SESSION_CANCELLED, 130, "cancelled; the code did not stop, the session was killed");
	else
		result_msg(&x->res, SESSION_TIMEOUT, NSBOX_EXIT_TIMEOUT,
			   "time limit exceeded (%.3g s); the session was killed", x->timeout);
	end_session(s, &x->res, true);
	exec_done(s);
}

static void on_cancel(struct nsbox_session *s)
{
	struct exec_state *x = &s->x;
	json_auto_t *c = json_pack("{s:s}", "reason", "cancel");

	x->cancelled = true;
	if (c)
		frame_queue_msg(&s->io, PROTO_CANCEL, x->id, c, now_ns() + 1000000000ull, NULL);
	if (!x->soft_sent) {
		/* Same grace as a time limit: then the sandbox goes. */
		x->soft_sent = true;
		x->hard = now_ns() + (unsigned long long)(dmax(x->grace, 0.5) * 1e9);
	}
}

/* ev's OUTPUT (stream, data, len set): 1, or 0 with the exec failed. */
static int output_event(struct nsbox_session *s, struct session_event *ev)
{
	struct exec_state *x = &s->x;

	/* An honest runner streams at most half the output limit per stream
	 * (the head) unless asked for all of it; the rest comes in RESULT.
	 * Code points: each undecodable byte inside is one U+FFFD (3 bytes). */
	if (s->o.stream_all)
		goto out;
	x->out_bytes += proto_utf8_chars(ev->data, ev->len);
	if (x->out_bytes > 2 * s->o.output_limit + 8) {
		protocol_error(s, &x->res, "more OUTPUT than the output limit allows");
		exec_done(s);
		ev->kind = SESSION_EV_DONE;
		return 1;
	}
out:
	ev->kind = SESSION_EV_OUTPUT;
	return 1;
}

/* One frame of the exec (owned by the state from here).  1 with an event,
 * 0 when handled inside. */
static int on_frame(struct nsbox_session *s, struct session_event *ev)
{
	struct exec_state *x = &s->x;
	struct proto_frame *f = &x->cur_frame;
	struct nsbox_err e = { 0 };
	char what[600];
	json_t *m;
	int k;

	x->res.bytes_in += NSBOX_PROTO_HDR_SIZE + f->hdr.len;
	if (x->res.bytes_in > s->o.max_bytes) {
		snprintf(what, sizeof(what), "more than %llu bytes received during one exec",
			 (unsigned long long)s->o.max_bytes);
		protocol_error(s, &x->res, what);
		goto done;
	}
	if (f->hdr.type == PROTO_CALL) {
		char name[PROTO_TOOL_NAME_MAX + 1];

		/* A call that can only fail is answered from its name alone:
		 * its arguments are never parsed (nor kept). */
		if (proto_call_name(f->payload, f->hdr.len, name) == 0 &&
		    (!find_tool(s, name) || x->res.tool_calls >= s->o.max_tool_calls)) {
			k = refuse_call(s, f->hdr.id, name, &e);
			if (k >= 0)
				return 0;
			snprintf(what, sizeof(what), "answering a tool call: %s", e.msg);
			protocol_error(s, &x->res, what);
			goto done;
		}
	}
	if (f->hdr.type == PROTO_CALL) {
		struct proto_call c;

		/* Judged as the parser would, and passed on as the sandbox's
		 * text: no tree of its arguments (a 16 MiB CALL of small
		 * values was two seconds of jansson and some 270 MiB). */
		if (proto_call_parse(f->payload, f->hdr.len, &c, &e) < 0) {
			protocol_error(s, &x->res, e.msg);
			goto done;
		}
		k = on_call(s, f->hdr.id, f->hdr.len, &c, ev, &e);
		if (k >= 0)
			return k;
		snprintf(what, sizeof(what), "answering a tool call: %s", e.msg);
		protocol_error(s, &x->res, what);
		goto done;
	}
	if (f->hdr.type == PROTO_OUTPUT && f->hdr.id == x->id) {
		/* The runner's own spelling, decoded in place (a jansson tree
		 * per 64 KiB of output cost a third of nsbox python's printing
		 * time); any other goes through the parser below. */
		k = proto_output_decode(f->payload, f->hdr.len, &ev->stream, &ev->data, &ev->len);
		if (k < 0) {
			protocol_error(s, &x->res, "OUTPUT payload is not valid JSON");
			goto done;
		}
		if (k > 0)
			return output_event(s, ev);
	}
	m = x->cur_msg = frame_parse(f, &e);
	if (!m) {
		protocol_error(s, &x->res, e.msg);
		goto done;
	}
	if (f->hdr.type == PROTO_OUTPUT && f->hdr.id == x->id) {
		json_t *d = json_object_get(m, "data");

		ev->stream = !strcmp(json_string_value(json_object_get(m, "stream")), "stdout") ? 1 : 2;
		ev->data = json_string_value(d);
		ev->len = json_string_length(d);
		return output_event(s, ev);
	}
	if (f->hdr.type == PROTO_RESULT && f->hdr.id == x->id) {
		struct session_result *res = &x->res;
		json_t *error = json_object_get(m, "error");
		static const char *const streams[] = { "stdout", "stderr", "stdout_tail", "stderr_tail" };

		/* The runner keeps at most output_limit bytes per stream (head,
		 * marker, tail; each undecodable byte one U+FFFD): a RESULT
		 * claiming more is not from an honest runner. */
		for (size_t i = 0; i < 4; i++) {
			json_t *o = json_object_get(m, streams[i]);
			size_t n = json_is_string(o) ? proto_utf8_chars(json_string_value(o), json_string_length(o))
						     : 0;

			if (o && !json_is_string(o)) {
				snprintf(what, sizeof(what), "RESULT: field %s has the wrong type", streams[i]);
				protocol_error(s, &x->res, what);
				goto done;
			}
			if (n > s->o.output_limit + TRUNC_MARKER_SLACK) {
				snprintf(what, sizeof(what),
					 "RESULT carries %zu characters of %s, over the output limit of %llu bytes", n,
					 streams[i], (unsigned long long)s->o.output_limit);
				protocol_error(s, &x->res, what);
				goto done;
			}
		}
		res->result = TAKE_PTR(x->cur_msg);
		/* A wall-clock limit, tool time included: a RESULT read after the
		 * deadline (the CANCEL already sent, so the step saw it due) is
		 * over it, even if the code finished (a tool that returned late
		 * and the code after it, a swallowed TimeLimitExceeded).  The
		 * session lives: the runner answered. */
		if (x->soft_sent && !x->cancelled && x->soft) {
			result_msg(res, SESSION_TIMEOUT, NSBOX_EXIT_TIMEOUT, "time limit exceeded (%.3g s)",
				   x->timeout);
			goto done;
		}
		if (json_is_object(error)) {
			const char *type = json_string_value(json_object_get(error, "type"));

			if (type && !strcmp(type, "nsbox.TimeLimitExceeded"))
				result_msg(res, SESSION_TIMEOUT, NSBOX_EXIT_TIMEOUT, "time limit exceeded (%.3g s)",
					   x->timeout);
			else if (type && !strcmp(type, "nsbox.Cancelled"))
				result_msg(res, SESSION_CANCELLED, 130, "cancelled");
			else if (type && !strcmp(type, "SystemExit"))
				res->outcome = SESSION_OK,
				res->exit_code = (int)json_integer_value(json_object_get(res->result, "exit_code"));
			else
				result_msg(res, SESSION_EXCEPTION, 1, "%s", type ? type : "exception");
		}
		goto done;
	}
	snprintf(what, sizeof(what), "unexpected %s frame (id %u) during EXEC %u", proto_type_name(f->hdr.type),
		 f->hdr.id, x->id);
	protocol_error(s, &x->res, what);
done:
	exec_done(s);
	ev->kind = SESSION_EV_DONE;
	return 1;
}

/* Arm the session fd's timer to the exec's next deadline. */
static void arm_timer(struct nsbox_session *s, unsigned long long deadline)
{
	struct itimerspec it = { 0 };

	if (s->timer_fd < 0 || s->timer_armed == deadline)
		return;
	it.it_value.tv_sec = (time_t)(deadline / 1000000000ull);
	it.it_value.tv_nsec = (long)(deadline % 1000000000ull);
	if (timerfd_settime(s->timer_fd, TFD_TIMER_ABSTIME, &it, NULL) == 0)
		s->timer_armed = deadline;
}

static int exec_step(struct nsbox_session *s, bool block, struct session_event *ev, struct nsbox_err *err)
{
	struct exec_state *x = &s->x;
	unsigned handled = 0;
	bool try_read;

	memset(ev, 0, sizeof(*ev));
	if (!x->active)
		return err_set(err, EINVAL, "no exec in progress");
	release_frame(s);
	if (x->done) {
		ev->kind = SESSION_EV_DONE;
		return 1;
	}
	if (x->gone) {
		struct pollfd p = { s->sb.pidfd, POLLIN, 0 };
		bool due = now_ns() >= x->gone;

		audit_drain(s);
		if (!due && poll(&p, 1, 0) == 0 && !block)
			return 0;
		/* Ended by itself (its status is read: an OOM kill), or not
		 * in time: killed now. */
		return exec_ends(s, ev, NULL, due);
	}
	if (!block) {
		uint64_t drain;

		/* Level-triggered fds: take what made the session fd readable. */
		if (s->timer_fd >= 0 && s->timer_armed && read(s->timer_fd, &drain, sizeof(drain)) > 0)
			s->timer_armed = 0;
		while (read(s->cancel_fd, &drain, sizeof(drain)) > 0)
			;
	}
	/* The proxy waits while the pipe is full, and the sandbox's network
	 * with it: records are taken whenever the session is driven. */
	audit_drain(s);
	/* Blocking: an answer is never there the moment we ask, so poll first
	 * (one read() less per frame), unless bytes are already buffered. */
	try_read = !block || s->io.rd->buf_start < s->io.rd->buf_end;
	for (;;) {
		unsigned long long deadline = x->soft_sent ? x->hard : x->soft;
		struct nsbox_err e = { 0 };
		struct pollfd p[4];
		bool queued;
		int k;

		if (!x->cancelled && atomic_exchange(&s->cancel_req, false)) {
			on_cancel(s);
			continue;
		}
		if (deadline && now_ns() >= deadline) {
			on_deadline(s);
			if (x->done) {
				ev->kind = SESSION_EV_DONE;
				return 1;
			}
			continue;
		}
		/* What waits for the runner goes first; while it waits no frame
		 * is read (the host answers nothing more to a runner that does
		 * not read), and none of it is waited for here: a runner that
		 * stopped reading held the thread in send() until the deadline,
		 * an event loop's thread too (red team 4). */
		if (frame_queued(&s->io)) {
			k = frame_flush(&s->io, &e);
			if (k < 0 || (k > 0 && !x->soft_sent && frame_stalled(&s->io, now_ns(), &e)))
				return exec_ends(s, ev, e.code == EPIPE || e.code == ECONNRESET ? NULL : e.msg, false);
		}
		queued = frame_queued(&s->io);
		k = try_read && !queued ? proto_reader_read(s->io.rd, s->io.sock, &x->cur_frame, &e) : 0;
		try_read = true;
		if (k == 1) {
			if (on_frame(s, ev))
				return 1;
			release_frame(s);
			/* Frames the library answers itself (a call to a name with
			 * no tool) raise no event: a sandbox sending them without
			 * end kept an event loop's host here, every other session
			 * on that loop starved.  Back to the loop after a batch,
			 * the socket still readable. */
			if (!block && ++handled >= SESSION_STEP_FRAMES)
				return 0;
			continue;
		}
		if (k < 0) {
			if (frame_peer_gone(&s->io, &e) && !block && s->sb.pidfd >= 0) {
				/* proc_finish would wait here for the sandbox to
				 * end by itself (2 s when its code closed the
				 * socket and lives on), on an event loop's thread:
				 * the step comes back when it has, or then. */
				x->gone = now_ns() + REAP_WAIT_NS;
				return 0;
			}
			return exec_ends(s, ev, frame_peer_gone(&s->io, &e) ? NULL : e.msg, false);
		}
		p[0] = (struct pollfd){ s->io.sock, queued ? POLLOUT : POLLIN, 0 };
		p[1] = (struct pollfd){ s->sb.pidfd, POLLIN, 0 };
		p[2] = (struct pollfd){ x->cancelled ? -1 : s->cancel_fd, POLLIN, 0 };
		p[3] = (struct pollfd){ s->audit && !s->audit->eof ? s->audit->fd : -1, POLLIN, 0 };
		if (block) {
			/* Spin briefly before sleeping: a reply often comes within
			 * tens of microseconds, and a cross-CPU wake-up costs about
			 * as much. */
			k = spinwait_poll(&s->io.spin, p, p[3].fd >= 0 ? 4 : 3, next_deadline(s));
		} else {
			k = poll(p, 2, 0);
		}
		if (k < 0) {
			if (errno == EINTR)
				continue;
			err_sys(&e, "poll");
			return exec_ends(s, ev, e.msg, false);
		}
		if (p[1].revents && !(p[0].revents & POLLIN)) {
			/* The sandbox's process ended; its socket may live on in a
			 * forked child, so do not wait for EOF. */
			return exec_ends(s, ev, NULL, false);
		}
		if (block && p[2].revents) {
			uint64_t drain;

			while (read(s->cancel_fd, &drain, sizeof(drain)) > 0)
				;
		}
		if (block && p[3].revents)
			audit_drain(s);
		if (!block && !p[0].revents)
			return 0;
	}
}

int session_exec_step(struct nsbox_session *s, bool block, struct session_event *ev, struct nsbox_err *err)
{
	int r = exec_step(s, block, ev, err);

	if (!block && s->x.active)
		step_pause(s);
	return r;
}

int session_exec_answer(struct nsbox_session *s, uint32_t call_id, json_t *value, const char *error,
			struct nsbox_err *err)
{
	struct exec_state *x = &s->x;
	const char *name;
	json_auto_t *ans = NULL;
	size_t i;

	if (!x->active || x->done)
		return err_set(err, EINVAL, "no exec in progress");
	for (i = 0; i < x->n_pending && x->pending[i].id != call_id; i++)
		;
	if (i == x->n_pending)
		return err_set(err, EINVAL, "no tool call %u is waiting for an answer", call_id);
	name = x->pending[i].tool;
	x->pending_bytes -= x->pending[i].bytes;
	x->pending[i] = x->pending[--x->n_pending];
	/* A cancel asked for while the tool ran (the signal that stopped
	 * it, too) reaches the code before the tool's answer does. */
	if (!x->cancelled && atomic_exchange(&s->cancel_req, false))
		on_cancel(s);
	if (x->soft && now_ns() >= x->soft) {
		/* Past the time limit (a tool that returned late, or an event
		 * loop answering after the deadline): the code is cancelled
		 * first and never sees the late value. */
		if (!x->soft_sent)
			on_deadline(s);
		value = NULL;
		error = "time limit exceeded while the tool ran";
	}
	ans = error ? json_pack("{s:s}", "message", error) : json_pack("{s:O?}", "value", value);
	if (send_answer(s, call_id, name, error ? PROTO_RAISE : PROTO_RETURN, ans, err) < 0) {
		char what[600];

		if (err->code == ENOMEM && !ans)
			return -1;
		if (err->code == EPIPE || err->code == ECONNRESET) {
			end_session(s, &x->res, false);
		} else {
			snprintf(what, sizeof(what), "answering a tool call: %s", err->msg);
			protocol_error(s, &x->res, what);
		}
		exec_done(s);
		wake(s);
		return err_set(err, EPIPE, "the session has ended (%s)", x->res.message);
	}
	step_pause(s);
	return 0;
}

int session_exec_finish(struct nsbox_session *s, struct session_result *res, struct nsbox_err *err)
{
	struct exec_state *x = &s->x;

	if (!x->active)
		return err_set(err, EINVAL, "no exec has ended");
	if (!x->done)
		return err_set(err, EAGAIN, "the exec is still running");
	*res = x->res;
	memset(&x->res, 0, sizeof(x->res));
	exec_clear(x);
	return 0;
}

bool session_exec_active(const struct nsbox_session *s)
{
	return s->x.active;
}

double session_time_left(const struct nsbox_session *s)
{
	const struct exec_state *x = &s->x;
	unsigned long long now;

	if (!x->active || x->done || !x->soft)
		return -1;
	now = now_ns();
	return now >= x->soft ? 0 : (double)(x->soft - now) / 1e9;
}

/* A call to a tool without a callback, from a blocking exec. */
static int call_tool(struct nsbox_session *s, const struct session_event *ev, struct nsbox_err *err)
{
	const struct session_tool *t = ev->tool;
	json_t *value = NULL;
	char *emsg = NULL;
	int r;

	if (!t->fn)
		return session_exec_answer(s, ev->call_id, NULL,
					   "this tool is answered through the event API (nsbox_exec_advance)", err);
	if (t->fn(t->ctx, t->name, ev->call_json, &value, &emsg) < 0)
		r = session_exec_answer(s, ev->call_id, NULL, emsg ? emsg : "the tool failed", err);
	else
		r = session_exec_answer(s, ev->call_id, value, NULL, err);
	free(emsg);
	json_decref(value);
	return r;
}

int session_exec(struct nsbox_session *s, const struct session_exec_req *req, struct session_result *res,
		 struct nsbox_err *err)
{
	struct session_event ev;

	memset(res, 0, sizeof(*res));
	if (session_exec_start(s, req, err) < 0)
		return -1;
	for (;;) {
		struct nsbox_err e = { 0 };

		if (session_exec_step(s, true, &ev, &e) < 0) {
			/* Cannot happen with an exec started; end it cleanly anyway. */
			protocol_error(s, &s->x.res, e.msg);
			exec_done(s);
			break;
		}
		if (ev.kind == SESSION_EV_DONE)
			break;
		if (ev.kind == SESSION_EV_OUTPUT && s->o.output && req->stream)
			s->o.output(s->o.output_ctx, ev.stream, ev.data, ev.len);
		else if (ev.kind == SESSION_EV_CALL)
			call_tool(s, &ev, &e); /* a failed answer ended the exec: the next step says how */
	}
	return session_exec_finish(s, res, err);
}

void session_result_free(struct session_result *res)
{
	if (!res)
		return;
	json_decref(res->result);
	res->result = NULL;
}

int session_fd(struct nsbox_session *s, struct nsbox_err *err)
{
	int fds[3];

	if (s->epoll_fd >= 0)
		return s->epoll_fd;
	s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (s->timer_fd < 0)
		return err_sys(err, "timerfd_create");
	s->timer_armed = 0;
	s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (s->epoll_fd < 0)
		return err_sys(err, "epoll_create1");
	fds[0] = s->io.sock;
	fds[1] = s->cancel_fd;
	fds[2] = s->timer_fd;
	for (size_t i = 0; i < 5; i++) {
		int fd = i < 3 ? fds[i] : i == 3 ? s->sb.pidfd : s->audit && !s->audit->eof ? s->audit->fd : -1;
		struct epoll_event e = { .events = EPOLLIN, .data.fd = fd };

		if (i == 0 && frame_queued(&s->io))
			e.events = EPOLLOUT;
		if (fd >= 0 && epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &e) < 0) {
			err_sys(err, "epoll_ctl");
			close(s->epoll_fd);
			s->epoll_fd = -1;
			return -1;
		}
	}
	s->sock_events = frame_queued(&s->io) ? EPOLLOUT : EPOLLIN;
	/* An exec already running: its deadline counts from now on. */
	if (s->x.active && !s->x.done)
		arm_timer(s, next_deadline(s));
	return s->epoll_fd;
}

/* ---- control requests: one request, one answer ---- */

/* Whether a cancel was asked for since the last look; the eventfd is
 * emptied then, or always with woken (it woke a wait: for an earlier
 * cancel, taken by a flag alone, it stays readable).  Emptied before the
 * flag is taken, so that a cancel coming in between leaves both set (its
 * wake-up is not lost).  No read() when there was none: this is on every
 * control request's round trip. */
static bool cancel_take(struct nsbox_session *s, bool woken)
{
	uint64_t drain;

	if (!woken && !atomic_load(&s->cancel_req))
		return false;
	while (read(s->cancel_fd, &drain, sizeof(drain)) > 0)
		;
	return atomic_exchange(&s->cancel_req, false);
}

/* One request and its answer.  sdata (NULL: none) goes as the request's
 * raw data (PROTO_FLAG_DATA); rbuf (NULL: none may come) receives the
 * answer's, at most rcap bytes (more is a protocol error), *rlen its size. */
static int control_data(struct nsbox_session *s, uint16_t type, json_t *msg, const void *sdata, size_t sdlen,
			int pass_fd, uint16_t want, json_t **answer, void *rbuf, size_t rcap, size_t *rlen,
			struct nsbox_err *err)
{
	unsigned long long deadline = now_ns() + (unsigned long long)(s->o.control_timeout * 1e9);
	bool op_bound = s->op_deadline && s->op_deadline < deadline;
	json_auto_t *owned = msg;
	struct session_result res = { 0 };
	_cleanup_frame_ struct proto_frame f = { 0 };
	const char *data = NULL;
	size_t jlen, dlen = 0;
	uint32_t id;
	json_t *m;
	int k;

	if (s->x.active)
		return err_set(err, EBUSY, "an exec is in progress");
	if (s->dead)
		return err_set(err, EPIPE, "the session has ended");
	if (!msg)
		return err_set(err, ENOMEM, "%s message", proto_type_name(type));
	if (op_bound)
		deadline = s->op_deadline;
	/* A cancel asked for before this request is not for it (within an
	 * API call of several requests: before the call, session_call_begin). */
	if (!s->in_call)
		cancel_take(s, false);
	id = s->next_id++;
	/* The send watches the cancel too (a runner that stops reading holds
	 * it up to the deadline otherwise). */
	s->io.cancel_fd = s->cancel_fd;
	s->io.cancel_req = &s->cancel_req;
	if (sdata || pass_fd >= 0) {
		_cleanup_free_ char *buf = NULL;
		size_t len;

		if ((sdata ? proto_encode_data(type, id, msg, sdata, sdlen, s->io.max_frame, &buf, &len, err)
			   : proto_encode(type, id, msg, s->io.max_frame, &buf, &len, err)) < 0) {
			s->io.cancel_req = NULL;
			return -1;
		}
		k = frame_send_buf_fd(&s->io, type, buf, len, pass_fd, deadline, err);
	} else {
		k = frame_send_msg(&s->io, type, id, msg, deadline, err);
	}
	s->io.cancel_req = NULL;
	if (k < 0) {
		if (err->code == EMSGSIZE)
			return -1;
		if (err->code == ECANCELED) {
			end_session(s, &res, true);
			return err_fail(err, NULL, ECANCELED, "%s: cancelled (nsbox_cancel) while sending; session ended",
					s->op_deadline ? s->op_what : proto_type_name(type));
		}
		/* Nothing was sent (the descriptor goes with the first bytes):
		 * the host's user has more descriptors in flight over unix
		 * sockets than this process's RLIMIT_NOFILE, a count the
		 * kernel keeps per user, which a sandbox of the same user can
		 * fill.  This call fails; the session is intact. */
		if (err->code == ETOOMANYREFS)
			return err_set(err, ETOOMANYREFS,
				       "%s: the host could not pass a descriptor: its user has too many in flight over unix "
				       "sockets (a sandbox of the same user can hold them; raise this process's RLIMIT_NOFILE)",
				       proto_type_name(type));
		end_session(s, &res, true);
		return err_wrap(err, "session ended");
	}
	/* nsbox_cancel ends the wait: the runner answers a request only when
	 * done with it, so the session ends (as at a control timeout), and
	 * close() from another thread need not wait out a sandbox that holds
	 * its answers back (up to the control timeout each). */
	while ((k = frame_wait(&s->io, s->sb.pidfd, s->cancel_fd, deadline, &f, err)) == W_CANCEL)
		if (cancel_take(s, true)) {
			end_session(s, &res, true);
			return err_fail(err, NULL, ECANCELED, "%s: cancelled (nsbox_cancel); session ended",
					s->op_deadline ? s->op_what : proto_type_name(type));
		}
	if (k == W_TIMEOUT) {
		end_session(s, &res, true);
		if (op_bound)
			return err_set(err, ETIMEDOUT, "%s: not done within %.0f s in all; session ended", s->op_what,
				       s->op_seconds);
		return err_set(err, 0, "the runner did not answer %s within %.0f s; session ended",
			       proto_type_name(type), s->o.control_timeout);
	}
	if (k == W_DEAD) {
		end_session(s, &res, false);
		return err_set(err, 0, "%s", res.message);
	}
	if (k != W_FRAME) {
		protocol_error(s, &res, err->msg);
		return err_set(err, 0, "%s", res.message);
	}
	m = frame_parse(&f, err);
	if (m && proto_frame_parts(&f, &jlen, &data, &dlen, err) < 0) {
		json_decref(m);
		m = NULL;
	}
	if (!m || f.hdr.id != id || f.hdr.type != want || (data && (!rbuf || dlen > rcap))) {
		char what[600];

		snprintf(what, sizeof(what), "%s", m ? "unexpected answer" : err->msg);
		if (m && data && f.hdr.id == id && f.hdr.type == want)
			snprintf(what, sizeof(what), "%zu bytes of data in answer to %s %u, %s", dlen,
				 proto_type_name(type), id, rbuf ? "more than asked for" : "which asked for none");
		else if (m)
			snprintf(what, sizeof(what), "unexpected %s frame (id %u) in answer to %s %u",
				 proto_type_name(f.hdr.type), f.hdr.id, proto_type_name(type), id);
		json_decref(m);
		protocol_error(s, &res, what);
		return err_set(err, 0, "%s", res.message);
	}
	if (rbuf && dlen)
		memcpy(rbuf, data, dlen);
	if (rlen)
		*rlen = data ? dlen : 0;
	*answer = m;
	return 0;
}

static int control(struct nsbox_session *s, uint16_t type, json_t *msg, uint16_t want, json_t **answer,
		   struct nsbox_err *err)
{
	return control_data(s, type, msg, NULL, 0, -1, want, answer, NULL, 0, NULL, err);
}

/* A SET_VAR or GET_VAR error: the exception's type and message are the
 * sandbox's text, quoted inert (proto_text_inert) in the host's message. */
static int var_error(const json_t *e, int code, struct nsbox_err *err)
{
	const char *type = json_string_value(json_object_get(e, "type"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	char qt[256], qm[1024];

	return err_set(err, code, "%s: %s", type ? proto_text_inert(type, qt, sizeof(qt)) : "(null)",
		       msg ? proto_text_inert(msg, qm, sizeof(qm)) : "(null)");
}

int session_set_var(struct nsbox_session *s, const char *name, json_t *value, struct nsbox_err *err)
{
	json_t *a = NULL, *e;
	int r = control(s, PROTO_SET_VAR, json_pack("{s:s,s:O?}", "name", name, "value", value), PROTO_VALUE, &a, err);

	if (r < 0)
		return r;
	e = json_object_get(a, "error");
	if (json_is_object(e))
		r = var_error(e, EINVAL, err);
	json_decref(a);
	return r;
}

int session_get_var(struct nsbox_session *s, const char *name, json_t **value, struct nsbox_err *err)
{
	json_t *a = NULL, *e;
	int r = control(s, PROTO_GET_VAR, json_pack("{s:s}", "name", name), PROTO_VALUE, &a, err);

	if (r < 0)
		return r;
	e = json_object_get(a, "error");
	if (json_is_object(e)) {
		const char *type = json_string_value(json_object_get(e, "type"));

		r = var_error(e, type && !strcmp(type, "NameError") ? ENOENT : EINVAL, err);
	} else {
		json_t *v = json_object_get(a, "value");

		*value = v ? json_incref(v) : json_null();
	}
	json_decref(a);
	return r;
}

int session_reset(struct nsbox_session *s, struct nsbox_err *err)
{
	json_t *a = NULL;
	int r = control(s, PROTO_RESET, json_object(), PROTO_VALUE, &a, err);

	json_decref(a);
	return r;
}

int session_ping(struct nsbox_session *s, double *rtt, struct nsbox_err *err)
{
	json_t *a = NULL;
	unsigned long long t0 = now_ns();
	int r = control(s, PROTO_PING, json_object(), PROTO_PONG, &a, err);

	json_decref(a);
	if (r == 0 && rtt)
		*rtt = (double)(now_ns() - t0) / 1e9;
	return r;
}

void session_cancel(struct nsbox_session *s)
{
	int saved = errno;
	uint64_t one = 1;

	/* Async-signal-safe: an atomic flag and a write to an eventfd. */
	atomic_store(&s->cancel_req, true);
	if (write(s->cancel_fd, &one, sizeof(one)) < 0) {
		/* Counter full: a wake-up is already pending. */
	}
	errno = saved;
}

bool session_alive(const struct nsbox_session *s)
{
	return s && !s->dead;
}

const json_t *session_hello(const struct nsbox_session *s)
{
	return s->hello;
}

void session_close(struct nsbox_session *s, struct jail_status *st)
{
	bool big;

	if (!s)
		return;
	s->sb.closing = true; /* a bounded workspace is written back now */
	/* Empty the pipe first: the records of the tunnels the sandbox's end
	 * closes are written while we stop it, and must fit. */
	audit_drain(s);
	if (!s->dead && s->x.active && !s->x.done) {
		/* An exec still running: the runner would not read a BYE. */
		s->dead = true;
		proc_finish(s, true);
	}
	if (!s->dead) {
		unsigned long long deadline = now_ns() + 1000000000ull;
		json_auto_t *m = json_object();
		struct nsbox_err e;

		bool answered = false;

		/* Orderly BYE.  A runner that answers it (or is gone already)
		 * gets REAP_WAIT_NS to finish its exit; one that does not within
		 * the second is killed at once: it is busy, or not a runner (a
		 * forged RESULT ended the host's exec while its code ran on). */
		if (m && frame_send_msg(&s->io, PROTO_BYE, s->next_id++, m, deadline, &e) == 0) {
			for (;;) {
				_cleanup_frame_ struct proto_frame f = { 0 };
				int w = frame_wait(&s->io, s->sb.pidfd, -1, deadline, &f, &e);

				if (w != W_FRAME || f.hdr.type == PROTO_BYE) {
					answered = w == W_FRAME || w == W_DEAD;
					break;
				}
			}
		}
		s->dead = true;
		proc_finish(s, !answered);
	}
	if (!s->sb.reaped)
		proc_finish(s, true);
	if (s->sb.priv)
		s->sb.ops->destroy(&s->sb);
	audit_finish(s);
	if (st)
		*st = s->sb.st;
	big = s->big;
	session_free(s);
	if (big)
		malloc_trim(0);
}

int session_add_tool(struct nsbox_session *s, const struct session_tool *t, struct nsbox_err *err)
{
	struct session_tool *n;
	json_t *a = NULL, *list;
	int r;

	if (check_tool_name(t ? t->name : NULL, err) < 0)
		return -1;
	if (t->schema && !json_is_object(t->schema))
		return err_set(err, EINVAL, "tool %s: the schema is not a JSON object", t->name);
	if (find_tool(s, t->name))
		return err_set(err, EEXIST, "tool %s is already registered", t->name);
	if (clashes(s, t->name))
		return err_set(err, EEXIST, "tool %s: its name and a registered tool's would share the global %.*s",
			       t->name, (int)strcspn(t->name, "."), t->name);
	if (s->dead)
		return err_set(err, EPIPE, "the session has ended");
	if (s->x.active)
		return err_set(err, EBUSY, "an exec is in progress");
	n = realloc(s->tools, (s->o.n_tools + 1) * sizeof(*n));
	if (!n)
		return err_set(err, ENOMEM, "tool %s", t->name);
	s->tools = n;
	s->o.tools = n;
	n[s->o.n_tools++] = *t;
	/* The new tool alone: the runner keeps those it has.  The whole list,
	 * sent for each tool, made the tools one by one again each time: a
	 * session of nsbox mcp with 256 code-mode tools took 4.7 s to start. */
	list = tools_json(s, s->o.n_tools - 1);
	if (!list) {
		s->o.n_tools--;
		return err_set(err, ENOMEM, "TOOLS message");
	}
	r = control(s, PROTO_TOOLS, json_pack("{s:o}", "tools", list), PROTO_VALUE, &a, err);
	json_decref(a);
	if (r < 0) {
		s->o.n_tools--;
		return err_wrap(err, "tool %s", t->name);
	}
	return 0;
}

void session_abandon(struct nsbox_session *s)
{
	if (!s)
		return;
	/* Another process's sandbox: close our copies, talk to nobody. */
	if (s->sb.priv)
		s->sb.ops->abandon(&s->sb);
	free(s->sb.priv);
	s->sb.priv = NULL;
	s->dead = s->sb.reaped = true;
	session_free(s);
}

int session_sandbox(const struct nsbox_session *s, struct session_sandbox_info *info, struct nsbox_err *err)
{
	memset(info, 0, sizeof(*info));
	info->alive = !s->dead;
	if (s->sb.priv && s->sb.ops->info(&s->sb, info, err) < 0)
		return -1;
	if (s->sb.reaped)
		info->memory_peak = s->sb.st.peak_memory;
	return 0;
}

/* ---- handoff: the runner socket leaves, the lifecycle stays (nsboxd) ---- */

int session_handoff(struct nsbox_session *s, int *sock, int *pidfd, struct nsbox_err *err)
{
	int fd, pfd;

	if (s->dead || s->io.sock < 0)
		return err_set(err, EPIPE, "the session has ended");
	if (s->x.active)
		return err_set(err, EBUSY, "an exec is in progress");
	if (s->io.rd->buf_start < s->io.rd->buf_end || s->io.rd->hdr_have)
		return err_set(err, EBUSY, "the runner socket has unread bytes");
	if (frame_queued(&s->io))
		return err_set(err, EBUSY, "the runner has not taken all that was sent to it");
	pfd = s->sb.pidfd >= 0 ? fcntl(s->sb.pidfd, F_DUPFD_CLOEXEC, 3) : -1;
	if (pfd < 0)
		return err_sys(err, "dup the sandbox's pidfd");
	/* Blocking again, as a fresh socketpair end would be. */
	fd = s->io.sock;
	if (fcntl(fd, F_SETFL, 0) < 0) {
		close(pfd);
		return err_sys(err, "fcntl");
	}
	s->io.sock = -1;
	/* No more requests from here: session_close() kills without a BYE. */
	s->dead = true;
	*sock = fd;
	*pidfd = pfd;
	return 0;
}

void session_kill(struct nsbox_session *s)
{
	if (s && s->sb.priv && !s->sb.reaped)
		s->sb.ops->kill(&s->sb);
}

void session_finish(struct nsbox_session *s, bool kill_now, struct jail_status *st)
{
	s->dead = true;
	s->sb.closing = true;
	audit_drain(s);
	if (!s->sb.reaped)
		proc_finish(s, kill_now);
	if (s->sb.priv)
		s->sb.ops->destroy(&s->sb);
	audit_finish(s);
	if (st)
		*st = s->sb.st;
}

/* ---- for host/files.c (FILE_* requests): additive, see host/files.h ---- */

#include "files.h"

double session_control_timeout(const struct nsbox_session *s)
{
	return s->o.control_timeout;
}

void session_call_begin(struct nsbox_session *s)
{
	cancel_take(s, false);
	s->in_call = true;
}

void session_call_end(struct nsbox_session *s)
{
	s->in_call = false;
}

void session_op_deadline(struct nsbox_session *s, double seconds, const char *what)
{
	s->op_deadline = seconds > 0 ? now_ns() + (unsigned long long)(seconds * 1e9) : 0;
	s->op_seconds = seconds;
	s->op_what = what;
}

int session_request(struct nsbox_session *s, uint16_t type, json_t *msg, json_t **answer, struct nsbox_err *err)
{
	return control(s, type, msg, PROTO_VALUE, answer, err);
}

int session_request_data(struct nsbox_session *s, uint16_t type, json_t *msg, const void *data, size_t dlen,
			 json_t **answer, void *rbuf, size_t rcap, size_t *rlen, struct nsbox_err *err)
{
	return control_data(s, type, msg, data, dlen, -1, PROTO_VALUE, answer, rbuf, rcap, rlen, err);
}

int session_request_fd(struct nsbox_session *s, uint16_t type, json_t *msg, int fd, json_t **answer,
		       struct nsbox_err *err)
{
	return control_data(s, type, msg, NULL, 0, fd, PROTO_VALUE, answer, NULL, 0, NULL, err);
}

uint32_t session_max_frame(const struct nsbox_session *s)
{
	return s->o.max_frame;
}
