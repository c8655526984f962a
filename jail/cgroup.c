/* cgroups for one sandbox.  We write cgroupfs directly instead of using
 * libcgroup: Debian 12's libcgroup 2.0.2 writes cgroup.subtree_control of
 * every ancestor from the root down, which fails in a delegated subtree,
 * and it knows nothing of clone3(CLONE_INTO_CGROUP), cgroup.kill or
 * memory.peak.  The files we touch are few and documented in
 * Documentation/admin-guide/cgroup-v2.rst and cgroup-v1/. */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static const char *const ctrl_names[CTRL__N] = { "memory", "pids", "cpu" };

const char *cgroup_ctrl_name(enum cgroup_ctrl c)
{
	return c < CTRL__N ? ctrl_names[c] : "?";
}

const char *cgroup_mode_name(enum cgroup_mode m)
{
	switch (m) {
	case CG_V2: return "v2";
	case CG_HYBRID: return "hybrid";
	case CG_V1: return "v1";
	default: return "none";
	}
}

static bool is_fs(const char *path, long magic)
{
	struct statfs sf;

	return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

static bool file_writable(const char *dir, const char *file)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	return access(p, W_OK) == 0;
}

/* A cgroup directory we may create children in and move processes into. */
static bool dir_delegated(const char *dir)
{
	return access(dir, W_OK | X_OK) == 0 && file_writable(dir, "cgroup.procs");
}

static bool list_has(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ' || p[-1] == ',') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == '\n' || p[n] == ','))
			return true;
	return false;
}

static void parent_dir(char *dst, size_t size, const char *dir)
{
	char *slash;

	snprintf(dst, size, "%s", dir);
	slash = strrchr(dst, '/');
	if (slash && slash != dst)
		*slash = '\0';
}

static void probe_v2(struct cgroup_probe *pr, const char *self_rel)
{
	char buf[1024], parent[512];
	bool is_root = strcmp(self_rel, "/") == 0;

	snprintf(pr->v2_self, sizeof(pr->v2_self), "%s%s", pr->v2_root, is_root ? "" : self_rel);
	snprintf(buf, sizeof(buf), "%s/cgroup.kill", pr->v2_self);
	pr->v2_kill = access(buf, F_OK) == 0;

	/* Sandboxes go beside our own leaf, in its parent: a cgroup with
	 * processes can't enable controllers for its children (the
	 * no-internal-process rule), so a delegated parent is what we need.
	 * The root cgroup is exempt from that rule. */
	if (is_root) {
		snprintf(parent, sizeof(parent), "%s", pr->v2_self);
	} else {
		parent_dir(parent, sizeof(parent), pr->v2_self);
		if (strlen(parent) < strlen(pr->v2_root))
			snprintf(parent, sizeof(parent), "%s", pr->v2_root);
	}
	if (dir_delegated(parent) && (is_root || file_writable(parent, "cgroup.subtree_control"))) {
		snprintf(pr->v2_parent_used, sizeof(pr->v2_parent_used), "%s", parent);
		pr->v2_writable = true;
	}

	snprintf(buf, sizeof(buf), "%s/cgroup.controllers", parent);
	char avail[256] = "";
	if (read_file(buf, avail, sizeof(avail)) < 0)
		avail[0] = '\0';
	for (int c = 0; c < CTRL__N; c++) {
		if (pr->ctrl_ok[c])
			continue;
		if (!pr->v2_writable) {
			snprintf(pr->why[c], sizeof(pr->why[c]),
				 "no delegated cgroup v2 subtree (neither %s nor its parent is writable by uid %u)",
				 pr->v2_self, (unsigned)geteuid());
		} else if (!list_has(avail, ctrl_names[c])) {
			if (!pr->why[c][0])
				snprintf(pr->why[c], sizeof(pr->why[c]), "controller not available in %s/cgroup.controllers",
					 parent);
		} else {
			pr->ctrl_ok[c] = true;
			pr->ctrl_v1[c] = false;
			snprintf(pr->ctrl_dir[c], sizeof(pr->ctrl_dir[c]), "%s", parent);
			pr->why[c][0] = '\0';
		}
	}
}

