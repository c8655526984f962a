/* `nsbox-runner --helper`: libnsbox's helper process (helper/helper.h).
 *
 * Single-threaded by design: it clones sandboxes (jail_start), which a
 * threaded process must not do.  It initialises CPython once, the
 * template, and for each SPAWN forks it into a new jail: the sandbox
 * skips CPython's initialisation and shares the template's pages
 * copy-on-write.  The template holds nothing from the host: the library
 * starts it with an empty environment and /dev/null on 0-2, and it keeps
 * no request data after answering (the policy text is wiped: Set= may
 * carry secrets that another session must not find in its copy of our
 * heap).  The cold path (flag HELPER_COLD) execs the runner afresh from
 * the sealed memfd on fd 4, for comparison.
 *
 * A spare (asked for by SPAWN's flag HELPER_SPARE, or for every SPAWN with
 * --spare, which the library passes when the host sets NSBOX_SPARE=1: it
 * costs one idle sandbox): after a template SPAWN, when no request is waiting, the helper
 * makes one more sandbox with the same policy, with a session socket of
 * its own, and leaves its runner waiting for HELLO.  The next template
 * SPAWN whose policy text is byte for byte the same gets it (its pidfd and
 * our end of its socket go back; the library's socket is closed): the
 * jail's setup (namespaces, mounts, seccomp, cgroup) is then off the
 * session's critical path.  The spare has run no code but the runner's;
 * its policy text is kept in a memfd, not in our heap, so that sandboxes
 * forked later do not find it in their copy of our memory.
 *
 * RUN makes a sandbox that executes a command with the caller's stdio
 * (nsbox_run() from a multithreaded host): the three fds are put on our
 * 0-2 for the clone (we are single-threaded and serve one request at a
 * time) and /dev/null goes back on them at once. */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "cgroup.h"
#include "helper.h"
#include "proto.h"
#include "util.h"

struct slot {
	bool used;
	uint64_t id;
	struct jail j;
};

static struct slot *slots;
static size_t n_slots;
static uint64_t next_id = 1;

static struct {
	bool enabled;		/* --spare */
	uint64_t id;		/* its slot; 0: no spare */
	int sock;		/* our end of its session socket */
	int text_fd;		/* memfd: the policy text it was made from; -1: none */
	size_t text_len;
	bool want;		/* make one when idle (text_fd holds the policy) */
	char warnings[NSBOX_ERR_MSG_MAX];	/* the jail's warnings for it */
} spare = { .sock = -1, .text_fd = -1 };

/* The jail's warnings for the request being served, one per line, for
 * the answer's msg (truncated if there are very many). */
static char *warn_to;

static void collect_warning(void *ctx, const char *msg)
{
	size_t have = strlen(warn_to), room = sizeof(((struct helper_rep *)0)->warnings) - have;

	(void)ctx;
	if (room > 1)
		snprintf(warn_to + have, room, "%s%s", have ? "\n" : "", msg);
}

/* Imported once here, shared by every session: what the runner itself
 * imports on demand (errors, REPL, tools, the want_value path), threading
 * (its io thread is C, but user code and asyncio's executor use it), and
 * what user code commonly imports.  decimal costs ~2.5 ms and 0.4 MiB.
 * Not asyncio: 7.5 MiB and ~25 ms, and it pulls in ssl (OpenSSL reads the
 * host's configuration); sessions import it themselves. */
static const char *const template_preload[] = {
	"_ast", "codeop", "inspect", "keyword", "linecache", "traceback", "threading",
	"random", "json", "re", "collections", "datetime", "math", "decimal", "statistics", "dataclasses",
};

struct template_arg {
	bool dist_packages;
	const char *preload;	/* Preload=, in the child's copy of the policy */
};

