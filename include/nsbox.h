/* libnsbox: run Python in kernel-isolated sandboxes from a C program.
 *
 * A session is one sandbox running an embedded CPython whose globals
 * persist across calls.  Host tools registered on a session appear inside
 * as Python functions; when sandboxed code calls one, the callback runs on
 * the thread that called nsbox_exec() and its JSON result goes back in.
 *
 * Conventions (every function):
 * - Functions returning int return 0 on success or a negative errno value
 *   (-EINVAL, -ENOMEM, ...) on failure; see libnsbox(3), RETURN VALUE and
 *   ERRORS.  When err is not NULL and the call fails, *err receives a new
 *   error object (code and message naming what and where) that the caller
 *   frees with nsbox_error_free(); on success *err is left untouched.
 * - Outputs are written only on success.  Destructors accept NULL.
 * - Strings returned as `char *` are malloc'ed and freed with nsbox_free();
 *   `const char *` results are borrowed from the object they came from.
 * - Options structs start with struct_size (set it to sizeof the struct you
 *   compiled against) so they can grow without breaking callers.
 * - Thread-safety: a session is used by one thread at a time; different
 *   sessions may be used from different threads at once.  nsbox_cancel()
 *   may be called from any thread.  Policies are not shared between threads
 *   while being modified.
 * - The calling process never clones or unshares: sandboxes are created by
 *   a helper process that the library starts, so a multithreaded host is
 *   safe.
 */
#ifndef NSBOX_H
#define NSBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NSBOX_API __attribute__((visibility("default")))

typedef struct nsbox_policy_handle nsbox_policy_t;
typedef struct nsbox_sess nsbox_session_t;
typedef struct nsbox_result nsbox_result_t;
typedef struct nsbox_error nsbox_error_t;

/* Exit statuses of nsbox(1) (and nsbox_result_exit_code(),
 * nsbox_run_status.exit_code).  The command's own status and 128+N for a
 * signal pass through. */
#define NSBOX_EXIT_USAGE 120	/* bad flags or bad policy */
#define NSBOX_EXIT_PROTOCOL 121	/* the runner broke the protocol */
#define NSBOX_EXIT_MEMORY 123	/* killed by the memory limit (OOM) */
#define NSBOX_EXIT_TIMEOUT 124	/* killed by the wall-clock time limit */
#define NSBOX_EXIT_SETUP 125	/* the sandbox could not be set up */
#define NSBOX_EXIT_NOEXEC 126	/* command found but could not be executed */
#define NSBOX_EXIT_NOTFOUND 127	/* command not found */

/* ---- errors ----------------------------------------------------------- */

/* The negative errno the failing call returned (e.g. -EINVAL). */
NSBOX_API int nsbox_error_code(const nsbox_error_t *err);
/* What failed and where.  Borrowed from err; never NULL. */
NSBOX_API const char *nsbox_error_message(const nsbox_error_t *err);
/* Since 0.4.0: the sandbox setup step that failed ("userns", "cgroup",
 * "mount", "landlock", "seccomp", "runner", ...; libnsbox(3)), or NULL when
 * the error is not a setup step's.  Borrowed from err. */
NSBOX_API const char *nsbox_error_step(const nsbox_error_t *err);
NSBOX_API void nsbox_error_free(nsbox_error_t *err);
/* Free a string returned by libnsbox. */
NSBOX_API void nsbox_free(void *p);
/* Library version, e.g. "0.4.0".  Static. */
NSBOX_API const char *nsbox_version(void);

/* ---- policies --------------------------------------------------------- */

/* A built-in policy name ("default", "strict", "permissive"), a policy
 * file path (nsbox-policy(5)), or NULL for "default".  *out is owned by
 * the caller (nsbox_policy_free).  Errors: -ENOENT no such policy, -EINVAL
 * a bad file (message "file:line: ..."), -ENOMEM. */
NSBOX_API int nsbox_policy_new(const char *name_or_file, nsbox_policy_t **out, nsbox_error_t **err);
NSBOX_API void nsbox_policy_free(nsbox_policy_t *p);
/* Set any key of nsbox-policy(5), e.g. ("Limits", "Memory", "256M").
 * Errors: -EINVAL with a message naming the key and what it accepts. */
NSBOX_API int nsbox_policy_set(nsbox_policy_t *p, const char *section, const char *key, const char *value,
			       nsbox_error_t **err);
/* Typed setters for every limit and option of `nsbox run`; 0 means no
 * limit where the policy allows it.  Errors: -EINVAL. */
