/* The sandbox's root as data (rootfs-table.h).  No system calls here. */
#include "rootfs-table.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom" };

static const struct rootfs_link dev_links[] = {
	{ "/proc/self/fd", "fd" },
	{ "/proc/self/fd/0", "stdin" },
	{ "/proc/self/fd/1", "stdout" },
	{ "/proc/self/fd/2", "stderr" },
	{ "pts/ptmx", "ptmx" }, /* the private devpts instance's (mount.c, make_dev) */
};

static const char *const merged_usr[] = { "bin", "sbin", "lib", "lib64", "lib32", "libx32" };

/* Configuration files of the root's own packages that they can't work
 * without, shown read-only in /etc from the root in use (the host's or
 * another tree's): Debian's matplotlib reads only /etc/matplotlibrc.
 * Nothing here may name the host (no hostname, users, addresses). */
/* services and protocols: public tables (getservbyname, getprotobyname). */
static const char *const etc_shared[] = { "matplotlibrc", "services", "protocols" };
/* Directories the same way: Debian's alternatives links, and fontconfig's
 * configuration (without it every fontconfig user, matplotlib's fc-list
 * among them, prints "Fontconfig error: Cannot load default config file";
 * its conf.d links name /usr/share/fontconfig, the root's own). */
static const char *const etc_shared_dirs[] = { "alternatives", "fonts" };

/* Top-level names of another root not shown: ours (the mount points, and
 * the new root's own scratch names: jail/mount.c, fake_boot_id and
 * mask_proc), and directories every sandbox gets empty or made. */
static const char *const skip_top[] = { ".",         "..",   "proc", "dev",  "sys",  "tmp",
					"etc",       "run",  "workspace", "out", "home", "root", "var",
					"boot",      "mnt",  "media", "srv", "lost+found", ".boot_id", ".proc_mask" };

/* Keyrings of the invoking user, and kernel layout that helps exploits.
 * The mode-0400 ones matter when the sandbox user maps to host root
 * (nsbox run as root). */
static const char *const proc_masked[] = { "keys", "key-users", "timer_list", "sched_debug", "latency_stats",
					   "timer_stats", "kcore", "sysrq-trigger",
					   /* the host's boot command line: root=UUID=, host names */
					   "cmdline",
					   /* every OFD lock on the host (fs/locks.c shows those
					    * whatever the pid namespace): device, inode and range
					    * of the files the host's and other sandboxes' processes
					    * lock, and a channel between sandboxes through the
					    * ranges of a lock on a file of their own */
					   "locks",
					   /* every pty on the host (all devpts instances): its
					    * logins and terminals, live */
					   "sys/kernel/pty/nr",
					   /* the number of cgroups per controller: the host's
					    * services and the live sandboxes, counted */
					   "cgroups",
					   /* host-wide counts a sandbox moves at will and another
					    * reads (open files, inodes, dentries: a channel between
					    * sandboxes at 2 bits a second through file-nr, red
					    * team 9), and the host's own interrupts and softirqs
					    * per device (its network and disk activity, live) and
					    * pressure stalls.  /proc/meminfo, loadavg and stat stay:
					    * programs read them (their counts are channels too, as
					    * timing is) */
					   "sys/fs/file-nr", "sys/fs/inode-nr", "sys/fs/inode-state", "sys/fs/dentry-state",
					   "sys/fs/aio-nr", "interrupts", "softirqs",
					   "pressure/",
					   /* kernel addresses wherever kptr_restrict and
					    * perf_event_paranoid let a reader have them */
					   "kallsyms",
					   /* the host's swap devices and files, by path */
					   "swaps",
					   /* the host's disks: names, sizes, live I/O counts */
					   "diskstats", "partitions",
					   /* device and firmware names (the hypervisor's), for
					    * every launcher: not mode 0400 on every kernel */
					   "iomem", "ioports",
					   /* Directories (a trailing /: an empty one bound
					    * over them): file systems' internals (ext4's free
					    * extents of every block group, its mount options,
					    * the block device), PCI and input devices, IRQs. */
					   "fs/", "bus/", "irq/" };
static const char *const proc_masked_root[] = { "kpagecount", "kpageflags", "kpagecgroup", "slabinfo",
						"pagetypeinfo", "vmallocinfo", "mtrr" };

size_t rootfs_dev_nodes(const char *const **out)
{
	*out = dev_nodes;
	return ARRAY_SIZE(dev_nodes);
}

size_t rootfs_dev_links(const struct rootfs_link **out)
{
	*out = dev_links;
	return ARRAY_SIZE(dev_links);
}

size_t rootfs_merged_usr(const char *const **out)
{
	*out = merged_usr;
	return ARRAY_SIZE(merged_usr);
}

size_t rootfs_etc_shared(const char *const **out)
{
	*out = etc_shared;
	return ARRAY_SIZE(etc_shared);
}

size_t rootfs_etc_shared_dirs(const char *const **out)
{
	*out = etc_shared_dirs;
	return ARRAY_SIZE(etc_shared_dirs);
}

bool rootfs_skip_top(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(skip_top); i++)
		if (strcmp(name, skip_top[i]) == 0)
			return true;
	return false;
}

size_t rootfs_proc_masked(bool host_root, const char **out, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(proc_masked) && n < max; i++)
		out[n++] = proc_masked[i];
	for (size_t i = 0; host_root && i < ARRAY_SIZE(proc_masked_root) && n < max; i++)
		out[n++] = proc_masked_root[i];
	return n;
}

size_t rootfs_rw_paths(const struct nsbox_policy *p, const char **out, size_t max)
{
	size_t n = 0;

	if (n < max)
		out[n++] = "/tmp";
	if (n < max)
		out[n++] = "/dev/shm";
	if (n < max)
		out[n++] = "/dev/pts"; /* the private devpts: open ptmx, a pty's ioctls */
	if (n < max)
		out[n++] = "/out";
	if (p->workspace && n < max)
		out[n++] = "/workspace";
	for (size_t i = 0; i < p->n_mounts && n < max; i++)
		if (p->mounts[i].rw)
			out[n++] = p->mounts[i].dst;
	return n;
}

const char *rootfs_home(const struct nsbox_policy *p)
{
	return p->workspace ? "/workspace" : "/tmp";
}

void rootfs_etc(const struct nsbox_policy *p, struct rootfs_etc_file out[ROOTFS_ETC_FILES])
{
	const char *home = rootfs_home(p);

	out[0].name = "passwd";
	if (p->uid == 0)
		snprintf(out[0].text, sizeof(out[0].text),
			 "root:x:0:0:root:%s:/bin/sh\n"
			 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			 home);
	else
		snprintf(out[0].text, sizeof(out[0].text),
			 "root:x:0:0:root:/root:/bin/sh\nsandbox:x:%u:%u:nsbox sandbox:%s:/bin/sh\n"
			 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			 (unsigned)p->uid, (unsigned)p->gid, home);
	out[1].name = "group";
	if (p->gid == 0)
		snprintf(out[1].text, sizeof(out[1].text), "root:x:0:\nnogroup:x:65534:\n");
	else
		snprintf(out[1].text, sizeof(out[1].text), "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n",
			 (unsigned)p->gid);
	out[2].name = "hosts";
	snprintf(out[2].text, sizeof(out[2].text), "127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost\n",
		 p->hostname ? p->hostname : "nsbox");
	out[3].name = "nsswitch.conf";
	snprintf(out[3].text, sizeof(out[3].text), "passwd: files\ngroup: files\nhosts: files dns\n");
}
