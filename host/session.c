/* Host side of the runner protocol.  Everything the runner sends is
 * hostile input: each frame is size-checked before allocation
 * (proto_reader), parsed and schema-checked (proto_msg_parse), matched
 * against what we are waiting for, and counted against per-exec caps.  Every
 * wait has a deadline and watches the sandbox's pidfd, so a runner that
 * stops answering, floods, or dies never hangs the host. */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "helper.h"
#include "locate.h"
#include "proto.h"
#include "util.h"

#define DEF_OUTPUT (1u << 20)
#define DEF_TOOL_CALLS 1000
#define DEF_MAX_BYTES (256ull << 20)
#define DEF_CONTROL 30.0
#define REAP_WAIT_NS 2000000000ull

struct nsbox_session {
	struct session_opts o;
	struct session_tool *tools;
	int sock;
	int cancel_pipe[2];
	atomic_bool cancel_req;
	struct proto_reader *rd;
	bool jailed;
	struct jail j;
	bool remote;		/* made by libnsbox's helper process (helper/helper.h) */
	struct helper_sandbox hs;
	pid_t pid;		/* unjailed child */
	int pidfd;		/* unjailed child's pidfd; jailed: j.pidfd */
	bool reaped;
	struct jail_status st;
	bool dead;
	uint32_t next_id;
	json_t *hello;
	unsigned spin_skip, spin_backoff;	/* spin_poll() */
};

/* ---- process control ---- */

static void proc_kill(struct nsbox_session *s)
{
	if (s->remote) {
		if (!s->reaped)
			helper_kill(&s->hs);
	} else if (s->jailed) {
		jail_kill(&s->j);
	} else if (s->pid > 0 && !s->reaped) {
		if (s->pidfd < 0 || syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0) < 0)
			kill(s->pid, SIGKILL);
	}
}

static void fill_unjailed_status(struct nsbox_session *s, int wst)
{
	memset(&s->st, 0, sizeof(s->st));
	s->st.exited = WIFEXITED(wst);
	s->st.exit_code = WIFEXITED(wst) ? WEXITSTATUS(wst) : 0;
	s->st.term_signal = WIFSIGNALED(wst) ? WTERMSIG(wst) : 0;
}

/* Reap without blocking: 1 reaped (s->st filled), 0 still running. */
static int proc_try_reap(struct nsbox_session *s)
{
	if (s->reaped)
		return 1;
	if (s->remote) {
		struct pollfd p = { s->hs.pidfd, POLLIN, 0 };
		struct nsbox_err e;

		/* pid 1 ended: the helper reaps it and reads the accounting. */
		if (s->hs.pidfd < 0 || poll(&p, 1, 0) == 1) {
			(void)helper_destroy(&s->hs, &s->st, &e);
			s->pidfd = -1;
			s->reaped = true;
		}
	} else if (s->jailed) {
		struct nsbox_err e;

		if (jail_try_reap(&s->j, &e) != 0) {
			s->st = s->j.status;
			s->reaped = true;
		}
	} else {
		int wst;
		pid_t r = waitpid(s->pid, &wst, WNOHANG);

		if (r == s->pid || (r < 0 && errno == ECHILD)) {
			if (r == s->pid)
				fill_unjailed_status(s, wst);
			s->reaped = true;
		}
	}
	return s->reaped;
}

/* Wait up to REAP_WAIT_NS for the process to end by itself (the OOM
 * killer's status must be read, not replaced by ours), then kill and reap. */
static void proc_finish(struct nsbox_session *s, bool kill_now)
{
	unsigned long long end = now_ns() + (kill_now ? 0 : REAP_WAIT_NS);

	while (!proc_try_reap(s)) {
		if (now_ns() >= end) {
			proc_kill(s);
			if (s->remote) {
				struct nsbox_err e;

				(void)helper_destroy(&s->hs, &s->st, &e);
				s->pidfd = -1;
				s->reaped = true;
			} else if (s->jailed) {
				jail_destroy(&s->j);
				s->st = s->j.status;
				s->reaped = true;
				s->pidfd = -1;
			} else {
				int wst;

				if (waitpid(s->pid, &wst, 0) == s->pid)
					fill_unjailed_status(s, wst);
				s->reaped = true;
			}
			break;
		}
		{
			struct pollfd p = { s->pidfd, POLLIN, 0 };

			poll(&p, s->pidfd >= 0 ? 1 : 0, 20);
		}
	}
}

static void set_dead(struct nsbox_session *s)
{
	s->dead = true;
}

