#include "args.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct jail_opt {
	const char *name; /* without the leading "--" */
	const char *section, *key;
	const char *fixed; /* value for flags without an argument */
	int path;	   /* 1: make the value absolute; 2: SRC:DST, make SRC absolute;
			      3: absolute against the cwd (the file may not exist yet);
			      4: a name, or (with a '/') a path made absolute;
			      5: NAME[=VALUE], NAME alone taking the host's value */
};

static const struct jail_opt opts[] = {
	{ "memory", "Limits", "Memory", NULL, 0 },
	{ "pids", "Limits", "Pids", NULL, 0 },
	{ "cpus", "Limits", "CPUs", NULL, 0 },
	{ "time-limit", "Limits", "TimeLimit", NULL, 0 },
	{ "tmp-size", "Limits", "TmpSize", NULL, 0 },
	{ "file-size", "Limits", "FileSize", NULL, 0 },
	{ "open-files", "Limits", "OpenFiles", NULL, 0 },
	{ "cgroups", "Limits", "Cgroups", NULL, 0 },
	{ "uid", "Sandbox", "Uid", NULL, 0 },
	{ "gid", "Sandbox", "Gid", NULL, 0 },
	{ "hostname", "Sandbox", "Hostname", NULL, 0 },
	{ "chdir", "Sandbox", "WorkDir", NULL, 0 },
	{ "share-net", "Sandbox", "Network", "host", 0 },
	{ "allow-net", "Network", "Allow", NULL, 0 },
	{ "net-log", "Network", "Log", NULL, 3 },
	{ "net-max-bytes-out", "Network", "MaxBytesOut", NULL, 0 },
	{ "net-max-bytes-in", "Network", "MaxBytesIn", NULL, 0 },
	{ "net-max-connections", "Network", "MaxConnections", NULL, 0 },
	{ "net-max-log-bytes", "Network", "MaxLogBytes", NULL, 0 },
	{ "bind", "Filesystem", "Bind", NULL, 2 },
	{ "ro-bind", "Filesystem", "ReadOnlyBind", NULL, 2 },
	{ "workspace", "Filesystem", "Workspace", NULL, 1 },
	{ "workspace-size", "Limits", "WorkspaceSize", NULL, 0 },
	{ "rootfs", "Filesystem", "RootFS", NULL, 4 },
	{ "tmpfs", "Filesystem", "TmpFS", NULL, 0 },
	{ "setenv", "Environment", "Set", NULL, 0 },
	{ "env", "Environment", "Set", NULL, 5 },
	{ "unsetenv", "Environment", "Unset", NULL, 0 },
	{ "seccomp-log", "Security", "Seccomp", "log", 0 },
	{ "landlock", "Security", "Landlock", NULL, 0 },
	{ "dist-packages", "Python", "DistPackages", "yes", 0 },
	{ "preload", "Python", "Preload", NULL, 0 },
};

