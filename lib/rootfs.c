/* Built root trees (rootfs/, `nsbox rootfs`), the library's side: a policy's
 * RootFS=NAME resolved to the tree's directory, and the packages a tree
 * provides.  The trees are built by rootfs/nsbox-rootfs (mmdebstrap) into
 * a cache directory:
 *
 *   CACHE/NAME            a symlink to NAME-HASH, replaced atomically by a build
 *   CACHE/NAME-HASH/tree  the root tree, what the sandbox sees as /usr and the
 *                         merged-usr links (jail/mount.c, make_system)
 *   CACHE/NAME-HASH/info  key=value lines: name, hash, preload, python, built
 *
 * CACHE is /var/cache/nsbox/rootfs for root, else $XDG_CACHE_HOME/nsbox/rootfs
 * (~/.cache/nsbox/rootfs); a user's lookup falls back to root's, which
 * root built and owns.  NSBOX_ROOTFS_CACHE overrides the first. */
#include "api-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "util.h"

#define SYSTEM_CACHE "/var/cache/nsbox/rootfs"
#define INFO_MAX 8192
#define STATUS_MAX (64u << 20) /* a dpkg status file; Debian's full archive is ~60 MB */

/* The user's cache directory, in buf; false when there is none ($HOME unset). */
static bool user_cache(char *buf, size_t size)
{
	const char *env = getenv("NSBOX_ROOTFS_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

	if (env && *env)
		return snprintf(buf, size, "%s", env) < (int)size;
	if (geteuid() == 0)
		return snprintf(buf, size, "%s", SYSTEM_CACHE) < (int)size;
	if (xdg && xdg[0] == '/')
		return snprintf(buf, size, "%s/nsbox/rootfs", xdg) < (int)size;
	if (home && home[0] == '/')
		return snprintf(buf, size, "%s/.cache/nsbox/rootfs", home) < (int)size;
	return false;
}

/* A build directory we may trust: owned by us or root, writable by no one
 * else (another user could otherwise swap the tree under our sandboxes). */
static bool trusted(const struct stat *st)
{
	return S_ISDIR(st->st_mode) && (st->st_uid == geteuid() || st->st_uid == 0) && !(st->st_mode & 022);
}

/* The same check as rootfs/nsbox-rootfs's cache_open (CACHE_PY), with the
 * same words: a cache another user could change is refused, as ssh and
 * sudo refuse unsafe paths.  Every directory on the (resolved) way must be
 * root's or ours and writable by no one else unless sticky (/tmp); the
 * cache itself ours and writable by no one else.  What does not exist yet
 * ends the walk (nothing is there to swap).  A cache that fails would let
 * another user replace the tree under our sandboxes between a build's
 * check and its use. */
static int cache_check(const char *path, struct nsbox_err *err)
{
	char real[PATH_MAX], head[PATH_MAX], cur[PATH_MAX], why[PATH_MAX + 96];
	const char *tail = "";
	uid_t me = geteuid();
	size_t n;

	why[0] = '\0';
	if (path[0] != '/') {
		snprintf(why, sizeof(why), "not an absolute path");
		goto bad;
	}
	/* realpath(3) of the longest prefix that exists, then the rest as it
	 * is (what Python's os.path.realpath, the script's, gives). */
	if (snprintf(head, sizeof(head), "%s", path) >= (int)sizeof(head))
		return err_fail(err, "rootfs", ENAMETOOLONG, "the cache %s: path too long", path);
	for (;;) {
		char *slash;

		if (realpath(head, real))
			break;
		if (errno != ENOENT && errno != ENOTDIR)
			return err_sys(err, "the cache %s: resolve %s", path, head);
		slash = strrchr(head, '/');
		if (!slash || slash == head) {
			snprintf(real, sizeof(real), "/");
			tail = path + 1;
			break;
		}
		*slash = '\0';
		tail = path + (slash - head) + 1;
	}
	n = strlen(real);
	if (*tail && snprintf(real + n, sizeof(real) - n, "%s%s", n > 1 ? "/" : "", tail) >= (int)(sizeof(real) - n))
		return err_fail(err, "rootfs", ENAMETOOLONG, "the cache %s: path too long", path);
	/* Collapse what the tail may carry ("a//b", trailing '/'). */
	for (char *p = real; (p = strstr(p, "//"));)
		memmove(p, p + 1, strlen(p));
	n = strlen(real);
	if (n > 1 && real[n - 1] == '/')
		real[n - 1] = '\0';
	for (const char *c = real;;) {
		const char *next = c == real ? c + 1 : strchr(c + 1, '/');
		struct stat st;
		bool last;

		if (c != real && !next)
			next = c + strlen(c);
		if (c == real)
			snprintf(cur, sizeof(cur), "/");
		else
			snprintf(cur, sizeof(cur), "%.*s", (int)(next - real), real);
		if (lstat(cur, &st) < 0) {
			if (errno == ENOENT)
				return 0;
			return err_sys(err, "the cache %s: lstat %s", path, cur);
		}
		last = !strcmp(cur, real);
		if (S_ISLNK(st.st_mode))
			snprintf(why, sizeof(why), "%s is a symbolic link (it changed while checked)", cur);
		else if (!S_ISDIR(st.st_mode))
			snprintf(why, sizeof(why), "%s is not a directory", cur);
		else if ((st.st_uid != 0 && st.st_uid != me) || (last && st.st_uid != me))
			snprintf(why, sizeof(why), "%s is owned by uid %u, not by %s", cur, (unsigned)st.st_uid,
				 last || me == 0 ? "you" : "you or root");
		else if ((st.st_mode & 022) && (last || !(st.st_mode & S_ISVTX)))
			snprintf(why, sizeof(why), "%s is writable by others (mode %04o)", cur,
				 (unsigned)(st.st_mode & 07777));
		if (why[0])
			goto bad;
		if (last || !*next)
			return 0;
		c = next;
	}
bad:
	return err_fail(err, "rootfs", EACCES, "the cache %s is not safe: %s (NSBOX_ROOTFS_CACHE, nsbox(1) ROOT TREES)",
			path, why);
}

/* Look NAME up in one cache: fills dir (CACHE/NAME-HASH, resolved) and
 * returns 0, or -1 (not there). */
static int find_in(const char *cache, const char *name, char *dir, size_t size)
{
	char link[PATH_MAX], *real;
	struct stat st;

	if (snprintf(link, sizeof(link), "%s/%s", cache, name) >= (int)sizeof(link))
		return -1;
	real = realpath(link, NULL);
	if (!real)
		return -1;
	if (stat(real, &st) < 0 || !trusted(&st) || snprintf(dir, size, "%s", real) >= (int)size) {
		free(real);
		return -1;
	}
	free(real);
	return 0;
}

/* The value of key in an info file's text, copied to out; false if absent. */
static bool info_get(const char *text, const char *key, char *out, size_t size)
{
	size_t kl = strlen(key);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, key, kl) && l[kl] == '=') {
			size_t n = strcspn(l + kl + 1, "\n");
			if (n >= size)
				return false;
			memcpy(out, l + kl + 1, n);
			out[n] = '\0';
			return true;
		}
	}
	return false;
}

