/* The host side of a Python session: a sandbox running nsbox-runner, spoken
 * to over the runner protocol (proto/proto.h, nsbox-protocol(7)).
 *
 * A session persists globals across execs, dispatches the runner's tool
 * calls to C callbacks, enforces per-exec time limits (soft: an exception
 * inside Python; hard: the sandbox is killed) and caps (tool calls and
 * bytes per exec), and treats every frame from inside as hostile: a
 * malformed, oversize, unexpected or late frame ends the session with a
 * protocol error, never a crash or a hang.
 *
 * Not thread-safe: one thread drives a session, except session_cancel()
 * which may be called from any thread or a signal handler.  session_start()
 * clones (through jail_start): call it from a single-threaded process. */
#ifndef NSBOX_SESSION_H
#define NSBOX_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "jail.h"
#include "policy.h"

struct nsbox_session;

/* A host tool.  On success return 0 with *value a new reference (NULL
 * means None).  On failure return -1 with *error a malloc'd message (or
 * NULL): the runner raises nsbox.ToolError(message).  call_json is the
 * call's JSON text, {"args":[...],"kwargs":{...}} (judged as strictly as
 * the parser would: proto_call_parse), borrowed. */
typedef int (*session_tool_fn)(void *ctx, const char *name, const char *call_json, json_t **value, char **error);

struct session_tool {
	const char *name;		/* a Python identifier */
	const char *description;	/* may be NULL */
	json_t *schema;			/* JSON Schema of the arguments, may be NULL; borrowed */
	session_tool_fn fn;		/* NULL: answered only through session_exec_answer() */
	void *ctx;
};

struct session_opts {
	const struct nsbox_policy *policy;	/* required; borrowed for the session's life */
	const struct session_tool *tools;	/* copied at start (schema borrowed) */
	size_t n_tools;
	uint64_t output_limit;		/* bytes per stream per exec; 0: 1 MiB */
	uint32_t max_frame;		/* frame payload cap; 0: NSBOX_PROTO_MAX_FRAME */
	unsigned max_tool_calls;	/* per exec; 0: 1000 */
	uint64_t max_bytes;		/* bytes received per exec; 0: 256 MiB */
	double grace;			/* seconds from soft to hard deadline; 0: max(0.5, 10%) */
	double control_timeout;		/* handshake, vars, reset; 0: 30 s */
	/* Streamed output (stream 1 = stdout, 2 = stderr), as produced. */
	void (*output)(void *ctx, int stream, const char *data, size_t len);
	void *output_ctx;
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	const char *runner_path;	/* NULL: $NSBOX_RUNNER, next to /proc/self/exe, NSBOX_LIBEXECDIR */
	/* TESTS ONLY: run the runner as a plain child, without any sandbox. */
	bool unjailed;
	/* Have libnsbox's helper process make the sandbox (helper/helper.h): the
	 * only mode a multithreaded process may use.  With cold, the helper
	 * execs the runner afresh instead of forking its initialised CPython. */
	bool use_helper;
	bool cold;
	bool spare;		/* use_helper: keep a spare sandbox for the next session */
	/* Get the sandbox from nsboxd listening at this path (a socket; the
	 * service backend, host/session-service.c) instead of making it. */
	const char *connect;
	/* sys.argv inside, NULL-terminated (NULL: Python's [""]); read by
	 * session_start only, sent in the HELLO. */
	const char *const *argv;
	/* The runner streams each exec's whole output, not only the head
	 * (output_limit still caps what RESULT keeps). */
	bool stream_all;
	/* In-process launches only: the caller's fd 0 (not a terminal) is the
	 * sandbox's stdin (nsbox-runner --stdin). */
	bool pass_stdin;
	/* The egress allowlist's audit (egress.h), when the policy has one:
	 * net_audit (NULL: none) gets each record, a JSON object's text, on
	 * the thread driving the session (host/netaudit.h); net_log_fd (-1:
	 * none; borrowed during session_start) gets each line from the proxy
	 * directly.  With either, the session never takes a spare. */
	void (*net_audit)(void *ctx, const char *record, size_t len);
	void *net_audit_ctx;
	int net_log_fd;
};