const char args_jail_help[] =
	"Jail options (override the policy):\n"
	"  --policy NAME|FILE     default, strict, permissive, or a policy file\n"
	"  --memory SIZE          memory limit (e.g. 256M); no swap\n"
	"  --pids N               process and thread limit\n"
	"  --cpus N               CPU limit (e.g. 0.5)\n"
	"  --time-limit SECONDS   wall-clock limit; the whole sandbox is killed\n"
	"  --tmp-size SIZE        size of /tmp and /dev/shm\n"
	"  --file-size SIZE       RLIMIT_FSIZE\n"
	"  --open-files N         RLIMIT_NOFILE\n"
	"  --cgroups auto|require|off\n"
	"  --uid N, --gid N       ids inside the sandbox (default 1000)\n"
	"  --hostname NAME        (default nsbox)\n"
	"  --share-net            share the host's network (opt-out of isolation)\n"
	"  --allow-net HOST[:PORT]  reach HOST (NAME, *.NAME, IP or CIDR; ports 443\n"
	"                         and 80 by default) through nsbox's egress proxy\n"
	"  --net-log FILE         audit every proxied connection and DNS query (JSON lines)\n"
	"  --net-max-bytes-out SIZE, --net-max-bytes-in SIZE, --net-max-connections N\n"
	"  --bind SRC[:DST]       read-write bind mount\n"
	"  --ro-bind SRC[:DST]    read-only bind mount\n"
	"  --workspace DIR        read-write at /workspace, the working directory\n"
	"  --workspace-size SIZE  what the sandbox may write there (default 256M;\n"
	"                         infinity: a plain bind); copied back at its end\n"
	"  --rootfs NAME|DIR      a built root tree (nsbox rootfs list) or a root directory\n"
	"                         instead of the host's /usr\n"
	"  --tmpfs PATH[:SIZE]    a private tmpfs at PATH (default size: --tmp-size's)\n"
	"  --chdir DIR            working directory inside (default HOME: /workspace or /tmp)\n"
	"  --setenv NAME=VALUE    set an environment variable\n"
	"  --env NAME[=VALUE]     the same; NAME alone passes the host's value (if set)\n"
	"  --unsetenv NAME        remove a variable (also PATH, HOME, LANG, TERM)\n"
	"  --seccomp-log          log, don't deny, what the seccomp allowlist would deny\n"
	"  --landlock auto|require|off\n"
	"  --dist-packages        make Debian's dist-packages importable (nsbox python)\n"
	"  --preload \"MOD ...\"    modules imported before the session starts (default: the root\n"
	"                         tree's Preload=)\n";

int cli_err_set(struct cli_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	size_t len;

	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	len = strlen(err->msg);
	if (code > 0)
		snprintf(err->msg + len, sizeof(err->msg) - len, ": %s", strerror(code));
	return -1;
}

int cli_err_wrap(struct cli_err *err, const char *fmt, ...)
{
	char prefix[256], old[sizeof(err->msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
	return -1;
}

/* "--name=value" or "--name value"; returns the option name length. */
static size_t opt_name_len(const char *arg)
{
	return strcspn(arg + 2, "=");
}

static char *absolute(const char *path, struct cli_err *err)
{
	char buf[PATH_MAX];

	if (!realpath(path, buf)) {
		cli_err_set(err, errno, "%s", path);
		return NULL;
	}
	return strdup(buf);
}

/* A directory the caller can enter and list (mounting one it cannot would
 * fail only at the mount step, as "setup failed").  Checked as the caller:
 * access() uses the real ids, which the sandbox's are mapped to. */
static int check_dir(const char *path, struct cli_err *err)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return cli_err_set(err, errno, "%s", path);
	if (!S_ISDIR(st.st_mode))
		return cli_err_set(err, 0, "not a directory");
	if (access(path, R_OK | X_OK) < 0)
		return cli_err_set(err, errno, "not accessible to uid %u", (unsigned)getuid());
	return 0;
}

/* An API error as a CLI error (and free it). */
static int take_error(struct cli_err *err, nsbox_error_t *e)
{
	/* The message is complete: no strerror() suffix. */
	cli_err_set(err, 0, "%s", nsbox_error_message(e));
	err->code = -nsbox_error_code(e);
	nsbox_error_free(e);
	return -1;
}

/* Whether the long option arg ("--name", no '=') takes the next word as its
 * value: a jail option without a fixed value, or one of the front end's
 * own (own_values). */
static bool takes_value(const char *arg, const char *const *own_values)
{
	size_t len = opt_name_len(arg);

	if (arg[2 + len] == '=')
		return false;
	for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++)
		if (strlen(opts[k].name) == len && !strncmp(arg + 2, opts[k].name, len))
			return !opts[k].fixed;
	for (const char *const *o = own_values; *o; o++)
		if (strlen(*o) == len && !strncmp(arg + 2, *o, len))
			return true;
	return false;
}

/* Where args_load_policy found --policy (-1: nowhere): any other one
 * args_parse_jail_option meets is a second, refused.  (The first won,
 * and a later one was never loaded or checked: `--policy strict --policy
 * /nonexistent` ran strict, status 0.) */