static int rootfs_find(const char *name, char *dir, size_t size, char *preload, size_t psize, struct nsbox_err *err)
{
	char cache[PATH_MAX], path[PATH_MAX + 8], text[INFO_MAX];
	const char *env = getenv("NSBOX_ROOTFS_CACHE");
	bool have = user_cache(cache, sizeof(cache));
	_cleanup_close_ int fd = -1;
	ssize_t n;

	/* Not the default cache in its place: the user meant another. */
	if (env && *env && env[0] != '/')
		return err_fail(err, "rootfs", EINVAL,
				"NSBOX_ROOTFS_CACHE=%s: not an absolute path (the cache of built root trees)", env);

	/* The user's cache as the script checks it before a build or a
	 * removal; root's, the fallback, is root's (trusted() checks its
	 * builds). */
	if (have && cache_check(cache, err) < 0)
		return -1;
	if (!(have && find_in(cache, name, dir, size) == 0) &&
	    !(geteuid() != 0 && find_in(SYSTEM_CACHE, name, dir, size) == 0))
		return err_fail(err, "rootfs", ENOENT,
				"root tree '%s' is not built (run: nsbox rootfs build %s; looked in %s%s)", name, name,
				have ? cache : "no cache directory: HOME is unset",
				geteuid() != 0 ? " and " SYSTEM_CACHE : "");
	snprintf(path, sizeof(path), "%s/info", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return err_sys(err, "root tree '%s': open %s", name, path);
	n = read(fd, text, sizeof(text) - 1);
	if (n < 0)
		return err_sys(err, "root tree '%s': read %s", name, path);
	text[n] = '\0';
	if (!info_get(text, "preload", preload, psize))
		preload[0] = '\0';
#ifdef NSBOX_PY_DEBVERSION
	{
		char py[128];
		/* The runner links libpython3.11 and runs on the tree's stdlib
		 * and extension modules: the same Debian build, or a clear no. */
		if (NSBOX_PY_DEBVERSION[0] &&
		    (!info_get(text, "python", py, sizeof(py)) || strcmp(py, NSBOX_PY_DEBVERSION)))
			return err_fail(
				err, "rootfs", ENOENT,
				"root tree '%s' carries python3.11 %s, this nsbox's runner links %s: rebuild it "
				"(nsbox rootfs build %s)",
				name, info_get(text, "python", py, sizeof(py)) ? py : "(unknown)", NSBOX_PY_DEBVERSION,
				name);
	}
#endif
	if (strlen(dir) + sizeof("/tree") > size)
		return err_fail(err, "rootfs", ENAMETOOLONG, "root tree '%s': %s: path too long", name, dir);
	strcat(dir, "/tree");
	return 0;
}

int rootfs_resolve(struct nsbox_policy *p, bool *named, struct nsbox_err *err)
{
	char dir[PATH_MAX], preload[POLICY_PRELOAD_MAX + 1], *d, *pl = NULL;

	*named = false;
	if (!p->rootfs || p->rootfs[0] == '/')
		return 0;
	*named = true;
	/* minimal is what sandboxes see without RootFS=: the host's /usr (see
	 * rootfs/minimal.tree for why it is not a built tree). */
	if (!strcmp(p->rootfs, "minimal")) {
		free(p->rootfs);
		p->rootfs = NULL;
		return 0;
	}
	if (rootfs_find(p->rootfs, dir, sizeof(dir), preload, sizeof(preload), err) < 0)
		return -1;
	/* The info file's list goes through the policy's own check. */
	if (!p->preload && preload[0]) {
		struct nsbox_policy q = { 0 };
		if (policy_set(&q, "Python", "Preload", preload, err) < 0) {
			policy_free(&q);
			return err_wrap(err, "root tree '%s': its info file's preload", p->rootfs);
		}
		pl = q.preload;
		q.preload = NULL;
		policy_free(&q);
	}
	if (!(d = strdup(dir))) {
		free(pl);
		return err_fail(err, "rootfs", ENOMEM, "out of memory");
	}
	free(p->rootfs);
	p->rootfs = d;
	if (pl)
		p->preload = pl;
	/* The tree's own packages are in its dist-packages. */
	p->dist_packages = true;
	return 0;
}

/* ---- the packages a tree provides: its dpkg status file ---- */

/* A dpkg status file is host-built (the tree is the host's, read-only to
 * every sandbox), but parsed as untrusted text anyway: bounded, and
 * anything that is not "Package:"/"Version:"/"Status:" is skipped. */
static int add_pkg(json_t *arr, const char *name, const char *ver, const char *status)
{
	size_t n = strlen(status);

	/* "install ok installed", not half-installed nor config-files. */
	if (n < 10 || strcmp(status + n - 10, " installed") || !name[0])
		return 0;
	return json_array_append_new(arr, json_pack("{s:s,s:s}", "name", name, "version", ver));
}

static void field(const char *line, size_t len, const char *key, char *out, size_t size)
{
	size_t kl = strlen(key), n;

	if (len <= kl || strncmp(line, key, kl))
		return;
	line += kl;
	len -= kl;
	while (len && (*line == ' ' || *line == '\t'))
		line++, len--;
	n = len < size - 1 ? len : size - 1;
	memcpy(out, line, n);
	out[n] = '\0';
}

int rootfs_packages(const char *root, json_t **out, struct nsbox_err *err)
{
	char path[PATH_MAX], name[256] = "", ver[256] = "", status[128] = "";
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *text = NULL;
	struct stat st;
	size_t len = 0;
	json_t *arr;

	if (snprintf(path, sizeof(path), "%s/var/lib/dpkg/status", root ? root : "") >= (int)sizeof(path))
		return err_fail(err, "packages", ENAMETOOLONG, "%s: path too long", root);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return err_sys(err, "packages: open %s", path);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return err_fail(err, "packages", EINVAL, "%s: not a regular file", path);
	if ((uint64_t)st.st_size > STATUS_MAX)
		return err_fail(err, "packages", EFBIG, "%s: larger than %u bytes", path, STATUS_MAX);
	text = malloc((size_t)st.st_size + 1);
	if (!text)
		return err_fail(err, "packages", ENOMEM, "out of memory");
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, text + len, (size_t)st.st_size - len);
		if (n < 0)
			return err_sys(err, "packages: read %s", path);
		if (n == 0)
			break;
		len += (size_t)n;
	}
	text[len] = '\0';
	arr = json_array();
	if (!arr)
		return err_fail(err, "packages", ENOMEM, "out of memory");
	for (size_t i = 0; i <= len;) {
		size_t e = i;
		while (e < len && text[e] != '\n')
			e++;
		if (e == i) { /* a blank line ends a stanza */
			if (add_pkg(arr, name, ver, status) < 0) {
				json_decref(arr);
				return err_fail(err, "packages", ENOMEM, "out of memory");
			}
			name[0] = ver[0] = status[0] = '\0';
		} else {
			field(text + i, e - i, "Package:", name, sizeof(name));
			field(text + i, e - i, "Version:", ver, sizeof(ver));
			field(text + i, e - i, "Status:", status, sizeof(status));
		}
		i = e + 1;
	}
	if (name[0] && add_pkg(arr, name, ver, status) < 0) {
		json_decref(arr);
		return err_fail(err, "packages", ENOMEM, "out of memory");
	}
	*out = arr;
	return 0;
}