/* The runner's argv for a cold start (an exec of the memfd on fd 4). */
static void cold_argv(const struct nsbox_policy *p, char *argv[6])
{
	int ac = 1;

	argv[0] = "nsbox-runner";
	if (p->dist_packages)
		argv[ac++] = "--dist-packages";
	if (p->preload && *p->preload) {
		argv[ac++] = "--preload";
		argv[ac++] = p->preload;
	}
	argv[ac] = NULL;
}

/* Inside the new sandbox, after every setup step (seccomp included):
 * become a fresh session of the initialised interpreter. */
static int template_child(void *arg)
{
	const struct template_arg *a = arg;
	struct nsbox_err err = { 0 };
	extern char **environ;

	PyOS_AfterFork_Child();
	signal(SIGPIPE, SIG_IGN);
	runner_rlimit_tune();
	/* User code's subprocesses must not inherit the protocol socket. */
	if (fcntl(3, F_SETFD, FD_CLOEXEC) < 0)
		return NSBOX_EXIT_SETUP;
	if (runner_py_adopt(a->dist_packages, environ, &err) < 0 || runner_py_preload_list(a->preload, &err) < 0 ||
	    (a->preload && *a->preload && runner_py_freeze(&err) < 0) || runner_py_session(3, &err) < 0) {
		json_t *m = json_pack("{s:s}", "message", err.msg);
		char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;

		if (s)
			proto_write_frame(3, PROTO_ERROR, 0, s, strlen(s), NULL);
		free(s);
		json_decref(m);
		return NSBOX_EXIT_SETUP;
	}
	return runner_py_serve();
}

static struct slot *find_slot(uint64_t id)
{
	for (size_t i = 0; i < n_slots; i++)
		if (slots[i].used && slots[i].id == id)
			return &slots[i];
	return NULL;
}

static struct slot *new_slot(void)
{
	struct slot *n;

	for (size_t i = 0; i < n_slots; i++)
		if (!slots[i].used)
			return &slots[i];
	n = realloc(slots, (n_slots + 16) * sizeof(*n));
	if (!n)
		return NULL;
	memset(n + n_slots, 0, 16 * sizeof(*n));
	slots = n;
	n_slots += 16;
	return &slots[n_slots - 16];
}

static void rep_cgroups(struct helper_rep *rep, const struct jail *j)
{
	rep->cg_mode = j->cg_mode;
	for (int i = 0; i < 3; i++)
		rep->cg_enforced[i] = j->cg_enforced[i];
}

static const char *mem_cgroup(const struct jail *j)
{
	if (!j->cg)
		return "";
	return j->cg->v1_dir[CTRL_MEMORY][0] ? j->cg->v1_dir[CTRL_MEMORY] : j->cg->v2_dir;
}

/* What every answer about a running sandbox says of it. */
static void rep_sandbox(struct helper_rep *rep, const struct slot *sl)
{
	rep->id = sl->id;
	rep->pid = sl->j.pid;
	snprintf(rep->cgroup, sizeof(rep->cgroup), "%s", mem_cgroup(&sl->j));
	rep_cgroups(rep, &sl->j);
}

static void rep_err(struct helper_rep *rep, const struct nsbox_err *err)
{
	rep->failed = 1;
	err_copy(&rep->err, err);
}

static void drop_spare(void)
{
	struct slot *sl = spare.id ? find_slot(spare.id) : NULL;

	if (sl) {
		jail_destroy(&sl->j);
		memset(sl, 0, sizeof(*sl));
	}
	if (spare.sock >= 0)
		close(spare.sock);
	spare.id = 0;
	spare.sock = -1;
}

static void forget_text(void)
{
	if (spare.text_fd >= 0)
		close(spare.text_fd);
	spare.text_fd = -1;
	spare.text_len = 0;
	spare.want = false;
}

/* Is the policy text the spare's?  Compared from the memfd, in a buffer
 * wiped afterwards. */
