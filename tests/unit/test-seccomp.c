/* The seccomp policy offline, as (arch, syscall, arguments) -> action through
 * the BPF evaluator, for every row of the table and the cases of issue 2;
 * then live: a forked child loads the filter and checks the errnos. */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <linux/fscrypt.h>
#include <linux/fsverity.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>
#include "seccomp-load.h"

#include "policy.h"
#include "seccomp-rules.h"
#include "tap.h"
#include "util.h"

#define X32_BIT 0x40000000U
#define RET_EPERM (SECCOMP_RET_ERRNO | EPERM)
#define RET_ENOSYS (SECCOMP_RET_ERRNO | ENOSYS)

static struct seccomp_prog prog, logprog;

static uint32_t eval_arch(const struct seccomp_prog *pr, uint32_t arch, int nr, uint64_t a0, uint64_t a1)
{
	struct seccomp_data d;

	memset(&d, 0, sizeof(d));
	d.nr = nr;
	d.arch = arch;
	d.instruction_pointer = 0x401000;
	d.args[0] = a0;
	d.args[1] = a1;
	return seccomp_prog_eval(pr, &d);
}

static uint32_t ev(const struct seccomp_prog *pr, const char *name, uint64_t a0, uint64_t a1)
{
	int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name);

	if (nr < 0) {
		printf("# unknown syscall %s\n", name);
		return 0xdeadbeef;
	}
	return eval_arch(pr, AUDIT_ARCH_X86_64, nr, a0, a1);
}

static uint32_t ev3(const struct seccomp_prog *pr, const char *name, uint64_t a0, uint64_t a1, uint64_t a2)
{
	struct seccomp_data d;

	memset(&d, 0, sizeof(d));
	d.nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name);
	d.arch = AUDIT_ARCH_X86_64;
	d.args[0] = a0;
	d.args[1] = a1;
	d.args[2] = a2;
	return seccomp_prog_eval(pr, &d);
}

/* name with its sixth argument (index 5) a5, the others 0. */
static uint32_t ev5(const struct seccomp_prog *pr, const char *name, uint64_t a5)
{
	struct seccomp_data d;

	memset(&d, 0, sizeof(d));
	d.nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name);
	d.arch = AUDIT_ARCH_X86_64;
	d.args[5] = a5;
	return seccomp_prog_eval(pr, &d);
}

/* The ioctl commands the table denies, on the low 32 bits. */
static bool denied_ioctl(uint64_t cmd)
{
	uint32_t lo = (uint32_t)cmd;

	return lo == TIOCSTI || lo == TIOCLINUX || lo == TIOCSETD || lo == TIOCCONS || lo == SIOCGIFBR ||
	       lo == SIOCSIFBR || lo == SIOCBRADDBR || lo == SIOCBRDELBR || lo == SIOCGIFVLAN || lo == SIOCSIFVLAN ||
	       lo == SIOCADDDLCI || lo == SIOCDELDLCI || lo == FS_IOC_ENABLE_VERITY || lo == FS_IOC_ADD_ENCRYPTION_KEY ||
	       lo == FS_IOC_SET_ENCRYPTION_POLICY;
}

static uint32_t expected(enum seccomp_rule_action a, bool log)
{
	switch (a) {
	case SRULE_ALLOW:
		return SECCOMP_RET_ALLOW;
	case SRULE_EPERM:
		return log ? SECCOMP_RET_LOG : RET_EPERM;
	case SRULE_ENOSYS:
		return RET_ENOSYS;
	}
	return 0xdeadbeef;
}

static bool in_table(int nr)
{
	for (size_t i = 0; i < seccomp_n_rules; i++)
		if (seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, seccomp_rules[i].name) == nr)
			return true;
	return false;
}