static int policy_at = -1;
static const char *policy_name;

int args_load_policy(nsbox_policy_t **p, int argc, char **argv, const char *const *own_values, struct cli_err *err)
{
	const char *name = "default";
	nsbox_error_t *e = NULL;

	policy_at = -1;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--") == 0)
			break;
		if (strcmp(a, "--policy") == 0) {
			if (i + 1 >= argc)
				return cli_err_set(err, 0, "--policy needs a value");
			name = argv[i + 1];
			policy_at = i;
			break;
		}
		if (strncmp(a, "--policy=", 9) == 0) {
			name = a + 9;
			policy_at = i;
			break;
		}
		if (!own_values)
			continue;
		/* Where the command, program or script begins, the rest is its
		 * own: `nsbox python -c CODE --policy x` is sys.argv. */
		if (a[0] != '-' || !a[1])
			break;
		if (a[1] == '-') {
			i += takes_value(a, own_values);
			continue;
		}
		/* python's clusters: -c and -m end the options, -W and -X take
		 * the rest or the next word. */
		for (const char *c = a + 1; *c; c++) {
			if (*c == 'c' || *c == 'm')
				goto found;
			if (*c == 'W' || *c == 'X') {
				i += !c[1];
				break;
			}
		}
	}
found:
	policy_name = name;
	if (nsbox_policy_new(name, p, &e) < 0)
		return take_error(err, e);
	return 0;
}

int args_parse_jail_option(nsbox_policy_t *p, int argc, char **argv, int *i, struct cli_err *err)
{
	const char *arg = argv[*i];
	const char *val;
	size_t len;
	bool inline_val;

	if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
		return 0;
	len = opt_name_len(arg);
	inline_val = arg[2 + len] == '=';
	if (len == 6 && strncmp(arg + 2, "policy", 6) == 0) {
		/* Applied first by args_load_policy(). */
		int at = *i;

		if (!inline_val)
			(*i)++;
		if (*i >= argc)
			return cli_err_set(err, 0, "--policy needs a value");
		if (policy_at >= 0 && at != policy_at)
			return cli_err_set(err, 0, "--policy given twice (%s, then %s)", policy_name,
					   inline_val ? arg + 9 : argv[*i]);
		return 1;
	}
	for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
		const struct jail_opt *o = &opts[k];
		char *owned = NULL;
		int r;

		if (strlen(o->name) != len || strncmp(arg + 2, o->name, len) != 0)
			continue;
		if (o->fixed) {
			if (inline_val)
				return cli_err_set(err, 0, "--%s takes no value", o->name);
			val = o->fixed;
		} else if (inline_val) {
			val = arg + 3 + len;
		} else {
			if (*i + 1 >= argc)
				return cli_err_set(err, 0, "--%s needs a value", o->name);
			val = argv[++*i];
		}
		if (o->path == 5 && !strchr(val, '=')) {
			/* As docker run -e NAME and nsjail --env NAME: the
			 * caller's value, or nothing when the caller has none. */
			const char *host = getenv(val);

			if (!host) {
				bool name_ok =
					(val[0] == '_' || (unsigned)((val[0] | 32) - 'a') < 26u) &&
					val[strspn(
						val,
						"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")] ==
						'\0';

				if (!name_ok)
					return cli_err_set(err, 0, "--%s %s: not a variable name", o->name, val);
				return 1;
			}
			if (asprintf(&owned, "%s=%s", val, host) < 0)
				return cli_err_set(err, ENOMEM, "--%s", o->name);
			val = owned;
		} else if (o->path == 3 && val[0] != '/') {
			char cwd[PATH_MAX];

			if (!getcwd(cwd, sizeof(cwd)))
				return cli_err_set(err, errno, "--%s", o->name);
			if (asprintf(&owned, "%s/%s", cwd, val) < 0)
				return cli_err_set(err, ENOMEM, "--%s", o->name);
			val = owned;
		} else if (o->path == 1 || (o->path == 4 && strchr(val, '/'))) {
			/* --rootfs NAME is a built tree's name; a directory has a '/'. */
			owned = absolute(val, err);
			if (!owned)
				return cli_err_wrap(err, "--%s", o->name);
			if (check_dir(owned, err) < 0) {
				free(owned);
				return cli_err_wrap(err, "--%s %s", o->name, val);
			}
			val = owned;
		} else if (o->path == 2) {
			const char *colon = strchr(val, ':');
			char src[PATH_MAX], abs[PATH_MAX];
			size_t sl = colon ? (size_t)(colon - val) : strlen(val);
			if (sl == 0 || sl >= sizeof(src))
				return cli_err_set(err, 0, "--%s %s: expected SRC[:DST]", o->name, val);
			memcpy(src, val, sl);
			src[sl] = '\0';
			if (!realpath(src, abs))
				return cli_err_set(err, errno, "--%s %s", o->name, src);
			/* A DST-less bind keeps the path as given, made absolute. */
			if (asprintf(&owned, "%s:%s", abs, colon ? colon + 1 : abs) < 0)
				return cli_err_set(err, ENOMEM, "--%s", o->name);
			val = owned;
		}
		nsbox_error_t *e = NULL;

		r = nsbox_policy_set(p, o->section, o->key, val, &e);
		free(owned);
		if (r < 0) {
			take_error(err, e);
			return cli_err_wrap(err, "--%s", o->name);
		}
		return 1;
	}
	return 0;
}