/* ---- frames ---- */

static int remaining_ms(unsigned long long deadline)
{
	unsigned long long now = now_ns();

	if (!deadline)
		return -1;
	if (now >= deadline)
		return 0;
	if ((deadline - now) / 1000000 > INT_MAX - 1)
		return INT_MAX;
	return (int)((deadline - now + 999999) / 1000000);
}

/* Send one whole frame (header and payload in buf: one send() when the
 * socket has room), polling so that a runner that stops reading cannot
 * block us past the deadline. */
static int send_buf(struct nsbox_session *s, uint16_t type, const char *buf, size_t len, unsigned long long deadline,
		    struct nsbox_err *err)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(s->sock, buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n >= 0) {
			done += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return err_sys(err, "send %s", proto_type_name(type));
		{
			struct pollfd p = { s->sock, POLLOUT, 0 };
			int k = poll(&p, 1, remaining_ms(deadline));

			if (k == 0)
				return err_set(err, ETIMEDOUT, "the runner stopped reading (sending %s)",
					       proto_type_name(type));
			if (k < 0 && errno != EINTR)
				return err_sys(err, "poll");
		}
	}
	return 0;
}

static int send_msg(struct nsbox_session *s, uint16_t type, uint32_t id, const json_t *msg,
		    unsigned long long deadline, struct nsbox_err *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;

	if (proto_encode(type, id, msg, s->o.max_frame, &buf, &len, err) < 0)
		return -1;
	return send_buf(s, type, buf, len, deadline, err);
}

/* ---- the EXEC frame, written directly ----
 * The one message sent per exec, built with proto_buf instead of a
 * jansson tree and dump (a few microseconds of the round trip).  What it
 * writes is what proto_encode() of the same object would, less key order
 * and escape spelling. */

/* The EXEC frame for req (header included) in a malloc'd *out. */
static int exec_frame(const struct session_exec_req *req, uint32_t id, double timeout, uint32_t max_frame, char **out,
		      size_t *out_len, struct nsbox_err *err)
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
	proto_buf_puts(&b, req->display ? ",\"display\":true" : ",\"display\":false");
	proto_buf_puts(&b, req->check_complete ? ",\"check_complete\":true" : ",\"check_complete\":false");
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

enum wait_res {
	W_FRAME = 1,
	W_TIMEOUT = 0,
	W_ERROR = -1,	/* protocol error or I/O error: err set */
	W_DEAD = -2,	/* the runner ended (EOF or process exit) */
	W_CANCEL = -3,	/* session_cancel() was called */
};

/* Poll without sleeping for up to SPIN_US microseconds (with more than one
 * CPU): a reply often comes within tens of microseconds, and a cross-CPU
 * wake-up costs about as much.  Only while spinning pays: when the runner
 * shares our CPU (the scheduler puts the two ends of a socket together), a
 * spin keeps it from running and every round trip pays the whole spin;
 * when it is slow to answer, the spin is wasted.  After a spin that found
 * nothing, sleep at once for the next 1, 2, 4 ... 256 waits. */
#define SPIN_US 60
#define SPIN_BACKOFF_MAX 256
static int spin_poll(struct nsbox_session *s, struct pollfd *p, nfds_t n)
{
	static int ncpu;
	unsigned long long t0;
	int k;

	if (!ncpu)
		ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 2 || s->spin_skip) {
		s->spin_skip -= s->spin_skip > 0;
		return 0;
	}
	t0 = now_ns();
	do {
		k = poll(p, n, 0);
		if (k != 0) {
			s->spin_backoff = 0;
			return k;
		}
	} while (now_ns() - t0 < SPIN_US * 1000ULL);
	s->spin_backoff = s->spin_backoff ? (s->spin_backoff < SPIN_BACKOFF_MAX ? 2 * s->spin_backoff
										: s->spin_backoff)
					  : 1;
	s->spin_skip = s->spin_backoff;
	return 0;
}

static int wait_frame(struct nsbox_session *s, unsigned long long deadline, bool watch_cancel,
		      struct proto_frame *f, struct nsbox_err *err)
{
	/* An answer is never there the moment we ask: poll first (one
	 * read() less per frame), unless bytes are already buffered. */
	bool try_read = s->rd->buf_start < s->rd->buf_end;