static void test_table(const struct seccomp_prog *pr, bool log)
{
	size_t i, bad = 0, n = 0;

	/* Every unconditional row does what it says. */
	for (i = 0; i < seccomp_n_rules; i++) {
		const struct seccomp_rule *s = &seccomp_rules[i];
		uint32_t got;

		if (s->cmp != SRULE_ANY)
			continue;
		n++;
		got = ev(pr, s->name, 0, 0);
		if (got != expected(s->action, log)) {
			printf("# %s: got %#x want %#x\n", s->name, got, expected(s->action, log));
			bad++;
		}
	}
	ok(bad == 0 && n > 200, "%s: all %zu unconditional rows give their action", log ? "log" : "enforce",
	   n);

	/* Every syscall number the table doesn't name gets the default. */
	bad = 0;
	for (int nr = 0; nr < 1024; nr++) {
		uint32_t want = log ? SECCOMP_RET_LOG : RET_ENOSYS;

		if (in_table(nr))
			continue;
		if (eval_arch(pr, AUDIT_ARCH_X86_64, nr, 0, 0) != want) {
			printf("# nr %d: got %#x\n", nr, eval_arch(pr, AUDIT_ARCH_X86_64, nr, 0, 0));
			bad++;
		}
	}
	ok(bad == 0, "%s: syscalls outside the table get %s", log ? "log" : "enforce",
	   log ? "LOG" : "ENOSYS");
}