static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t row[64], prev, tmp;

	if (lb >= ARRAY_SIZE(row) || la >= 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		prev = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t best = prev + (a[i - 1] != b[j - 1]);

			tmp = row[j];
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			prev = tmp;
		}
	}
	return row[lb];
}

/* Distance from arg's name (up to any '=') to "--name"; a prefix of a
 * longer name counts as close (--mem for --memory). */
static size_t option_distance(const char *arg, size_t len, const char *name)
{
	size_t ln = strlen(name), d = edit_distance(arg, len, name, ln);

	if (len >= 3 && len < ln && strncmp(arg, name, len) == 0 && d > 1)
		d = 1;
	return d;
}

const char *args_suggest(const char *arg, const char *const *extra)
{
	const char *best = NULL, *a = arg;
	size_t len, best_d = SIZE_MAX;

	while (*a == '-')
		a++;
	len = strcspn(a, "=");
	if (len == 0)
		return NULL;
	for (size_t k = 0; k < ARRAY_SIZE(opts) + 1; k++) {
		const char *name = k < ARRAY_SIZE(opts) ? opts[k].name : "policy";
		size_t d = option_distance(a, len, name);

		if (d < best_d) {
			best_d = d;
			best = name;
		}
	}
	for (size_t k = 0; extra && extra[k]; k++) {
		size_t d = option_distance(a, len, extra[k]);

		if (d < best_d) {
			best_d = d;
			best = extra[k];
		}
	}
	/* Close enough to be a typo: a third of the name, at least one edit. */
	if (!best || best_d > (len > 6 ? len / 3 : 2) || best_d >= len)
		return NULL;
	return best;
}

int args_unknown_option(const char *cmd, const char *arg, const char *const *extra, struct cli_err *err)
{
	const char *s = args_suggest(arg, extra);

	if (s)
		return cli_err_set(err, 0, "unknown option '%s'; did you mean --%s? (see nsbox %s --help)", arg, s,
				   cmd);
	return cli_err_set(err, 0, "unknown option '%s' (see nsbox %s --help)", arg, cmd);
}

/* What sh(1) may run that PATH does not hold: its own words. */
static const char *const shell_words[] = { ".",	    ":",     "break",  "cd",	"command",  "continue", "eval",
					   "exec",  "exit",  "export", "read",	"readonly", "return",	"set",
					   "shift", "times", "trap",   "type",	"ulimit",   "umask",	"unset",
					   "wait",  "if",    "for",    "while", "until",    "case",	"{",
					   "!",	    "test",  "[",      "echo",	"printf",   "true",	"false" };