static bool same_text(const char *text, size_t len)
{
	static char buf[HELPER_MAX_POLICY];
	bool same;

	if (spare.text_fd < 0 || len != spare.text_len || len > sizeof(buf))
		return false;
	same = pread(spare.text_fd, buf, len, 0) == (ssize_t)len && !memcmp(buf, text, len);
	explicit_bzero(buf, len);
	return same;
}

/* Remember the policy text of a template SPAWN (for the spare). */
static void keep_text(const char *text, size_t len)
{
	int fd;

	if (same_text(text, len))
		return;
	drop_spare();
	forget_text();
	fd = memfd_create("nsbox-spare-policy", MFD_CLOEXEC);
	if (fd < 0)
		return;
	if (write_full(fd, text, len) < 0) {
		close(fd);
		return;
	}
	spare.text_fd = fd;
	spare.text_len = len;
}

/* Hand the spare over if it fits: fills rep, returns the pidfd (and the
 * socket in *sock_out), or -1 (then there is no spare any more). */
static int take_spare(const char *text, size_t len, bool refill, struct helper_rep *rep, int *sock_out)
{
	struct slot *sl = spare.id ? find_slot(spare.id) : NULL;
	struct pollfd p;
	int pidfd;

	if (!sl || !same_text(text, len)) {
		drop_spare();
		return -1;
	}
	/* A spare that died (or whose runner gave up) is no use. */
	p = (struct pollfd){ sl->j.pidfd, POLLIN, 0 };
	if (poll(&p, 1, 0) != 0) {
		drop_spare();
		return -1;
	}
	pidfd = fcntl(sl->j.pidfd, F_DUPFD_CLOEXEC, 5);
	if (pidfd < 0) {
		drop_spare();
		return -1;
	}
	rep_sandbox(rep, sl);
	rep->has_sock = 1;
	snprintf(rep->warnings, sizeof(rep->warnings), "%s", spare.warnings);
	*sock_out = spare.sock;
	spare.sock = -1;
	spare.id = 0;
	spare.want = refill;
	return pidfd;
}

