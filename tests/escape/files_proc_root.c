/* Reach the host's root through /proc: /proc/1/root, /proc/1/cwd, the
 * magic links of pid 1 (nsbox's init) and of every other visible process.
 * argv[1]: the canary's host path. */
#include <dirent.h>
#include "escape.h"

static const char *canary;

static void try_dir(const char *link)
{
	char p[4096];
	int fd;

	snprintf(p, sizeof(p), "%s%s", link, canary);
	must_not_open(p, O_RDONLY);
	snprintf(p, sizeof(p), "%s/etc/shadow", link);
	must_not_open(p, O_RDONLY);
	/* A directory fd from outside would let ".." climb the host tree. */
	fd = open(link, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fchdir(fd) == 0) {
		for (int i = 0; i < 64; i++)
			if (chdir("..") < 0)
				break;
		if (access(canary + 1, F_OK) == 0)
			ESCAPED("%s then .. reaches the host canary", link);
	}
	close(fd);
	(void)chdir("/");
}

int main(int argc, char **argv)
{
	char p[512];
	DIR *proc, *fds;
	struct dirent *pe, *fe;

	if (argc < 2)
		ESCAPED("usage: files_proc_root CANARY (test bug)");
	canary = argv[1];
	if (!(proc = opendir("/proc")))
		BLOCKED("no /proc: %s", ename(errno));
	while ((pe = readdir(proc))) {
		if (pe->d_name[0] < '0' || pe->d_name[0] > '9')
			continue;
		snprintf(p, sizeof(p), "/proc/%s/root", pe->d_name);
		try_dir(p);
		snprintf(p, sizeof(p), "/proc/%s/cwd", pe->d_name);
		try_dir(p);
		snprintf(p, sizeof(p), "/proc/%s/fd", pe->d_name);
		if (!(fds = opendir(p))) {
			NOTE("opendir %s: %s", p, ename(errno));
			continue;
		}
		while ((fe = readdir(fds))) {
			char fp[600];
			if (fe->d_name[0] == '.')
				continue;
			snprintf(fp, sizeof(fp), "%s/%s", p, fe->d_name);
			try_dir(fp);
		}
		closedir(fds);
	}
	closedir(proc);
	BLOCKED("no /proc magic link leads to the host root");
}