static void probe_v1(struct cgroup_probe *pr, const char *ctrls, const char *rel)
{
	char dir[512];

	for (int c = 0; c < CTRL__N; c++) {
		if (pr->ctrl_ok[c] || !list_has(ctrls, ctrl_names[c]))
			continue;
		/* Debian mounts joint hierarchies as /sys/fs/cgroup/cpu,cpuacct with a
		 * cpu -> cpu,cpuacct symlink; the single name works for both. */
		snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s", ctrl_names[c], strcmp(rel, "/") ? rel : "");
		if (!is_fs(dir, CGROUP_SUPER_MAGIC)) {
			snprintf(pr->why[c], sizeof(pr->why[c]), "v1 hierarchy not mounted at /sys/fs/cgroup/%s",
				 ctrl_names[c]);
			continue;
		}
		if (!dir_delegated(dir)) {
			snprintf(pr->why[c], sizeof(pr->why[c]), "v1 cgroup %s is not writable by uid %u (no delegation)",
				 dir, (unsigned)geteuid());
			continue;
		}
		pr->ctrl_ok[c] = true;
		pr->ctrl_v1[c] = true;
		snprintf(pr->ctrl_dir[c], sizeof(pr->ctrl_dir[c]), "%s", dir);
		pr->why[c][0] = '\0';
	}
}

bool cgroup_host_v2(void)
{
	return is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC);
}

void cgroup_probe_host(struct cgroup_probe *pr)
{
	char line[1024];
	FILE *f;
	bool any_v1 = false;

	memset(pr, 0, sizeof(*pr));
	if (is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC)) {
		pr->mode = CG_V2;
		snprintf(pr->v2_root, sizeof(pr->v2_root), "/sys/fs/cgroup");
	} else if (is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC)) {
		pr->mode = CG_HYBRID;
		snprintf(pr->v2_root, sizeof(pr->v2_root), "/sys/fs/cgroup/unified");
	}
	for (int c = 0; c < CTRL__N; c++)
		snprintf(pr->why[c], sizeof(pr->why[c]), "no cgroup hierarchy offers it");

	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return;
	/* v2 first, so a controller present on both is taken from v2. */
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "0::", 3) == 0 && pr->v2_root[0])
			probe_v2(pr, line + 3);
	}
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		char *c1, *c2;

		line[strcspn(line, "\n")] = '\0';
		c1 = strchr(line, ':');
		c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c1 || !c2 || c2 == c1 + 1)
			continue;
		*c2 = '\0';
		any_v1 = true;
		probe_v1(pr, c1 + 1, c2 + 1);
	}
	fclose(f);
	if (pr->mode == CG_NONE && any_v1)
		pr->mode = CG_V1;
}

void cgroup_migration_probe(const struct cgroup_probe *pr, struct cgroup_migration_info *mi)
{
	char line[1024];
	bool v1 = false;
	FILE *f;

	memset(mi, 0, sizeof(*mi));
	for (int c = 0; c < CTRL__N; c++)
		v1 |= pr->ctrl_ok[c] && pr->ctrl_v1[c];
	/* "dev mountpoint fstype options 0 0", proc_pid_mounts(5). */
	f = fopen("/proc/self/mounts", "re");
	while (f && fgets(line, sizeof(line), f)) {
		char mnt[256], type[32], opts[512];
		if (sscanf(line, "%*s %255s %31s %511s", mnt, type, opts) != 3)
			continue;
		if (strcmp(type, "cgroup2") == 0 && !mi->remount[0])
			snprintf(mi->remount, sizeof(mi->remount), "%s", mnt);
		if ((strcmp(type, "cgroup2") == 0 || strcmp(type, "cgroup") == 0) && list_has(opts, "favordynmods"))
			mi->favordynmods = true;
	}
	if (f)
		fclose(f);
	mi->state = !v1 ? CG_MIGRATE_NONE : mi->favordynmods ? CG_MIGRATE_FAST : CG_MIGRATE_SLOW;
}

void cgroup_migration_hint(const struct cgroup_migration_info *mi, char *buf, size_t size)
{
	if (mi->remount[0])
		snprintf(buf, size,
			 "hint (as root): mount -o remount,favordynmods %s\n"
			 "  a host-wide setting: every fork and exit gets slightly slower, migrations get fast;\n"
			 "  undo with a remount without it through mount(2) (mount(8) re-adds it from utab)",
			 mi->remount);
	else
		snprintf(buf, size,
			 "hint (as root): mount a cgroup2 hierarchy with -o favordynmods, or use a kernel built\n"
			 "  with CONFIG_CGROUP_FAVOR_DYNMODS; a host-wide setting: every fork and exit gets\n"
			 "  slightly slower, migrations get fast");
}

