/* libnsbox names a sandbox's cgroup nsbox-<launcher pid>-<n> beside its
 * launcher's own (jail/cgroup.c).  A launcher killed with SIGKILL can't
 * remove them, and when the whole service was killed (systemd's
 * KillMode=control-group does it with SIGKILL after TimeoutStopSec) a
 * sandbox may still be inside.  nsboxd sweeps its own cgroups on start,
 * before it makes anything: under Delegate=yes that is its unit's subtree. */
#include "cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool pid_gone(long pid)
{
	return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static void kill_procs(const char *dir)
{
	char path[PATH_MAX + 32];
	FILE *f;
	long pid;

	/* cgroup.kill where the kernel has it (v2, 5.14), else one by one. */
	snprintf(path, sizeof(path), "%s/cgroup.kill", dir);
	f = fopen(path, "we");
	if (f) {
		fputs("1", f);
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fscanf(f, "%ld", &pid) == 1)
		if (pid > 0)
			kill((pid_t)pid, SIGKILL);
	fclose(f);
}

static int sweep(const char *parent, bool verbose)
{
	DIR *d = opendir(parent);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[PATH_MAX + 256];
		char *end;
		long pid;

		if (strncmp(de->d_name, "nsbox-", 6) != 0 || strncmp(de->d_name, "nsbox-test", 10) == 0)
			continue;
		pid = strtol(de->d_name + 6, &end, 10);
		if (pid <= 0 || *end != '-' || !pid_gone(pid))
			continue;
		snprintf(path, sizeof(path), "%s/%s", parent, de->d_name);
		kill_procs(path);
		for (int i = 0; i < 50 && rmdir(path) < 0 && errno == EBUSY; i++)
			usleep(10000);
		if (access(path, F_OK) < 0) {
			n++;
			if (verbose)
				fprintf(stderr, "nsboxd: removed stale cgroup %s\n", path);
		}
	}
	closedir(d);
	return n;
}

int cleanup_stale_cgroups(bool verbose)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[PATH_MAX + 128];
	int n = 0;

	if (!f)
		return 0;
	/* "0::/path" (v2) or "N:memory:/path" (v1); the sandboxes' cgroups
	 * are made beside ours, in our cgroup's parent, or inside it. */
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		char dir[PATH_MAX + 64], parent[PATH_MAX + 64];
		char *slash;
		const char *ctrl;

		if (!c2)
			continue;
		line[strcspn(line, "\n")] = '\0';
		*c2 = '\0';
		ctrl = c1 + 1;
		if (!*ctrl)
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", c2 + 1);
		else if (!strcmp(ctrl, "memory") || !strcmp(ctrl, "pids") || !strcmp(ctrl, "cpu,cpuacct") ||
			 !strcmp(ctrl, "cpu"))
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s", ctrl, c2 + 1);
		else
			continue;
		if (access(dir, F_OK) < 0 && !*ctrl)
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup/unified%s", c2 + 1);
		n += sweep(dir, verbose);
		snprintf(parent, sizeof(parent), "%s", dir);
		slash = strrchr(parent, '/');
		if (slash && slash > parent + strlen("/sys/fs/cgroup")) {
			*slash = '\0';
			n += sweep(parent, verbose);
		}
	}
	fclose(f);
	return n;
}
