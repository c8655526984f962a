/* nsboxd's own cgroup (owncg.h).  Under Delegate=yes systemd starts the
 * service in the unit's cgroup itself, and a cgroup v2 directory with a
 * process in it can't enable controllers for children (the
 * no-internal-process rule, Documentation/admin-guide/cgroup-v2.rst): so
 * nsboxd moves into a leaf, as systemd's DelegateSubgroup= (254) would do
 * for it, and the unit's cgroup becomes the sandboxes' parent.  Without
 * the leaf libnsbox would make them in the unit's parent (system.slice),
 * outside the unit. */
#include "owncg.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup"

static int say(char *msg, size_t size, int r, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int say(char *msg, size_t size, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, size, fmt, ap);
	va_end(ap);
	return r;
}

static int put(const char *dir, const char *file, const char *val)
{
	char p[PATH_MAX + 64];
	FILE *f;
	int r;

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	f = fopen(p, "we");
	if (!f)
		return -errno;
	r = fputs(val, f) < 0 ? -EIO : 0;
	if (fclose(f) != 0 && r == 0)
		r = errno ? -errno : -EIO;
	return r;
}

static bool writable(const char *dir, const char *file)
{
	char p[PATH_MAX + 64];

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	return access(p, W_OK) == 0;
}

/* Whether this process is the only one in dir (threads are one entry). */
static bool alone_in(const char *dir)
{
	char p[PATH_MAX + 64];
	long pid;
	int n = 0;
	bool mine = false;
	FILE *f;

	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	f = fopen(p, "re");
	if (!f)
		return false;
	while (fscanf(f, "%ld", &pid) == 1) {
		n++;
		mine |= pid == (long)getpid();
	}
	fclose(f);
	return n == 1 && mine;
}

static bool has_word(const char *list, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = list; (p = strstr(p, w)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

int owncg_enter_leaf(char *msg, size_t size)
{
	static const char *const ctrls[] = { "cpu", "memory", "pids" };
	char line[PATH_MAX], dir[PATH_MAX + 32], leaf[PATH_MAX + 64], avail[256] = "", pid[32];
	struct statfs sf;
	FILE *f;
	int r;

	if (statfs(CG_ROOT, &sf) < 0 || (long)sf.f_type != (long)CGROUP2_SUPER_MAGIC)
		return say(msg, size, 0,
			   "cgroup: not a pure cgroup v2 host; sandboxes' cgroups as nsbox(1) makes them");
	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return say(msg, size, -1, "cgroup: /proc/self/cgroup: %s", strerror(errno));
	line[0] = '\0';
	while (fgets(line, sizeof(line), f) && strncmp(line, "0::", 3) != 0)
		line[0] = '\0';
	fclose(f);
	line[strcspn(line, "\n")] = '\0';
	if (strncmp(line, "0::/", 4) != 0)
		return say(msg, size, -1, "cgroup: no v2 entry in /proc/self/cgroup");
	if (!line[4])
		return say(msg, size, 0, "cgroup: nsboxd runs in the root cgroup; sandboxes' cgroups go beside it");
	snprintf(dir, sizeof(dir), CG_ROOT "%s", line + 3);
	if (strcmp(strrchr(dir, '/') + 1, OWNCG_LEAF) == 0)
		return say(msg, size, 0, "cgroup: already in a leaf of its own, %s", dir);
	if (access(dir, W_OK | X_OK) < 0 || !writable(dir, "cgroup.procs") || !writable(dir, "cgroup.subtree_control"))
		return say(msg, size, 0, "cgroup: %s is not delegated to uid %u; sandboxes' cgroups go beside it", dir,
			   (unsigned)geteuid());
	/* A login session's leaf is writable by its user too, but a shell
	 * in it forbids children with controllers: only a cgroup the service
	 * has to itself is made the sandboxes' parent. */
	if (!alone_in(dir))
		return say(msg, size, 0, "cgroup: %s holds other processes too; sandboxes' cgroups go beside it", dir);

	snprintf(leaf, sizeof(leaf), "%s/" OWNCG_LEAF, dir);
	if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
		return say(msg, size, -1, "cgroup: mkdir %s: %s", leaf, strerror(errno));
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	r = put(leaf, "cgroup.procs", pid);
	if (r < 0) {
		snprintf(msg, size, "cgroup: move into %s: %s", leaf, strerror(-r));
		(void)rmdir(leaf);
		return -1;
	}
	/* What the sandboxes' limits need, enabled once here rather than
	 * raced for by the helpers; cpu also for the weight below. */
	snprintf(line, sizeof(line), "%s/cgroup.controllers", dir);
	f = fopen(line, "re");
	if (f) {
		if (!fgets(avail, sizeof(avail), f))
			avail[0] = '\0';
		fclose(f);
	}
	for (size_t i = 0; i < sizeof(ctrls) / sizeof(ctrls[0]); i++) {
		char want[16];

		if (!has_word(avail, ctrls[i]))
			continue;
		snprintf(want, sizeof(want), "+%s", ctrls[i]);
		r = put(dir, "cgroup.subtree_control", want);
		if (r < 0)
			return say(msg, size, -1, "cgroup: enable %s in %s: %s", ctrls[i], dir, strerror(-r));
	}
	/* The control path before the sandboxes: under contention the leaf
	 * (nsboxd and its helpers, which make the sandboxes) gets ten times
	 * the CPU share of each sandbox. */
	if (!has_word(avail, "cpu"))
		return say(msg, size, -1, "cgroup: moved into %s; no cpu controller in %s: not favoured", leaf, dir);
	r = put(leaf, "cpu.weight", OWNCG_CPU_WEIGHT);
	if (r < 0)
		return say(msg, size, -1, "cgroup: %s/cpu.weight: %s", leaf, strerror(-r));
	return say(msg, size, 1,
		   "cgroup: moved into %s (cpu.weight " OWNCG_CPU_WEIGHT "); sandboxes' cgroups go beside it", leaf);
}