static void test_cases(void)
{
	static const char *const eperm[] = {
		"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
		"fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "process_vm_readv",
		"process_vm_writev", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
		"userfaultfd", "init_module", "finit_module", "delete_module", "kexec_load",
		"kexec_file_load", "reboot", "swapon", "swapoff", "acct", "open_by_handle_at",
		"name_to_handle_at", "setns", "unshare", "quotactl", "lookup_dcookie", "iopl", "ioperm",
		"syslog", "vhangup", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
		"sethostname", "setdomainname", "kcmp", "process_madvise", "nfsservctl", "uselib",
		"_sysctl", "fanotify_init", "fanotify_mark", "setgroups", "inotify_init", "inotify_init1",
		"inotify_add_watch", "inotify_rm_watch",
	};
	static const char *const allow[] = {
		"read", "write", "openat", "close", "newfstatat", "statx", "mmap", "mprotect",
		"munmap", "brk", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "futex", "execve",
		"exit_group", "wait4", "fork", "vfork", "connect", "epoll_wait",
		"getrandom", "sched_getaffinity", "get_mempolicy", "prlimit64", "prctl", "seccomp",
		"landlock_restrict_self", "pidfd_open", "close_range", "rseq", "memfd_create",
		"getdents64", "clock_nanosleep", "faccessat2", "futex_waitv",
	};
	size_t i, bad;

	bad = 0;
	for (i = 0; i < ARRAY_SIZE(eperm); i++)
		if (ev(&prog, eperm[i], 0, 0) != RET_EPERM) {
			printf("# %s not EPERM\n", eperm[i]);
			bad++;
		}
	ok(bad == 0, "namespace, mount, tracing, kernel-surface and host-wide syscalls: EPERM");
	bad = 0;
	for (i = 0; i < ARRAY_SIZE(allow); i++)
		if (ev(&prog, allow[i], 0, 0) != SECCOMP_RET_ALLOW) {
			printf("# %s not ALLOW\n", allow[i]);
			bad++;
		}
	ok(bad == 0, "what CPython and the shell need: ALLOW");

	/* socket: unix, inet, inet6 and netlink only; AF_VSOCK reaches the
	 * hypervisor (not namespaced). */
	ok(ev(&prog, "socket", 1, 1) == SECCOMP_RET_ALLOW && ev(&prog, "socket", 2, 1) == SECCOMP_RET_ALLOW &&
		   ev(&prog, "socket", 10, 2) == SECCOMP_RET_ALLOW && ev3(&prog, "socket", 16, 3, 0) == SECCOMP_RET_ALLOW,
	   "socket(AF_UNIX, AF_INET, AF_INET6, AF_NETLINK NETLINK_ROUTE): ALLOW");
	/* Netlink protocols but NETLINK_ROUTE load the module serving them. */
	bad = 0;
	for (uint64_t proto = 1; proto < 64; proto++)
		if (ev3(&prog, "socket", 16, 3, proto) != RET_EPERM || ev3(&prog, "socket", 16, 2, proto << 32) != RET_EPERM)
			bad++;
	ok(bad == 0 && ev3(&prog, "socket", 16 | (1ULL << 40), 3, 0) == SECCOMP_RET_ALLOW &&
		   ev3(&prog, "socket", 1, 1, 5) == SECCOMP_RET_ALLOW,
	   "socket(AF_NETLINK, any protocol but NETLINK_ROUTE, also in the high word): EPERM");
	/* Host-wide and per-user budgets (README, the budget table). */
	ok(ev(&prog, "io_setup", 1, 0) == RET_ENOSYS && ev(&prog, "io_submit", 0, 1) == RET_ENOSYS &&
		   ev(&prog, "io_getevents", 0, 1) == RET_ENOSYS && ev(&prog, "io_destroy", 0, 0) == RET_ENOSYS &&
		   ev(&prog, "io_cancel", 0, 0) == RET_ENOSYS && ev(&prog, "io_pgetevents", 0, 0) == RET_ENOSYS,
	   "legacy AIO (fs.aio-max-nr, host-wide): ENOSYS");
	ok(ev(&prog, "fcntl", 3, F_SETPIPE_SZ) == RET_EPERM &&
		   ev(&prog, "fcntl", 3, F_SETPIPE_SZ | (1ULL << 32)) == RET_EPERM &&
		   ev(&prog, "fcntl", 3, F_SETLEASE) == RET_EPERM &&
		   ev(&prog, "fcntl", 3, F_SETLEASE | (1ULL << 32)) == RET_EPERM &&
		   ev(&prog, "fcntl", 3, F_NOTIFY) == RET_EPERM &&
		   ev(&prog, "fcntl", 3, F_NOTIFY | (1ULL << 32)) == RET_EPERM &&
		   ev(&prog, "fcntl", 3, F_GETLEASE) == SECCOMP_RET_ALLOW &&
		   ev(&prog, "fcntl", 3, F_GETPIPE_SZ) == SECCOMP_RET_ALLOW && ev(&prog, "fcntl", 3, F_SETFL) == SECCOMP_RET_ALLOW &&
		   ev(&prog, "fcntl", 3, F_DUPFD_CLOEXEC) == SECCOMP_RET_ALLOW && ev(&prog, "fcntl", 3, F_SETLK) == SECCOMP_RET_ALLOW,
	   "fcntl: F_SETPIPE_SZ (pipe-user-pages, per user), F_SETLEASE (host writers wait) and F_NOTIFY (host accesses) "
	   "EPERM, the rest ALLOW");
	/* The page cache's residency, per page, without timing. */
	ok(ev5(&prog, "preadv2", RWF_NOWAIT) == RET_EPERM && ev5(&prog, "preadv2", RWF_NOWAIT | RWF_HIPRI) == RET_EPERM &&
		   ev5(&prog, "pwritev2", RWF_NOWAIT) == RET_EPERM && ev5(&prog, "preadv2", 0) == SECCOMP_RET_ALLOW &&
		   ev5(&prog, "preadv2", RWF_HIPRI) == SECCOMP_RET_ALLOW &&
		   ev5(&prog, "pwritev2", RWF_APPEND) == SECCOMP_RET_ALLOW && ev(&prog, "mincore", 0, 0) == RET_EPERM,
	   "preadv2/pwritev2 with RWF_NOWAIT and mincore (page-cache residency of host files): EPERM; other flags ALLOW");
	/* RLIMIT_CORE stays 1, the value at which the kernel runs no
	 * core_pattern pipe helper (payload.c): read, never set. */
	ok(ev3(&prog, "prlimit64", 0, RLIMIT_CORE, 0x7ffd0000) == RET_EPERM &&
		   ev3(&prog, "prlimit64", 0, RLIMIT_CORE | (1ULL << 32), 1ULL << 32) == RET_EPERM &&
		   ev3(&prog, "prlimit64", 0, RLIMIT_CORE, 0) == SECCOMP_RET_ALLOW &&
		   ev3(&prog, "prlimit64", 0, RLIMIT_NOFILE, 0x7ffd0000) == SECCOMP_RET_ALLOW &&
		   ev3(&prog, "prlimit64", 0, RLIMIT_CPU, 0x7ffd0000) == SECCOMP_RET_ALLOW &&
		   ev(&prog, "setrlimit", RLIMIT_CORE, 0x7ffd0000) == RET_EPERM &&
		   ev(&prog, "setrlimit", RLIMIT_CORE | (1ULL << 32), 0x7ffd0000) == RET_EPERM &&
		   ev(&prog, "setrlimit", RLIMIT_NOFILE, 0x7ffd0000) == SECCOMP_RET_ALLOW &&
		   ev(&prog, "getrlimit", RLIMIT_CORE, 0x7ffd0000) == SECCOMP_RET_ALLOW,
	   "RLIMIT_CORE: prlimit64 with a new limit and setrlimit EPERM; reading it and setting others ALLOW");
	/* pid 1 makes its cgroup namespace again once attached (pid1.c);
	 * without CAP_SYS_ADMIN the kernel refuses it to the payload. */
	ok(ev(&prog, "unshare", CLONE_NEWCGROUP, 0) == SECCOMP_RET_ALLOW &&
		   ev(&prog, "unshare", CLONE_NEWCGROUP | CLONE_NEWUSER, 0) == RET_EPERM &&
		   ev(&prog, "unshare", CLONE_NEWCGROUP | (1ULL << 32), 0) == RET_EPERM &&
		   ev(&prog, "unshare", CLONE_NEWNS, 0) == RET_EPERM && ev(&prog, "unshare", 0, 0) == RET_EPERM,
	   "unshare: CLONE_NEWCGROUP alone reaches the kernel, everything else EPERM");
	ok(ev(&prog, "socket", 40, 1) == RET_EPERM && ev(&prog, "socket", 17, 3) == RET_EPERM &&
		   ev(&prog, "socket", 0x100000028ULL, 1) == RET_EPERM,
	   "socket(AF_VSOCK, AF_PACKET, AF_VSOCK with high bits): EPERM");
	bad = 0;
	for (uint64_t fam = 0; fam < 0x10000; fam++) {
		uint32_t want = (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6 || fam == AF_NETLINK) ?
					SECCOMP_RET_ALLOW : RET_EPERM;

		if (ev3(&prog, "socket", fam, 1, 0) != want || ev3(&prog, "socket", fam | (fam << 40), 1, 0) != want)
			bad++;
	}
	ok(bad == 0, "socket sweep (all 16-bit families, also with high bits): only unix/inet/inet6/netlink");
	/* Inet and inet6: a (type, protocol) pair no protocol built in serves
	 * makes the kernel run modprobe for it, as root on the host. */
	bad = 0;
	for (int f = 0; f < 2; f++) {
		uint64_t fam = f ? AF_INET6 : AF_INET, ping = f ? IPPROTO_ICMPV6 : IPPROTO_ICMP;

		for (uint64_t type = 0; type < 16; type++) {
			for (uint64_t proto = 0; proto < 512; proto++) {
				bool tcp = type == SOCK_STREAM && (proto == 0 || proto == IPPROTO_TCP);
				bool udp = type == SOCK_DGRAM && (proto == 0 || proto == IPPROTO_UDP || proto == ping);
				uint32_t want = tcp || udp ? SECCOMP_RET_ALLOW : RET_EPERM;
				/* The kernel reads type and protocol as ints, the
				 * type under SOCK_TYPE_MASK. */
				uint64_t flags = SOCK_NONBLOCK | SOCK_CLOEXEC | (proto << 40);

				if (ev3(&prog, "socket", fam, type, proto) != want ||
				    ev3(&prog, "socket", fam, type | flags, proto | (type << 33)) != want)
					bad++;
			}
		}
	}
	ok(bad == 0 && ev3(&prog, "socket", AF_INET, SOCK_STREAM, IPPROTO_SCTP) == RET_EPERM &&
		   ev3(&prog, "socket", AF_INET6, SOCK_SEQPACKET, 0) == RET_EPERM &&
		   ev3(&prog, "socket", AF_INET, SOCK_STREAM, IPPROTO_MPTCP) == RET_EPERM &&
		   ev3(&prog, "socket", AF_INET, SOCK_DGRAM, 115 /* L2TP */) == RET_EPERM &&
		   ev3(&prog, "socket", AF_INET, SOCK_DGRAM, IPPROTO_TCP) == RET_EPERM &&
		   ev3(&prog, "socket", AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP) == SECCOMP_RET_ALLOW,
	   "socket sweep (inet, inet6: 16 types x 512 protocols, also with flags and high bits): TCP, UDP, ping only "
	   "(%zu differ)", bad);
	/* socketpair() creates its sockets (and loads their modules) before
	 * the family says it makes no pairs: AF_UNIX only. */
	bad = 0;
	for (uint64_t fam = 0; fam < 0x10000; fam++) {
		uint32_t want = fam == AF_UNIX ? SECCOMP_RET_ALLOW : RET_EPERM;

		if (ev3(&prog, "socketpair", fam, 1, 0) != want || ev3(&prog, "socketpair", fam, 2, 132) != want ||
		    ev3(&prog, "socketpair", fam | (fam << 40), 5, 9) != want)
			bad++;
	}
	ok(bad == 0 && ev3(&prog, "socketpair", AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) == SECCOMP_RET_ALLOW &&
		   ev3(&prog, "socketpair", AF_INET, SOCK_STREAM, IPPROTO_SCTP) == RET_EPERM &&
		   ev3(&prog, "socketpair", AF_NETLINK, SOCK_RAW, 9) == RET_EPERM,
	   "socketpair sweep (all 16-bit families, also with high bits): AF_UNIX only (%zu differ)", bad);
	bad = 0;
	for (uint64_t level = 0; level < 0x10000; level++)
		if (ev3(&prog, "setsockopt", 3, level, 1) != (level == SOL_TLS ? RET_EPERM : SECCOMP_RET_ALLOW) ||
		    ev3(&prog, "setsockopt", 3, level | (level << 40), 31) !=
			    (level == SOL_TLS ? RET_EPERM : SECCOMP_RET_ALLOW))
			bad++;
	ok(bad == 0, "setsockopt sweep (all 16-bit levels, also with high bits): SOL_TLS only EPERM (%zu differ)", bad);

	/* clone */
	ok(ev(&prog, "clone", CLONE_NEWUSER | SIGCHLD, 0) == RET_EPERM, "clone(CLONE_NEWUSER): EPERM");
	ok(ev(&prog, "clone", CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
				      CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
				      CLONE_CHILD_CLEARTID, 0) == SECCOMP_RET_ALLOW,
	   "clone(thread flags): ALLOW");
	ok(ev(&prog, "clone", CLONE_VM | CLONE_VFORK | SIGCHLD, 0) == SECCOMP_RET_ALLOW,
	   "clone(CLONE_VFORK, posix_spawn): ALLOW");
	ok(ev(&prog, "clone", SIGCHLD, 0) == SECCOMP_RET_ALLOW, "clone(SIGCHLD, fork): ALLOW");
	{
		static const uint64_t ns[] = { CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
					       CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP, 0x80 };

		bad = 0;
		for (i = 0; i < ARRAY_SIZE(ns); i++) {
			if (ev(&prog, "clone", ns[i] | SIGCHLD, 0) != RET_EPERM)
				bad++;
			if (ev(&prog, "clone", ns[i] | CLONE_VM | 0xffffffff00000000ULL, 0) != RET_EPERM)
				bad++;
			if (ev(&prog, "clone", (ns[i] | CLONE_NEWUSER | CLONE_NEWNS) | SIGCHLD, 0) !=
			    RET_EPERM)
				bad++;
		}
		ok(bad == 0, "clone with any CLONE_NEW* flag (alone, combined, high bits set): EPERM");
	}
	ok(ev(&prog, "clone", SIGCHLD | 0xffffffff00000000ULL, 0) == SECCOMP_RET_ALLOW,
	   "clone ignores the upper 32 bits like the kernel does");
	ok(ev(&prog, "clone3", 0, 0) == RET_ENOSYS, "clone3: ENOSYS (glibc falls back to clone)");
	ok(ev(&prog, "io_uring_setup", 0, 0) == RET_ENOSYS && ev(&prog, "io_uring_enter", 0, 0) == RET_ENOSYS &&
		   ev(&prog, "io_uring_register", 0, 0) == RET_ENOSYS,
	   "io_uring_*: ENOSYS");
	ok(eval_arch(&prog, AUDIT_ARCH_X86_64, 999, 0, 0) == RET_ENOSYS, "unknown nr 999: ENOSYS");

	/* ioctl, CVE-2017-5226 and CVE-2019-10063 */
	ok(ev(&prog, "ioctl", 0, TIOCSTI) == RET_EPERM, "ioctl(TIOCSTI): EPERM");
	ok(ev(&prog, "ioctl", 0, 0xffffffff00005412ULL) == RET_EPERM, "ioctl(0xffffffff00005412): EPERM");
	ok(ev(&prog, "ioctl", 0, 0x100005412ULL) == RET_EPERM, "ioctl(TIOCSTI | 1 << 32): EPERM");
	ok(ev(&prog, "ioctl", 0, TIOCLINUX) == RET_EPERM &&
		   ev(&prog, "ioctl", 0, 0xdead00000000ULL | TIOCLINUX) == RET_EPERM,
	   "ioctl(TIOCLINUX), also with high bits: EPERM");
	/* Line disciplines (CVE-2023-6546 n_gsm, CVE-2024-36016) and console
	 * redirection. */
	ok(ev(&prog, "ioctl", 0, TIOCSETD) == RET_EPERM, "ioctl(TIOCSETD): EPERM");
	ok(ev(&prog, "ioctl", 0, 0x100000000ULL | TIOCSETD) == RET_EPERM &&
		   ev(&prog, "ioctl", 0, 0xffffffff00000000ULL | TIOCSETD) == RET_EPERM,
	   "ioctl(TIOCSETD | 1 << 32, TIOCSETD | ~0 << 32): EPERM");
	ok(ev(&prog, "ioctl", 0, TIOCCONS) == RET_EPERM &&
		   ev(&prog, "ioctl", 0, 0x100000000ULL | TIOCCONS) == RET_EPERM,
	   "ioctl(TIOCCONS), also with high bits: EPERM");
	ok(ev(&prog, "ioctl", 0, TIOCGETD) == SECCOMP_RET_ALLOW, "ioctl(TIOCGETD): ALLOW");
	ok(ev(&prog, "ioctl", 3, FIONREAD) == SECCOMP_RET_ALLOW &&
		   ev(&prog, "ioctl", 3, 0x100000000ULL | FIONREAD) == SECCOMP_RET_ALLOW,
	   "ioctl(FIONREAD), also with high bits: ALLOW");
	ok(ev(&prog, "ioctl", 1, TCGETS) == SECCOMP_RET_ALLOW, "ioctl(TCGETS): ALLOW");
	ok(ev(&prog, "ioctl", 1, 0xffffffff00000000ULL | TCGETS) == SECCOMP_RET_ALLOW,
	   "ioctl(TCGETS with high bits): ALLOW");
	bad = 0;
	for (uint64_t cmd = 0; cmd < 0x10000; cmd++) {
		uint32_t want = denied_ioctl(cmd) ? RET_EPERM : SECCOMP_RET_ALLOW;

		if (ev(&prog, "ioctl", 3, cmd) != want || ev(&prog, "ioctl", 3, cmd | (cmd << 40)) != want)
			bad++;
	}
	{
		/* A cheap LCG over the whole 64-bit range. */
		uint64_t x = 0x9e3779b97f4a7c15ULL;

		for (i = 0; i < 200000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			uint32_t lo = (uint32_t)x;
			uint32_t want = denied_ioctl(lo) ? RET_EPERM : SECCOMP_RET_ALLOW;

			if (ev(&prog, "ioctl", 3, x) != want)
				bad++;
		}
	}
	ok(bad == 0, "ioctl sweep (all 16-bit cmds, random 64-bit values): only TIOCSTI/TIOCLINUX/TIOCSETD/TIOCCONS and the "
	   "module-loading socket, fs-verity and fscrypt ioctls denied");

	/* personality */
	ok(ev(&prog, "personality", 0xffffffff, 0) == SECCOMP_RET_ALLOW, "personality(query): ALLOW");
	ok(ev(&prog, "personality", 0, 0) == SECCOMP_RET_ALLOW, "personality(PER_LINUX): ALLOW");
	ok(ev(&prog, "personality", 0x0040000, 0) == RET_ENOSYS, "personality(ADDR_NO_RANDOMIZE): denied");

	/* Foreign ABIs */
	ok(eval_arch(&prog, AUDIT_ARCH_I386, 20 /* getpid */, 0, 0) == SECCOMP_RET_KILL_PROCESS,
	   "i386 getpid: KILL_PROCESS");
	ok(eval_arch(&prog, AUDIT_ARCH_X86_64, X32_BIT | 39 /* getpid */, 0, 0) == SECCOMP_RET_KILL_PROCESS,
	   "x32 getpid (nr | 0x40000000): KILL_PROCESS");
	ok(eval_arch(&prog, AUDIT_ARCH_X86_64, X32_BIT | 512, 0, 0) == SECCOMP_RET_KILL_PROCESS,
	   "x32 rt_sigaction (512): KILL_PROCESS");
	ok(eval_arch(&prog, AUDIT_ARCH_X86_64, -1, 0, 0) == SECCOMP_RET_KILL_PROCESS ||
		   eval_arch(&prog, AUDIT_ARCH_X86_64, -1, 0, 0) == RET_ENOSYS,
	   "nr -1 is not allowed");
	ok(eval_arch(&prog, AUDIT_ARCH_AARCH64, 172, 0, 0) == SECCOMP_RET_KILL_PROCESS,
	   "aarch64: KILL_PROCESS");
}

