/* The sandbox root's tables and generated /etc (jail/rootfs-table.c),
 * offline: pure functions of the policy, no privileges needed. */
#include <stdbool.h>
#include <string.h>

#include "policy.h"
#include "rootfs-table.h"
#include "tap.h"
#include "util.h"

static bool has(const char *const *v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i], s) == 0)
			return true;
	return false;
}

static const char *etc(const struct rootfs_etc_file *f, const char *name)
{
	for (size_t i = 0; i < ROOTFS_ETC_FILES; i++)
		if (strcmp(f[i].name, name) == 0)
			return f[i].text;
	return "";
}

int main(void)
{
	struct nsbox_policy p = { 0 };
	struct nsbox_err err = { 0 };
	struct rootfs_etc_file files[ROOTFS_ETC_FILES];
	const char *v[64];
	const char *const *names;
	const struct rootfs_link *links;
	size_t n;

	ok(policy_init_builtin(&p, "default", &err) == 0, "default policy: %s", err.msg);

	/* /etc for the default user (uid 1000), no workspace. */
	rootfs_etc(&p, files);
	ok(!strcmp(files[0].name, "passwd") && !strcmp(files[1].name, "group") && !strcmp(files[2].name, "hosts") &&
		   !strcmp(files[3].name, "nsswitch.conf"),
	   "etc: passwd, group, hosts, nsswitch.conf in order");
	ok(!strcmp(etc(files, "passwd"), "root:x:0:0:root:/root:/bin/sh\n"
					 "sandbox:x:1000:1000:nsbox sandbox:/tmp:/bin/sh\n"
					 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
	   "passwd: the sandbox user, home /tmp");
	ok(!strcmp(etc(files, "group"), "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"), "group");
	ok(!strcmp(etc(files, "hosts"), "127.0.0.1\tlocalhost nsbox\n::1\tlocalhost ip6-localhost\n"),
	   "hosts: the default hostname");
	ok(!strcmp(etc(files, "nsswitch.conf"), "passwd: files\ngroup: files\nhosts: files dns\n"), "nsswitch.conf");
	ok(!strcmp(rootfs_home(&p), "/tmp"), "home /tmp without a workspace");

	/* Root inside, a hostname and a workspace. */
	ok(policy_set(&p, "Sandbox", "Uid", "0", &err) == 0 && policy_set(&p, "Sandbox", "Gid", "0", &err) == 0 &&
		   policy_set(&p, "Sandbox", "Hostname", "box1", &err) == 0 &&
		   policy_set(&p, "Filesystem", "Workspace", "/tmp", &err) == 0 &&
		   policy_set(&p, "Filesystem", "Bind", "/tmp:/data", &err) == 0,
	   "policy_set: %s", err.msg);
	rootfs_etc(&p, files);
	ok(!strcmp(etc(files, "passwd"), "root:x:0:0:root:/workspace:/bin/sh\n"
					 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
	   "passwd: uid 0 is root, home /workspace");
	ok(!strcmp(etc(files, "group"), "root:x:0:\nnogroup:x:65534:\n"), "group: gid 0 is root");
	ok(strstr(etc(files, "hosts"), "localhost box1\n") != NULL, "hosts: the policy's hostname");
	ok(!strcmp(rootfs_home(&p), "/workspace"), "home /workspace");

	n = rootfs_rw_paths(&p, v, ARRAY_SIZE(v));
	ok(n == 6 && !strcmp(v[0], "/tmp") && !strcmp(v[1], "/dev/shm") && !strcmp(v[2], "/dev/pts") &&
		   !strcmp(v[3], "/out") && !strcmp(v[4], "/workspace") && !strcmp(v[5], "/data"),
	   "writable: /tmp, /dev/shm, /dev/pts, /out, /workspace, the rw bind (%zu)", n);
	ok(rootfs_rw_paths(&p, v, 1) == 1, "writable paths bounded by max");

	/* /proc masks: the mode-0400 ones only when the user is host root. */
	n = rootfs_proc_masked(false, v, ARRAY_SIZE(v));
	ok(has(v, n, "kcore") && has(v, n, "sysrq-trigger") && has(v, n, "keys") && has(v, n, "locks") &&
		   !has(v, n, "kpageflags"),
	   "proc masks for an unprivileged host user (%zu)", n);
	size_t nroot = rootfs_proc_masked(true, v, ARRAY_SIZE(v));
	ok(nroot > n && has(v, nroot, "kpageflags") && has(v, nroot, "iomem") && has(v, nroot, "kcore"),
	   "proc masks for host root add the mode-0400 ones (%zu)", nroot);
	ok(rootfs_proc_masked(true, v, 2) == 2, "proc masks bounded by max");

	/* /dev: the five harmless nodes, never a disk or a tty. */
	n = rootfs_dev_nodes(&names);
	ok(n == 5 && has(names, n, "null") && has(names, n, "urandom") &&
		   !has(names, n, "tty") && !has(names, n, "sda"),
	   "dev nodes: null, zero, full, random, urandom");
	n = rootfs_dev_links(&links);
	ok(n == 5 && !strcmp(links[0].name, "fd") && !strcmp(links[0].target, "/proc/self/fd") &&
		   !strcmp(links[3].name, "stderr") && !strcmp(links[3].target, "/proc/self/fd/2") &&
		   !strcmp(links[4].name, "ptmx") && !strcmp(links[4].target, "pts/ptmx"),
	   "dev links: fd, stdin, stdout, stderr, ptmx into the private devpts");

	n = rootfs_merged_usr(&names);
	ok(n == 6 && has(names, n, "bin") && has(names, n, "lib64"), "merged-usr names");
	ok(rootfs_skip_top("proc") && rootfs_skip_top("etc") && rootfs_skip_top("home") && rootfs_skip_top("..") &&
		   !rootfs_skip_top("usr") && !rootfs_skip_top("opt"),
	   "--rootfs: the jail's own and the machine's state skipped, usr and opt kept");
	{
		const char *const *shared;
		size_t ns = rootfs_etc_shared(&shared);
		bool mpl = false, own = false;
		for (size_t i = 0; i < ns; i++) {
			mpl |= !strcmp(shared[i], "matplotlibrc");
			/* nsbox's own /etc files are never the root's */
			own |= !strcmp(shared[i], "passwd") || !strcmp(shared[i], "group") ||
			       !strcmp(shared[i], "hosts") || !strcmp(shared[i], "hostname") ||
			       !strcmp(shared[i], "resolv.conf") || !strcmp(shared[i], "nsswitch.conf") ||
			       strchr(shared[i], '/');
		}
		ok(ns <= ROOTFS_ETC_SHARED_MAX && mpl && !own,
		   "/etc from the root: %zu file(s), matplotlibrc among them, none of nsbox's own", ns);
		ns = rootfs_etc_shared_dirs(&shared);
		ok(ns <= ROOTFS_ETC_SHARED_DIRS_MAX && has(shared, ns, "fonts") && has(shared, ns, "alternatives") &&
			   !has(shared, ns, "ssl") && !has(shared, ns, "apt"),
		   "/etc directories from the root: alternatives and fonts (fontconfig), no others");
	}

	policy_free(&p);
	tap_done();
}
