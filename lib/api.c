/* libnsbox's public API (include/nsbox.h) over the core: policies
 * (policy/), sessions (host/session.c) made by the helper process
 * (helper/helper.c).  This file only checks arguments, converts between the
 * public JSON-text interface and jansson, and maps errors to negative
 * errno values; it never prints and never exits.  Compiled with
 * -fvisibility=hidden: only NSBOX_API symbols are exported, through the
 * version script lib/libnsbox.sym. */
#include "nsbox.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "error.h"
#include "cgroup.h"
#include "policy.h"
#include "proto.h"
#include "run.h"
#include "session.h"
#include "files.h"
#include "helper.h"
#include "hostpath.h"
#include "util.h"
#include "api-internal.h"

#include "api-private.h"

struct nsbox_policy_handle {
	struct nsbox_policy p;
	/* The real path of the file the policy was read from (NULL: a
	 * built-in one), to refuse a workspace or writable bind holding it,
	 * and its path as given, made absolute (a link on the way counts). */
	char *file, *given;
};

struct api_tool {
	char *name;
	char *description;
	json_t *schema;
	nsbox_tool_fn fn;
	void *userdata;
	struct api_tool *next;
};

struct nsbox_sess {
	struct nsbox_session *s;
	struct nsbox_policy policy; /* the session's own copy */
	struct api_tool *tools;
	atomic_bool busy; /* one call at a time: -EBUSY otherwise; held by an event-driven exec
					 * from nsbox_exec_start() to nsbox_exec_result() */
	bool ev_exec;	  /* an event-driven exec holds busy */
	bool ev_done;	  /* ... and has reported DONE */
	pid_t owner;	  /* the process that made it (fork check) */
	uint64_t file_max; /* the file calls' default cap: NSBOX_FILE_MAX, read at nsbox_session_new */
};

struct nsbox_result {
	enum nsbox_status status;
	char *value;
	char *out, *err;
	size_t out_len, err_len;
	char *etype, *emsg, *tb;
	json_t *msg;	      /* the RESULT message, or NULL */
	_Atomic(char *) json; /* its text: made by the first nsbox_result_json() */
	int exit_code;
	double wall, cpu;
	uint64_t peak;
	unsigned tool_calls;
	/* Rich results, decoded from msg when it has any. */
	struct rich_display *displays;
	size_t n_displays;
	struct rich_file *files;
	size_t n_files;
	bool displays_truncated, files_truncated;
};

struct rich_item {
	const char *mime; /* borrowed from msg */
	char *data;	  /* NUL-terminated */
	size_t len;
};

struct rich_display {
	struct rich_item *items;
	size_t n;
};

struct rich_file {
	const char *name; /* borrowed from msg */
	char *data;	  /* NULL: not sent */
	size_t len;
	uint64_t size;
};

/* ---- errors ---- */

/* When even the error object cannot be allocated. */
static struct nsbox_error oom_error = { -ENOMEM, "out of memory", "" };

/* Only the errno values libnsbox(3) documents leave the library (as
 * libseccomp's _rc_filter): what the core or the kernel says otherwise is
 * mapped to the documented value nearest in meaning, EIO when none is. */
static int rc_filter(int code)
{
	switch (-code) {
	case EINVAL:
	case ENOENT:
	case EEXIST:
	case EBUSY:
	case ENOTCONN:
	case EPERM:
	case ENOSPC:
	case ENOSYS:
	case ECONNRESET:
	case ETIMEDOUT:
	case EIO:
	case ENOMEM:
	case EBADF:
	case EAGAIN:
	case E2BIG:
		return code;
	case EACCES:
	case EROFS:
		return -EPERM;
	case EMSGSIZE:
	case EFBIG:
	case ENAMETOOLONG:
	case EILSEQ:
	case ERANGE:
	case ENOTDIR:
		return -EINVAL;
	case EPIPE:
		return -ENOTCONN;
	case EUSERS:
	case EMFILE:
	case ENFILE:
	case EDQUOT:
		return -ENOSPC;
	case EOPNOTSUPP:
		return -ENOSYS;
	default:
		return -EIO;
	}
}

static int fail_step(nsbox_error_t **err, int code, const char *msg, const char *step)
{
	code = rc_filter(code);
	if (err) {
		struct nsbox_error *e = calloc(1, sizeof(*e));

		if (e && (e->msg = strdup(msg ? msg : "")) != NULL) {
			e->code = code;
			snprintf(e->step, sizeof(e->step), "%s", step ? step : "");
			*err = e;
		} else {
			free(e);
			*err = &oom_error;
		}
	}
	return code;
}

static int fail_msg(nsbox_error_t **err, int code, const char *msg)
{
	return fail_step(err, code, msg, NULL);
}