static void test_log_mode(void)
{
	ok(ev(&logprog, "mount", 0, 0) == SECCOMP_RET_LOG, "log: mount -> LOG");
	ok(eval_arch(&logprog, AUDIT_ARCH_X86_64, 999, 0, 0) == SECCOMP_RET_LOG, "log: unknown nr -> LOG");
	ok(ev(&logprog, "clone", CLONE_NEWUSER, 0) == SECCOMP_RET_LOG, "log: clone(CLONE_NEWUSER) -> LOG");
	ok(ev(&logprog, "ioctl", 0, TIOCSTI) == SECCOMP_RET_LOG, "log: ioctl(TIOCSTI) -> LOG");
	ok(ev(&logprog, "ioctl", 0, 0x100000000ULL | TIOCSETD) == SECCOMP_RET_LOG,
	   "log: ioctl(TIOCSETD | 1 << 32) -> LOG");
	ok(ev(&logprog, "clone3", 0, 0) == RET_ENOSYS, "log: clone3 stays ENOSYS");
	ok(ev(&logprog, "read", 0, 0) == SECCOMP_RET_ALLOW, "log: read -> ALLOW");
	ok(eval_arch(&logprog, AUDIT_ARCH_I386, 20, 0, 0) == SECCOMP_RET_KILL_PROCESS,
	   "log: i386 still KILL_PROCESS");
	ok(eval_arch(&logprog, AUDIT_ARCH_X86_64, X32_BIT | 39, 0, 0) == SECCOMP_RET_KILL_PROCESS,
	   "log: x32 still KILL_PROCESS");
}