	for (;;) {
		struct pollfd p[3] = {
			{ s->sock, POLLIN, 0 },
			{ s->pidfd, POLLIN, 0 },
			{ watch_cancel ? s->cancel_pipe[0] : -1, POLLIN, 0 },
		};
		int k = try_read ? proto_reader_read(s->rd, s->sock, f, err) : 0;

		try_read = true;
		if (k == 1)
			return W_FRAME;
		if (k < 0) {
			/* ECONNRESET: the runner died with our frame unread. */
			if ((s->rd->eof && err->code == EPIPE) || err->code == ECONNRESET)
				return W_DEAD;
			return W_ERROR;
		}
		if (watch_cancel && atomic_exchange(&s->cancel_req, false)) {
			char c[64];

			while (read(s->cancel_pipe[0], c, sizeof(c)) > 0)
				;
			return W_CANCEL;
		}
		/* Spin briefly before sleeping: a reply often comes within tens
		 * of microseconds, and a cross-CPU wake-up costs about as much. */
		k = spin_poll(s, p, 3);
		if (k == 0)
			k = poll(p, 3, remaining_ms(deadline));
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return err_sys(err, "poll"), W_ERROR;
		}
		if (k == 0)
			return W_TIMEOUT;
		if (p[1].revents && !(p[0].revents & POLLIN)) {
			/* The sandbox's process ended; its socket may live on in a
			 * forked child, so do not wait for EOF. */
			return W_DEAD;
		}
	}
}

static json_t *parse_frame(struct proto_frame *f, struct nsbox_err *err)
{
	json_t *m = NULL;

	if (proto_msg_parse(f, PROTO_TO_HOST, &m, err) < 0)
		return NULL;
	return m;
}

/* ---- start ---- */

static int start_unjailed(struct nsbox_session *s, int mfd, int csock, char *const argv[], struct nsbox_err *err)
{
	pid_t pid = fork();

	if (pid < 0)
		return err_sys(err, "fork");
	if (pid == 0) {
		char *envp[] = { NULL };
		int keep[1];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		mfd = fcntl(mfd, F_DUPFD_CLOEXEC, 10);
		if (mfd < 0 || dup2(csock, 3) < 0)
			_exit(125);
		keep[0] = mfd;
		close_fds_except(4, keep, 1);
		syscall(SYS_execveat, mfd, "", argv, envp, AT_EMPTY_PATH);
		_exit(127);
	}
	s->pid = pid;
	s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (s->pidfd < 0) {
		err_sys(err, "pidfd_open");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		s->reaped = true;
		return -1;
	}
	return 0;
}