static int fail(nsbox_error_t **err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(nsbox_error_t **err, int code, const char *fmt, ...)
{
	char buf[NSBOX_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return fail_msg(err, code, buf);
}

/* A core error as an API error: its errno negated (EPIPE, "the session
 * has ended", becomes -ENOTCONN), or dflt when it has none.  The failing
 * setup step leads the message. */
static int fail_core(nsbox_error_t **err, const struct nsbox_err *e, int dflt)
{
	int code = e->code ? -e->code : dflt;

	/* A bad policy is not a setup step that failed: its message says it all. */
	if (e->step[0] && strcmp(e->step, "policy") != 0) {
		char buf[NSBOX_ERR_MSG_MAX + 96];

		snprintf(buf, sizeof(buf), "setup step '%s' failed: %s", e->step, e->msg);
		return fail_step(err, code, buf, e->step);
	}
	return fail_msg(err, code, e->msg);
}

int nsbox_error_code(const nsbox_error_t *err)
{
	return err ? err->code : 0;
}

const char *nsbox_error_message(const nsbox_error_t *err)
{
	return err && err->msg ? err->msg : "";
}

const char *nsbox_error_step(const nsbox_error_t *err)
{
	return err && err->step[0] ? err->step : NULL;
}

void nsbox_error_free(nsbox_error_t *err)
{
	if (!err || err == &oom_error)
		return;
	free(err->msg);
	free(err);
}

void nsbox_free(void *p)
{
	free(p);
}

const char *nsbox_version(void)
{
	return NSBOX_VERSION;
}

int nsbox_set_helpers(unsigned n)
{
	return helper_set_count(n);
}

/* Options structs may come from an older or newer caller: copy what both
 * know, zero the rest.  struct_size must cover at least struct_size. */
static int copy_opts(void *dst, size_t dst_size, const void *src, nsbox_error_t **err, const char *what)
{
	size_t n;

	memset(dst, 0, dst_size);
	if (!src)
		return 0;
	memcpy(&n, src, sizeof(n));
	if (n < sizeof(size_t))
		return fail(err, -EINVAL, "%s: struct_size is %zu (set it to sizeof(struct %s))", what, n, what);
	memcpy(dst, src, n < dst_size ? n : dst_size);
	return 0;
}

/* ---- policies ---- */

static char *policy_text(const struct nsbox_policy *p)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	policy_print(p, f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* path made absolute against the current directory, nothing resolved;
 * NULL when out of memory (or no current directory). */
static char *absolute(const char *path)
{
	char cwd[PATH_MAX], *out;

	if (path[0] == '/')
		return strdup(path);
	if (!getcwd(cwd, sizeof(cwd)) || asprintf(&out, "%s/%s", cwd, path) < 0)
		return NULL;
	return out;
}

int nsbox_policy_new(const char *name_or_file, nsbox_policy_t **out, nsbox_error_t **err)
{
	struct nsbox_policy_handle *h;
	struct nsbox_err e = { 0 };

	if (!out)
		return fail(err, -EINVAL, "nsbox_policy_new: out is NULL");
	h = calloc(1, sizeof(*h));
	if (!h)
		return fail(err, -ENOMEM, "nsbox_policy_new: out of memory");
	if (policy_load(&h->p, name_or_file ? name_or_file : "default", &e) < 0) {
		free(h);
		return fail_core(err, &e, -EINVAL);
	}
	/* Where the file lies, for policy_file_exposed(); a file read that
	 * has no path now (deleted since, a descriptor's) has none to check. */
	if (name_or_file && !policy_is_builtin_name(name_or_file) &&
	    ((!(h->file = realpath(name_or_file, NULL)) && errno == ENOMEM) ||
	     (h->file && !(h->given = absolute(name_or_file))))) {
		free(h->file);
		policy_free(&h->p);
		free(h);
		return fail(err, -ENOMEM, "nsbox_policy_new: out of memory");
	}
	*out = h;
	return 0;
}

void nsbox_policy_free(nsbox_policy_t *p)
{
	if (!p)
		return;
	policy_free(&p->p);
	free(p->file);
	free(p->given);
	free(p);
}

int nsbox_policy_set(nsbox_policy_t *p, const char *section, const char *key, const char *value, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };

	if (!p || !section || !key || !value)
		return fail(err, -EINVAL, "nsbox_policy_set: NULL argument");
	if (policy_set(&p->p, section, key, value, &e) < 0)
		return fail_core(err, &e, -EINVAL);
	return 0;
}

static int set_u64(nsbox_policy_t *p, const char *key, uint64_t v, const char *zero, nsbox_error_t **err)
{
	char buf[32];

	if (v == 0)
		snprintf(buf, sizeof(buf), "%s", zero);
	else
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	return nsbox_policy_set(p, "Limits", key, buf, err);
}

static int set_double(nsbox_policy_t *p, const char *key, double v, nsbox_error_t **err)
{
	char buf[64];

	if (!(v >= 0))
		return fail(err, -EINVAL, "[Limits] %s: %g is negative or not a number", key, v);
	if (v == 0)
		snprintf(buf, sizeof(buf), "infinity");
	else
		format_double_c(buf, sizeof(buf), "%.17g", 0, v);
	return nsbox_policy_set(p, "Limits", key, buf, err);
}

int nsbox_policy_set_memory(nsbox_policy_t *p, uint64_t bytes, nsbox_error_t **err)
{
	return set_u64(p, "Memory", bytes, "infinity", err);
}

int nsbox_policy_set_pids(nsbox_policy_t *p, uint64_t n, nsbox_error_t **err)
{
	return set_u64(p, "Pids", n, "infinity", err);
}

int nsbox_policy_set_cpus(nsbox_policy_t *p, double cpus, nsbox_error_t **err)
{
	return set_double(p, "CPUs", cpus, err);
}

int nsbox_policy_set_time_limit(nsbox_policy_t *p, double seconds, nsbox_error_t **err)
{
	return set_double(p, "TimeLimit", seconds, err);
}

int nsbox_policy_set_tmp_size(nsbox_policy_t *p, uint64_t bytes, nsbox_error_t **err)
{
	/* No "no limit" for /tmp: 0 is refused by the policy. */
	return set_u64(p, "TmpSize", bytes, "0", err);
}

int nsbox_policy_set_file_size(nsbox_policy_t *p, uint64_t bytes, nsbox_error_t **err)
{
	return set_u64(p, "FileSize", bytes, "infinity", err);
}

int nsbox_policy_set_open_files(nsbox_policy_t *p, uint64_t n, nsbox_error_t **err)
{
	return set_u64(p, "OpenFiles", n, "infinity", err);
}

int nsbox_policy_set_share_net(nsbox_policy_t *p, bool share, nsbox_error_t **err)
{
	return nsbox_policy_set(p, "Sandbox", "Network", share ? "host" : "none", err);
}

int nsbox_policy_set_ids(nsbox_policy_t *p, uid_t uid, gid_t gid, nsbox_error_t **err)
{
	char u[32], g[32];
	struct nsbox_policy_handle saved;
	struct nsbox_err e = { 0 };
	int r;

	if (!p)
		return fail(err, -EINVAL, "nsbox_policy_set_ids: NULL policy");
	snprintf(u, sizeof(u), "%u", (unsigned)uid);
	snprintf(g, sizeof(g), "%u", (unsigned)gid);
	/* Both or neither. */
	saved.p.uid = p->p.uid;
	saved.p.gid = p->p.gid;
	r = nsbox_policy_set(p, "Sandbox", "Uid", u, err);
	if (r == 0 && (r = nsbox_policy_set(p, "Sandbox", "Gid", g, err)) < 0)
		p->p.uid = saved.p.uid;
	if (r == 0 && policy_validate(&p->p, &e) < 0) {
		p->p.uid = saved.p.uid;
		p->p.gid = saved.p.gid;
		return fail_core(err, &e, -EINVAL);
	}
	return r;
}

int nsbox_policy_add_bind(nsbox_policy_t *p, const char *src, const char *dst, bool writable, nsbox_error_t **err)
{
	_cleanup_free_ char *v = NULL;

	if (!p || !src || !dst)
		return fail(err, -EINVAL, "nsbox_policy_add_bind: NULL argument");
	if (asprintf(&v, "%s:%s", src, dst) < 0)
		return fail(err, -ENOMEM, "nsbox_policy_add_bind: out of memory");
	return nsbox_policy_set(p, "Filesystem", writable ? "Bind" : "ReadOnlyBind", v, err);
}

int nsbox_policy_set_workspace(nsbox_policy_t *p, const char *dir, nsbox_error_t **err)
{
	return nsbox_policy_set(p, "Filesystem", "Workspace", dir ? dir : "", err);
}

int nsbox_policy_setenv(nsbox_policy_t *p, const char *name, const char *value, nsbox_error_t **err)
{
	_cleanup_free_ char *v = NULL;

	if (!p || !name || !value)
		return fail(err, -EINVAL, "nsbox_policy_setenv: NULL argument");
	if (!*name || strchr(name, '='))
		return fail(err, -EINVAL, "nsbox_policy_setenv: bad variable name '%s'", name);
	if (asprintf(&v, "%s=%s", name, value) < 0)
		return fail(err, -ENOMEM, "nsbox_policy_setenv: out of memory");
	return nsbox_policy_set(p, "Environment", "Set", v, err);
}

/* A host path the policy names, as this process sees it: a missing
 * workspace or bind source is the caller's mistake, named before anything
 * starts, whichever backend would start the sandbox.  A check, not a
 * resolution: the launcher (or, through nsboxd, session-service.c in this
 * process) opens the path again when it uses it. */
static int check_host_path(nsbox_error_t **err, const char *key, const char *path, bool dir)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		int e = errno;

		return fail(err, e == EACCES || e == EPERM ? -EPERM : -ENOENT, "%s%s: %s", key, path, strerror(e));
	}
	if (dir && !S_ISDIR(st.st_mode))
		return fail(err, -EINVAL, "%s%s: not a directory", key, path);
	return 0;
}

/* Whether the host object at path (a workspace, a writable bind's source)
 * is the policy's file or one of the directories above it: walked up from
 * the file's real path, compared by identity (so another path to the same
 * directory counts too). */
static bool holds_file(const char *file, const char *path)
{
	char up[PATH_MAX];
	struct stat t, a;
	size_t n = strlen(file);

	if (stat(path, &t) < 0 || n >= sizeof(up))
		return false;
	memcpy(up, file, n + 1);
	for (;;) {
		char *slash;

		if (stat(n ? up : "/", &a) == 0 && a.st_dev == t.st_dev && a.st_ino == t.st_ino)
			return true;
		if (!n || !(slash = strrchr(up, '/')))
			return false;
		*slash = '\0';
		n = (size_t)(slash - up);
	}
}

/* The workspace or writable bind (its key and path) that holds the host
 * file whose real path is file, or NULL: the sandbox may write there,
 * bounded or not (the write-back lands it). */
static const char *sandbox_writes(const nsbox_policy_t *p, const char *file, const char **key)
{
	if (p->p.workspace && holds_file(file, p->p.workspace)) {
		*key = "[Filesystem] Workspace=";
		return p->p.workspace;
	}
	for (size_t i = 0; i < p->p.n_mounts; i++)
		if (p->p.mounts[i].src && p->p.mounts[i].rw && holds_file(file, p->p.mounts[i].src)) {
			*key = "[Filesystem] Bind=";
			return p->p.mounts[i].src;
		}
	return NULL;
}

/* The real path path has or, not there yet, would have (its directory's
 * real path and its name); NULL when neither resolves. */
static char *real_or_new(const char *path)
{
	char *r = realpath(path, NULL), *dir, *slash, *out = NULL;

	if (r || errno != ENOENT)
		return r;
	dir = strdup(path);
	if (!dir)
		return NULL;
	slash = strrchr(dir, '/');
	if (slash && slash[1]) {
		*slash = '\0';
		r = realpath(slash == dir ? "/" : dir, NULL);
		if (r && asprintf(&out, "%s/%s", strcmp(r, "/") ? r : "", slash + 1) < 0)
			out = NULL;
	} else if (!slash && (r = realpath(".", NULL)) && asprintf(&out, "%s/%s", strcmp(r, "/") ? r : "", dir) < 0) {
		out = NULL;
	}
	free(r);
	free(dir);
	return out;
}

/* A directory the host passes through to reach path as given (from the
 * current directory), lying in what the sandbox may write: the sandbox
 * could replace the entry that comes next (with a link to elsewhere, or
 * make it when it is not there yet).  The real path of the file alone
 * misses a link on the way (proj/bin -> /opt/x/bin in a workspace proj).
 * Its real path in *dir (free it), or NULL. */