struct session_exec_req {
	const char *code;
	const char *filename;	/* NULL: "<exec>" */
	bool want_value;	/* return the last expression's value */
	bool stream;		/* send output to opts.output as produced */
	bool display;		/* REPL: print repr of the last expression's value */
	bool check_complete;	/* REPL: answer incomplete=true instead of running unfinished code */
	bool plain;		/* no rich results: the runner doesn't look for them */
	double timeout;		/* seconds; 0: the policy's TimeLimit (0 there: none) */
};

enum session_outcome {
	SESSION_OK = 0,		/* ran to completion without an exception */
	SESSION_EXCEPTION,	/* an uncaught exception (see result's error) */
	SESSION_TIMEOUT,	/* time limit exceeded (dead if the hard deadline was reached) */
	SESSION_CANCELLED,	/* session_cancel() */
	SESSION_MEMORY,		/* memory limit exceeded (OOM kill); dead */
	SESSION_CRASHED,	/* the runner died; dead */
	SESSION_PROTOCOL,	/* the runner broke the protocol or a cap; dead */
};

struct session_result {
	enum session_outcome outcome;
	bool dead;		/* the session is gone; only session_close() remains */
	json_t *result;		/* the RESULT message (validated), NULL if none came */
	char message[512];	/* for outcomes other than OK/EXCEPTION: what happened */
	int exit_code;		/* what `nsbox python` exits with for this outcome */
	unsigned tool_calls;
	uint64_t bytes_in;	/* frame bytes received during the exec */
	double wall;		/* seconds, host side */
	uint64_t peak_memory;	/* bytes, when the sandbox ended (dead) */
};

/* Start a session: find the runner, start it (in a jail built from
 * opts->policy), handshake.  On success *out owns the session; free it
 * with session_close().  On failure returns -1 with err and leaves
 * nothing running. */
int session_start(struct nsbox_session **out, const struct session_opts *opts, struct nsbox_err *err);

/* Run code.  Returns 0 with *res filled for every outcome, including
 * limit kills and protocol errors (then res->dead is set).  Returns -1
 * with err only if nothing was run (the session was already dead, or a bad
 * request).  Free *res with session_result_free().  Tool calls run their
 * tool's fn on this thread (a tool without one answers a ToolError);
 * output goes to opts.output when req->stream.  Built on the exec state
 * machine below. */
int session_exec(struct nsbox_session *s, const struct session_exec_req *req, struct session_result *res,
		 struct nsbox_err *err);
void session_result_free(struct session_result *res);

/* ---- the exec state machine, for event loops ----
 * session_exec_start() sends the code; session_exec_step() does what is
 * ready and reports one event; tool calls are answered with
 * session_exec_answer() (any time before DONE, in any order);
 * session_exec_finish() takes the result after DONE.  Every deadline of
 * the exec (time limit, its grace, a cancel's grace) is kept here; with
 * session_fd() made, the fd is readable whenever a step has work. */
enum session_event_kind {
	SESSION_EV_OUTPUT = 1,	/* stream, data, len */
	SESSION_EV_CALL,	/* call_id, tool, args, kwargs */
	SESSION_EV_DONE,	/* the exec ended: session_exec_finish() */
};

struct session_event {
	enum session_event_kind kind;
	int stream;				/* OUTPUT: 1 stdout, 2 stderr */
	const char *data;			/* OUTPUT: borrowed until the next step */
	size_t len;
	uint32_t call_id;			/* CALL */
	const struct session_tool *tool;	/* CALL: borrowed (its fn may be NULL) */
	const char *call_json;			/* CALL: {"args":[...],"kwargs":{...}}, borrowed until the next step */
};

/* Send code.  -1 with err when nothing ran: EPIPE dead session, EINVAL bad
 * request, EBUSY an exec is in progress (or its result not yet taken).
 * When sending fails because the runner died, the exec is started and
 * ends at once (the first step reports DONE). */
int session_exec_start(struct nsbox_session *s, const struct session_exec_req *req, struct nsbox_err *err);
/* One step.  block: wait (spinning briefly first, spinwait_poll) until
 * there is an event; else return 0 at once when there is none.  Returns 1
 * with *ev filled, 0 (only without block), or -1 with err (EINVAL: no exec
 * in progress).  After DONE, further steps report DONE again. */
int session_exec_step(struct nsbox_session *s, bool block, struct session_event *ev, struct nsbox_err *err);
/* Answer CALL call_id: value (borrowed, NULL: None) or, when error is not
 * NULL, an nsbox.ToolError(error) inside.  Errors: EINVAL no such call
 * pending; EPIPE the session died (the exec has ended: the next step
 * reports DONE). */