/* Make the spare (when no request waits). */
static void make_spare(void)
{
	static char text[HELPER_MAX_POLICY + 1];
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	struct template_arg targ = { 0 };
	struct jail_spec spec = { .exec_fd = -1, .n_pass_fds = 1 };
	char *argv[6];
	struct slot *sl;
	int sv[2], r;

	spare.want = false;
	if (spare.id || spare.text_fd < 0 || spare.text_len > HELPER_MAX_POLICY)
		return;
	if (pread(spare.text_fd, text, spare.text_len, 0) != (ssize_t)spare.text_len)
		goto out;
	if (policy_from_text(&p, text, spare.text_len, "<libnsbox policy>", &err) < 0)
		goto out;
	sl = new_slot();
	if (!sl || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		goto out;
	(void)sock_refuse_fds(sv[0]); /* as session.c's: the host's end */
	targ.dist_packages = p.dist_packages;
	targ.preload = p.preload;
	spec.policy = &p;
	if (p.rootfs) {
		/* Another root tree brings its own stdlib: a fresh runner on it. */
		cold_argv(&p, argv);
		spec.argv = argv;
		spec.exec_fd = HELPER_EXEC_FD;
	} else {
		spec.child_fn = template_child;
		spec.child_arg = &targ;
	}
	spec.pass_fds = &sv[1];
	spec.warn = collect_warning;
	spare.warnings[0] = '\0';
	warn_to = spare.warnings;
	PyOS_BeforeFork();
	r = jail_start(&sl->j, &spec, &err);
	PyOS_AfterFork_Parent();
	close(sv[1]);
	if (r < 0) {
		close(sv[0]);
		goto out;
	}
	sl->used = true;
	sl->id = next_id++;
	spare.id = sl->id;
	spare.sock = sv[0];
out:
	explicit_bzero(text, spare.text_len);
	policy_free(&p); /* wipes every string */
}

/* A sandbox just started in sl: give it an id and fill the answer.
 * Returns the pidfd to pass back, or -1 (the sandbox is destroyed). */
static int commit_slot(struct slot *sl, struct helper_rep *rep, struct nsbox_err *err)
{
	int pidfd = fcntl(sl->j.pidfd, F_DUPFD_CLOEXEC, 5);

	if (pidfd < 0) {
		err_sys(err, "dup pidfd");
		jail_destroy(&sl->j);
		memset(sl, 0, sizeof(*sl));
		return -1;
	}
	sl->used = true;
	sl->id = next_id++;
	rep_sandbox(rep, sl);
	return pidfd;
}

/* SPAWN: returns the pidfd to pass back, or -1.  fds_in: the session
 * socket, then (HELPER_NET_AUDIT) the proxy's audit descriptors. */
static int do_spawn(const struct helper_req *req, char *text, const int fds_in[HELPER_MAX_FDS],
		    struct helper_rep *rep, int *sock_out)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	struct template_arg targ = { 0 };
	char *argv[6];
	int sock = fds_in[0], audit[EGRESS_AUDIT_FDS];
	size_t n_audit = 0;
	struct jail_spec spec = { .exec_fd = -1, .pass_fds = &sock, .n_pass_fds = 1, .warn = collect_warning,
				  .net_audit_fds = audit };
	bool net_audit = req->flags & HELPER_NET_AUDIT;
	/* A spare has no audit descriptors: a session with them never takes
	 * one, nor has one made after it. */
	bool want_spare = (spare.enabled || (req->flags & HELPER_SPARE)) && !(req->flags & HELPER_COLD) && !net_audit;
	struct slot *sl;
	int r, pidfd;

	if (sock < 0) {
		err_set(&err, EINVAL, "SPAWN without a session socket");
		goto fail;
	}
	for (size_t i = 1; net_audit && i < 1 + EGRESS_AUDIT_FDS; i++)
		if (fds_in[i] >= 0)
			audit[n_audit++] = fds_in[i];
	if (net_audit != (n_audit > 0) || (!net_audit && fds_in[1] >= 0) || fds_in[1 + EGRESS_AUDIT_FDS] >= 0 ||
	    fds_in[HELPER_MAX_FDS - 1] >= 0) {
		err_set(&err, EPROTO, "SPAWN: audit descriptors %s", net_audit ? "missing" : "not asked for");
		goto fail;
	}
	spec.n_net_audit_fds = n_audit;
	if (req->len > HELPER_MAX_POLICY) {
		err_set(&err, E2BIG, "SPAWN: the policy is too large");
		goto fail;
	}
	if (!(req->flags & HELPER_COLD) && !net_audit && (spare.id || spare.text_fd >= 0)) {
		pidfd = take_spare(text, req->len, want_spare, rep, sock_out);
		if (pidfd >= 0)
			return pidfd;
	}
	warn_to = rep->warnings;
	if (policy_from_text(&p, text, req->len, "<libnsbox policy>", &err) < 0)
		goto fail;
	sl = new_slot();
	if (!sl) {
		err_set(&err, ENOMEM, "sandbox table");
		goto fail;
	}
	spec.policy = &p;
	/* Another root tree (RootFS=) brings its own stdlib, which the
	 * template's interpreter has not imported from: a fresh runner on it. */
	if ((req->flags & HELPER_COLD) || p.rootfs) {
		cold_argv(&p, argv);
		spec.argv = argv;
		spec.exec_fd = HELPER_EXEC_FD;
		r = jail_start(&sl->j, &spec, &err);
	} else {
		targ.dist_packages = p.dist_packages;
		targ.preload = p.preload;
		spec.child_fn = template_child;
		spec.child_arg = &targ;
		/* The interpreter's locks must be in a known state in the copy. */
		PyOS_BeforeFork();
		r = jail_start(&sl->j, &spec, &err);
		PyOS_AfterFork_Parent();
	}
	if (r < 0)
		goto fail;
	pidfd = commit_slot(sl, rep, &err);
	if (pidfd < 0)
		goto fail;
	policy_free(&p); /* wipes every string */
	if (want_spare) {
		keep_text(text, req->len);
		spare.want = spare.text_fd >= 0;
	}
	return pidfd;
fail:
	rep_err(rep, &err);
	policy_free(&p); /* wipes every string */
	return -1;
}