static int cg_write(const char *dir, const char *file, const char *val, struct nsbox_err *err)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	if (write_file(p, val) < 0)
		return err_sys(err, "write %s to %s", val, p);
	return 0;
}

/* Optional knobs: missing on some kernels or configurations. */
static void cg_write_opt(const char *dir, const char *file, const char *val)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	(void)write_file(p, val);
}

static int write_limit(struct cgroup_handle *h, enum cgroup_ctrl c, const struct nsbox_policy *p,
		       struct nsbox_err *err)
{
	bool v1 = h->probe.ctrl_v1[c];
	const char *dir = v1 ? h->v1_dir[c] : h->v2_dir;
	char val[64];

	switch (c) {
	case CTRL_MEMORY:
		snprintf(val, sizeof(val), "%llu", (unsigned long long)p->memory);
		if (v1) {
			if (cg_write(dir, "memory.limit_in_bytes", val, err) < 0)
				return -1;
			/* memsw exists only with swap accounting; equal to the
			 * limit means no swap. */
			cg_write_opt(dir, "memory.memsw.limit_in_bytes", val);
			cg_write_opt(dir, "memory.swappiness", "0");
			/* v1 charges socket buffers only to a counter of their own,
			 * and only once its limit has been written, before the
			 * sockets exist (memcg1 tcpmem_active): unset, a sandbox
			 * under --memory 128M queued 1.1 GiB on its loopback.  A
			 * quarter of the limit, so the sandbox as a whole holds
			 * at most 1.25 times it (v2 charges sockets to
			 * memory.max itself).  Kernel objects (slab) are charged to
			 * memory.limit_in_bytes. */
			snprintf(val, sizeof(val), "%llu", (unsigned long long)(p->memory / 4));
			if (file_writable(dir, "memory.kmem.tcp.limit_in_bytes") &&
			    cg_write(dir, "memory.kmem.tcp.limit_in_bytes", val, err) < 0)
				return -1;
		} else {
			if (cg_write(dir, "memory.max", val, err) < 0)
				return -1;
			cg_write_opt(dir, "memory.swap.max", "0");
			/* Kill the whole sandbox on OOM rather than leave it half dead. */
			cg_write_opt(dir, "memory.oom.group", "1");
		}
		return 0;
	case CTRL_PIDS:
		snprintf(val, sizeof(val), "%llu", (unsigned long long)p->pids);
		return cg_write(dir, "pids.max", val, err);
	case CTRL_CPU: {
		unsigned long long quota = (unsigned long long)(p->cpus * 100000.0 + 0.5);
		if (quota < 1000)
			quota = 1000;
		if (v1) {
			snprintf(val, sizeof(val), "%llu", quota);
			if (cg_write(dir, "cpu.cfs_period_us", "100000", err) < 0)
				return -1;
			return cg_write(dir, "cpu.cfs_quota_us", val, err);
		}
		snprintf(val, sizeof(val), "%llu 100000", quota);
		return cg_write(dir, "cpu.max", val, err);
	}
	default:
		return err_set(err, EINVAL, "unknown controller");
	}
}

static const char *const fallback[CTRL__N] = {
	"falling back to RLIMIT_AS (address space, not memory use)",
	"falling back to RLIMIT_NPROC",
	"CPU use is not limited",
};

static bool needed(const struct nsbox_policy *p, enum cgroup_ctrl c)
{
	switch (c) {
	case CTRL_MEMORY: return p->memory > 0;
	case CTRL_PIDS: return p->pids > 0;
	case CTRL_CPU: return p->cpus > 0;
	default: return false;
	}
}