int session_exec_answer(struct nsbox_session *s, uint32_t call_id, json_t *value, const char *error,
			struct nsbox_err *err);
/* After DONE: move the result into *res (session_result_free) and make
 * the session ready for the next exec.  Errors: EINVAL no exec, EAGAIN
 * the exec has not ended. */
int session_exec_finish(struct nsbox_session *s, struct session_result *res, struct nsbox_err *err);
/* An exec was started and its result not yet taken. */
bool session_exec_active(const struct nsbox_session *s);
/* Seconds until the running exec's time limit (0 when past it), or -1
 * when no exec runs or it has no limit. */
double session_time_left(const struct nsbox_session *s);

/* An epoll fd (owned by the session, made on first call) readable whenever
 * session_exec_step() has work: the runner's socket, the sandbox's pidfd,
 * a timerfd armed to the exec's next deadline, and session_cancel().  -1
 * with err when it can't be made. */
int session_fd(struct nsbox_session *s, struct nsbox_err *err);

/* Hand the network audit records waiting now to opts.net_audit (never
 * blocks); how many.  For between execs: during one, steps do it. */
int session_net_audit_drain(struct nsbox_session *s);

/* Bind or read a global.  Values use the JSON encoding of
 * nsbox-protocol(7).  session_get_var: *value is a new reference; a missing
 * name is an error with code ENOENT. */
int session_set_var(struct nsbox_session *s, const char *name, json_t *value, struct nsbox_err *err);
int session_get_var(struct nsbox_session *s, const char *name, json_t **value, struct nsbox_err *err);
/* Clear the session's globals (imported modules stay loaded). */
int session_reset(struct nsbox_session *s, struct nsbox_err *err);
/* Round trip; *rtt in seconds (may be NULL). */
int session_ping(struct nsbox_session *s, double *rtt, struct nsbox_err *err);
/* Ask the running exec to stop (raises nsbox.Cancelled inside).  Safe from
 * any thread and from signal handlers; no effect between execs. */
void session_cancel(struct nsbox_session *s);
bool session_alive(const struct nsbox_session *s);
/* The runner's HELLO (borrowed): version, capabilities, python, pid. */
const json_t *session_hello(const struct nsbox_session *s);

/* End the session (BYE, then kill), reap, fill *st if not NULL, free.
 * Accepts NULL. */
void session_close(struct nsbox_session *s, struct jail_status *st);

/* Register one more tool on a running session (TOOLS message): visible
 * from the next exec.  t's strings and schema are borrowed for the
 * session's life.  Errors: EINVAL bad name or schema, EEXIST name taken,
 * EPIPE the session has ended. */
int session_add_tool(struct nsbox_session *s, const struct session_tool *t, struct nsbox_err *err);

/* Free a session inherited across fork() without touching the sandbox (it
 * belongs to the parent): close our fds, free memory.  Accepts NULL. */
void session_abandon(struct nsbox_session *s);

struct session_sandbox_info {
	pid_t pid;		/* host pid of the sandbox's pid 1 */
	bool alive;
	char cgroup[256];	/* memory cgroup, "" if none */
	uint64_t memory_current;	/* bytes, 0 if unknown */
	uint64_t memory_peak;
};
int session_sandbox(const struct nsbox_session *s, struct session_sandbox_info *info, struct nsbox_err *err);

/* Hand the runner socket over (nsboxd passes it to its client, who speaks
 * nsbox-protocol(7) to the runner directly).  On success *sock is the
 * blocking socket and *pidfd a new pidfd of the sandbox's pid 1, both owned
 * by the caller; the session then only controls the sandbox's lifecycle
 * (session_kill, session_finish, session_sandbox, session_close): exec and
 * the other requests fail with EPIPE.  Errors: EPIPE dead, EBUSY bytes
 * from the runner are buffered here. */
int session_handoff(struct nsbox_session *s, int *sock, int *pidfd, struct nsbox_err *err);
/* SIGKILL the sandbox; returns at once.  Accepts NULL. */
void session_kill(struct nsbox_session *s);
/* Wait for the sandbox to end (kill_now: kill it first), reap it, remove
 * its cgroups and fill *st (may be NULL).  The session stays allocated:
 * session_close() frees it. */
void session_finish(struct nsbox_session *s, bool kill_now, struct jail_status *st);

#endif