bool args_left_to_service(int r, const nsbox_error_t *e)
{
	const char *svc = getenv("NSBOX_CONNECT");
	const char *step = nsbox_error_step(e);

	return r < 0 && svc && *svc && step && !strcmp(step, "rootfs");
}

/* command's first word as execvp(3) finds it: 1 with its path in found,
 * 0 when it is not a plain word or is one of sh's own, -1 with err when
 * no file is there. */
/* each (may be NULL) is given every place sh looks for the program, up to
 * where it is found: its nonzero return is returned at once. */
static int command_file(const char *command, char found[PATH_MAX], struct cli_err *err,
			int (*each)(const char *place, void *ctx), void *ctx)
{
	char word[PATH_MAX], cand[PATH_MAX];
	const char *s = command, *path;
	size_t n;

	while (*s == ' ' || *s == '\t')
		s++;
	n = strcspn(s, " \t\n;&|<>()`$\"'\\*?[]~=#");
	if (n == 0 || n >= sizeof(word)) {
		/* Not a plain command word (a subshell, a quote, an assignment):
		 * only sh can tell, when the tool is called. */
		if (*s == '\0')
			return cli_err_set(err, 0, "empty command");
		return 0;
	}
	memcpy(word, s, n);
	word[n] = '\0';
	if (s[n] == '=')
		return 0; /* VAR=value cmd */
	for (size_t k = 0; k < ARRAY_SIZE(shell_words); k++)
		if (strcmp(word, shell_words[k]) == 0)
			return 0;
	if (strchr(word, '/')) {
		struct stat st;
		int k;

		if (each && (k = each(word, ctx)) != 0)
			return k;
		if (stat(word, &st) < 0)
			return cli_err_set(err, errno, "%s", word);
		if (!S_ISREG(st.st_mode) || access(word, X_OK) < 0)
			return cli_err_set(err, 0, "%s: not an executable file", word);
		memcpy(found, word, n + 1);
		return 1;
	}
	/* As execvp(3) searches: each PATH entry, an empty one meaning ".". */
	path = getenv("PATH");
	if (!path)
		path = "/usr/local/bin:/bin:/usr/bin";
	for (const char *p = path;; p += strcspn(p, ":") + 1) {
		size_t dl = strcspn(p, ":");
		struct stat st;
		int k;

		if (snprintf(cand, sizeof(cand), "%.*s%s%s", (int)dl, dl ? p : ".", "/", word) >= (int)sizeof(cand))
			goto next;
		if (each && (k = each(cand, ctx)) != 0)
			return k;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
			memcpy(found, cand, strlen(cand) + 1);
			return 1;
		}
next:
		if (!p[dl])
			break;
	}
	return cli_err_set(err, 0, "%s: command not found in PATH", word);
}

int args_check_command(const char *command, struct cli_err *err)
{
	char found[PATH_MAX];

	return command_file(command, found, err, NULL, NULL) < 0 ? -1 : 0;
}

struct places {
	const nsbox_policy_t *p;
	nsbox_error_t **e;
	bool refused;
};

static int place_exposed(const char *place, void *ctx)
{
	struct places *c = ctx;
	int k = nsbox_policy_check_host_file(c->p, place, c->e);

	if (k == -EPERM) {
		c->refused = true;
		return 2; /* stop */
	}
	if (k < 0) { /* a place that is not there: sh's search goes on */
		nsbox_error_free(*c->e);
		*c->e = NULL;
	}
	return 0;
}

int args_check_command_places(const char *command, const nsbox_policy_t *p, nsbox_error_t **e)
{
	struct places c = { p, e, false };
	struct cli_err err;
	char found[PATH_MAX];

	(void)command_file(command, found, &err, place_exposed, &c);
	return c.refused ? -EPERM : 0;
}