/* Put fd on std (0-2) without CLOEXEC, for the sandbox to inherit. */
static int put_stdio(int fd, int std)
{
	if (fd == std)
		return fcntl(fd, F_SETFD, 0);
	return dup2(fd, std) < 0 ? -1 : 0;
}

/* /dev/null, opened once at start (CLOEXEC): putting it back on 0-2 after
 * a RUN can't fail for want of an fd, so a RUN caller's stdio never stays
 * where later sandboxes would inherit it. */
static int devnull = -1;

static int null_stdio(void)
{
	for (int i = 0; i < 3; i++)
		if (dup2(devnull, i) < 0)
			return -1;
	return 0;
}

/* RUN: returns the pidfd to pass back, or -1 (rep says why, or that the
 * command could not be executed).  fds: stdin, stdout, stderr, then
 * (HELPER_NET_AUDIT) the proxy's audit descriptors. */
static int do_run(const struct helper_req *req, char *data, const int fds[HELPER_MAX_FDS], struct helper_rep *rep)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	char **argv = NULL;
	struct jail_spec spec = { .exec_fd = -1, .warn = collect_warning, .net_audit_fds = &fds[3] };
	size_t n_audit = 0;
	struct slot *sl;
	size_t at, alen;
	int r, pidfd = -1;

	if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0) {
		err_set(&err, EINVAL, "RUN without stdin, stdout and stderr");
		goto fail;
	}
	while (n_audit < EGRESS_AUDIT_FDS && fds[3 + n_audit] >= 0)
		n_audit++;
	if (((req->flags & HELPER_NET_AUDIT) != 0) != (n_audit > 0)) {
		err_set(&err, EPROTO, "RUN: audit descriptors %s", n_audit ? "not asked for" : "missing");
		goto fail;
	}
	spec.n_net_audit_fds = n_audit;
	/* argv: argc NUL-terminated strings filling the rest exactly. */
	if (req->len == 0 || req->text_len >= req->len || req->argc == 0 || req->argc > HELPER_MAX_ARGV / 2 ||
	    data[req->len - 1] != '\0') {
		err_set(&err, EPROTO, "malformed RUN request");
		goto fail;
	}
	argv = calloc(req->argc + 1, sizeof(*argv));
	if (!argv) {
		err_set(&err, ENOMEM, "argv");
		goto fail;
	}
	for (at = req->text_len, r = 0; r < (int)req->argc; r++) {
		if (at >= req->len) {
			err_set(&err, EPROTO, "malformed RUN request: argv");
			goto fail;
		}
		argv[r] = data + at;
		alen = strlen(data + at);
		at += alen + 1;
	}
	if (at != req->len) {
		err_set(&err, EPROTO, "malformed RUN request: argv");
		goto fail;
	}
	if (policy_from_text(&p, data, req->text_len, "<libnsbox policy>", &err) < 0 || policy_validate(&p, &err) < 0)
		goto fail;
	sl = new_slot();
	if (!sl) {
		err_set(&err, ENOMEM, "sandbox table");
		goto fail;
	}
	spec.policy = &p;
	spec.argv = argv;
	warn_to = rep->warnings;
	if (put_stdio(fds[0], 0) < 0 || put_stdio(fds[1], 1) < 0 || put_stdio(fds[2], 2) < 0) {
		err_sys(&err, "stdio");
		if (null_stdio() < 0)
			_exit(125);	/* never serve on with a caller's fds on 0-2 */
		goto fail;
	}
	r = jail_start(&sl->j, &spec, &err);
	if (null_stdio() < 0) {
		/* The caller's fds would leak into later sandboxes: stop here
		 * (the library sees the helper die and starts a new one). */
		_exit(125);
	}
	if (r == -2) {
		/* Not executable inside: the status is final, nothing is left. */
		rep->exec_failed = 1;
		rep->st = sl->j.status;
		rep_cgroups(rep, &sl->j);
		memset(sl, 0, sizeof(*sl));
		goto out;
	}
	if (r < 0)
		goto fail;
	pidfd = commit_slot(sl, rep, &err);
	if (pidfd < 0)
		goto fail;
	goto out;