static void test_evaluator(void)
{
	struct sock_filter bad_load[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, sizeof(struct seccomp_data)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_filter no_ret[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
	};
	struct sock_filter jump_out[] = {
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 5, 5),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_filter alu[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1]) + 4),
		BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 1),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_LD | BPF_IMM, 0x50000),
		BPF_STMT(BPF_ALU | BPF_OR | BPF_X, 0),
		BPF_STMT(BPF_RET | BPF_A, 0),
	};
	struct seccomp_prog p1 = { bad_load, ARRAY_SIZE(bad_load) };
	struct seccomp_prog p2 = { no_ret, ARRAY_SIZE(no_ret) };
	struct seccomp_prog p3 = { jump_out, ARRAY_SIZE(jump_out) };
	struct seccomp_prog p4 = { alu, ARRAY_SIZE(alu) };
	struct seccomp_data d;

	memset(&d, 0, sizeof(d));
	d.args[1] = 6ULL << 32;
	ok(seccomp_prog_eval(&p1, &d) == SECCOMP_RET_KILL_PROCESS, "eval: load past seccomp_data kills");
	ok(seccomp_prog_eval(&p2, &d) == SECCOMP_RET_KILL_PROCESS, "eval: no return kills");
	ok(seccomp_prog_eval(&p3, &d) == SECCOMP_RET_KILL_PROCESS, "eval: jump past the end kills");
	ok(seccomp_prog_eval(&p4, &d) == (SECCOMP_RET_ERRNO | 7), "eval: high word of args[1], ALU, TAX, RET A");
}