static const char *exposed_on_the_way(const nsbox_policy_t *p, const char *path, const char **key, char **dir)
{
	char buf[PATH_MAX];
	bool writable = p->p.workspace;
	size_t n;

	*dir = NULL;
	/* Nothing the sandbox may write: no realpath per component (this runs
	 * at every nsbox_session_new of a policy read from a file). */
	for (size_t i = 0; i < p->p.n_mounts && !writable; i++)
		writable = p->p.mounts[i].src && p->p.mounts[i].rw;
	if (!writable)
		return NULL;
	if (path[0] == '/')
		n = (size_t)snprintf(buf, sizeof(buf), "%s", path);
	else if (getcwd(buf, sizeof(buf)))
		n = strlen(buf) + (size_t)snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "/%s", path);
	else
		return NULL;
	if (n >= sizeof(buf))
		return NULL;
	for (char *slash = buf; (slash = strchr(slash, '/')); slash++) {
		const char *next = slash + 1, *where;
		size_t len = strcspn(next, "/");
		char keep;

		if (len == 0 || (len == 1 && next[0] == '.') || (len == 2 && next[0] == '.' && next[1] == '.'))
			continue;
		keep = *slash;
		*slash = '\0';
		*dir = realpath(slash == buf ? "/" : buf, NULL);
		*slash = keep;
		if (!*dir)
			return NULL; /* not there: nor is anything below (its parent was checked) */
		if ((where = sandbox_writes(p, *dir, key)))
			return where;
		free(*dir);
		*dir = NULL;
	}
	return NULL;
}

/* Host files the host trusts, where the sandbox may write: refused.  The
 * policy read from a file (the sandbox would choose the next run's policy,
 * a bind of the host's home directory included), and the network log,
 * the record of what the sandbox reached (it replaced the log with its own
 * lines: through the write-back, or live). */
static int policy_file_exposed(const nsbox_policy_t *p, nsbox_error_t **err)
{
	const char *key, *where = p->file ? sandbox_writes(p, p->file, &key) : NULL;
	_cleanup_free_ char *log = NULL, *dir = NULL;

	/* Or a directory on the way to it there: the sandbox could put a
	 * policy of its own in its place. */
	if (!where && p->given)
		where = exposed_on_the_way(p, p->given, &key, &dir);
	if (where)
		return fail(err, -EPERM,
			    "%s%s holds the policy file %s: the sandbox could rewrite the policy of the next run (keep "
			    "the policy file outside what the sandbox may write)",
			    key, where, p->given ? p->given : p->file);
	if (!p->p.net_log || host_path_is_descriptor(p->p.net_log))
		return 0;
	if (!(where = exposed_on_the_way(p, p->p.net_log, &key, &dir)) &&
	    (!(log = real_or_new(p->p.net_log)) || !(where = sandbox_writes(p, log, &key))))
		return 0;
	return fail(err, -EPERM,
		    "[Network] Log=%s lies beneath %s%s: the sandbox could rewrite the record of its own network use "
		    "(keep the log outside what the sandbox may write)",
		    p->p.net_log, key, where);
}

int nsbox_policy_check_host_file(const nsbox_policy_t *p, const char *path, nsbox_error_t **err)
{
	_cleanup_free_ char *real = NULL, *dir = NULL;
	const char *key, *where;

	if (!p || !path)
		return fail(err, -EINVAL, "nsbox_policy_check_host_file: %s is NULL", p ? "path" : "the policy");
	if (host_path_is_descriptor(path))
		return 0;
	if ((where = exposed_on_the_way(p, path, &key, &dir)))
		return fail(err, -EPERM,
			    "%s lies beneath %s%s (through %s): the sandbox could rewrite it, or put another in its "
			    "place (keep it outside what the sandbox may write)",
			    path, key, where, dir);
	real = real_or_new(path);
	if (!real)
		return fail(err, errno == ENOMEM ? -ENOMEM : -ENOENT, "%s: %s", path, strerror(errno));
	where = sandbox_writes(p, real, &key);
	if (!where)
		return 0;
	return fail(err, -EPERM,
		    "%s lies beneath %s%s: the sandbox could rewrite it (keep it outside what the sandbox may write)",
		    real, key, where);
}

int nsbox_policy_check(const nsbox_policy_t *p, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	int r;

	if (!p)
		return fail(err, -EINVAL, "nsbox_policy_check: NULL policy");
	if (policy_validate(&p->p, &e) < 0)
		return fail_core(err, &e, -EINVAL);
	if (p->p.workspace && (r = check_host_path(err, "[Filesystem] Workspace=", p->p.workspace, true)) < 0)
		return r;
	for (size_t i = 0; i < p->p.n_mounts; i++) {
		const struct policy_mount *m = &p->p.mounts[i];

		if (m->src && (r = check_host_path(err, m->rw ? "[Filesystem] Bind=" : "[Filesystem] ReadOnlyBind=",
						   m->src, false)) < 0)
			return r;
	}
	if ((r = policy_file_exposed(p, err)) < 0)
		return r;
	/* RootFS=NAME names a tree that must be built.  Its errors, and only
	 * they, carry the step "rootfs": through nsboxd the name is the
	 * service's to resolve, and the front ends leave exactly this to it. */
	if (p->p.rootfs && p->p.rootfs[0] != '/') {
		struct nsbox_policy q = { 0 };
		bool named;

		if (policy_copy(&q, &p->p, &e) < 0)
			return fail_core(err, &e, -ENOMEM);
		r = rootfs_resolve(&q, &named, &e);
		policy_free(&q);
		if (r < 0) {
			err_step(&e, "rootfs");
			return fail_core(err, &e, -ENOENT);
		}
	}
	return 0;
}

int nsbox_policy_packages(const nsbox_policy_t *p, char **json, nsbox_error_t **err)
{
	struct nsbox_policy q = { 0 };
	struct nsbox_err e = { 0 };
	json_t *arr = NULL;
	bool named;
	char *s;

	if (!p || !json)
		return fail(err, -EINVAL, "nsbox_policy_packages: %s is NULL", p ? "json" : "the policy");
	if (policy_copy(&q, &p->p, &e) < 0)
		return fail_core(err, &e, -ENOMEM);
	if (rootfs_resolve(&q, &named, &e) < 0 || rootfs_packages(q.rootfs, &arr, &e) < 0) {
		policy_free(&q);
		return fail_core(err, &e, -ENOENT);
	}
	policy_free(&q);
	s = json_dumps(arr, JSON_COMPACT);
	json_decref(arr);
	if (!s)
		return fail(err, -ENOMEM, "nsbox_policy_packages: out of memory");
	*json = s;
	return 0;
}

char *nsbox_policy_to_string(const nsbox_policy_t *p)
{
	return p ? policy_text(&p->p) : NULL;
}

/* ---- sessions ---- */

static bool enter(nsbox_session_t *s)
{
	return !atomic_exchange(&s->busy, true);
}

static void leave(nsbox_session_t *s)
{
	atomic_store(&s->busy, false);
}

static int busy(nsbox_error_t **err, const char *what)
{
	return fail(err, -EBUSY, "%s: the session is in use by another call", what);
}

static int check_session(nsbox_session_t *s, nsbox_error_t **err, const char *what)
{
	if (!s)
		return fail(err, -EINVAL, "%s: NULL session", what);
	if (s->owner != getpid())
		return fail(err, -ENOTCONN, "%s: the session belongs to the parent process (fork)", what);
	if (!session_alive(s->s))
		return fail(err, -ENOTCONN, "%s: the session has ended", what);
	return 0;
}

/* The environment variables a session reads (libnsbox(3), ENVIRONMENT),
 * once: NSBOX_FILE_MAX into *file_max, NSBOX_SPARE into *spare (as
 * env_switch gives it).  A value it can't use is an error naming it, not
 * the default in its place (NSBOX_FILE_MAX=128M was 64 MiB, NSBOX_SPARE=no
 * a spare). */
static int env_read(uint64_t *file_max, int *spare, nsbox_error_t **err)
{
	const char *v = getenv("NSBOX_FILE_MAX");
	unsigned long long n = SESSION_FILE_MAX_DEFAULT;

	if (v && *v && (parse_size(v, &n) < 0 || !n))
		return fail(err, -EINVAL,
			    "nsbox_session_new: NSBOX_FILE_MAX=%s: not a size (bytes, or with K, M, G or T; not 0)", v);
	*file_max = n;
	*spare = env_switch("NSBOX_SPARE");
	if (*spare == -2)
		return fail(err, -EINVAL, "nsbox_session_new: NSBOX_SPARE=%s: use 0 or 1 (or no, yes; unset: the default)",
			    getenv("NSBOX_SPARE"));
	return 0;
}