fail:
	rep_err(rep, &err);
out:
	free(argv);
	policy_free(&p); /* wipes every string */
	return pidfd;
}

static void handle(const struct helper_req *req, char *text, const int fds_in[HELPER_MAX_FDS],
		   struct helper_rep *rep, int *fd_out, int *sock_out)
{
	struct slot *sl = NULL;

	if (req->op != HELPER_SPAWN && req->op != HELPER_RUN) {
		sl = find_slot(req->id);
		if (!sl) {
			rep->failed = 1;
			err_set(&rep->err, ESRCH, "no sandbox %llu", (unsigned long long)req->id);
			return;
		}
	}
	switch (req->op) {
	case HELPER_SPAWN:
		*fd_out = do_spawn(req, text, fds_in, rep, sock_out);
		break;
	case HELPER_RUN:
		*fd_out = do_run(req, text, fds_in, rep);
		break;
	case HELPER_KILL:
		jail_kill(&sl->j);
		break;
	case HELPER_DESTROY: {
		struct wsync_job ws;

		/* A bounded workspace's write-back is the library's to run
		 * (helper_destroy), once we have answered: it takes as long as
		 * the sandbox's upper layer makes it, and every other sandbox
		 * of ours would wait behind it (past HELPER_TIMEOUT_MS, the
		 * library kills us, and them). */
		if (jail_take_workspace(&sl->j, &ws) == 1) {
			*fd_out = ws.upper;
			*sock_out = ws.host;
			rep->has_ws = 1;
			rep->ws_uid = ws.uid;
			rep->ws_gid = ws.gid;
			rep->ws_size = ws.size;
		}
		jail_destroy(&sl->j);
		rep->st = sl->j.status;
		memset(sl, 0, sizeof(*sl));
		break;
	}
	default:
		rep->failed = 1;
		err_set(&rep->err, EINVAL, "unknown helper request %u", req->op);
	}
}

/* SIGTERM, SIGHUP or SIGINT sent to the helper itself (a service manager
 * stopping the host's cgroup, a kill): end like a lost connection, taking
 * every sandbox down with its cgroups, instead of dying with them left
 * behind.  (The helper has its own session: a ^C on the host's terminal
 * never reaches it.) */
static volatile sig_atomic_t stop_signal;
static sigset_t wait_mask;	/* the mask while waiting: stop signals let through */

static void on_stop(int sig)
{
	stop_signal = sig;
}

static void shutdown_all(void)
{
	drop_spare();
	forget_text();
	for (size_t i = 0; i < n_slots; i++)
		if (slots[i].used)
			jail_destroy(&slots[i].j);
}