/* Live: load the filter in a child and check what the kernel does. */
static int live_child(void)
{
	struct nsbox_err err;
	int fail = 0;

	if (seccomp_apply(&prog, &err) < 0) {
		fprintf(stderr, "# %s\n", err.msg);
		_exit(100);
	}
	if (getpid() <= 0)
		fail |= 1;
	errno = 0;
	if (unshare(CLONE_NEWUSER) != -1 || errno != EPERM)
		fail |= 2;
	errno = 0;
	if (syscall(SYS_clone3, NULL, 0) != -1 || errno != ENOSYS)
		fail |= 4;
	errno = 0;
	if (syscall(999) != -1 || errno != ENOSYS)
		fail |= 8;
	errno = 0;
	if (syscall(SYS_ioctl, 0, 0xffffffff00005412ULL, "x") != -1 || errno != EPERM)
		fail |= 16;
	errno = 0;
	if (syscall(SYS_mount, "none", "/mnt", "tmpfs", 0, NULL) != -1 || errno != EPERM)
		fail |= 32;
	/* TIOCSETD is refused before the kernel looks at the fd; FIONREAD
	 * on a pipe still works. */
	{
		int ldisc = 0, avail = -1, p[2];

		errno = 0;
		if (syscall(SYS_ioctl, 0, 0x100000000ULL | TIOCSETD, &ldisc) != -1 || errno != EPERM)
			fail |= 128;
		if (pipe(p) < 0 || write(p[1], "ab", 2) != 2 || ioctl(p[0], FIONREAD, &avail) < 0 || avail != 2)
			fail |= 128;
	}
	/* RLIMIT_CORE reads but does not change; other limits still do. */
	{
		struct rlimit rl = { 0, 0 }, nf;

		errno = 0;
		if (setrlimit(RLIMIT_CORE, &rl) != -1 || errno != EPERM || getrlimit(RLIMIT_CORE, &rl) < 0 ||
		    getrlimit(RLIMIT_NOFILE, &nf) < 0 || setrlimit(RLIMIT_NOFILE, &nf) < 0)
			fail |= 256;
	}
	/* Threads and fork still work. */
	{
		pid_t pid = fork();
		int st;

		if (pid == 0)
			_exit(7);
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 7)
			fail |= 64;
	}
	_exit(fail);
}