int nsbox_session_new(const nsbox_policy_t *p, const struct nsbox_session_opts *opts, nsbox_session_t **out,
		      nsbox_error_t **err)
{
	struct nsbox_session_opts o;
	struct session_opts so = { 0 };
	struct nsbox_err e = { 0 };
	bool named_tree;
	nsbox_session_t *s;
	uint64_t file_max = SESSION_FILE_MAX_DEFAULT;
	int spare_env = -1;

	if (!p || !out)
		return fail(err, -EINVAL, "nsbox_session_new: %s is NULL", p ? "out" : "the policy");
	if (policy_file_exposed(p, err) < 0)
		return -EPERM;
	if (copy_opts(&o, sizeof(o), opts, err, "nsbox_session_opts") < 0)
		return -EINVAL;
	if (env_read(&file_max, &spare_env, err) < 0)
		return -EINVAL;
	/* no_spare (0.3.0) sits in what was the 0.2.0 struct's tail padding:
	 * a 0.2.0 caller's struct_size covers it, with whatever was there. */
	if (opts && opts->struct_size < offsetof(struct nsbox_session_opts, argv) + sizeof(o.argv))
		o.no_spare = false;
	s = calloc(1, sizeof(*s));
	if (!s)
		return fail(err, -ENOMEM, "nsbox_session_new: out of memory");
	s->owner = getpid();
	s->file_max = file_max;
	if (policy_copy(&s->policy, &p->p, &e) < 0) {
		free(s);
		return fail_core(err, &e, -ENOMEM);
	}
	if (policy_validate(&s->policy, &e) < 0) {
		policy_free(&s->policy);
		free(s);
		return fail_core(err, &e, -EINVAL);
	}
	/* Through nsboxd: the caller's field, else the environment's. */
	{
		size_t need = offsetof(struct nsbox_session_opts, connect) + sizeof(o.connect);
		const char *env = getenv("NSBOX_CONNECT");

		so.connect = opts && opts->struct_size >= need ? o.connect : NULL;
		if (!so.connect && env && *env)
			so.connect = env;
		/* "" made an abstract address of NULs ("connect to nsboxd at :
		 * Connection refused"); an empty NSBOX_CONNECT means unset. */
		if (so.connect && !*so.connect) {
			policy_free(&s->policy);
			free(s);
			return fail(err, -EINVAL, "nsbox_session_new: connect is empty (NULL: not through nsboxd)");
		}
	}
	/* A tree's name goes to nsboxd as it is: the service resolves it
	 * among its own builds (nsbox-protocol(7), OPEN). */
	if (so.connect)
		named_tree = s->policy.rootfs && s->policy.rootfs[0] != '/';
	else if (rootfs_resolve(&s->policy, &named_tree, &e) < 0) {
		policy_free(&s->policy);
		free(s);
		return fail_core(err, &e, -ENOENT);
	}
	so.policy = &s->policy;
	so.output_limit = o.output_limit;
	so.max_tool_calls = o.max_tool_calls;
	so.max_bytes = o.max_bytes;
	so.output = o.output;
	so.output_ctx = o.output_userdata;
	so.stream_all = o.stream_all && o.output;
	so.pass_stdin = o.pass_stdin && o.in_process;
	so.use_helper = !o.in_process;
	/* in_process starts CPython cold here; through nsboxd the sandbox is the
	 * service's, and a pooled one is already warm (cold is not poolable). */
	so.cold = o.cold || (o.in_process && !so.connect);
	/* A warm spare unless the caller or the environment says no.  By
	 * default not for a policy naming host paths (workspace, binds,
	 * another root): a spare's mounts are made in advance, and the host
	 * directory behind them may be replaced before it is taken; a caller
	 * who sets spare knowingly still gets one.  A built tree (RootFS=NAME)
	 * is not replaced in place: a build makes a new directory. */
	{
		bool host_paths = s->policy.workspace || s->policy.n_mounts || (s->policy.rootfs && !named_tree);

		so.spare = !o.no_spare && spare_env != 0 && (o.spare || !host_paths);
	}
	so.warn = o.warn;
	so.warn_ctx = o.warn_userdata;
	so.argv = o.argv;
	so.net_audit = o.net_audit;
	so.net_audit_ctx = o.net_audit_userdata;
	so.net_log_fd = o.net_log_fd > 0 ? o.net_log_fd : -1;
	/* As nsbox_run: a descriptor that isn't open is the caller's error,
	 * not an audit silently not kept. */
	if (so.net_log_fd >= 0 && fcntl(so.net_log_fd, F_GETFD) < 0) {
		policy_free(&s->policy);
		free(s);
		return fail(err, -EBADF, "nsbox_session_new: net_log_fd (fd %d) is not an open fd", o.net_log_fd);
	}
	/* Handshake and variable requests: generous for a cold start, but
	 * never much longer than a time limit the policy sets. */
	so.control_timeout = s->policy.time_limit > 0 && s->policy.time_limit + 5 < 30 ? s->policy.time_limit + 5 : 30;
	if (o.in_process && process_threads() != 1) {
		policy_free(&s->policy);
		free(s);
		return fail(err, -EINVAL, "nsbox_session_new: in_process needs a single-threaded caller");
	}
	if (session_start(&s->s, &so, &e) < 0) {
		policy_free(&s->policy);
		free(s);
		return fail_core(err, &e, -EIO);
	}
	*out = s;
	return 0;
}

void nsbox_session_free(nsbox_session_t *s)
{
	struct api_tool *t, *next;

	if (!s)
		return;
	/* Marked in use for good: a net_audit or warn callback run by the
	 * close below that calls back into this session gets -EBUSY, not a
	 * half-freed session. */
	(void)enter(s);
	if (s->owner != getpid())
		session_abandon(s->s);
	else
		session_close(s->s, NULL);
	for (t = s->tools; t; t = next) {
		next = t->next;
		free(t->name);
		free(t->description);
		json_decref(t->schema);
		free(t);
	}
	policy_free(&s->policy);
	free(s);
}