int runner_helper_main(bool use_spare)
{
	static char buf[sizeof(struct helper_req) + HELPER_MAX_POLICY + HELPER_MAX_ARGV + 1];
	static struct helper_rep rep;
	struct nsbox_err err = { 0 };
	int keep[2] = { HELPER_CTL_FD, HELPER_EXEC_FD };

	if (fcntl(HELPER_CTL_FD, F_SETFD, FD_CLOEXEC) < 0 || fcntl(HELPER_EXEC_FD, F_SETFD, FD_CLOEXEC) < 0)
		return 2;
	close_fds_except(5, keep, 2);
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		return 125;
	/* Its answers carry descriptors (util.h, nofile_raise): a sandbox
	 * holding its user's in-flight count up must not make them fail, and
	 * the helper end every sandbox it holds. */
	nofile_raise();
	spare.enabled = use_spare;
	signal(SIGPIPE, SIG_IGN);
	/* Sandboxes are reaped by DESTROY; none may be auto-reaped. */
	signal(SIGCHLD, SIG_DFL);
	{
		/* Blocked but while waiting for a request (ppoll below), so a
		 * stop never lands between the check and the wait. */
		struct sigaction sa = { .sa_handler = on_stop };
		static const int stops[] = { SIGTERM, SIGHUP, SIGINT };
		sigset_t block;

		sigemptyset(&sa.sa_mask);
		sigemptyset(&block);
		for (size_t k = 0; k < ARRAY_SIZE(stops); k++) {
			if (sigaction(stops[k], &sa, NULL) < 0)
				return 125;
			sigaddset(&block, stops[k]);
		}
		if (sigprocmask(SIG_BLOCK, &block, &wait_mask) < 0)
			return 125;
	}
	if (runner_py_init(false, &err) < 0 || runner_py_preload(template_preload, ARRAY_SIZE(template_preload), &err) < 0 ||
	    runner_py_template_stdio(&err) < 0 || runner_py_freeze(&err) < 0)
		return 125;
	for (;;) {
		union {
			char b[CMSG_SPACE(HELPER_MAX_FDS * sizeof(int))];
			struct cmsghdr align;
		} cm;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		struct helper_req req;
		struct cmsghdr *c;
		int fds_in[HELPER_MAX_FDS], fd_out = -1, sock_out = -1;
		size_t n_in = 0;
		ssize_t n;

		for (size_t i = 0; i < HELPER_MAX_FDS; i++)
			fds_in[i] = -1;
		if (spare.want) {
			struct pollfd p = { HELPER_CTL_FD, POLLIN, 0 };

			/* Only while nobody waits for us. */
			if (poll(&p, 1, 0) == 0)
				make_spare();
		}
		{
			struct pollfd p = { HELPER_CTL_FD, POLLIN, 0 };

			if (ppoll(&p, 1, NULL, &wait_mask) < 0 && errno != EINTR)
				break;
			if (stop_signal)
				break;
			if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
		}
		n = recvmsg(HELPER_CTL_FD, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;	/* the library is gone: so are its sandboxes */
		for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < k; i++) {
					int fd;

					memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
					if (n_in < HELPER_MAX_FDS)
						fds_in[n_in++] = fd;
					else
						close(fd);
				}
			}
		memset(&rep, 0, sizeof(rep));
		rep.magic = HELPER_MAGIC;
		memcpy(&req, buf, n >= (ssize_t)sizeof(req) ? sizeof(req) : 0);
		if (n < (ssize_t)sizeof(req) || req.magic != HELPER_MAGIC || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
		    req.len != (size_t)n - sizeof(req) || req.text_len > req.len ||
		    req.text_len > HELPER_MAX_POLICY) {
			rep.failed = 1;
			err_set(&rep.err, EPROTO, "malformed helper request");
		} else {
			handle(&req, buf + sizeof(req), fds_in, &rep, &fd_out, &sock_out);
		}
		for (size_t i = 0; i < n_in; i++)
			close(fds_in[i]);
		explicit_bzero(buf, (size_t)n);
		{
			struct iovec oiov = { &rep, sizeof(rep) };
			int fds[2] = { fd_out, sock_out };

			n = send_with_fds(HELPER_CTL_FD, &oiov, 1, fds, fd_out < 0 ? 0 : sock_out >= 0 ? 2 : 1);
			if (fd_out >= 0)
				close(fd_out);
			if (sock_out >= 0)
				close(sock_out);
			if (n < 0)
				break;
		}
	}
	shutdown_all();
	return stop_signal ? 128 + stop_signal : 0;
}