static void test_live(void)
{
	int st = 0;
	bool reaped;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0)
		live_child();
	/* ok() evaluates its condition twice: no side effects inside. */
	reaped = pid > 0 && waitpid(pid, &st, 0) == pid;
	ok(reaped, "live: child ran");
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	   "live: getpid works, unshare(CLONE_NEWUSER) EPERM, clone3 ENOSYS, nr 999 ENOSYS, "
	   "ioctl(TIOCSTI|high bits) EPERM, mount EPERM, fork works, ioctl(TIOCSETD|1<<32) EPERM, "
	   "FIONREAD works, setrlimit(RLIMIT_CORE) EPERM, RLIMIT_NOFILE set (status %#x)",
	   st);

	/* x32 from the native ABI: the process dies with SIGSYS. */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct nsbox_err err;

		if (seccomp_apply(&prog, &err) < 0)
			_exit(100);
		syscall(X32_BIT | 39);
		_exit(0);
	}
	reaped = pid > 0 && waitpid(pid, &st, 0) == pid;
	ok(reaped && WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS,
	   "live: an x32 syscall kills the process with SIGSYS (status %#x)", st);
}

int main(void)
{
	struct nsbox_policy p;
	struct nsbox_err err;
	struct timespec t0, t1;
	int r;

	memset(&p, 0, sizeof(p));
	memset(&err, 0, sizeof(err));
	r = policy_init_builtin(&p, "default", &err);
	ok(r == 0, "default policy loads");
	ok(p.seccomp == SECCOMP_ENFORCE, "default policy enforces seccomp");

	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = seccomp_prog_compile(&p, &prog, &err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("# build took %lld us (%u instructions)\n",
	       (long long)((t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000),
	       prog.len);
	ok(r == 0, "seccomp_prog_compile(default) %s", r ? err.msg : "");
	if (r) {
		policy_free(&p);
		tap_done();
	}

	p.seccomp = SECCOMP_LOG;
	r = seccomp_prog_compile(&p, &logprog, &err);
	ok(r == 0, "seccomp_prog_compile(log) %s", r ? err.msg : "");
	if (r) {
		seccomp_prog_free(&prog);
		policy_free(&p);
		tap_done();
	}

	test_table(&prog, false);
	test_table(&logprog, true);
	test_cases();
	test_log_mode();
	test_evaluator();
	test_live();

	seccomp_prog_free(&prog);
	seccomp_prog_free(&logprog);
	seccomp_prog_free(NULL);
	ok(prog.insns == NULL && prog.len == 0, "seccomp_prog_free zeroes the prog");
	policy_free(&p);
	/* pid 1's own filter: its wait loop works, anything else kills it. */
	{
		pid_t c = fork();
		if (c == 0) {
			sigset_t set;
			struct timespec ts = { 0, 1000 };
			if (seccomp_apply_pid1(NULL) < 0)
				_exit(2);
			sigemptyset(&set);
			sigaddset(&set, SIGUSR1);
			sigprocmask(SIG_BLOCK, &set, NULL);
			(void)sigtimedwait(&set, NULL, &ts);	/* allowed */
			(void)waitpid(-1, NULL, WNOHANG);	/* allowed */
			syscall(SYS_getpid);			/* not on the list */
			_exit(0);
		}
		int st = 0;
		waitpid(c, &st, 0);
		ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "pid 1 filter: wait loop allowed, getpid kills (status %d)",
		   st);
	}
	tap_done();
}