/* The core's tool callback: JSON values in, the user's JSON text out. */
static int call_tool(void *ctx, const char *name, const char *call_json, json_t **value, char **error)
{
	const struct api_tool *t = ctx;
	char *res = NULL, *emsg = NULL;
	json_error_t jerr;
	int r;

	r = t->fn(t->userdata, name, call_json, &res, &emsg);
	if (r != 0) {
		free(res);
		*error = emsg;
		return -1;
	}
	free(emsg);
	if (!res)
		return 0; /* None */
	*value = json_loads(res, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
	if (!*value) {
		if (asprintf(error, "tool %s returned invalid JSON: %s (line %d, column %d)", name, jerr.text,
			     jerr.line, jerr.column) < 0)
			*error = NULL;
		free(res);
		return -1;
	}
	free(res);
	return 0;
}

int nsbox_session_add_tool(nsbox_session_t *s, const char *name, const char *schema_json, const char *description,
			   nsbox_tool_fn fn, void *userdata, nsbox_error_t **err)
{
	struct api_tool *t;
	struct session_tool st;
	struct nsbox_err e = { 0 };
	json_error_t jerr;
	int r;

	if (!s || !name)
		return fail(err, -EINVAL, "nsbox_session_add_tool: %s is NULL", !s ? "the session" : "name");
	t = calloc(1, sizeof(*t));
	if (!t)
		return fail(err, -ENOMEM, "nsbox_session_add_tool: out of memory");
	t->fn = fn;
	t->userdata = userdata;
	t->name = strdup(name);
	t->description = description ? strdup(description) : NULL;
	if (!t->name || (description && !t->description)) {
		r = fail(err, -ENOMEM, "nsbox_session_add_tool: out of memory");
		goto out;
	}
	if (schema_json) {
		t->schema = json_loads(schema_json, 0, &jerr);
		if (!t->schema) {
			r = fail(err, -EINVAL, "tool %s: the schema is not JSON: %s (line %d, column %d)", name,
				 jerr.text, jerr.line, jerr.column);
			goto out;
		}
		if (!json_is_object(t->schema)) {
			r = fail(err, -EINVAL, "tool %s: the schema is not a JSON object", name);
			goto out;
		}
	}
	if (s->owner != getpid()) {
		r = fail(err, -ENOTCONN, "tool %s: the session belongs to the parent process (fork)", name);
		goto out;
	}
	if (!enter(s)) {
		r = busy(err, "nsbox_session_add_tool");
		goto out;
	}
	st = (struct session_tool){ .name = t->name,
				    .description = t->description,
				    .schema = t->schema,
				    .fn = fn ? call_tool : NULL,
				    .ctx = t };
	r = session_add_tool(s->s, &st, &e);
	leave(s);
	if (r < 0) {
		r = fail_core(err, &e, -EIO);
		goto out;
	}
	t->next = s->tools;
	s->tools = t;
	return 0;
out:
	free(t->name);
	free(t->description);
	json_decref(t->schema);
	free(t);
	return r;
}

static char *dup_str(const json_t *v, size_t *len)
{
	const char *s = json_string_value(v);
	size_t n = s ? json_string_length(v) : 0;
	char *d = malloc(n + 1);

	if (!d)
		return NULL;
	if (n)
		memcpy(d, s, n);
	d[n] = '\0';
	if (len)
		*len = n;
	return d;
}

static char *dup_opt(const json_t *v)
{
	return json_is_string(v) ? dup_str(v, NULL) : NULL;
}

static const char *const limit_types[] = {
	[NSBOX_TIME_LIMIT] = "nsbox.TimeLimitExceeded", [NSBOX_CANCELLED] = "nsbox.Cancelled",
	[NSBOX_MEMORY_LIMIT] = "MemoryError",		[NSBOX_CRASHED] = "nsbox.SandboxError",
	[NSBOX_PROTOCOL_ERROR] = "nsbox.ProtocolError",
};

/* A string as the data of a display or file: base64-decoded unless text,
 * NUL-terminated.  The host checked it on receipt (proto_rich_check). */
static char *rich_data(const json_t *v, bool text, size_t *len)
{
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	long long k;
	char *d = malloc((text ? n : n / 4 * 3) + 1);

	if (!d)
		return NULL;
	if (text) {
		memcpy(d, s, n);
		*len = n;
	} else if ((k = proto_b64_decode(s, n, d)) >= 0) {
		*len = (size_t)k;
	} else {
		free(d);
		return NULL;
	}
	d[*len] = '\0';
	return d;
}

static int rich_result(nsbox_result_t *r, const json_t *m)
{
	const json_t *ds = json_object_get(m, "displays"), *fs = json_object_get(m, "files"), *b, *f, *v;
	size_t i;

	r->displays_truncated = json_is_true(json_object_get(m, "displays_truncated"));
	r->files_truncated = json_is_true(json_object_get(m, "files_truncated"));
	if (json_array_size(ds) && !(r->displays = calloc(json_array_size(ds), sizeof(*r->displays))))
		return -1;
	json_array_foreach(ds, i, b)
	{
		struct rich_display *d = &r->displays[r->n_displays++];
		const char *mime;

		if (!(d->items = calloc(json_object_size(b) + 1, sizeof(*d->items))))
			return -1;
		json_object_foreach((json_t *)b, mime, v)
		{
			struct rich_item *it = &d->items[d->n];

			it->mime = mime;
			if (!(it->data = rich_data(v, proto_mime_text(mime), &it->len)))
				return -1;
			d->n++;
		}
	}
	if (json_array_size(fs) && !(r->files = calloc(json_array_size(fs), sizeof(*r->files))))
		return -1;
	json_array_foreach(fs, i, f)
	{
		struct rich_file *rf = &r->files[r->n_files++];

		rf->name = json_string_value(json_object_get(f, "name"));
		rf->size = (uint64_t)json_integer_value(json_object_get(f, "size"));
		if ((v = json_object_get(f, "data")) && !(rf->data = rich_data(v, false, &rf->len)))
			return -1;
	}
	return 0;
}

static nsbox_result_t *make_result(const struct session_result *res)
{
	static const enum nsbox_status map[] = {
		[SESSION_OK] = NSBOX_OK,
		[SESSION_EXCEPTION] = NSBOX_EXCEPTION,
		[SESSION_TIMEOUT] = NSBOX_TIME_LIMIT,
		[SESSION_CANCELLED] = NSBOX_CANCELLED,
		[SESSION_MEMORY] = NSBOX_MEMORY_LIMIT,
		[SESSION_CRASHED] = NSBOX_CRASHED,
		[SESSION_PROTOCOL] = NSBOX_PROTOCOL_ERROR,
	};
	nsbox_result_t *r = calloc(1, sizeof(*r));
	const json_t *m = res->result;
	const json_t *e = json_object_get(m, "error");
	const json_t *v = json_object_get(m, "value");
	const json_t *usage = json_object_get(m, "usage");

	if (!r)
		return NULL;
	r->status = map[res->outcome];
	if (res->outcome == SESSION_OK && json_is_true(json_object_get(m, "incomplete")))
		r->status = NSBOX_INCOMPLETE;
	/* A runner that exited by itself (os._exit(N)) ends with its status,
	 * 0 too, as python would; any other failure is never 0. */
	r->exit_code = res->exit_code;
	if (!r->exit_code && res->outcome != SESSION_OK && res->outcome != SESSION_CRASHED)
		r->exit_code = 1;
	/* As text only when asked for: json_dumps() of a RESULT is ~4 us,
	 * a tenth of an exec round trip here. */
	r->msg = json_incref((json_t *)m);
	/* `nsbox python` treats SystemExit as the script's exit status; to an
	 * API caller an uncaught SystemExit with a non-zero code is an
	 * exception like any other (SystemExit(0) and sys.exit() are not). */
	if (res->outcome == SESSION_OK && res->exit_code != 0 && json_is_object(e))
		r->status = NSBOX_EXCEPTION;
	r->value = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : strdup("null");
	r->out = dup_str(json_object_get(m, "stdout"), &r->out_len);
	r->err = dup_str(json_object_get(m, "stderr"), &r->err_len);
	if (r->status != NSBOX_OK && r->status != NSBOX_INCOMPLETE) {
		if (json_is_object(e)) {
			r->etype = dup_opt(json_object_get(e, "type"));
			r->emsg = dup_opt(json_object_get(e, "message"));
			r->tb = dup_opt(json_object_get(e, "traceback"));
		}
		if (r->status != NSBOX_EXCEPTION) {
			/* A limit kill: the message is what happened to the sandbox. */
			free(r->emsg);
			r->emsg = strdup(res->message);
			if (!r->etype)
				r->etype = strdup(limit_types[r->status]);
		}
	}
	r->wall = res->wall;
	r->cpu = json_number_value(json_object_get(usage, "cpu"));
	r->peak = res->peak_memory ? res->peak_memory : (uint64_t)json_integer_value(json_object_get(usage, "max_rss"));
	r->tool_calls = res->tool_calls;
	if (!r->value || !r->out || !r->err || rich_result(r, m) < 0 ||
	    (r->status != NSBOX_OK && r->status != NSBOX_EXCEPTION && r->status != NSBOX_INCOMPLETE &&
	     (!r->emsg || !r->etype))) {
		nsbox_result_free(r);
		return NULL;
	}
	return r;
}

/* The session turns a timeout into a deadline in nanoseconds: an infinite
 * or huge one would wrap it into the past and kill the code at once. */
static int check_timeout(double t, nsbox_error_t **err, const char *what)
{
	if (!(t >= 0) || t > POLICY_TIME_LIMIT_MAX)
		return fail(err, -EINVAL, "%s: timeout %g is out of range (0 for the policy's, else up to %g seconds)",
			    what, t, POLICY_TIME_LIMIT_MAX);
	return 0;
}

static void exec_req(struct session_exec_req *req, const char *code, const struct nsbox_exec_opts *o)
{
	req->code = code;
	req->filename = o->filename;
	req->want_value = o->repl;
	req->display = o->interactive;
	req->check_complete = o->interactive;
	req->plain = o->flags & NSBOX_EXEC_PLAIN;
	req->timeout = o->timeout;
	req->stream = true; /* nsbox_exec: to opts.output as produced, when set; else as events */
}

int nsbox_exec(nsbox_session_t *s, const char *code, const struct nsbox_exec_opts *opts, nsbox_result_t **out,
	       nsbox_error_t **err)
{
	struct nsbox_exec_opts o;
	struct session_exec_req req = { 0 };
	struct session_result res;
	struct nsbox_err e = { 0 };
	nsbox_result_t *r;
	int k;

	if (!code || !out)
		return fail(err, -EINVAL, "nsbox_exec: %s is NULL", !code ? "code" : "out");
	if ((k = check_session(s, err, "nsbox_exec")) < 0)
		return k;
	if (copy_opts(&o, sizeof(o), opts, err, "nsbox_exec_opts") < 0)
		return -EINVAL;
	if (check_timeout(o.timeout, err, "nsbox_exec") < 0)
		return -EINVAL;
	if (!enter(s))
		return busy(err, "nsbox_exec");
	exec_req(&req, code, &o);
	k = session_exec(s->s, &req, &res, &e);
	leave(s);
	if (k < 0)
		return fail_core(err, &e, -EINVAL);
	r = make_result(&res);
	session_result_free(&res);
	if (!r)
		return fail(err, -ENOMEM, "nsbox_exec: out of memory for the result");
	*out = r;
	return 0;
}

void nsbox_cancel(nsbox_session_t *s)
{
	if (s && s->s)
		session_cancel(s->s);
}

double nsbox_exec_time_left(const nsbox_session_t *s)
{
	if (!s || !s->s || s->owner != getpid())
		return -1;
	return session_time_left(s->s);
}

/* ---- exec for event loops ---- */

int nsbox_session_fd(nsbox_session_t *s)
{
	struct nsbox_err e = { 0 };
	int fd;

	if (!s || s->owner != getpid()) {
		errno = s ? ENOTCONN : EINVAL;
		return -1;
	}
	fd = session_fd(s->s, &e);
	if (fd < 0)
		errno = e.code ? e.code : EIO;
	return fd;
}

int nsbox_net_audit_drain(nsbox_session_t *s, nsbox_error_t **err)
{
	int n;

	if (!s)
		return fail(err, -EINVAL, "nsbox_net_audit_drain: NULL session");
	if (s->owner != getpid())
		return fail(err, -ENOTCONN, "nsbox_net_audit_drain: the session belongs to the parent process (fork)");
	if (!enter(s))
		return busy(err, "nsbox_net_audit_drain");
	n = session_net_audit_drain(s->s);
	leave(s);
	return n;
}

int nsbox_exec_start(nsbox_session_t *s, const char *code, const struct nsbox_exec_opts *opts, nsbox_error_t **err)
{
	struct nsbox_exec_opts o;
	struct session_exec_req req = { 0 };
	struct nsbox_err e = { 0 };
	int k;

	if (!code)
		return fail(err, -EINVAL, "nsbox_exec_start: code is NULL");
	if ((k = check_session(s, err, "nsbox_exec_start")) < 0)
		return k;
	if (copy_opts(&o, sizeof(o), opts, err, "nsbox_exec_opts") < 0)
		return -EINVAL;
	if (check_timeout(o.timeout, err, "nsbox_exec_start") < 0)
		return -EINVAL;
	if (!enter(s))
		return busy(err, "nsbox_exec_start");
	exec_req(&req, code, &o);
	if (session_exec_start(s->s, &req, &e) < 0) {
		leave(s);
		return fail_core(err, &e, -EINVAL);
	}
	s->ev_exec = true;
	return 0;
}

/* The exec started by nsbox_exec_start(), or -EINVAL. */
static int check_event_exec(nsbox_session_t *s, nsbox_error_t **err, const char *what)
{
	if (!s)
		return fail(err, -EINVAL, "%s: NULL session", what);
	if (s->owner != getpid())
		return fail(err, -ENOTCONN, "%s: the session belongs to the parent process (fork)", what);
	if (!s->ev_exec)
		return fail(err, -EINVAL, "%s: no exec started with nsbox_exec_start", what);
	return 0;
}

int nsbox_exec_advance(nsbox_session_t *s, struct nsbox_event *ev, nsbox_error_t **err)
{
	struct nsbox_event out = { 0 };
	struct session_event se;
	struct nsbox_err e = { 0 };
	size_t n;
	int k;

	if ((k = check_event_exec(s, err, "nsbox_exec_advance")) < 0)
		return k;
	if (!ev || ev->struct_size < offsetof(struct nsbox_event, kind) + sizeof(ev->kind))
		return fail(err, -EINVAL, "nsbox_exec_advance: %s", ev ? "ev->struct_size is too small" : "ev is NULL");
	if (s->ev_done)
		return fail(err, -EINVAL, "nsbox_exec_advance: the exec has ended (DONE): take its result");
	n = ev->struct_size;
	k = session_exec_step(s->s, false, &se, &e);
	if (k < 0)
		return fail_core(err, &e, -EINVAL);
	if (k == 0)
		return 0;
	out.struct_size = n < sizeof(out) ? n : sizeof(out);
	switch (se.kind) {
	case SESSION_EV_OUTPUT:
		out.kind = NSBOX_EVENT_OUTPUT;
		out.stream = se.stream;
		out.data = se.data;
		out.len = se.len;
		break;
	case SESSION_EV_CALL:
		out.kind = NSBOX_EVENT_TOOL_CALL;
		out.call_id = se.call_id;
		out.tool = se.tool->name;
		out.args_json = se.call_json;
		break;
	case SESSION_EV_DONE:
		out.kind = NSBOX_EVENT_DONE;
		s->ev_done = true;
		break;
	}
	memcpy(ev, &out, out.struct_size);
	return 1;
}

int nsbox_exec_answer(nsbox_session_t *s, uint64_t call_id, const char *result_json, const char *error_message,
		      nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	json_auto_t *v = NULL;
	_cleanup_free_ char *bad = NULL;
	json_error_t jerr;
	int k;

	if ((k = check_event_exec(s, err, "nsbox_exec_answer")) < 0)
		return k;
	if (call_id > UINT32_MAX)
		return fail(err, -EINVAL, "nsbox_exec_answer: no tool call %llu is waiting for an answer",
			    (unsigned long long)call_id);
	if (!error_message && result_json) {
		v = json_loads(result_json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
		/* As nsbox_exec() treats a callback's invalid JSON: a ToolError inside. */
		if (!v && asprintf(&bad, "the tool's answer is not valid JSON: %s (line %d, column %d)", jerr.text,
				   jerr.line, jerr.column) < 0)
			return fail(err, -ENOMEM, "nsbox_exec_answer: out of memory");
	}
	if (session_exec_answer(s->s, (uint32_t)call_id, v, error_message ? error_message : bad, &e) < 0)
		return fail_core(err, &e, -EINVAL);
	return 0;
}

int nsbox_exec_result(nsbox_session_t *s, nsbox_result_t **out, nsbox_error_t **err)
{
	struct session_result res;
	struct nsbox_err e = { 0 };
	nsbox_result_t *r;
	int k;

	if (!out)
		return fail(err, -EINVAL, "nsbox_exec_result: out is NULL");
	if ((k = check_event_exec(s, err, "nsbox_exec_result")) < 0)
		return k;
	if (session_exec_finish(s->s, &res, &e) < 0)
		return fail_core(err, &e, -EINVAL);
	s->ev_exec = s->ev_done = false;
	leave(s);
	r = make_result(&res);
	session_result_free(&res);
	if (!r)
		return fail(err, -ENOMEM, "nsbox_exec_result: out of memory for the result");
	*out = r;
	return 0;
}

enum nsbox_status nsbox_result_status(const nsbox_result_t *r)
{
	return r ? r->status : NSBOX_CRASHED;
}

const char *nsbox_result_value(const nsbox_result_t *r)
{
	return r ? r->value : "null";
}

const char *nsbox_result_stdout(const nsbox_result_t *r, size_t *len)
{
	if (len)
		*len = r ? r->out_len : 0;
	return r ? r->out : "";
}

const char *nsbox_result_stderr(const nsbox_result_t *r, size_t *len)
{
	if (len)
		*len = r ? r->err_len : 0;
	return r ? r->err : "";
}

const char *nsbox_result_error_type(const nsbox_result_t *r)
{
	return r ? r->etype : NULL;
}

const char *nsbox_result_error_message(const nsbox_result_t *r)
{
	return r ? r->emsg : NULL;
}

const char *nsbox_result_traceback(const nsbox_result_t *r)
{
	return r ? r->tb : NULL;
}

void nsbox_result_usage(const nsbox_result_t *r, double *wall, double *cpu, uint64_t *peak_memory, unsigned *tool_calls)
{
	if (wall)
		*wall = r ? r->wall : 0;
	if (cpu)
		*cpu = r ? r->cpu : 0;
	if (peak_memory)
		*peak_memory = r ? r->peak : 0;
	if (tool_calls)
		*tool_calls = r ? r->tool_calls : 0;
}

bool nsbox_result_truncated(const nsbox_result_t *r, int stream, uint64_t *total)
{
	const char *key = stream == 2 ? "stderr" : "stdout";
	char k[32];
	json_int_t n;
	bool t;

	if (total)
		*total = 0;
	if (!r || !r->msg || (stream != 1 && stream != 2))
		return false;
	snprintf(k, sizeof(k), "%s_truncated", key);
	t = json_is_true(json_object_get(r->msg, k));
	snprintf(k, sizeof(k), "%s_bytes", key);
	n = json_integer_value(json_object_get(r->msg, k));
	if (total)
		*total = n > 0 ? (uint64_t)n : (stream == 2 ? r->err_len : r->out_len);
	return t;
}

int nsbox_result_exit_code(const nsbox_result_t *r)
{
	return r ? r->exit_code : 1;
}

const char *nsbox_result_json(const nsbox_result_t *cr)
{
	/* A result is always ours, allocated: the text is made on demand. */
	nsbox_result_t *r = (nsbox_result_t *)cr;
	char *t, *none = NULL;

	if (!r || !r->msg)
		return "{}";
	if ((t = atomic_load(&r->json)))
		return t;
	if (!(t = json_dumps(r->msg, JSON_COMPACT)))
		return NULL;
	/* Two threads asking at once: one text wins, the other is freed. */
	if (!atomic_compare_exchange_strong(&r->json, &none, t)) {
		free(t);
		return none;
	}
	return t;
}

void nsbox_result_free(nsbox_result_t *r)
{
	bool big;

	if (!r)
		return;
	/* A big RESULT's tree is many small blocks: see session.c's
	 * release_frame. */
	big = (r->value ? strlen(r->value) : 0) + r->out_len + r->err_len >= (1u << 20);
	free(atomic_load(&r->json));
	json_decref(r->msg);
	free(r->value);
	free(r->out);
	free(r->err);
	free(r->etype);
	free(r->emsg);
	free(r->tb);
	for (size_t i = 0; i < r->n_displays; i++) {
		for (size_t j = 0; j < r->displays[i].n; j++)
			free(r->displays[i].items[j].data);
		free(r->displays[i].items);
	}
	free(r->displays);
	for (size_t i = 0; i < r->n_files; i++)
		free(r->files[i].data);
	free(r->files);
	free(r);
	if (big)
		malloc_trim(0);
}

/* A request to the runner failed: a request that ended the session (its
 * control timeout, nsbox_cancel, a protocol error) says so with ENOTCONN,
 * as every later call would. */
static int request_fail(nsbox_session_t *s, const struct nsbox_err *e, nsbox_error_t **err)
{
	if (!session_alive(s->s))
		return fail_msg(err, -ENOTCONN, e->msg);
	return fail_core(err, e, -EIO);
}

int nsbox_set_var(nsbox_session_t *s, const char *name, const char *json, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	json_error_t jerr;
	json_t *v;
	int r;

	if (!name || !json)
		return fail(err, -EINVAL, "nsbox_set_var: %s is NULL", !name ? "name" : "json");
	if (!proto_is_identifier(name))
		return fail(err, -EINVAL, "nsbox_set_var: '%s' is not a Python identifier", name);
	if ((r = check_session(s, err, "nsbox_set_var")) < 0)
		return r;
	v = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
	if (!v)
		return fail(err, -EINVAL, "nsbox_set_var %s: not JSON: %s (line %d, column %d)", name, jerr.text,
			    jerr.line, jerr.column);
	if (!enter(s)) {
		json_decref(v);
		return busy(err, "nsbox_set_var");
	}
	session_call_begin(s->s);
	r = session_set_var(s->s, name, v, &e);
	session_call_end(s->s);
	leave(s);
	json_decref(v);
	return r < 0 ? request_fail(s, &e, err) : 0;
}

int nsbox_get_var(nsbox_session_t *s, const char *name, char **json, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	json_t *v = NULL;
	char *text;
	int r;

	if (!name || !json)
		return fail(err, -EINVAL, "nsbox_get_var: %s is NULL", !name ? "name" : "json");
	if (!proto_is_identifier(name))
		return fail(err, -EINVAL, "nsbox_get_var: '%s' is not a Python identifier", name);
	if ((r = check_session(s, err, "nsbox_get_var")) < 0)
		return r;
	if (!enter(s))
		return busy(err, "nsbox_get_var");
	session_call_begin(s->s);
	r = session_get_var(s->s, name, &v, &e);
	session_call_end(s->s);
	leave(s);
	if (r < 0)
		return request_fail(s, &e, err);
	text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	json_decref(v);
	if (!text)
		return fail(err, -ENOMEM, "nsbox_get_var: out of memory");
	*json = text;
	return 0;
}

int nsbox_reset(nsbox_session_t *s, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	int r;

	if ((r = check_session(s, err, "nsbox_reset")) < 0)
		return r;
	if (!enter(s))
		return busy(err, "nsbox_reset");
	session_call_begin(s->s);
	r = session_reset(s->s, &e);
	session_call_end(s->s);
	leave(s);
	return r < 0 ? request_fail(s, &e, err) : 0;
}

int nsbox_session_info(nsbox_session_t *s, struct nsbox_session_info *info, nsbox_error_t **err)
{
	struct nsbox_session_info o;
	struct session_sandbox_info si;
	struct nsbox_err e = { 0 };
	bool held;
	size_t n;
	int k;

	if (!s || !info)
		return fail(err, -EINVAL, "nsbox_session_info: %s is NULL", !s ? "the session" : "info");
	n = info->struct_size;
	if (n < sizeof(size_t))
		return fail(err, -EINVAL, "nsbox_session_info: struct_size is %zu", n);
	if (s->owner != getpid())
		return fail(err, -ENOTCONN, "nsbox_session_info: the session belongs to the parent process (fork)");
	/* An event-driven exec holds the session: its driving thread may ask. */
	held = enter(s);
	if (!held && !s->ev_exec)
		return busy(err, "nsbox_session_info");
	k = session_sandbox(s->s, &si, &e);
	if (held)
		leave(s);
	if (k < 0)
		return fail_core(err, &e, -EIO);
	memset(&o, 0, sizeof(o));
	o.struct_size = n < sizeof(o) ? n : sizeof(o);
	o.pid = si.pid;
	o.alive = si.alive;
	snprintf(o.cgroup, sizeof(o.cgroup), "%s", si.cgroup);
	o.memory_limit = s->policy.memory;
	o.pids_limit = s->policy.pids;
	o.cpus_limit = s->policy.cpus;
	o.memory_current = si.memory_current;
	o.memory_peak = si.memory_peak;
	{
		/* The runner says sys.version; the version is its first word. */
		const char *v = json_string_value(json_object_get(session_hello(s->s), "python")) ?: "";

		snprintf(o.python, sizeof(o.python), "%.*s", (int)strcspn(v, " "), v);
	}
	memcpy(info, &o, o.struct_size);
	return 0;
}

/* ---- commands ---- */

int nsbox_run(const nsbox_policy_t *p, char *const argv[], const struct nsbox_run_opts *opts,
	      struct nsbox_run_status *st, nsbox_error_t **err)
{
	struct nsbox_run_opts o;
	struct nsbox_run_status out;
	struct run_opts ro = { 0 };
	struct run_result res;
	struct nsbox_err e = { 0 };
	size_t n;

	if (!p || !argv || !st)
		return fail(err, -EINVAL, "nsbox_run: %s is NULL", !p ? "the policy" : !argv ? "argv" : "st");
	if (!argv[0] || !argv[0][0])
		return fail(err, -EINVAL, "nsbox_run: no command given");
	if (policy_file_exposed(p, err) < 0)
		return -EPERM;
	n = st->struct_size;
	if (n < sizeof(size_t))
		return fail(err, -EINVAL, "nsbox_run: st->struct_size is %zu", n);
	if (copy_opts(&o, sizeof(o), opts, err, "nsbox_run_opts") < 0)
		return -EINVAL;
	if (o.stdio)
		for (int i = 0; i < 3; i++)
			if (o.stdio[i] < 0 || fcntl(o.stdio[i], F_GETFD) < 0)
				return fail(err, -EBADF, "nsbox_run: stdio[%d] (fd %d) is not an open fd", i,
					    o.stdio[i]);
	ro.stdio = o.stdio;
	ro.warn = o.warn;
	ro.warn_ctx = o.warn_userdata;
	ro.forward_signals = o.forward_signals;
	ro.in_process = o.in_process;
	ro.controlling_tty = o.controlling_tty;
	ro.net_log_fd = -1;
	if (o.net_log_fd) {
		if (*o.net_log_fd < 0 || fcntl(*o.net_log_fd, F_GETFD) < 0)
			return fail(err, -EBADF, "nsbox_run: net_log_fd (fd %d) is not an open fd", *o.net_log_fd);
		ro.net_log_fd = *o.net_log_fd;
	}
	ro.net_audit = o.net_audit;
	ro.net_audit_ctx = o.net_audit_userdata;
	if (o.controlling_tty && !o.in_process)
		return fail(err, -EINVAL, "nsbox_run: controlling_tty needs in_process");
	if (o.controlling_tty && (o.stdio ? !isatty(o.stdio[0]) : !isatty(0)))
		return fail(err, -EINVAL, "nsbox_run: controlling_tty: stdin is not a terminal");
	{
		struct nsbox_policy q = { 0 };
		bool named;
		int r;

		if (policy_copy(&q, &p->p, &e) < 0)
			return fail_core(err, &e, -ENOMEM);
		if (rootfs_resolve(&q, &named, &e) < 0) {
			policy_free(&q);
			return fail_core(err, &e, -ENOENT);
		}
		r = run_command(&q, argv, &ro, &res, &e);
		policy_free(&q);
		if (r < 0)
			return fail_core(err, &e, -EIO);
	}
	api_run_status(&out, n, &res.st);
	snprintf(out.cgroup_mode, sizeof(out.cgroup_mode), "%s", cgroup_mode_name(res.cg_mode));
	out.memory_enforced = res.cg_enforced[CTRL_MEMORY];
	out.pids_enforced = res.cg_enforced[CTRL_PIDS];
	out.cpu_enforced = res.cg_enforced[CTRL_CPU];
	memcpy(st, &out, out.struct_size);
	return 0;
}

/* ---- for the library's other files (lib/api-internal.h) ---- */

void api_run_status(struct nsbox_run_status *out, size_t n, const struct jail_status *js)
{
	memset(out, 0, sizeof(*out));
	out->struct_size = n < sizeof(*out) ? n : sizeof(*out);
	out->exit_code = jail_exit_code(js);
	out->exited = js->exited;
	out->exit_status = js->exit_code;
	out->term_signal = js->term_signal;
	out->time_limit = js->time_limit;
	out->oom_killed = js->oom_killed;
	out->exec_errno = js->exec_errno;
	out->peak_memory = js->peak_memory;
	out->cpu_user = js->cpu_user;
	out->cpu_system = js->cpu_system;
	out->wall = js->wall;
}

struct nsbox_session *api_core_session(nsbox_session_t *s)
{
	return s ? s->s : NULL;
}

int api_fail(nsbox_error_t **err, int code, const char *msg)
{
	return fail_msg(err, code, msg);
}

pid_t api_session_owner(const nsbox_session_t *s)
{
	return s->owner;
}

/* ---- session file operations (since 0.5.0; host/files.c) ---- */

/* The default cap per file per call (NULL s: checked as such later). */
static uint64_t file_max(const nsbox_session_t *s)
{
	return s ? s->file_max : SESSION_FILE_MAX_DEFAULT;
}

static int file_call_begin(nsbox_session_t *s, const char *path, nsbox_error_t **err, const char *what)
{
	int r;

	if (!path || !*path)
		return fail(err, -EINVAL, "%s: %s", what, !path ? "path is NULL" : "path is empty");
	if (!proto_utf8_valid(path, strlen(path)))
		return fail(err, -EINVAL, "%s: path is not UTF-8", what);
	if ((r = check_session(s, err, what)) < 0)
		return r;
	if (!enter(s))
		return busy(err, what);
	session_call_begin(s->s);
	return 0;
}

/* The file calls document the errno seen inside (nsbox.h, session files):
 * these pass untouched, rc_filter maps the rest. */
static int file_fail(nsbox_error_t **err, const struct nsbox_err *e)
{
	switch (e->code) {
	case EISDIR:
	case ENOTDIR:
	case EFBIG:
	case ELOOP:
	case EACCES:
	case EDQUOT:
	case ENOTSUP:
	case EROFS:
	case ENAMETOOLONG:
	case EEXIST:
	case ENOSPC:
	case ENOENT:
	case EINVAL:
	case EPERM:
	case ETOOMANYREFS: /* the host could not pass its memfd (host/session.c) */
		break;
	default:
		return fail_core(err, e, -EIO);
	}
	if (err) {
		struct nsbox_error *o = calloc(1, sizeof(*o));

		if (o && (o->msg = strdup(e->msg)) != NULL) {
			o->code = -e->code;
			*err = o;
		} else {
			free(o);
			*err = &oom_error;
		}
	}
	return -e->code;
}

static int file_call_end(nsbox_session_t *s, int r, const struct nsbox_err *e, nsbox_error_t **err)
{
	struct nsbox_err q;

	session_call_end(s->s);
	leave(s);
	if (r >= 0)
		return 0;
	/* Every message of a file call, made inert here once: they quote
	 * paths, and a path may hold names the sandbox chose (upload_dir's
	 * host tree an earlier session wrote back, download_dir's and the
	 * runner's errors), which reached the caller's terminal raw. */
	q = *e;
	proto_text_inert(e->msg, q.msg, sizeof(q.msg));
	/* A request that ended the session (timeout, protocol error) says so. */
	if (!session_alive(s->s))
		return fail_msg(err, -ENOTCONN, q.msg);
	return file_fail(err, &q);
}

int nsbox_write_file(nsbox_session_t *s, const char *path, const void *data, size_t len, int mode, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	int r;

	if (!data && len)
		return fail(err, -EINVAL, "nsbox_write_file: data is NULL");
	if (mode > 07777)
		return fail(err, -EINVAL, "nsbox_write_file: mode %o has bits beyond 07777", (unsigned)mode);
	if (len > file_max(s)) {
		err_set(&e, EFBIG, "nsbox_write_file: %zu bytes is more than the cap of %llu bytes", len,
			(unsigned long long)file_max(s));
		return file_fail(err, &e);
	}
	if ((r = file_call_begin(s, path, err, "nsbox_write_file")) < 0)
		return r;
	r = session_file_write(s->s, path, data ? data : "", len, mode, &e);
	return file_call_end(s, r, &e, err);
}

int nsbox_read_file(nsbox_session_t *s, const char *path, char **data, size_t *len, uint64_t max, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	char *buf = NULL;
	size_t n = 0;
	int r;

	if (!data || !len)
		return fail(err, -EINVAL, "nsbox_read_file: %s is NULL", !data ? "data" : "len");
	if ((r = file_call_begin(s, path, err, "nsbox_read_file")) < 0)
		return r;
	r = session_file_read(s->s, path, max ? max : file_max(s), &buf, &n, &e);
	if ((r = file_call_end(s, r, &e, err)) < 0)
		return r;
	*data = buf;
	*len = n;
	return 0;
}

int nsbox_download_dir(nsbox_session_t *s, const char *path, const char *local, uint64_t max_bytes, uint64_t max_files,
		       nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	uint64_t n = 0;
	int r;

	if (!local || !*local)
		return fail(err, -EINVAL, "nsbox_download_dir: local is %s", local ? "empty" : "NULL");
	if (max_files > INT_MAX)
		return fail(err, -EINVAL, "nsbox_download_dir: max_files over %d", INT_MAX);
	if ((r = file_call_begin(s, path, err, "nsbox_download_dir")) < 0)
		return r;
	r = session_download_dir(s->s, path, local, max_bytes ? max_bytes : NSBOX_DIR_MAX_BYTES,
				 max_files ? max_files : NSBOX_DIR_MAX_FILES, file_max(s), &n, &e);
	if ((r = file_call_end(s, r, &e, err)) < 0)
		return r;
	return (int)n;
}

int nsbox_upload_dir(nsbox_session_t *s, const char *local, const char *path, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	uint64_t n = 0;
	int r;

	if (!local || !*local)
		return fail(err, -EINVAL, "nsbox_upload_dir: local is %s", local ? "empty" : "NULL");
	if ((r = file_call_begin(s, path, err, "nsbox_upload_dir")) < 0)
		return r;
	r = session_upload_dir(s->s, local, path, file_max(s), &n, &e);
	if ((r = file_call_end(s, r, &e, err)) < 0)
		return r;
	return n > INT_MAX ? INT_MAX : (int)n;
}

int nsbox_list_files(nsbox_session_t *s, const char *path, char **json, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	json_t *v = NULL;
	char *text;
	int r;

	if (!json)
		return fail(err, -EINVAL, "nsbox_list_files: json is NULL");
	if ((r = file_call_begin(s, path, err, "nsbox_list_files")) < 0)
		return r;
	r = session_file_list(s->s, path, &v, &e);
	if ((r = file_call_end(s, r, &e, err)) < 0)
		return r;
	text = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	if (!text)
		return fail(err, -ENOMEM, "nsbox_list_files: out of memory");
	*json = text;
	return 0;
}

int nsbox_make_dir(nsbox_session_t *s, const char *path, int mode, nsbox_error_t **err)
{
	struct nsbox_err e = { 0 };
	int r;

	if (mode > 07777)
		return fail(err, -EINVAL, "nsbox_make_dir: mode %o has bits beyond 07777", (unsigned)mode);
	if ((r = file_call_begin(s, path, err, "nsbox_make_dir")) < 0)
		return r;
	r = session_file_mkdir(s->s, path, mode, &e);
	return file_call_end(s, r, &e, err);
}

/* ---- rich results ---- */

size_t nsbox_result_display_count(const nsbox_result_t *r)
{
	return r ? r->n_displays : 0;
}

size_t nsbox_result_display_mime_count(const nsbox_result_t *r, size_t i)
{
	return r && i < r->n_displays ? r->displays[i].n : 0;
}

const char *nsbox_result_display_mime(const nsbox_result_t *r, size_t i, size_t j)
{
	return r && i < r->n_displays && j < r->displays[i].n ? r->displays[i].items[j].mime : NULL;
}

const void *nsbox_result_display_data(const nsbox_result_t *r, size_t i, const char *mime, size_t *len)
{
	if (len)
		*len = 0;
	if (!r || !mime || i >= r->n_displays)
		return NULL;
	for (size_t j = 0; j < r->displays[i].n; j++) {
		const struct rich_item *it = &r->displays[i].items[j];

		if (!strcmp(it->mime, mime)) {
			if (len)
				*len = it->len;
			return it->data;
		}
	}
	return NULL;
}

bool nsbox_result_displays_truncated(const nsbox_result_t *r)
{
	return r && r->displays_truncated;
}

size_t nsbox_result_file_count(const nsbox_result_t *r)
{
	return r ? r->n_files : 0;
}

const char *nsbox_result_file_name(const nsbox_result_t *r, size_t i)
{
	return r && i < r->n_files ? r->files[i].name : NULL;
}

const void *nsbox_result_file_data(const nsbox_result_t *r, size_t i, size_t *len, uint64_t *size)
{
	const struct rich_file *f = r && i < r->n_files ? &r->files[i] : NULL;

	if (len)
		*len = f && f->data ? f->len : 0;
	if (size)
		*size = f ? f->size : 0;
	return f ? f->data : NULL;
}

bool nsbox_result_files_truncated(const nsbox_result_t *r)
{
	return r && r->files_truncated;
}