static json_t *tools_json(const struct nsbox_session *s)
{
	json_t *tools = json_array();

	for (size_t i = 0; tools && i < s->o.n_tools; i++) {
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
	json_t *tools = tools_json(s);
	json_t *m;

	if (!tools)
		return NULL;
	m = json_pack("{s:i,s:[sss],s:o,s:{s:I,s:I}}", "version", NSBOX_PROTO_VERSION, "capabilities", "exec", "tools",
		      "cancel", "tools", tools, "limits", "output", (json_int_t)s->o.output_limit, "max_frame",
		      (json_int_t)s->o.max_frame);
	if (m && s->o.stream_all &&
	    json_object_set_new(json_object_get(m, "limits"), "stream_all", json_true()) < 0) {
		json_decref(m);
		return NULL;
	}
	if (m && s->o.argv && json_object_set_new(m, "argv", argv_json(s->o.argv)) < 0) {
		json_decref(m);
		return NULL;
	}
	return m;
}

static bool valid_identifier(const char *n)
{
	return proto_is_identifier(n) && strlen(n) <= PROTO_TOOL_NAME_MAX;
}

static void session_free(struct nsbox_session *s)
{
	if (!s)
		return;
	if (s->sock >= 0)
		close(s->sock);
	if (s->cancel_pipe[0] >= 0)
		close(s->cancel_pipe[0]);
	if (s->cancel_pipe[1] >= 0)
		close(s->cancel_pipe[1]);
	if (s->remote && !s->reaped) {
		struct nsbox_err e;

		(void)helper_destroy(&s->hs, NULL, &e);
	} else if (s->remote && s->hs.pidfd >= 0) {
		close(s->hs.pidfd);
	} else if (!s->remote && !s->jailed && s->pidfd >= 0) {
		close(s->pidfd);
	}
	if (s->rd) {
		proto_reader_free(s->rd);
		free(s->rd);
	}
	json_decref(s->hello);
	free(s->tools);
	free(s);
}

int session_start(struct nsbox_session **out, const struct session_opts *opts, struct nsbox_err *err)
{
	struct nsbox_session *s;
	char path[PATH_MAX] = "nsbox-runner";
	_cleanup_close_ int mfd = -1;
	int sv[2];
	char *argv[5] = { "nsbox-runner", NULL, NULL, NULL, NULL };
	int argc = 1;
	struct proto_frame f = { 0 };
	unsigned long long deadline;
	json_t *m;
	int k;

	if (!opts || !opts->policy)
		return err_set(err, EINVAL, "session: no policy");
	for (size_t i = 0; i < opts->n_tools; i++)
		if (!valid_identifier(opts->tools[i].name) || !opts->tools[i].fn)
			return err_set(err, EINVAL, "tool name '%s' is not a Python identifier",
				       opts->tools[i].name ? opts->tools[i].name : "");
	s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(err, ENOMEM, "session");
	s->sock = s->cancel_pipe[0] = s->cancel_pipe[1] = s->pidfd = s->hs.pidfd = -1;
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
	s->tools = calloc(opts->n_tools ? opts->n_tools : 1, sizeof(*s->tools));
	s->rd = malloc(sizeof(*s->rd));
	if (!s->tools || !s->rd) {
		session_free(s);
		return err_set(err, ENOMEM, "session");
	}
	if (opts->n_tools)
		memcpy(s->tools, opts->tools, opts->n_tools * sizeof(*s->tools));
	s->o.tools = s->tools;
	proto_reader_init(s->rd, s->o.max_frame);

	if (pipe2(s->cancel_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		err_sys(err, "pipe2");
		session_free(s);
		return -1;
	}
	if (!opts->use_helper &&
	    (s->o.runner_path ? (snprintf(path, sizeof(path), "%s", s->o.runner_path), 0)
			      : runner_locate(path, sizeof(path), err)) < 0) {
		session_free(s);
		return -1;
	}
	/* argv[0] names the file (tests pick an evil runner's mode by it). */
	argv[0] = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (opts->policy->dist_packages)
		argv[argc++] = "--dist-packages";
	if (opts->pass_stdin && !opts->use_helper && isatty(0) != 1)
		argv[argc++] = "--stdin";
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		err_sys(err, "socketpair");
		session_free(s);
		return -1;
	}
	if (opts->use_helper) {
		int spare_sock = -1;

		struct helper_spawn_opts ho = { .cold = opts->cold, .spare = opts->spare, .warn = opts->warn,
						.warn_ctx = opts->warn_ctx };

		k = helper_spawn(opts->policy, sv[1], &ho, &s->hs, &spare_sock, err);
		if (k == 0) {
			s->remote = true;
			s->pidfd = s->hs.pidfd;
			/* A spare sandbox, made before we asked: its socket is ours. */
			if (spare_sock >= 0) {
				close(sv[0]);
				sv[0] = spare_sock;
			}
		}
	} else if (opts->unjailed) {
		mfd = runner_sealed_copy(path, err);
		k = mfd < 0 ? -1 : start_unjailed(s, mfd, sv[1], argv, err);
	} else {
		/* Bound read-only into the sandbox and run from there. */
		struct jail_spec spec = {
			.policy = opts->policy,
			.argv = argv,
			.exec_fd = -1,
			.exec_file = path,
			.pass_fds = &sv[1],
			.n_pass_fds = 1,
			.warn = opts->warn,
			.warn_ctx = opts->warn_ctx,
		};

		k = jail_start(&s->j, &spec, err);
		if (k == 0) {
			s->jailed = true;
			s->pidfd = s->j.pidfd;
		}
	}
	close(sv[1]);
	s->sock = sv[0];
	if (k < 0) {
		session_free(s);
		return -1;
	}
	if (fcntl(s->sock, F_SETFL, O_NONBLOCK) < 0) {
		err_sys(err, "fcntl");
		goto fail;
	}

	/* Handshake: our HELLO (tools, limits), then the runner's. */
	deadline = now_ns() + (unsigned long long)(s->o.control_timeout * 1e9);
	m = hello_msg(s);
	s->o.argv = NULL;	/* borrowed for the HELLO only */
	if (!m) {
		err_set(err, ENOMEM, "HELLO");
		goto fail;
	}
	k = send_msg(s, PROTO_HELLO, 0, m, deadline, err);
	json_decref(m);
	if (k < 0)
		goto fail;
	k = wait_frame(s, deadline, false, &f, err);
	if (k == W_TIMEOUT) {
		err_set(err, ETIMEDOUT, "the runner did not answer the handshake within %.0f s", s->o.control_timeout);
		goto fail;
	}
	if (k == W_DEAD) {
		proc_finish(s, false);
		if (s->st.exited)
			err_set(err, 0, "the runner exited with status %d before the handshake%s", s->st.exit_code,
				s->st.exit_code == 127 ? " (could not execute it)" : "");
		else
			err_set(err, 0, "the runner was killed by signal %d before the handshake", s->st.term_signal);
		goto fail;
	}
	if (k != W_FRAME)
		goto fail;
	m = parse_frame(&f, err);
	if (m && f.hdr.type == PROTO_ERROR) {
		err_set(err, 0, "the runner failed to start: %s", json_string_value(json_object_get(m, "message")));
		json_decref(m);
		m = NULL;
	} else if (m && (f.hdr.type != PROTO_HELLO ||
			 json_integer_value(json_object_get(m, "version")) != NSBOX_PROTO_VERSION)) {
		err_set(err, EPROTO, "the runner answered %s (protocol version %lld), expected HELLO version %d",
			proto_type_name(f.hdr.type), (long long)json_integer_value(json_object_get(m, "version")),
			NSBOX_PROTO_VERSION);
		json_decref(m);
		m = NULL;
	}
	proto_frame_free(&f);
	if (!m)
		goto fail;
	s->hello = m;
	s->next_id = 1;
	*out = s;
	return 0;
fail:
	proto_frame_free(&f);
	proc_finish(s, true);
	if (s->jailed)
		jail_destroy(&s->j);
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
	set_dead(s);
	proc_finish(s, kill_now);
	res->dead = true;
	res->peak_memory = s->st.peak_memory;
	if (res->outcome == SESSION_TIMEOUT || res->outcome == SESSION_PROTOCOL)
		return;
	if (s->st.oom_killed) {
		result_msg(res, SESSION_MEMORY, NSBOX_EXIT_MEMORY, "memory limit exceeded (peak %.1f MiB)",
			   (double)s->st.peak_memory / (1 << 20));
	} else if (!s->st.exited) {
		result_msg(res, SESSION_CRASHED, 128 + s->st.term_signal, "the runner was killed by signal %d",
			   s->st.term_signal);
	} else {
		result_msg(res, SESSION_CRASHED, s->st.exit_code ? s->st.exit_code : 1,
			   "the runner exited with status %d", s->st.exit_code);
	}
}

static void protocol_error(struct nsbox_session *s, struct session_result *res, const char *what)
{
	json_t *m = json_pack("{s:s}", "message", what);

	/* Best effort: tell the runner why, then kill it. */
	if (m)
		send_msg(s, PROTO_ERROR, 0, m, now_ns() + 100000000ull, NULL);
	json_decref(m);
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

/* Answer one CALL.  Returns 0, or -1 if the session must end (err). */
static int handle_call(struct nsbox_session *s, uint32_t id, json_t *m, struct session_result *res,
		       unsigned long long deadline, struct nsbox_err *err)
{
	const char *name = json_string_value(json_object_get(m, "name"));
	const struct session_tool *t = find_tool(s, name);
	json_t *value = NULL, *ans;
	char *emsg = NULL;
	char buf[256];
	uint16_t type = PROTO_RAISE;
	int r;

	res->tool_calls++;
	if (res->tool_calls > s->o.max_tool_calls) {
		snprintf(buf, sizeof(buf), "tool call limit exceeded (%u per exec)", s->o.max_tool_calls);
		ans = json_pack("{s:s}", "message", buf);
	} else if (!t) {
		snprintf(buf, sizeof(buf), "unknown tool '%.64s'", name);
		ans = json_pack("{s:s}", "message", buf);
	} else if (t->fn(t->ctx, name, json_object_get(m, "args"), json_object_get(m, "kwargs"), &value, &emsg) < 0) {
		ans = json_pack("{s:s}", "message", emsg ? emsg : "the tool failed");
	} else {
		type = PROTO_RETURN;
		ans = json_pack("{s:O?}", "value", value);
	}
	free(emsg);
	json_decref(value);
	if (!ans)
		return err_set(err, ENOMEM, "tool answer");
	r = send_msg(s, type, id, ans, deadline, err);
	if (r < 0 && err->code == EMSGSIZE) {
		/* The host's answer is too big for a frame: the caller inside
		 * gets a clear ToolError instead. */
		json_decref(ans);
		snprintf(buf, sizeof(buf), "the answer of tool '%.64s' is too large (over %u bytes)", name,
			 s->o.max_frame);
		ans = json_pack("{s:s}", "message", buf);
		r = send_msg(s, PROTO_RAISE, id, ans, deadline, err);
	}
	json_decref(ans);
	return r;
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

int session_exec(struct nsbox_session *s, const struct session_exec_req *req, struct session_result *res,
		 struct nsbox_err *err)
{
	json_t *m;
	uint32_t id;
	double timeout = exec_timeout(s, req);
	double grace = s->o.grace > 0 ? s->o.grace : dmax(0.5, timeout * 0.1);
	unsigned long long t0 = now_ns();
	unsigned long long soft = timeout > 0 ? t0 + (unsigned long long)(timeout * 1e9) : 0;
	unsigned long long hard = 0;
	bool soft_sent = false, cancelled = false;
	uint64_t out_bytes = 0;

	memset(res, 0, sizeof(*res));
	if (s->dead)
		return err_set(err, EPIPE, "the session has ended");
	if (!req->code)
		return err_set(err, EINVAL, "no code");
	/* Sending is bounded by the exec's own hard deadline (or the control
	 * timeout when there is none). */
	{
		unsigned long long d = now_ns() + (unsigned long long)(s->o.control_timeout * 1e9);
		_cleanup_free_ char *frame = NULL;
		size_t flen = 0;
		int k;

		if (exec_frame(req, s->next_id, timeout, s->o.max_frame, &frame, &flen, err) < 0)
			return -1;
		id = s->next_id++;
		k = send_buf(s, PROTO_EXEC, frame, flen, d, err);
		if (k < 0) {
			if (err->code == EMSGSIZE || err->code == EINVAL)
				return -1;
			/* A runner that died is reported as such (signal, OOM). */
			if (err->code == EPIPE || err->code == ECONNRESET) {
				end_session(s, res, false);
				goto done;
			}
			result_msg(res, SESSION_PROTOCOL, NSBOX_EXIT_PROTOCOL, "sending EXEC: %s", err->msg);
			end_session(s, res, true);
			goto done;
		}
	}
	atomic_store(&s->cancel_req, false);
	for (;;) {
		struct proto_frame f = { 0 };
		struct nsbox_err e = { 0 };
		unsigned long long deadline = soft_sent ? hard : soft;
		int k = wait_frame(s, deadline, !cancelled, &f, &e);
		char what[600];

		if (k == W_CANCEL) {
			json_t *c = json_pack("{s:s}", "reason", "cancel");

			cancelled = true;
			send_msg(s, PROTO_CANCEL, id, c, now_ns() + 1000000000ull, NULL);
			json_decref(c);
			if (!soft_sent) {
				/* Same grace as a time limit: then the sandbox goes. */
				soft_sent = true;
				hard = now_ns() + (unsigned long long)(dmax(grace, 0.5) * 1e9);
			}
			continue;
		}
		if (k == W_TIMEOUT) {
			if (!soft_sent) {
				json_t *c = json_pack("{s:s}", "reason", "timeout");

				soft_sent = true;
				hard = now_ns() + (unsigned long long)(grace * 1e9);
				send_msg(s, PROTO_CANCEL, id, c, hard, NULL);
				json_decref(c);
				continue;
			}
			if (cancelled && !(soft && now_ns() >= soft))
				result_msg(res, SESSION_CANCELLED, 130, "cancelled; the code did not stop, the session was killed");
			else
				result_msg(res, SESSION_TIMEOUT, NSBOX_EXIT_TIMEOUT,
					   "time limit exceeded (%.3g s); the session was killed", timeout);
			end_session(s, res, true);
			break;
		}
		if (k == W_DEAD) {
			end_session(s, res, false);
			break;
		}
		if (k == W_ERROR) {
			protocol_error(s, res, e.msg);
			break;
		}
		res->bytes_in += NSBOX_PROTO_HDR_SIZE + f.hdr.len;
		if (res->bytes_in > s->o.max_bytes) {
			proto_frame_free(&f);
			snprintf(what, sizeof(what), "more than %llu bytes received during one exec",
				 (unsigned long long)s->o.max_bytes);
			protocol_error(s, res, what);
			break;
		}
		m = parse_frame(&f, &e);
		if (!m) {
			proto_frame_free(&f);
			protocol_error(s, res, e.msg);
			break;
		}
		if (f.hdr.type == PROTO_OUTPUT && f.hdr.id == id) {
			const char *st = json_string_value(json_object_get(m, "stream"));
			json_t *d = json_object_get(m, "data");

			/* An honest runner streams at most half the output limit per
			 * stream (the head); the rest comes in RESULT. */
			out_bytes += json_string_length(d);
			if (!s->o.stream_all && out_bytes > 2 * s->o.output_limit + 8) {
				json_decref(m);
				proto_frame_free(&f);
				protocol_error(s, res, "more OUTPUT than the output limit allows");
				break;
			}
			if (s->o.output && req->stream)
				s->o.output(s->o.output_ctx, !strcmp(st, "stdout") ? 1 : 2, json_string_value(d),
					    json_string_length(d));
		} else if (f.hdr.type == PROTO_CALL) {
			if (handle_call(s, f.hdr.id, m, res, hard ? hard : (soft ? soft + 1000000000ull : now_ns() + (unsigned long long)(s->o.control_timeout * 1e9)), &e) < 0) {
				json_decref(m);
				proto_frame_free(&f);
				snprintf(what, sizeof(what), "answering a tool call: %s", e.msg);
				protocol_error(s, res, what);
				break;
			}
		} else if (f.hdr.type == PROTO_RESULT && f.hdr.id == id) {
			json_t *error = json_object_get(m, "error");

			res->result = m;
			m = NULL;
			proto_frame_free(&f);
			if (json_is_object(error)) {
				const char *type = json_string_value(json_object_get(error, "type"));

				if (type && !strcmp(type, "nsbox.TimeLimitExceeded"))
					result_msg(res, SESSION_TIMEOUT, NSBOX_EXIT_TIMEOUT,
						   "time limit exceeded (%.3g s)", timeout);
				else if (type && !strcmp(type, "nsbox.Cancelled"))
					result_msg(res, SESSION_CANCELLED, 130, "cancelled");
				else if (type && !strcmp(type, "SystemExit"))
					res->outcome = SESSION_OK, res->exit_code =
						(int)json_integer_value(json_object_get(res->result, "exit_code"));
				else
					result_msg(res, SESSION_EXCEPTION, 1, "%s", type ? type : "exception");
			}
			break;
		} else {
			snprintf(what, sizeof(what), "unexpected %s frame (id %u) during EXEC %u",
				 proto_type_name(f.hdr.type), f.hdr.id, id);
			json_decref(m);
			proto_frame_free(&f);
			protocol_error(s, res, what);
			break;
		}
		json_decref(m);
		proto_frame_free(&f);
	}
done:
	res->wall = (double)(now_ns() - t0) / 1e9;
	return 0;
}

void session_result_free(struct session_result *res)
{
	if (!res)
		return;
	json_decref(res->result);
	res->result = NULL;
}

/* ---- control requests: one request, one answer ---- */

static int control(struct nsbox_session *s, uint16_t type, json_t *msg, uint16_t want, json_t **answer,
		   struct nsbox_err *err)
{
	unsigned long long deadline = now_ns() + (unsigned long long)(s->o.control_timeout * 1e9);
	uint32_t id;
	struct session_result res = { 0 };
	int k;

	if (s->dead) {
		json_decref(msg);
		return err_set(err, EPIPE, "the session has ended");
	}
	if (!msg)
		return err_set(err, ENOMEM, "%s message", proto_type_name(type));
	id = s->next_id++;
	k = send_msg(s, type, id, msg, deadline, err);
	json_decref(msg);
	if (k < 0) {
		if (err->code == EMSGSIZE)
			return -1;
		end_session(s, &res, true);
		return err_wrap(err, "session ended");
	}
	for (;;) {
		struct proto_frame f = { 0 };
		json_t *m;

		k = wait_frame(s, deadline, false, &f, err);
		if (k == W_TIMEOUT) {
			end_session(s, &res, true);
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
		m = parse_frame(&f, err);
		if (!m || f.hdr.id != id || f.hdr.type != want) {
			char what[600];

			snprintf(what, sizeof(what), "%s", m ? "unexpected answer" : err->msg);
			if (m)
				snprintf(what, sizeof(what), "unexpected %s frame (id %u) in answer to %s %u",
					 proto_type_name(f.hdr.type), f.hdr.id, proto_type_name(type), id);
			json_decref(m);
			proto_frame_free(&f);
			protocol_error(s, &res, what);
			return err_set(err, 0, "%s", res.message);
		}
		proto_frame_free(&f);
		*answer = m;
		return 0;
	}
}

int session_set_var(struct nsbox_session *s, const char *name, json_t *value, struct nsbox_err *err)
{
	json_t *a = NULL, *e;
	int r = control(s, PROTO_SET_VAR, json_pack("{s:s,s:O?}", "name", name, "value", value), PROTO_VALUE, &a, err);

	if (r < 0)
		return r;
	e = json_object_get(a, "error");
	if (json_is_object(e))
		r = err_set(err, EINVAL, "%s: %s", json_string_value(json_object_get(e, "type")),
			    json_string_value(json_object_get(e, "message")));
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

		r = err_set(err, type && !strcmp(type, "NameError") ? ENOENT : EINVAL, "%s: %s", type,
			    json_string_value(json_object_get(e, "message")));
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

	/* Async-signal-safe: an atomic flag and a write to a pipe. */
	atomic_store(&s->cancel_req, true);
	if (write(s->cancel_pipe[1], "c", 1) < 0) {
		/* Full pipe: a wake-up is already pending. */
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
	if (!s)
		return;
	if (!s->dead) {
		unsigned long long deadline = now_ns() + 1000000000ull;
		json_t *m = json_object();
		struct proto_frame f = { 0 };
		struct nsbox_err e;

		/* Orderly BYE; whatever the runner does, it is killed below. */
		if (m && send_msg(s, PROTO_BYE, s->next_id++, m, deadline, &e) == 0) {
			while (wait_frame(s, deadline, false, &f, &e) == W_FRAME) {
				uint16_t t = f.hdr.type;

				proto_frame_free(&f);
				if (t == PROTO_BYE)
					break;
			}
		}
		json_decref(m);
		s->dead = true;
		proc_finish(s, false);
	}
	if (!s->reaped)
		proc_finish(s, true);
	if (s->jailed) {
		jail_destroy(&s->j);
		s->st = s->j.status;
	}
	if (st)
		*st = s->st;
	session_free(s);
}

int session_add_tool(struct nsbox_session *s, const struct session_tool *t, struct nsbox_err *err)
{
	struct session_tool *n;
	json_t *a = NULL, *list;
	int r;

	if (!t || !valid_identifier(t->name) || !t->fn)
		return err_set(err, EINVAL, "tool name '%s' is not a Python identifier",
			       t && t->name ? t->name : "");
	if (t->schema && !json_is_object(t->schema))
		return err_set(err, EINVAL, "tool %s: the schema is not a JSON object", t->name);
	if (find_tool(s, t->name))
		return err_set(err, EEXIST, "tool %s is already registered", t->name);
	if (s->dead)
		return err_set(err, EPIPE, "the session has ended");
	n = realloc(s->tools, (s->o.n_tools + 1) * sizeof(*n));
	if (!n)
		return err_set(err, ENOMEM, "tool %s", t->name);
	s->tools = n;
	s->o.tools = n;
	n[s->o.n_tools++] = *t;
	/* The runner gets the whole list: a tool it already has is kept. */
	list = tools_json(s);
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
	if (s->remote) {
		if (s->hs.pidfd >= 0)
			close(s->hs.pidfd);
	} else if (s->jailed) {
		if (s->j.pidfd >= 0)
			close(s->j.pidfd);
		if (s->j.sync_fd >= 0)
			close(s->j.sync_fd);
		if (s->j.cg) {
			if (s->j.cg->v2_fd >= 0)
				close(s->j.cg->v2_fd);
			free(s->j.cg);
		}
	} else if (s->pidfd >= 0) {
		close(s->pidfd);
	}
	s->hs.pidfd = s->pidfd = -1;
	s->dead = s->reaped = true;
	s->remote = s->jailed = false;
	session_free(s);
}

int session_sandbox(const struct nsbox_session *s, struct session_sandbox_info *info, struct nsbox_err *err)
{
	memset(info, 0, sizeof(*info));
	info->alive = !s->dead;
	if (s->remote) {
		info->pid = s->hs.pid;
		snprintf(info->cgroup, sizeof(info->cgroup), "%s", s->hs.cgroup);
		if (!s->reaped && helper_info(&s->hs, &info->memory_current, &info->memory_peak, err) < 0)
			return -1;
	} else if (s->jailed) {
		info->pid = s->j.pid;
		if (s->j.cg)
			snprintf(info->cgroup, sizeof(info->cgroup), "%s",
				 s->j.cg->v1_dir[0][0] ? s->j.cg->v1_dir[0] : s->j.cg->v2_dir);
	} else {
		info->pid = s->pid;
	}
	if (s->reaped)
		info->memory_peak = s->st.peak_memory;
	return 0;
}