NSBOX_API int nsbox_policy_set_memory(nsbox_policy_t *p, uint64_t bytes, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_pids(nsbox_policy_t *p, uint64_t n, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_cpus(nsbox_policy_t *p, double cpus, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_time_limit(nsbox_policy_t *p, double seconds, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_tmp_size(nsbox_policy_t *p, uint64_t bytes, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_file_size(nsbox_policy_t *p, uint64_t bytes, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_open_files(nsbox_policy_t *p, uint64_t n, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_share_net(nsbox_policy_t *p, bool share, nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_ids(nsbox_policy_t *p, uid_t uid, gid_t gid, nsbox_error_t **err);
NSBOX_API int nsbox_policy_add_bind(nsbox_policy_t *p, const char *src, const char *dst, bool writable,
				    nsbox_error_t **err);
NSBOX_API int nsbox_policy_set_workspace(nsbox_policy_t *p, const char *dir, nsbox_error_t **err);
NSBOX_API int nsbox_policy_setenv(nsbox_policy_t *p, const char *name, const char *value, nsbox_error_t **err);
/* Check the policy as a whole (what nsbox_run() and nsbox_session_new()
 * check before starting), e.g. a bind destination inside a writable mount.
 * Since 0.2.0.  Errors: -EINVAL with a message saying what is wrong;
 * -ENOENT when RootFS=NAME names a root tree that is not built (since
 * 0.5.0; `nsbox rootfs build NAME` builds it), -EPERM when the user's
 * cache of trees is one another user could change (its message names the
 * directory); these errors of looking the name up have the step "rootfs"
 * (nsbox_error_step()), and no other error of this call has that step.
 * Since 0.5.0 also -ENOENT, -EPERM or -EINVAL (not a directory) for
 * a workspace or bind source this process can't find, the message naming
 * the key and the path.  -EPERM, here and from nsbox_run() and
 * nsbox_session_new(), for a policy read from a file that lies beneath the
 * workspace or a writable bind's source, or a [Network] Log= there: the
 * sandbox could rewrite it. */
NSBOX_API int nsbox_policy_check(const nsbox_policy_t *p, nsbox_error_t **err);
/* A host file the caller will trust (run, read as configuration) checked
 * against p: -EPERM when it lies beneath the workspace or a writable bind's
 * source (the sandbox could rewrite it; compared by identity, through any
 * path; a file not there yet by its directory), or the path as given passes
 * through a directory there (a link on the way), -ENOENT when neither it nor
 * its directory resolves, 0 otherwise (also for a descriptor of the caller's:
 * /dev/stdout, /dev/fd/N...).  nsbox(1) checks its --tool programs and
 * --json-status so.  Since 0.5.0. */
NSBOX_API int nsbox_policy_check_host_file(const nsbox_policy_t *p, const char *path, nsbox_error_t **err);

/* The Debian packages the policy's root tree provides (RootFS=NAME, a
 * built tree; RootFS=DIR; or the host's, without RootFS=), read from the
 * tree's dpkg status file on the host: a JSON array of {"name": ...,
 * "version": ...} objects, in the file's order, in *json (free with
 * nsbox_free).  Returns 0, or -ENOENT (the tree is not built, or has no
 * dpkg status file), -EINVAL, -ENOMEM.  Since 0.5.0. */
NSBOX_API int nsbox_policy_packages(const nsbox_policy_t *p, char **json, nsbox_error_t **err);
/* The effective policy in the file format; nsbox_free() it.  NULL on ENOMEM. */
NSBOX_API char *nsbox_policy_to_string(const nsbox_policy_t *p);

/* ---- sessions --------------------------------------------------------- */

/* Streamed output: stream 1 is stdout, 2 is stderr.  Runs on the thread
 * that called nsbox_exec(). */
typedef void (*nsbox_output_fn)(void *userdata, int stream, const char *data, size_t len);
/* A warning about the sandbox, e.g. a limit this host can't enforce with
 * a cgroup and the fallback used instead (no trailing newline). */
typedef void (*nsbox_warn_fn)(void *userdata, const char *message);
/* (since 0.5.0) One record of the egress allowlist's audit ([Network]
 * Allow=, libnsbox(3) NETWORK AUDIT): a JSON object, the text of one
 * [Network] Log= line without its newline, with the keys time, kind,
 * host, port, addr, sni, decision, reason, bytes_out and bytes_in.
 * record is NUL-terminated and borrowed for the call; len is strlen.
 * Runs on the thread driving the session, never another: inside
 * nsbox_exec(), nsbox_exec_advance(), nsbox_net_audit_drain(),
 * nsbox_session_end() and nsbox_session_free(). */
typedef void (*nsbox_net_audit_fn)(void *userdata, const char *record, size_t len);

struct nsbox_session_opts {
	size_t struct_size;		/* sizeof(struct nsbox_session_opts) */
	uint64_t output_limit;		/* bytes kept per stream per exec; 0: 1 MiB */
	unsigned max_tool_calls;	/* per exec; 0: 1000 */
	uint64_t max_bytes;		/* bytes from the sandbox per exec; 0: 256 MiB */
	nsbox_output_fn output;		/* may be NULL */
	void *output_userdata;
	bool cold;			/* start CPython afresh instead of forking the helper's template */
	/* Fields below: since 0.2.0 (a smaller struct_size leaves them zero). */
	nsbox_warn_fn warn;		/* may be NULL: warnings are dropped */
	void *warn_userdata;
	/* Keep a spare: once this session is made, the helper starts another
	 * sandbox with the same policy, ready for the next nsbox_session_new()
	 * (which then takes about a millisecond).  Costs one idle sandbox per
	 * helper (the last policy's).  The default since 0.3.0 (no_spare, or
	 * NSBOX_SPARE=0 in the environment, turns it off), except for a
	 * policy naming host paths (workspace, binds, another root directory: a
	 * spare's mounts are made in advance, and the directory behind them may
	 * be replaced meanwhile; a built tree, RootFS=NAME, is never replaced in
	 * place and keeps it); setting spare asks for one even then. */
	bool spare;
	/* Make the sandbox from this process instead of the helper: no helper
	 * to start, so a one-off session is ready sooner, but CPython starts
	 * cold.  Only for single-threaded processes (nsbox(1) uses it):
	 * -EINVAL when the caller has more than one thread. */
	bool in_process;
	/* Fields below: since 0.3.0. */
	bool no_spare;			/* no spare sandbox for this session's policy */
	/* sys.argv inside, NULL-terminated (NULL: [""]).  Read during
	 * nsbox_session_new only.  Bytes that are not UTF-8 arrive as CPython
	 * decodes its own argv (surrogateescape). */
	const char *const *argv;
	/* Fields below: since 0.4.0.  Get the sandbox from nsboxd(8) listening
	 * at this socket path instead of making it (NULL: $NSBOX_CONNECT when
	 * set and not empty, else make it here).  The policy must then be a
	 * built-in profile with limits, network (shared, or an egress
	 * allowlist with its limits), workspace, binds and environment
	 * (-EINVAL otherwise); the workspace, binds and the allowlist's audit
	 * sink (Log=, opened here, or net_log_fd or net_audit's pipe: one of
	 * them) are opened by this process and passed as descriptors.  Execs and tool calls
	 * travel straight between this process and its sandbox.  Errors from
	 * the service come back as this library's values (nsbox_error_code):
	 * -EPERM not allowed (the service's EACCES, nsboxd.conf(5)), -ENOSPC
	 * over this user's quota (its EDQUOT), -EAGAIN the service is full. */
	const char *connect;
	/* Since 0.5.0: output gets all of each exec's output as produced, not only the
	 * first half of output_limit; the result's stdout and stderr are
	 * capped by output_limit all the same (and say so: stdout_truncated
	 * in nsbox_result_json).  Streamed bytes do count towards max_bytes. */
	bool stream_all;
	/* in_process only: the caller's stdin (fd 0) is the sandbox's, read
	 * by the code directly, when it is a pipe or a file; never a terminal
	 * (TIOCSTI, CVE-2017-5226): then, and otherwise, stdin inside is empty. */
	bool pass_stdin;
	/* Fields below: since 0.5.0, the egress allowlist's audit (libnsbox(3),
	 * NETWORK AUDIT).  Without a [Network] Allow= rule there is nothing to
	 * audit and they are ignored.  A session with either makes its own
	 * sandbox: it never takes a warm spare (made in advance, without them).
	 * net_audit gets every record (one per connection or DNS query, as it
	 * ends) on the thread driving the session; while nobody drives it
	 * (between execs) up to 256 KiB of records wait, and then the sandbox's
	 * network waits too: records are never dropped.  What is left is
	 * delivered by nsbox_session_free().  May be NULL. */
	nsbox_net_audit_fn net_audit;
	void *net_audit_userdata;
	/* > 0: the proxy also writes each record, as a line, to this descriptor
	 * (a file, a pipe, a socket; through nsboxd a regular file or a pipe
	 * only; duplicated during nsbox_session_new, the caller keeps its
	 * own; -EBADF when it isn't open).  Whole lines; when it is full the
	 * sandbox's network waits until it drains.  0 or negative: none (fd 0
	 * can't be named: dup it). */
	int net_log_fd;
};

/* Create a session under policy p (copied; p may be freed afterwards).
 * opts may be NULL.  The sandbox starts at once.  Errors: -EINVAL bad
 * arguments, -EPERM / -ENOSYS the host can't create sandboxes (message
 * says which step and why), -ENOMEM. */
NSBOX_API int nsbox_session_new(const nsbox_policy_t *p, const struct nsbox_session_opts *opts,
				nsbox_session_t **out, nsbox_error_t **err);
/* Kill the sandbox, reap it, copy a bounded workspace back (on this
 * thread, in a child of this process that shares its descriptor table:
 * never during an exec, whatever ended the sandbox), free everything.
 * Accepts NULL. */
NSBOX_API void nsbox_session_free(nsbox_session_t *s);

/* A tool callback.  args_json is the call's JSON: {"args": [...],
 * "kwargs": {...}} (borrowed, valid during the call; the runner's own
 * spelling of the two, checked strictly: spacing and member order may
 * vary).  On success return 0 and set *result_json to a malloc'ed JSON
 * text (NULL means None).  On failure return non-zero and set
 * *error_message to a malloc'ed message (may stay NULL): sandboxed code
 * sees nsbox.ToolError(message).  Invalid JSON in *result_json also
 * becomes a ToolError.  Runs on the thread that called nsbox_exec(). */
typedef int (*nsbox_tool_fn)(void *userdata, const char *name, const char *args_json, char **result_json,
			     char **error_message);

/* Register a tool: name must be a Python identifier that is not a keyword,
 * a builtin (len, print, open...) or a dunder (since 0.5.0: a tool is a
 * global inside and would replace it), or (since 0.5.0) two identifiers
 * joined by a dot, "NS.NAME": a function NAME in a namespace object NS in
 * the session's globals (NS as a plain name above; NAME not a keyword or a
 * dunder; NS not also a plain tool's name: -EEXIST); schema_json (may be
 * NULL) is a JSON Schema of the arguments ({"type": "object",
 * "properties": ...}), used to generate the Python signature and
 * docstring; description may be NULL.  Tools may be added at any time;
 * they are visible from the next exec.  Since 0.4.0 fn may be NULL: the
 * tool is answered only through the event API (nsbox_exec_answer); a
 * blocking nsbox_exec() answers a call to it with a ToolError.  Errors:
 * -EINVAL bad name or schema, -EEXIST name taken, -ENOTCONN the session
 * died, -EBUSY an exec is in progress. */
NSBOX_API int nsbox_session_add_tool(nsbox_session_t *s, const char *name, const char *schema_json,
				     const char *description, nsbox_tool_fn fn, void *userdata,
				     nsbox_error_t **err);

struct nsbox_exec_opts {
	size_t struct_size;	/* sizeof(struct nsbox_exec_opts) */
	double timeout;		/* seconds, up to 1e9; 0: the policy's TimeLimit (0 there: none) */
	bool repl;		/* return the last expression's value like a REPL */
	const char *filename;	/* shown in tracebacks; NULL: "<exec>" */
	/* Since 0.2.0.  One line of an interactive console: an expression
	 * statement's value is printed (sys.displayhook), and input that is
	 * incomplete (an open block) runs nothing and comes back as
	 * NSBOX_INCOMPLETE, so the caller reads another line and resends the
	 * whole. */
	bool interactive;
	/* Since 0.5.0: NSBOX_EXEC_* bits.  A whole word after the 0.2.0
	 * struct (40 bytes on LP64), so that an older caller's struct_size
	 * never covers it: a flag in its tail padding would be read from
	 * whatever byte the caller left there. */
	uint64_t flags;
};

/* No rich results: the runner does not look for a value's _repr_*_
 * methods, render open figures (they are closed) or scan /out, and the
 * result has no displays or files.  For callers that would drop them. */
#define NSBOX_EXEC_PLAIN 0x1ull

enum nsbox_status {
	NSBOX_OK = 0,			/* ran to completion */
	NSBOX_EXCEPTION,		/* an uncaught exception: see the error accessors */
	NSBOX_TIME_LIMIT,		/* time limit exceeded (the session may be dead) */
	NSBOX_CANCELLED,		/* nsbox_cancel() */
	NSBOX_MEMORY_LIMIT,		/* the memory limit killed the sandbox; dead */
	NSBOX_CRASHED,			/* the sandbox died; dead */
	NSBOX_PROTOCOL_ERROR,		/* the sandbox broke the protocol; dead */
	NSBOX_INCOMPLETE,		/* interactive: incomplete input; nothing ran */
};

/* Run code.  Returns 0 and a result for every outcome of running code,
 * limit kills included (check nsbox_result_status); the result is owned by
 * the caller (nsbox_result_free).  Errors (nothing ran): -EINVAL, -ENOTCONN
 * the session is dead, -EBUSY the session is in use by another call. */
NSBOX_API int nsbox_exec(nsbox_session_t *s, const char *code, const struct nsbox_exec_opts *opts,
			 nsbox_result_t **out, nsbox_error_t **err);
/* Interrupt the exec running on s (nsbox.Cancelled inside).  Any thread;
 * async-signal-safe (a SIGINT handler may call it).  A call waiting on the
 * runner's answer instead (a file call, nsbox_get_var...) fails with
 * -ENOTCONN and the session ends (libnsbox(3)). */
NSBOX_API void nsbox_cancel(nsbox_session_t *s);
/* Since 0.5.0.  Seconds left before the time limit of the exec running on
 * s (0 once it has passed), or -1 when none runs or it has no limit.  For
 * a tool callback that can bound its own work: the limit is a wall-clock
 * limit of the whole exec, tool time included (libnsbox(3), TIME LIMITS).
 * From the thread driving the session. */
NSBOX_API double nsbox_exec_time_left(const nsbox_session_t *s);

NSBOX_API enum nsbox_status nsbox_result_status(const nsbox_result_t *r);
/* The value as JSON (nsbox-protocol(7) encoding), "null" when none. */
NSBOX_API const char *nsbox_result_value(const nsbox_result_t *r);
NSBOX_API const char *nsbox_result_stdout(const nsbox_result_t *r, size_t *len);
NSBOX_API const char *nsbox_result_stderr(const nsbox_result_t *r, size_t *len);
/* Exception type name ("ZeroDivisionError"), message and traceback; NULL
 * unless the status is NSBOX_EXCEPTION.  For limit kills, message says
 * what happened ("time limit exceeded"). */
NSBOX_API const char *nsbox_result_error_type(const nsbox_result_t *r);
NSBOX_API const char *nsbox_result_error_message(const nsbox_result_t *r);
NSBOX_API const char *nsbox_result_traceback(const nsbox_result_t *r);
/* Resource use of the exec: wall and CPU seconds, peak memory bytes, tool
 * calls.  Any pointer may be NULL. */
NSBOX_API void nsbox_result_usage(const nsbox_result_t *r, double *wall, double *cpu, uint64_t *peak_memory,
				  unsigned *tool_calls);
/* The exit status nsbox-python(1) would end with for this result: 0, the
 * code of an uncaught SystemExit, 1 for another exception, and for limit
 * kills the statuses of nsbox(1) (123 memory, 124 time, 121 protocol).
 * With NSBOX_CRASHED: the runner's own status when it exited (os._exit(N),
 * 0 included, as python's), 128+N when signal N killed it. */
NSBOX_API int nsbox_result_exit_code(const nsbox_result_t *r);
/* The runner's whole RESULT message as JSON (nsbox-protocol(7)), with the
 * fields that have no accessor (stdout_truncated, stdout_tail, ...);
 * "{}" when the sandbox died before answering.  Borrowed from r; made on
 * the first call (safe from several threads), NULL only when out of
 * memory. */
NSBOX_API const char *nsbox_result_json(const nsbox_result_t *r);
/* Since 0.5.0.  Whether stream (1 stdout, 2 stderr) was cut to the
 * session's output limit (head and tail kept, a "[... N bytes truncated
 * ...]" line between them); *total (may be NULL) gets how many bytes the
 * code wrote to it.  false for a bad stream or a result without output. */
NSBOX_API bool nsbox_result_truncated(const nsbox_result_t *r, int stream, uint64_t *total);
NSBOX_API void nsbox_result_free(nsbox_result_t *r);

/* ---- rich results (since 0.5.0; libnsbox(3), RICH RESULTS) -------------
 * What display(obj), matplotlib figures and a last expression with rich
 * representations produced, in order, as MIME bundles; and the files the
 * exec wrote to /out.  Indexes out of range give 0 or NULL.  Data is
 * borrowed from r: decoded bytes for binary types (image/png...), UTF-8
 * text for text types (text/html, image/svg+xml, application/json...),
 * NUL-terminated either way, *len bytes long.  Thread-safe on a const r. */
NSBOX_API size_t nsbox_result_display_count(const nsbox_result_t *r);
/* The MIME types of bundle i: mime_count of them, mime(i, j) each. */
NSBOX_API size_t nsbox_result_display_mime_count(const nsbox_result_t *r, size_t i);
NSBOX_API const char *nsbox_result_display_mime(const nsbox_result_t *r, size_t i, size_t j);
/* Bundle i's data for mime ("image/png"), or NULL if it has none. */
NSBOX_API const void *nsbox_result_display_data(const nsbox_result_t *r, size_t i, const char *mime, size_t *len);
/* Whether displays were left out or cut down to fit the caps (the count,
 * the bytes per result, MIME types the wire does not allow). */
NSBOX_API bool nsbox_result_displays_truncated(const nsbox_result_t *r);
/* Files the exec created or changed in /out (top level, regular files):
 * names (checked: no '/', no control characters, not "." or ".."), sizes,
 * and the data, or NULL for one too large to come with the result (read
 * it with nsbox_read_file()). */
NSBOX_API size_t nsbox_result_file_count(const nsbox_result_t *r);
NSBOX_API const char *nsbox_result_file_name(const nsbox_result_t *r, size_t i);
NSBOX_API const void *nsbox_result_file_data(const nsbox_result_t *r, size_t i, size_t *len, uint64_t *size);
/* Whether /out files were left out or came without their data. */
NSBOX_API bool nsbox_result_files_truncated(const nsbox_result_t *r);

/* ---- exec for event loops (since 0.4.0) --------------------------------
 *
 * nsbox_exec() blocks and runs tool callbacks on the calling thread.  An
 * event loop serving many sessions from one thread instead starts an exec,
 * polls the session's fd, and advances the exec when the fd is readable:
 *
 *	nsbox_exec_start(s, code, &opts, &err);
 *	for (;;) {
 *		poll nsbox_session_fd(s) for POLLIN (with other fds);
 *		while ((k = nsbox_exec_advance(s, &ev, &err)) > 0) {
 *			if (ev.kind == NSBOX_EVENT_OUTPUT) ...ev.stream, ev.data, ev.len
 *			if (ev.kind == NSBOX_EVENT_TOOL_CALL) ...answer now or later:
 *				nsbox_exec_answer(s, ev.call_id, "42", NULL, &err);
 *			if (ev.kind == NSBOX_EVENT_DONE)
 *				nsbox_exec_result(s, &r, &err); ...done, stop advancing
 *		}
 *		k == 0: nothing more now, poll again; k < 0: error
 *	}
 *
 * nsbox_exec() is built on these calls.  Every deadline (the time limit,
 * its grace, a cancel) makes the fd readable when it falls due, so the
 * caller needs no timer of its own.  An exec driven this way surfaces every
 * tool call as an event, whether or not the tool was registered with a
 * callback (nsbox_session_add_tool() accepts fn NULL for such hosts); the
 * session's output callback is not called: output arrives as events.
 * Nothing sent during the exec waits for the sandbox to read it: what its
 * socket does not take is queued, and the fd waits for room meanwhile.
 * One exec at a time per session; different sessions are independent. */

/* The fd to poll (POLLIN) for session s: readable whenever
 * nsbox_exec_advance() has work (a frame from the sandbox, its death, a
 * deadline, nsbox_cancel(), since 0.5.0 network audit records for
 * nsbox_session_opts.net_audit).  Owned by the session, stable for its
 * life; never read or close it.  -1 with errno set when it can't be made. */
NSBOX_API int nsbox_session_fd(nsbox_session_t *s);
/* (since 0.5.0) Hand the network audit records waiting now to
 * nsbox_session_opts.net_audit, on the calling thread, without blocking:
 * between execs, where nothing else reads them (an event loop that keeps
 * nsbox_session_fd() registered then calls this when it is readable).
 * Returns how many were delivered (0 without a net_audit callback), or
 * -EINVAL, -ENOTCONN (a session of the parent process), -EBUSY (another
 * call, or an exec, is in progress on s: nsbox_exec_advance() delivers
 * them then). */
NSBOX_API int nsbox_net_audit_drain(nsbox_session_t *s, nsbox_error_t **err);

/* Send code to the sandbox and return without waiting.  Errors (nothing
 * ran): -EINVAL, -ENOTCONN the session is dead, -EBUSY an exec is in
 * progress on s. */
NSBOX_API int nsbox_exec_start(nsbox_session_t *s, const char *code, const struct nsbox_exec_opts *opts,
			       nsbox_error_t **err);

enum nsbox_event_kind {
	NSBOX_EVENT_OUTPUT = 1,		/* stream (1 stdout, 2 stderr), data, len */
	NSBOX_EVENT_TOOL_CALL,		/* call_id, tool, args_json: answer with nsbox_exec_answer() */
	NSBOX_EVENT_DONE,		/* the exec ended: collect it with nsbox_exec_result() */
};

struct nsbox_event {
	size_t struct_size;		/* sizeof(struct nsbox_event), set by the caller */
	enum nsbox_event_kind kind;
	int stream;
	const char *data;		/* OUTPUT: borrowed until the next advance; not NUL-terminated */
	size_t len;
	uint64_t call_id;		/* TOOL_CALL */
	const char *tool;		/* TOOL_CALL: the tool's name, borrowed until the next advance */
	const char *args_json;		/* TOOL_CALL: {"args": [...], "kwargs": {...}}, likewise */
};

/* Do what is ready without blocking.  Returns 1 with *ev filled, 0 when
 * there is nothing to do until the fd is readable again, or a negative
 * errno: -EINVAL no exec in progress (or after DONE), -ENOMEM.  Limit
 * kills, crashes and protocol errors are not errors here: they end the
 * exec with DONE and a result saying what happened.  A tool call over the
 * session's max_tool_calls, or to a name that is not registered, is
 * answered with a ToolError inside and not reported.  The sandbox waits
 * for each tool call's answer (its time limit runs meanwhile); output and
 * other calls (from other threads inside) may come first. */
NSBOX_API int nsbox_exec_advance(nsbox_session_t *s, struct nsbox_event *ev, nsbox_error_t **err);

/* Answer tool call call_id of the exec in progress: result_json (NULL
 * means None) or, when error_message is not NULL, an nsbox.ToolError with
 * that message inside.  Any time before DONE, from the thread driving the
 * session.  Invalid JSON is a ToolError inside.  Errors: -EINVAL no such
 * call pending, -ENOTCONN the session died meanwhile. */
NSBOX_API int nsbox_exec_answer(nsbox_session_t *s, uint64_t call_id, const char *result_json,
				const char *error_message, nsbox_error_t **err);

/* After NSBOX_EVENT_DONE: the result (owned by the caller), as
 * nsbox_exec() returns it; the session is then free for the next exec.
 * Errors: -EINVAL no exec has ended, -EAGAIN the exec is still running. */
NSBOX_API int nsbox_exec_result(nsbox_session_t *s, nsbox_result_t **out, nsbox_error_t **err);

/* Bind a global to a JSON value / read one as JSON (nsbox_free the
 * string).  Errors: -EINVAL bad name or JSON, -ENOENT no such global,
 * -ENOTCONN dead session. */
NSBOX_API int nsbox_set_var(nsbox_session_t *s, const char *name, const char *json, nsbox_error_t **err);
NSBOX_API int nsbox_get_var(nsbox_session_t *s, const char *name, char **json, nsbox_error_t **err);
/* Clear the session's globals. */
NSBOX_API int nsbox_reset(nsbox_session_t *s, nsbox_error_t **err);

struct nsbox_session_info {
	size_t struct_size;		/* sizeof(struct nsbox_session_info) */
	pid_t pid;			/* host pid of the sandbox's init */
	bool alive;
	char cgroup[256];		/* the sandbox's cgroup ("" if none) */
	uint64_t memory_limit;		/* bytes, 0 none */
	uint64_t pids_limit;
	double cpus_limit;
	uint64_t memory_current;	/* bytes in use now (0 if unknown) */
	uint64_t memory_peak;
	char python[32];		/* since 0.2.0: the sandbox's Python version, "3.11.2" */
};
/* Fill *info (set info->struct_size first).  Also from the thread driving
 * an event-driven exec on s (nsbox_exec_start).  Errors: -EINVAL, -EBUSY. */
NSBOX_API int nsbox_session_info(nsbox_session_t *s, struct nsbox_session_info *info, nsbox_error_t **err);

/* ---- session files (since 0.5.0) ----------------------------------------
 *
 * Files inside a session's sandbox, with or without a workspace.  The
 * runner does the work inside the sandbox, as the sandbox's user and in its
 * mount namespace (nsbox-protocol(7), FILES): the host never opens a path
 * the sandbox controls, so a symlink, fifo or renamed entry planted inside
 * only changes what the sandbox itself sees.  Relative paths are relative
 * to the runner's working directory.  Reads, and writes of 256 KiB or
 * more, cross in a memfd the library makes (one request; the runner copies
 * in the kernel); smaller writes as raw bytes after the request.  Errors
 * (besides -EINVAL bad arguments, -EBUSY, -ENOTCONN the session ended):
 * the errno seen inside, negated: -ENOENT no such file or directory,
 * -EISDIR a directory, -EINVAL not a regular file (fifo, device, socket),
 * -EFBIG over the cap, -ENOSPC/-EDQUOT the sandbox's space is full,
 * -EACCES, -ENOTDIR, -ELOOP, -ENOTSUP the runner is too old. */

/* Write data[0..len) to path, creating it with mode (-1: 0644) or
 * truncating it.  At most 64 MiB per call (-EFBIG), or NSBOX_FILE_MAX
 * bytes when that is set in the environment. */
NSBOX_API int nsbox_write_file(nsbox_session_t *s, const char *path, const void *data, size_t len, int mode,
			       nsbox_error_t **err);
/* Read path: at most max bytes (0: 64 MiB or NSBOX_FILE_MAX), -EFBIG past it.  On success
 * *data is malloc'd (nsbox_free), NUL-terminated after *len bytes. */
NSBOX_API int nsbox_read_file(nsbox_session_t *s, const char *path, char **data, size_t *len, uint64_t max,
			      nsbox_error_t **err);
/* List directory path as JSON (nsbox_free):
 * {"entries": [{"name": "a.txt", "type": "file", "size": 12}, ...],
 *  "truncated": false}; type is "file", "dir", "symlink", "fifo",
 * "socket", "char", "block" or "other" (of the entry itself, not what a
 * symlink points to); a name that is not UTF-8 comes with "name_hex" (its
 * bytes) and a lossy "name".  At most 50000 entries ("truncated": true
 * when there were more; since 0.5.0, 100000 before). */
NSBOX_API int nsbox_list_files(nsbox_session_t *s, const char *path, char **json, nsbox_error_t **err);
/* Make directory path and missing parents (mode -1: 0755); an existing
 * directory is not an error. */
NSBOX_API int nsbox_make_dir(nsbox_session_t *s, const char *path, int mode, nsbox_error_t **err);

/* Whole trees.  nsbox_download_dir copies directory path inside into the
 * host directory local (made if missing, not its parents): regular files
 * and directories only (symlinks, fifos, devices and names that are not
 * UTF-8 are skipped).  Each name the sandbox listed must be one path
 * component (no '/', not "." or "..", no control characters), and each is
 * made beneath its parent's descriptor with mkdirat or openat2
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) and
 * O_CREAT | O_EXCL | O_NOFOLLOW: nothing on the host is followed or
 * overwritten (-EEXIST).  Caps: max_bytes in all, of the host's disk
 * (files in whole blocks, a block per directory; 0: 1 GiB), max_files
 * entries (0: 100000), the per-file cap of nsbox_read_file, 64 levels
 * (-ELOOP), else -EFBIG (also for a directory of more entries than
 * nsbox_list_files gives); what was copied before a failure stays.
 * nsbox_upload_dir copies the host directory local to path inside (made
 * with its parents): regular files (the nsbox_write_file cap each) and
 * directories, each opened beneath its parent with O_NOFOLLOW; symlinks and
 * special files are skipped, never followed.  Both return the number of
 * files copied (>= 0), or a negative errno as above (-EINVAL for a host
 * name that is not UTF-8). */
#define NSBOX_DIR_MAX_BYTES (1ull << 30)
#define NSBOX_DIR_MAX_FILES 100000
NSBOX_API int nsbox_download_dir(nsbox_session_t *s, const char *path, const char *local, uint64_t max_bytes,
				 uint64_t max_files, nsbox_error_t **err);
NSBOX_API int nsbox_upload_dir(nsbox_session_t *s, const char *local, const char *path, nsbox_error_t **err);

/* ---- commands ----------------------------------------------------------- */

struct nsbox_run_opts {
	size_t struct_size;		/* sizeof(struct nsbox_run_opts) */
	/* The command's stdin, stdout and stderr (3 fds, borrowed), or NULL
	 * for the caller's 0, 1 and 2.  Since 0.5.0 a terminal among them is
	 * never handed over: output bound for it goes to a pseudo-terminal of
	 * the command's own and input from it through a pipe, relayed by a
	 * process of ours until the command ends (but controlling_tty). */
	const int *stdio;
	nsbox_warn_fn warn;		/* may be NULL */
	void *warn_userdata;
	/* From the call on, SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the
	 * caller are passed on to the command; one that comes while the
	 * sandbox is being built reaches it as soon as it exists.  Handlers
	 * are installed at the start and the old ones restored before
	 * returning; a signal the caller ignores stays ignored, and one
	 * caught when no command came of it is raised again for the caller's
	 * own handler.  One such call at a time per process: -EBUSY
	 * otherwise. */
	bool forward_signals;
	/* Launch from this process instead of the helper (see
	 * nsbox_session_opts.in_process): single-threaded callers only. */
	bool in_process;
	/* (since 0.5.0) Make the command's stdin its controlling terminal
	 * (TIOCSCTTY after setsid), so that a shell has job control.  For a
	 * pseudo-terminal the caller made for this run and relays, as
	 * nsbox(1) does when its stdin is a terminal; never the caller's
	 * own terminal (the kernel refuses one that already controls a
	 * session, and the run fails).  in_process only: -EINVAL with the
	 * helper. */
	bool controlling_tty;
	/* (since 0.5.0) With a [Network] Allow= rule, the egress proxy also
	 * writes each audit record, as a line, to *net_log_fd (as
	 * nsbox_session_opts.net_log_fd; borrowed during the call).  NULL:
	 * none.  A pointer (like stdio), so that the struct grows past the
	 * older one's tail padding: an older caller's struct_size leaves it
	 * NULL.  Read it while the command runs (a pipe: from another thread):
	 * while it is full, the command's network waits.  -EBADF when it is
	 * not an open descriptor. */
	const int *net_log_fd;
	/* (since 0.5.0) With a [Network] Allow= rule, each audit record (as
	 * nsbox_session_opts.net_audit: one per connection or DNS query, as
	 * it ends) is passed to net_audit on the thread that called
	 * nsbox_run, while it waits for the command; every record the proxy
	 * wrote has been delivered when nsbox_run returns (records still
	 * coming a second after the sandbox's end are dropped, with a
	 * warning).  Must not call nsbox_run.  May be NULL; with net_log_fd
	 * too, both get every record. */
	nsbox_net_audit_fn net_audit;
	void *net_audit_userdata;
};

struct nsbox_run_status {
	size_t struct_size;		/* sizeof(struct nsbox_run_status) */
	int exit_code;			/* what nsbox(1) exits with: the command's status, 128+N for
					 * signal N, 123 memory limit, 124 time limit, 126/127 exec */
	bool exited;			/* exit_status is valid, else term_signal */
	int exit_status;
	int term_signal;
	bool time_limit;		/* killed by the policy's TimeLimit */
	bool oom_killed;		/* the memory limit killed something */
	int exec_errno;			/* the command could not be executed (then 126/127) */
	uint64_t peak_memory;		/* bytes */
	double cpu_user, cpu_system, wall;	/* seconds */
	char cgroup_mode[16];		/* "v2", "hybrid", "v1" or "none" */
	bool memory_enforced, pids_enforced, cpu_enforced;	/* by a cgroup (else rlimits) */
};

/* Run argv (argv[0] searched in the sandbox's PATH) in a new sandbox under
 * policy p and wait for it, enforcing the policy's limits.  Returns 0 with
 * *st filled (st->struct_size set by the caller) whenever the command was
 * started, whatever became of it, or could not be executed inside.  Errors:
 * -EINVAL bad arguments, -EBUSY another forward_signals run, -EPERM /
 * -ENOSYS the host can't create sandboxes (message names the step), -ENOMEM. */
NSBOX_API int nsbox_run(const nsbox_policy_t *p, char *const argv[], const struct nsbox_run_opts *opts,
			struct nsbox_run_status *st, nsbox_error_t **err);

/* ---- the host (since 0.4.0) --------------------------------------------
 *
 * What this host supports and what nsbox will do about it (what nsbox(1)'s
 * `info` prints), a self-test of the sandbox (`doctor`), and two checks a
 * front end makes before it starts a sandbox for nothing. */

/* A cgroup controller as this process can use it for sandboxes. */
struct nsbox_host_cgroup_ctrl {
	bool enforced;			/* limits are enforced through a cgroup; else the fallback */
	bool v1;			/* ... of a v1 hierarchy (else v2) */
	char dir[512];			/* the directory sandbox cgroups are created under */
	char why[160];			/* not enforced: why not */
};

struct nsbox_host_info {
	size_t struct_size;		/* sizeof(struct nsbox_host_info), set by the caller */
	uid_t euid;			/* of the calling process, for which all this holds */
	/* User namespaces.  The sysctls, -1 where the host has no such file. */
	long max_user_namespaces;
	long unprivileged_userns_clone;			/* Debian's */
	long apparmor_restrict_unprivileged_userns;	/* Ubuntu's */
	bool userns;			/* this process may create the sandboxes' user namespaces */
	/* Cgroups. */
	char cgroup_mode[16];		/* "v2", "hybrid", "v1" or "none" (as nsbox_run_status) */
	char cgroup_v2_root[256];	/* the cgroup2 mount, "" if none */
	char cgroup_v2_self[512];	/* this process's v2 cgroup */
	char cgroup_v2_parent[512];	/* where v2 sandbox cgroups go, "" if nowhere writable */
	bool cgroup_v2_kill;		/* cgroup.kill exists */
	struct nsbox_host_cgroup_ctrl memory, pids, cpu;
	/* Moving each sandbox's pid 1 into v1 cgroups: "none" (pure v2, where it
	 * is cloned straight into its cgroup, or no v1 cgroup used), "fast" (a
	 * cgroup mount has favordynmods) or "slow" (a start may wait for an RCU
	 * grace period). */
	char cgroup_migration[8];
	char cgroup_migration_hint[512];	/* "slow": the fix, lines separated by '\n' */
	int landlock_abi;		/* the kernel's Landlock ABI version, 0 none */
	char seccomp_actions[256];	/* /proc/sys/kernel/seccomp/actions_avail, "" unknown */
	char runner[4096];		/* the runner binary sessions use, "" when not found */
	char runner_error[256];		/* ... and then why not */
};

/* Inspect the host as the calling process sees it: reads /proc, /sys and
 * the cgroup mounts, creates nothing.  Fills *info (info->struct_size set
 * by the caller; fields beyond it are left alone).  Errors: -EINVAL. */
NSBOX_API int nsbox_host_info(struct nsbox_host_info *info, nsbox_error_t **err);

/* One probe of nsbox_selftest(): something sandboxed code must not be able
 * to do (probe, e.g. "mount"), whether it could (escaped) and what
 * happened ("EPERM", "succeeded").  Strings borrowed for the call. */
typedef void (*nsbox_probe_fn)(void *userdata, const char *probe, bool escaped, const char *detail);

struct nsbox_selftest_opts {
	size_t struct_size;		/* sizeof(struct nsbox_selftest_opts) */
	const nsbox_policy_t *policy;	/* NULL: "default" with a 20 s time limit */
	nsbox_probe_fn probe;		/* called once per probe, in order; may be NULL */
	void *probe_userdata;
	nsbox_warn_fn warn;		/* may be NULL */
	void *warn_userdata;
	bool in_process;		/* as nsbox_run_opts.in_process */
};

/* Start a sandbox with nsbox_run() and run escape probes inside it (ids,
 * capabilities, no_new_privs, seccomp, network, hidden host files, writes
 * to /usr and /proc/sys, namespaces, mount, ptrace, bpf, keyctl, io_uring,
 * TIOCSTI on the caller's stdin, mknod), written in Python: python3 from
 * the sandbox's PATH.  opts may be NULL.  On success *escaped (may be
 * NULL) receives how many probes got out: 0 when the host isolates
 * sandboxes as designed.  Errors: those of nsbox_run() (the sandbox could
 * not start), -ENOENT no python3 in the sandbox, -EPROTO the probes did not
 * complete (the message says how they ended), -ENOMEM. */
NSBOX_API int nsbox_selftest(const struct nsbox_selftest_opts *opts, unsigned *escaped, nsbox_error_t **err);

/* A size as policies write it: "123", "64K", "256M", "2G", "1T" (binary
 * units).  Errors: -EINVAL (the message quotes s). */
NSBOX_API int nsbox_parse_size(const char *s, uint64_t *bytes, nsbox_error_t **err);

/* 0 when name is acceptable to nsbox_session_add_tool() (a Python
 * identifier of at most 64 bytes, nsbox-protocol(7), and since 0.5.0 not
 * a keyword, a builtin such as len or print, or a dunder; or NS.NAME as
 * nsbox_session_add_tool() says); -EINVAL otherwise. */
NSBOX_API int nsbox_check_tool_name(const char *name, nsbox_error_t **err);

/* ---- handing a sandbox over (since 0.4.0; nsboxd(8)) -------------------
 *
 * A service that makes sandboxes for other processes keeps each sandbox's
 * lifecycle but gives its client the runner socket, so that execs and tool
 * calls travel straight between the client and its sandbox
 * (nsbox-protocol(7)). */

/* Give away the runner socket of session s.  On success *runner_fd is the
 * session's end of the runner socket (blocking, CLOEXEC), *pidfd a pidfd of
 * the sandbox's pid 1 (readable when it ends) and *hello_json the runner's
 * HELLO as JSON text (nsbox_free() it); all three are the caller's.  From
 * then on s only controls the sandbox: nsbox_session_kill(),
 * nsbox_session_end(), nsbox_session_info() and nsbox_session_free();
 * nsbox_exec() and the other requests fail with -ENOTCONN.  Outputs are
 * untouched on failure.  Errors: -EINVAL, -ENOTCONN the session has ended,
 * -EBUSY the session is in use, or the runner sent bytes not yet read. */
NSBOX_API int nsbox_session_handoff(nsbox_session_t *s, int *runner_fd, int *pidfd, char **hello_json,
				    nsbox_error_t **err);
/* SIGKILL the sandbox of s and return at once (nsbox_session_end() reaps
 * it).  Any thread; accepts NULL. */
NSBOX_API void nsbox_session_kill(nsbox_session_t *s);
/* Wait for the sandbox to end (with kill, SIGKILL it first), reap it,
 * remove its cgroups and fill *st (st->struct_size set by the caller):
 * exited, exit_status, term_signal, oom_killed, peak_memory, cpu_* and wall
 * are meaningful, exit_code is what nsbox(1) would exit with.  s stays
 * valid for nsbox_session_info() (alive false) and nsbox_session_free().
 * Without kill, blocks until the sandbox ends by itself (poll the pidfd
 * from nsbox_session_handoff() first).  A bounded workspace is copied back
 * here, as by nsbox_session_free().  Errors: -EINVAL. */
NSBOX_API int nsbox_session_end(nsbox_session_t *s, bool kill, struct nsbox_run_status *st, nsbox_error_t **err);

/* How many helper processes this process may run to make sandboxes, 1 (the
 * default) to 4.  A helper makes one sandbox at a time; a host that makes
 * sandboxes from several threads at once (nsboxd's workers) makes them in
 * parallel with more.  Each helper is started when first needed; lowering
 * the count stops none (their sandboxes stay theirs).  Any thread.
 * Errors: -EINVAL n is out of range. */
NSBOX_API int nsbox_set_helpers(unsigned n);

#ifdef __cplusplus
}
#endif
#endif
