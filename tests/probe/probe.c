/* Runs inside the sandbox and reports facts as JSON lines "key": value, for
 * the integration tests to assert on.  Every syscall attempt reports the
 * errno it got ("ok" if it succeeded: an escape). */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

static void show_file(const char *key, const char *path)
{
	char buf[16384];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : 0, r;

	/* A seq_file (mountinfo) gives a page per read. */
	while (fd >= 0 && (size_t)n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) != 0) {
		if (r < 0) {
			n = -1;
			break;
		}
		n += r;
	}
	if (fd >= 0)
		close(fd);
	printf("\"%s\": \"", key);
	if (n < 0) {
		printf("ERR %s\",\n", strerror(errno));
		return;
	}
	for (ssize_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c == '\n')
			printf("\\n");
		else if (c == '\t')
			printf("\\t");
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	printf("\",\n");
}

static void result(const char *name, long r)
{
	if (r >= 0)
		printf("\"%s\": \"ok\",\n", name);
	else
		printf("\"%s\": \"%s\",\n", name, strerrorname_np(errno) ? strerrorname_np(errno) : "?");
}

int main(void)
{
	char host[256] = "";
	long r;

	printf("{\n");
	printf("\"uid\": %u, \"gid\": %u, \"pid\": %d, \"ppid\": %d, \"sid\": %d,\n", getuid(), getgid(), getpid(),
	       getppid(), getsid(0));
	gethostname(host, sizeof(host) - 1);
	printf("\"hostname\": \"%s\",\n", host);
	show_file("uid_map", "/proc/self/uid_map");
	show_file("gid_map", "/proc/self/gid_map");
	show_file("setgroups", "/proc/self/setgroups");
	show_file("status", "/proc/self/status");
	show_file("mountinfo", "/proc/self/mountinfo");
	show_file("shadow", "/etc/shadow");
	show_file("passwd", "/etc/passwd");
	/* The network namespace's interfaces, from /proc/net/dev: a sandbox
	 * with one of its own may open no netlink socket (if_nameindex). */
	printf("\"interfaces\": [");
	{
		FILE *f = fopen("/proc/net/dev", "r");
		char line[512];
		int n = 0;

		for (int ln = 0; f && fgets(line, sizeof(line), f); ln++) {
			char *colon = strchr(line, ':'), *name = line;

			if (ln < 2 || !colon)
				continue;
			*colon = '\0';
			while (*name == ' ')
				name++;
			printf("%s\"%s\"", n++ ? ", " : "", name);
		}
		if (f)
			fclose(f);
	}
	printf("],\n");
	printf("\"fds\": [");
	for (int fd = 0, first = 1; fd < 1024; fd++)
		if (fcntl(fd, F_GETFD) >= 0) {
			printf("%s%d", first ? "" : ", ", fd);
			first = 0;
		}
	printf("],\n");

	result("unshare_user", unshare(CLONE_NEWUSER));
	result("unshare_ns", unshare(CLONE_NEWNS));
	r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (r == 0)
		_exit(0);
	result("clone_newuser", r);
	struct clone_args ca = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };
	r = syscall(SYS_clone3, &ca, sizeof(ca));
	if (r == 0)
		_exit(0);
	result("clone3", r);
	result("setns", syscall(SYS_setns, 0, 0));
	result("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, 0));
	result("umount", syscall(SYS_umount2, "/proc", 2));
	result("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
	result("chroot", syscall(SYS_chroot, "/tmp"));
	result("ptrace", syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, 1, 0, 0));
	result("process_vm_readv", syscall(SYS_process_vm_readv, 1, 0, 0, 0, 0, 0));
	result("bpf", syscall(SYS_bpf, 0, 0, 0));
	result("perf_event_open", syscall(SYS_perf_event_open, 0, 0, -1, -1, 0));
	result("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
	result("add_key", syscall(SYS_add_key, "user", "x", "y", 1, 0));
	result("request_key", syscall(SYS_request_key, "user", "x", 0, 0));
	result("userfaultfd", syscall(SYS_userfaultfd, 0));
	result("io_uring_setup", syscall(SYS_io_uring_setup, 1, 0));
	result("init_module", syscall(SYS_init_module, 0, 0, ""));
	result("finit_module", syscall(SYS_finit_module, -1, "", 0));
	result("kexec_load", syscall(SYS_kexec_load, 0, 0, 0, 0));
	result("reboot", syscall(SYS_reboot, 0, 0, 0, 0));
	result("swapon", syscall(SYS_swapon, "/tmp/x", 0));
	result("acct", syscall(SYS_acct, "/tmp/x"));
	result("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, 0, 0));
	result("ioctl_tiocsti", syscall(SYS_ioctl, 0, TIOCSTI, "x"));
	result("ioctl_tiocsti_high", syscall(SYS_ioctl, 0, 0x100000000UL | TIOCSTI, "x"));
	result("ioctl_tioclinux", syscall(SYS_ioctl, 0, TIOCLINUX, "x"));
	{
		int ldisc = 0;	/* N_TTY: harmless even where it got through */

		result("ioctl_tiocsetd", syscall(SYS_ioctl, 0, TIOCSETD, &ldisc));
	}
	result("ioctl_tioccons", syscall(SYS_ioctl, 0, TIOCCONS));
	result("unknown_syscall", syscall(1000));
	result("sethostname", sethostname("x", 1));
	result("write_usr", open("/usr/nsbox-probe", O_WRONLY | O_CREAT, 0644));
	result("write_root", open("/nsbox-probe", O_WRONLY | O_CREAT, 0644));
	result("write_proc_sys", open("/proc/sys/kernel/hostname", O_WRONLY));
	result("write_tmp", open("/tmp/nsbox-probe", O_WRONLY | O_CREAT, 0644));
	result("write_devnull", open("/dev/null", O_WRONLY));
	result("mknod", mknod("/tmp/nsbox-null", S_IFCHR | 0666, makedev(1, 3)));
	result("setuid0", setuid(0));
	printf("\"end\": true\n}\n");
	return 0;
}