static void rmdir_retry(const char *dir)
{
	/* A v1 memory cgroup can stay busy for a moment after its last task
	 * is reaped; give it up to ~200 ms. */
	for (int i = 0; i < 200; i++) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return;
		if (errno != EBUSY)
			return;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

void cgroup_destroy(struct cgroup_handle *h)
{
	if (!h)
		return;
	for (int c = 0; c < CTRL__N; c++)
		if (h->v1_dir[c][0])
			rmdir_retry(h->v1_dir[c]);
	if (h->v2_fd >= 0)
		close(h->v2_fd);
	if (h->v2_dir[0])
		rmdir_retry(h->v2_dir);
	free(h);
}

/* A launcher killed with SIGKILL can't remove its (empty) cgroups; the next
 * launch removes those whose launcher pid is gone.  rmdir fails harmlessly
 * on a cgroup that still has processes. */
static void remove_stale(const char *parent)
{
	DIR *d = opendir(parent);
	struct dirent *de;
	char path[PATH_MAX];

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long pid;

		if (strncmp(de->d_name, "nsbox-", 6) != 0)
			continue;
		pid = strtol(de->d_name + 6, &end, 10);
		if (pid <= 0 || *end != '-' || (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		snprintf(path, sizeof(path), "%s/%s", parent, de->d_name);
		(void)rmdir(path);
	}
	closedir(d);
}

int cgroup_create(const struct nsbox_policy *p, struct cgroup_handle **out,
		  void (*warn)(void *ctx, const char *msg), void *warn_ctx, struct nsbox_err *err)
{
	static unsigned counter;
	struct cgroup_handle *h;
	char name[64], msg[400];
	bool want_v2 = false;

	*out = NULL;
	/* Cgroups=off is the caller's explicit choice: the rlimit fallbacks
	 * apply without a warning (nsbox-policy(5) says which). */
	if (p->cgroups == WANT_OFF)
		return 0;
	h = calloc(1, sizeof(*h));
	if (!h)
		return err_set(err, ENOMEM, "cgroup");
	h->v2_fd = -1;
	cgroup_probe_host(&h->probe);
	snprintf(name, sizeof(name), "nsbox-%d-%u", (int)getpid(), counter++);

	for (int c = 0; c < CTRL__N; c++) {
		if (!needed(p, c))
			continue;
		if (!h->probe.ctrl_ok[c]) {
			if (p->cgroups == WANT_REQUIRE) {
				err_set(err, 0,
					"cgroup %s: the policy requires cgroups, but %s (hint: run under a delegated cgroup, "
					"e.g. systemd-run --user -p Delegate=yes, or as root)",
					ctrl_names[c], h->probe.why[c]);
				err_step(err, "cgroup");
				cgroup_destroy(h);
				return -1;
			}
			continue;
		}
		if (!h->probe.ctrl_v1[c])
			want_v2 = true;
	}

	/* On a hybrid host the v2 hierarchy holds no controllers; a cgroup
	 * there would only add cgroup.kill, and killing pid 1 of the pid
	 * namespace already ends every process of the sandbox. */
	bool use_v2 = h->probe.mode == CG_V2 && h->probe.v2_writable;
	if (use_v2)
		remove_stale(h->probe.v2_parent_used);
	for (int c = 0; c < CTRL__N; c++)
		if (needed(p, c) && h->probe.ctrl_ok[c] && h->probe.ctrl_v1[c])
			remove_stale(h->probe.ctrl_dir[c]);
	if (use_v2) {
		const char *parent = h->probe.v2_parent_used;
		if (want_v2) {
			char ctl[64] = "";
			for (int c = 0; c < CTRL__N; c++)
				if (needed(p, c) && h->probe.ctrl_ok[c] && !h->probe.ctrl_v1[c]) {
					strcat(ctl, ctl[0] ? " +" : "+");
					strcat(ctl, ctrl_names[c]);
				}
			if (cg_write(parent, "cgroup.subtree_control", ctl, err) < 0) {
				err_wrap(err, "cgroup: enable controllers");
				err_step(err, "cgroup");
				cgroup_destroy(h);
				return -1;
			}
		}
		snprintf(h->v2_dir, sizeof(h->v2_dir), "%s/%s", parent, name);
		if (mkdir(h->v2_dir, 0755) < 0) {
			err_sys(err, "cgroup: mkdir %s", h->v2_dir);
			h->v2_dir[0] = '\0';
			err_step(err, "cgroup");
			cgroup_destroy(h);
			return -1;
		}
		h->v2_fd = open(h->v2_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}

	for (int c = 0; c < CTRL__N; c++) {
		if (!needed(p, c) || !h->probe.ctrl_ok[c])
			continue;
		if (h->probe.ctrl_v1[c]) {
			snprintf(h->v1_dir[c], sizeof(h->v1_dir[c]), "%s/%s", h->probe.ctrl_dir[c], name);
			if (mkdir(h->v1_dir[c], 0755) < 0) {
				err_sys(err, "cgroup %s: mkdir %s", ctrl_names[c], h->v1_dir[c]);
				h->v1_dir[c][0] = '\0';
				goto fail;
			}
		} else if (!h->v2_dir[0]) {
			continue;
		}
		if (write_limit(h, c, p, err) < 0) {
			err_wrap(err, "cgroup %s", ctrl_names[c]);
			goto fail;
		}
		h->enforced[c] = true;
	}

	for (int c = 0; c < CTRL__N; c++)
		if (needed(p, c) && !h->enforced[c] && warn) {
			snprintf(msg, sizeof(msg), "%s limit not enforced by a cgroup: %s; %s", ctrl_names[c],
				 h->probe.why[c], fallback[c]);
			warn(warn_ctx, msg);
		}
	if (!h->v2_dir[0] && !h->v1_dir[CTRL_MEMORY][0] && !h->v1_dir[CTRL_PIDS][0] && !h->v1_dir[CTRL_CPU][0]) {
		cgroup_destroy(h);
		return 0;
	}
	*out = h;
	return 0;
fail:
	err_step(err, "cgroup");
	cgroup_destroy(h);
	return -1;
}

int cgroup_attach(struct cgroup_handle *h, pid_t pid, bool v2_too, struct nsbox_err *err)
{
	char val[32];
	int moved = 0;

	snprintf(val, sizeof(val), "%d", (int)pid);
	for (int c = 0; c < CTRL__N; c++)
		if (h->v1_dir[c][0]) {
			if (cg_write(h->v1_dir[c], "cgroup.procs", val, err) < 0)
				return err_step(err, "cgroup attach");
			moved = 1;
		}
	if (v2_too && h->v2_dir[0]) {
		if (cg_write(h->v2_dir, "cgroup.procs", val, err) < 0)
			return err_step(err, "cgroup attach");
		moved = 1;
	}
	return moved;
}

static void kill_listed(const char *dir)
{
	char p[PATH_MAX], buf[8192];
	char *s, *save = NULL;

	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	if (read_file(p, buf, sizeof(buf)) < 0)
		return;
	for (s = strtok_r(buf, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
		long pid = strtol(s, NULL, 10);
		if (pid > 1)
			kill((pid_t)pid, SIGKILL);
	}
}

void cgroup_kill(struct cgroup_handle *h)
{
	if (!h)
		return;
	if (h->v2_dir[0]) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/cgroup.kill", h->v2_dir);
		if (write_file(p, "1") == 0)
			return;
		kill_listed(h->v2_dir);
	}
	for (int c = 0; c < CTRL__N; c++)
		if (h->v1_dir[c][0])
			kill_listed(h->v1_dir[c]);
}

static unsigned long long read_key(const char *dir, const char *file, const char *key)
{
	char p[PATH_MAX], buf[4096];
	size_t klen = strlen(key);

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	if (read_file(p, buf, sizeof(buf)) < 0)
		return 0;
	if (!klen)
		return strtoull(buf, NULL, 10);
	for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, key, klen) == 0 && l[klen] == ' ')
			return strtoull(l + klen + 1, NULL, 10);
	return 0;
}

void cgroup_stats(struct cgroup_handle *h, uint64_t *peak, bool *oom, double *cpu_usec)
{
	*peak = 0;
	*oom = false;
	*cpu_usec = -1;
	if (!h)
		return;
	if (h->enforced[CTRL_MEMORY]) {
		if (h->probe.ctrl_v1[CTRL_MEMORY]) {
			*peak = read_key(h->v1_dir[CTRL_MEMORY], "memory.max_usage_in_bytes", "");
			*oom = read_key(h->v1_dir[CTRL_MEMORY], "memory.oom_control", "oom_kill") > 0;
		} else {
			*peak = read_key(h->v2_dir, "memory.peak", "");
			*oom = read_key(h->v2_dir, "memory.events", "oom_kill") > 0;
		}
	}
	if (h->v2_dir[0]) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/cpu.stat", h->v2_dir);
		if (access(p, R_OK) == 0)
			*cpu_usec = (double)read_key(h->v2_dir, "cpu.stat", "usage_usec");
	}
}
