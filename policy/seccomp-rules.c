/* The seccomp allowlist (x86_64) and its compilation to classic BPF.
 *
 * Shape of the policy (issue 2):
 *   - native architecture only: i386 and x32 calls kill the process;
 *   - syscalls not in the table fail with ENOSYS so libc falls back;
 *   - clone3, io_uring_* and legacy AIO fail with ENOSYS (clone3's flags live
 *     in memory the filter cannot read; io_uring bypasses the filter
 *     entirely; AIO events are one host-wide budget, fs.aio-max-nr);
 *   - namespace creation, the mount family, tracing, kernel attack surface
 *     and host-wide settings fail with EPERM;
 *   - everything CPython, its common C extensions and the shell tools need
 *     is allowed.  Networking is cut by the empty network namespace, not here.
 *
 * libseccomp silently drops conditional rules of a syscall that also has an
 * unconditional rule, and refuses two comparisons of one argument in one
 * rule, so "ioctl unless TIOCSTI" cannot be written directly.  A row with
 * cmp SRULE_OTHERWISE stands for "every call no other row of this syscall
 * matches"; seccomp_prog_build expands it into disjoint masked comparisons
 * (see add_otherwise()), so the outcome never depends on how libseccomp
 * orders overlapping rules. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fscrypt.h>
#include <linux/fsverity.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "seccomp-rules.h"
#include "util.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Every flag that makes clone() create a namespace.  CLONE_NEWTIME sits in
 * the exit-signal byte of clone()'s flags, where no valid signal sets it. */
#define CLONE_NS_FLAGS                                                                 \
	((uint64_t)(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | \
		    CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_NEWTIME))

/* ioctl's cmd is an unsigned int: the kernel ignores the upper 32 bits, so
 * match the lower 32 only (CVE-2019-10063: flatpak's filter compared all 64
 * bits and TIOCSTI | 1 << 32 went through). */
#define LOW32 0xffffffffULL

#define ALLOW(n) { n, SRULE_ALLOW, SRULE_ANY, 0, 0, 0, 0 }
#define EPERM_(n) { n, SRULE_EPERM, SRULE_ANY, 0, 0, 0, 0 }
#define ENOSYS_(n) { n, SRULE_ENOSYS, SRULE_ANY, 0, 0, 0, 0 }
#define WHEN(n, act, a, m, v) { n, act, SRULE_MASKED_EQ, a, m, v, 0 }
/* WHEN, and argument a2 non-zero; with a2 zero, the OTHERWISE row decides. */
#define WHEN_SET(n, act, a, m, v, a2) { n, act, SRULE_MASKED_EQ, a, m, v, (a2) + 1, false }
/* WHEN, and argument a2 zero; with a2 non-zero, the OTHERWISE row decides. */
#define WHEN_ZERO(n, act, a, m, v, a2) { n, act, SRULE_MASKED_EQ, a, m, v, (a2) + 1, true }
/* WHEN, and (args[pairs->a] & mask_a, args[pairs->b]) one of the pairs; for
 * another pair, the OTHERWISE row decides. */
#define WHEN_PAIRS(n, act, a, m, v, pairs) { n, act, SRULE_MASKED_EQ, a, m, v, 0, false, pairs }
#define OTHERWISE(n, act) { n, act, SRULE_OTHERWISE, 0, 0, 0, 0 }
/* Allowed unless the mode argument carries S_ISUID or S_ISGID. */
#define NOSUID_MODE(n, a) WHEN(n, SRULE_EPERM, a, 06000, 04000), WHEN(n, SRULE_EPERM, a, 06000, 02000), \
	WHEN(n, SRULE_EPERM, a, 06000, 06000), OTHERWISE(n, SRULE_ALLOW)

/* socket(AF_INET or AF_INET6, type, protocol): TCP and UDP, named by their
 * protocol number or by 0, and ICMP echo ("ping") sockets.  For any other
 * pair inet_create() looks for a protocol built in and, finding none, has
 * the kernel run modprobe as root on the host (net-pf-2-proto-P-type-T,
 * then net-pf-2-proto-P): SCTP, DCCP, L2TP, SMC, each with a history of
 * CVEs, for any caller, from any network namespace.  Built-in protocols
 * besides TCP and UDP (MPTCP, UDP-Lite, SCTP where it is built in) are
 * refused too: code the sandbox has no use for.  The type is compared
 * under SOCK_TYPE_MASK (0xf): SOCK_NONBLOCK and SOCK_CLOEXEC pass. */
static const struct seccomp_pairs inet_pairs = {
	1, 2, 0xf, 5,
	{ SOCK_STREAM, SOCK_STREAM, SOCK_DGRAM, SOCK_DGRAM, SOCK_DGRAM },
	{ 0, IPPROTO_TCP, 0, IPPROTO_UDP, IPPROTO_ICMP },
};
static const struct seccomp_pairs inet6_pairs = {
	1, 2, 0xf, 5,
	{ SOCK_STREAM, SOCK_STREAM, SOCK_DGRAM, SOCK_DGRAM, SOCK_DGRAM },
	{ 0, IPPROTO_TCP, 0, IPPROTO_UDP, IPPROTO_ICMPV6 },
};

const struct seccomp_rule seccomp_rules[] = {
	/* Files and directories.  What may be written is decided by the
	 * read-only mounts and Landlock, not here. */
	ALLOW("read"), ALLOW("write"), ALLOW("readv"), ALLOW("writev"),
	ALLOW("pread64"), ALLOW("pwrite64"), ALLOW("preadv"), ALLOW("pwritev"),
	/* RWF_NOWAIT (flags, argument 5: after pos_l and pos_h) fails with
	 * EAGAIN where a page is not in the page cache: a per-page oracle of
	 * which host files (/usr, a root tree, binds) the host's users and
	 * other sandboxes read, and a channel between sandboxes, with no
	 * timing needed (audit-infoleak).  Nothing we run asks for it; a
	 * program that does gets EPERM and reads without it. */
	WHEN("preadv2", SRULE_EPERM, 5, RWF_NOWAIT, RWF_NOWAIT), OTHERWISE("preadv2", SRULE_ALLOW),
	WHEN("pwritev2", SRULE_EPERM, 5, RWF_NOWAIT, RWF_NOWAIT), OTHERWISE("pwritev2", SRULE_ALLOW),
	NOSUID_MODE("open", 2), NOSUID_MODE("openat", 3), NOSUID_MODE("creat", 1),
	/* openat2's mode sits in a struct the filter can't read; libc never
	 * uses it, so it gets the default ENOSYS. */
	ALLOW("close"), ALLOW("close_range"),
	ALLOW("stat"), ALLOW("fstat"), ALLOW("lstat"), ALLOW("newfstatat"), ALLOW("statx"),
	ALLOW("statfs"), ALLOW("fstatfs"),
	ALLOW("lseek"), ALLOW("access"), ALLOW("faccessat"), ALLOW("faccessat2"),
	ALLOW("pipe"), ALLOW("pipe2"), ALLOW("dup"), ALLOW("dup2"), ALLOW("dup3"),
	/* F_SETPIPE_SZ grows a pipe to pipe-max-size (1 MiB, 256 pages),
	 * charged to the host user's pipe-user-pages-soft (16384 pages): 64
	 * grown pipes and every new pipe of the host user gets 2 pages
	 * (fs/pipe.c, too_many_pipe_buffers_soft).  A pipe keeps the default
	 * 16 pages here; shrinking it is not asked for by anything we run. */
	WHEN("fcntl", SRULE_EPERM, 1, LOW32, F_SETPIPE_SZ),
	/* F_SETLEASE: the sandbox's user owns the host files its uid maps to,
	 * so it could lease one shared read-only (--ro-bind, /usr under a root
	 * launcher) and every host open() of it for writing would wait
	 * lease-break-time (45 s) each time, while the sandbox re-takes it
	 * (fcntl(2), Leases; red team 3). */
	WHEN("fcntl", SRULE_EPERM, 1, LOW32, F_SETLEASE),
	/* F_NOTIFY (dnotify): see inotify below. */
	WHEN("fcntl", SRULE_EPERM, 1, LOW32, F_NOTIFY),
	OTHERWISE("fcntl", SRULE_ALLOW),
	ALLOW("flock"),
	ALLOW("fsync"), ALLOW("fdatasync"), ALLOW("syncfs"), ALLOW("sync"), ALLOW("sync_file_range"),
	ALLOW("truncate"), ALLOW("ftruncate"), ALLOW("fallocate"),
	ALLOW("getdents"), ALLOW("getdents64"), ALLOW("getcwd"), ALLOW("chdir"), ALLOW("fchdir"),
	ALLOW("rename"), ALLOW("renameat"), ALLOW("renameat2"),
	ALLOW("mkdir"), ALLOW("mkdirat"), ALLOW("rmdir"),
	ALLOW("link"), ALLOW("linkat"), ALLOW("unlink"), ALLOW("unlinkat"),
	ALLOW("symlink"), ALLOW("symlinkat"), ALLOW("readlink"), ALLOW("readlinkat"),
	/* mkfifo; device nodes need CAP_MKNOD in the initial user namespace. */
	NOSUID_MODE("mknod", 1), NOSUID_MODE("mknodat", 2),
	/* No setuid or setgid bits: when nsbox runs as root the sandbox's
	 * user is host uid 0, and a setuid file it leaves in a writable bind
	 * (nosuid only inside the sandbox) would be a setuid-root binary on
	 * the host.  chmod family here, file creation modes below. */
	NOSUID_MODE("chmod", 1), NOSUID_MODE("fchmod", 1), NOSUID_MODE("fchmodat", 2), NOSUID_MODE("fchmodat2", 2),
	ALLOW("chown"), ALLOW("fchown"), ALLOW("lchown"), ALLOW("fchownat"), ALLOW("umask"),
	ALLOW("utime"), ALLOW("utimes"), ALLOW("utimensat"), ALLOW("futimesat"),
	ALLOW("getxattr"), ALLOW("lgetxattr"), ALLOW("fgetxattr"),
	ALLOW("listxattr"), ALLOW("llistxattr"), ALLOW("flistxattr"),
	ALLOW("setxattr"), ALLOW("lsetxattr"), ALLOW("fsetxattr"),
	ALLOW("removexattr"), ALLOW("lremovexattr"), ALLOW("fremovexattr"),
	ALLOW("fadvise64"), ALLOW("readahead"),
	ALLOW("sendfile"), ALLOW("copy_file_range"), ALLOW("splice"), ALLOW("tee"), ALLOW("vmsplice"),
	/* inotify and dnotify report accesses to an inode from every process
	 * on the host, and every inode of /usr, the /etc binds, the device
	 * nodes and a root tree is shared with the host and every other
	 * sandbox: a watch on /usr/bin named each program the host ran, and
	 * when, and two sandboxes could signal through opens of one file
	 * (red team 6).  No mount option or Landlock right limits a watch to
	 * the sandbox's own files; fanotify is denied below. */
	EPERM_("inotify_init"), EPERM_("inotify_init1"), EPERM_("inotify_add_watch"),
	EPERM_("inotify_rm_watch"),
	/* ioctls on the caller's stdio, which may be the user's terminal.
	 * TIOCSTI (CVE-2017-5226) and TIOCLINUX (selection paste, the same
	 * attack on a VT) inject input; the jail also calls setsid().
	 * TIOCSETD attaches a line discipline (n_gsm, n_hdlc, ...), code with
	 * a history of bugs reachable from any tty fd (CVE-2023-6546,
	 * CVE-2024-36016).  TIOCCONS redirects the console; it needs
	 * CAP_SYS_ADMIN on the host, denied anyway for defence in depth.
	 * TIOCGETD stays allowed. */
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, TIOCSTI),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, TIOCLINUX),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, TIOCSETD),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, TIOCCONS),
	/* Socket ioctls that have the kernel run modprobe, as root on the
	 * host, for the module serving them when it is not loaded, with no
	 * capability asked first (net/socket.c): bridge (SIOCGIFBR,
	 * SIOCSIFBR, SIOCBRADDBR, SIOCBRDELBR), 8021q (SIOCGIFVLAN,
	 * SIOCSIFVLAN) and dlci (SIOCADDDLCI, SIOCDELDLCI). */
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCGIFBR),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCSIFBR),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCBRADDBR),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCBRDELBR),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCGIFVLAN),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCSIFVLAN),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCADDDLCI),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, SIOCDELDLCI),
	/* fs-verity and fscrypt on a writable bind of an ext4, f2fs or btrfs
	 * that has them: each loads the crypto module its algorithm names
	 * (crypto-sha512, xts, cts), and a v2 encryption key needs no
	 * capability.  Nothing in a sandbox has a use for either. */
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, FS_IOC_ENABLE_VERITY),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, FS_IOC_ADD_ENCRYPTION_KEY),
	WHEN("ioctl", SRULE_EPERM, 1, LOW32, FS_IOC_SET_ENCRYPTION_POLICY),
	OTHERWISE("ioctl", SRULE_ALLOW),
	/* socket(): the families CPython and the shell tools use.  The empty
	 * network namespace cuts IP; AF_VSOCK is not namespaced and reaches the
	 * hypervisor, so everything else is denied (as Docker's profile does
	 * for AF_VSOCK).  Netlink: NETLINK_ROUTE (protocol 0) only, what
	 * getifaddrs, if_nameindex, getaddrinfo's AI_ADDRCONFIG and ip(8)
	 * use.  Creating a socket of any other protocol, or naming a generic
	 * netlink family or a sock_diag family, makes the kernel load the
	 * module that serves it (net-pf-16-proto-N: scsi_transport_iscsi,
	 * the way in of CVE-2021-27365, rdma, crypto_user, tipc, ...), as
	 * root on the host, for any unprivileged caller.  Inet and inet6:
	 * TCP, UDP and ping only (inet_pairs, above), for the same reason. */
	WHEN("socket", SRULE_ALLOW, 0, 0xffffffffULL, AF_UNIX),
	WHEN_PAIRS("socket", SRULE_ALLOW, 0, 0xffffffffULL, AF_INET, &inet_pairs),
	WHEN_PAIRS("socket", SRULE_ALLOW, 0, 0xffffffffULL, AF_INET6, &inet6_pairs),
	WHEN_ZERO("socket", SRULE_ALLOW, 0, 0xffffffffULL, AF_NETLINK, 2),
	OTHERWISE("socket", SRULE_EPERM),

	/* Memory.  mbind/set_mempolicy/get_mempolicy: numpy and OpenBLAS. */
	ALLOW("brk"), ALLOW("mmap"), ALLOW("munmap"), ALLOW("mprotect"), ALLOW("mremap"),
	/* mincore: the same page-cache oracle as RWF_NOWAIT, for a file the
	 * caller owns or may write, which under a root launcher is all of
	 * /usr (its owner, host root, is the sandbox's user).  glibc and
	 * CPython never call it. */
	ALLOW("madvise"), EPERM_("mincore"), ALLOW("msync"),
	ALLOW("mlock"), ALLOW("mlock2"), ALLOW("munlock"), ALLOW("mlockall"), ALLOW("munlockall"),
	ALLOW("membarrier"), ALLOW("memfd_create"),
	ALLOW("get_mempolicy"), ALLOW("set_mempolicy"), ALLOW("mbind"),
	ALLOW("pkey_alloc"), ALLOW("pkey_free"), ALLOW("pkey_mprotect"),

	/* Signals. */
	ALLOW("rt_sigaction"), ALLOW("rt_sigprocmask"), ALLOW("rt_sigreturn"), ALLOW("rt_sigpending"),
	ALLOW("rt_sigtimedwait"), ALLOW("rt_sigsuspend"), ALLOW("rt_sigqueueinfo"),
	ALLOW("rt_tgsigqueueinfo"), ALLOW("sigaltstack"), ALLOW("signalfd"), ALLOW("signalfd4"),
	ALLOW("kill"), ALLOW("tkill"), ALLOW("tgkill"), ALLOW("pause"), ALLOW("restart_syscall"),
	ALLOW("pidfd_open"), ALLOW("pidfd_send_signal"),

	/* Time and timers. */
	ALLOW("gettimeofday"), ALLOW("time"), ALLOW("clock_gettime"), ALLOW("clock_getres"),
	ALLOW("clock_nanosleep"), ALLOW("nanosleep"), ALLOW("alarm"),
	ALLOW("getitimer"), ALLOW("setitimer"),
	ALLOW("timer_create"), ALLOW("timer_settime"), ALLOW("timer_gettime"),
	ALLOW("timer_getoverrun"), ALLOW("timer_delete"),
	ALLOW("timerfd_create"), ALLOW("timerfd_settime"), ALLOW("timerfd_gettime"), ALLOW("times"),

	/* Identity and limits.  Without capabilities the set*id calls can only
	 * drop ids and prlimit64/setrlimit only lower hard limits. */
	ALLOW("getpid"), ALLOW("gettid"), ALLOW("getppid"), ALLOW("getpgrp"), ALLOW("getpgid"),
	ALLOW("setpgid"), ALLOW("getsid"), ALLOW("setsid"),
	ALLOW("getuid"), ALLOW("geteuid"), ALLOW("getgid"), ALLOW("getegid"),
	ALLOW("getresuid"), ALLOW("getresgid"), ALLOW("getgroups"),
	ALLOW("setuid"), ALLOW("setgid"), ALLOW("setreuid"), ALLOW("setregid"),
	ALLOW("setresuid"), ALLOW("setresgid"), ALLOW("setfsuid"), ALLOW("setfsgid"),
	ALLOW("capget"), ALLOW("capset"),
	ALLOW("getrlimit"), ALLOW("getrusage"),
	/* RLIMIT_CORE is 1 and stays 1 (payload.c): the kernel skips a core
	 * dump to a pipe only at that value (fs/coredump.c, coredump_pipe;
	 * 0 means no limit there), so a sandbox that lowered it could run the
	 * host's core_pattern helper (systemd-coredump, apport: root, outside
	 * its cgroup, writing the dump to the host's disk) at every crash.
	 * Reading it stays allowed: glibc's getrlimit is prlimit64 with no new
	 * limit. */
	WHEN("setrlimit", SRULE_EPERM, 0, LOW32, RLIMIT_CORE), OTHERWISE("setrlimit", SRULE_ALLOW),
	WHEN_SET("prlimit64", SRULE_EPERM, 1, LOW32, RLIMIT_CORE, 2), OTHERWISE("prlimit64", SRULE_ALLOW),
	ALLOW("sysinfo"), ALLOW("uname"), ALLOW("getpriority"), ALLOW("setpriority"),
	ALLOW("ioprio_get"), ALLOW("ioprio_set"), ALLOW("getcpu"), ALLOW("getrandom"),

	/* Scheduling (OpenBLAS and numpy read sched_getaffinity). */
	ALLOW("sched_yield"), ALLOW("sched_getaffinity"), ALLOW("sched_setaffinity"),
	ALLOW("sched_getparam"), ALLOW("sched_setparam"), ALLOW("sched_getscheduler"),
	ALLOW("sched_setscheduler"), ALLOW("sched_get_priority_max"),
	ALLOW("sched_get_priority_min"), ALLOW("sched_rr_get_interval"),
	ALLOW("sched_getattr"), ALLOW("sched_setattr"),

	/* Processes and threads.  clone() may not create namespaces: nested
	 * user namespaces are the usual first step of a kernel exploit. */
	ALLOW("fork"), ALLOW("vfork"),
	WHEN("clone", SRULE_ALLOW, 0, CLONE_NS_FLAGS, 0),
	OTHERWISE("clone", SRULE_EPERM),
	ALLOW("execve"), ALLOW("execveat"), ALLOW("exit"), ALLOW("exit_group"),
	ALLOW("wait4"), ALLOW("waitid"),
	ALLOW("futex"), ALLOW("futex_waitv"), ALLOW("set_robust_list"), ALLOW("get_robust_list"),
	ALLOW("set_tid_address"), ALLOW("rseq"), ALLOW("arch_prctl"),
	/* No capabilities and no_new_privs set: prctl can't raise anything. */
	ALLOW("prctl"),
	/* Both only add restrictions on top of ours. */
	ALLOW("seccomp"),
	ALLOW("landlock_create_ruleset"), ALLOW("landlock_add_rule"), ALLOW("landlock_restrict_self"),
	/* Only the query and the default persona: the others switch off ASLR
	 * or change the ABI.  Other values get the default ENOSYS (libseccomp
	 * can't express "EPERM unless 0 or ~0" in a bounded number of rows). */
	WHEN("personality", SRULE_ALLOW, 0, LOW32, 0),
	WHEN("personality", SRULE_ALLOW, 0, LOW32, 0xffffffffULL),

	/* Polling and events. */
	ALLOW("poll"), ALLOW("ppoll"), ALLOW("select"), ALLOW("pselect6"),
	ALLOW("epoll_create"), ALLOW("epoll_create1"), ALLOW("epoll_ctl"), ALLOW("epoll_wait"),
	ALLOW("epoll_pwait"), ALLOW("epoll_pwait2"), ALLOW("eventfd"), ALLOW("eventfd2"),

	/* Sockets (socket() above).  The network namespace holds only
	 * loopback.  socketpair() creates its two sockets (sock_create) before
	 * it asks the family for a pair, which only AF_UNIX makes: any other
	 * family, inet protocol or netlink protocol would have the kernel load
	 * its module just as socket() would, and then fail. */
	WHEN("socketpair", SRULE_ALLOW, 0, 0xffffffffULL, AF_UNIX),
	OTHERWISE("socketpair", SRULE_EPERM),
	ALLOW("bind"), ALLOW("listen"),
	ALLOW("accept"), ALLOW("accept4"), ALLOW("connect"),
	ALLOW("getsockname"), ALLOW("getpeername"), ALLOW("sendto"), ALLOW("recvfrom"),
	ALLOW("sendmsg"), ALLOW("recvmsg"), ALLOW("sendmmsg"), ALLOW("recvmmsg"),
	ALLOW("shutdown"), ALLOW("getsockopt"),
	/* Kernel TLS's keys (SOL_TLS, after TCP_ULP "tls" where the host has
	 * tls.ko loaded) load the cipher's crypto module (gcm(aes), ccm,
	 * chacha20poly1305), and kTLS is kernel code nothing inside needs. */
	WHEN("setsockopt", SRULE_EPERM, 1, LOW32, SOL_TLS),
	OTHERWISE("setsockopt", SRULE_ALLOW),

	/* SysV and POSIX IPC: the IPC namespace is private. */
	ALLOW("shmget"), ALLOW("shmat"), ALLOW("shmdt"), ALLOW("shmctl"),
	ALLOW("semget"), ALLOW("semop"), ALLOW("semtimedop"), ALLOW("semctl"),
	ALLOW("msgget"), ALLOW("msgsnd"), ALLOW("msgrcv"), ALLOW("msgctl"),
	ALLOW("mq_open"), ALLOW("mq_unlink"), ALLOW("mq_timedsend"), ALLOW("mq_timedreceive"),
	ALLOW("mq_notify"), ALLOW("mq_getsetattr"),

	/* ENOSYS so libc and Python fall back: glibc retries clone3 with
	 * clone, and io_uring users fall back to threads.  io_uring ops are not
	 * seen by seccomp at all. */
	ENOSYS_("clone3"),
	ENOSYS_("io_uring_setup"), ENOSYS_("io_uring_enter"), ENOSYS_("io_uring_register"),
	/* Legacy AIO: io_setup reserves events from fs.aio-max-nr (65536),
	 * one budget for the whole host with no per-user split: one sandbox
	 * took it all and io_setup failed for every uid, root included.
	 * CPython does not use it; libaio users fall back to threads. */
	ENOSYS_("io_setup"), ENOSYS_("io_destroy"), ENOSYS_("io_submit"), ENOSYS_("io_cancel"),
	ENOSYS_("io_getevents"), ENOSYS_("io_pgetevents"),

	/* Namespaces and mounts.  unshare(CLONE_NEWCGROUP) alone reaches the
	 * kernel: pid 1 makes its cgroup namespace again once the launcher
	 * has moved it into its cgroups (pid1.c, SYNC_CG_MOVED), after the
	 * filter is on; the kernel refuses it without CAP_SYS_ADMIN, which
	 * nothing else in the sandbox has. */
	WHEN("unshare", SRULE_ALLOW, 0, ~0ULL, CLONE_NEWCGROUP), OTHERWISE("unshare", SRULE_EPERM), EPERM_("setns"),
	EPERM_("mount"), EPERM_("umount2"), EPERM_("pivot_root"), EPERM_("chroot"),
	EPERM_("move_mount"), EPERM_("open_tree"), EPERM_("fsopen"), EPERM_("fsconfig"),
	EPERM_("fsmount"), EPERM_("fspick"), EPERM_("mount_setattr"),
	/* open_by_handle_at: the "shocker" escape from containers. */
	EPERM_("open_by_handle_at"), EPERM_("name_to_handle_at"),
	/* Reaching into other processes. */
	EPERM_("ptrace"), EPERM_("process_vm_readv"), EPERM_("process_vm_writev"),
	EPERM_("kcmp"), EPERM_("process_madvise"), EPERM_("pidfd_getfd"),
	EPERM_("migrate_pages"), EPERM_("move_pages"),
	/* Kernel attack surface. */
	EPERM_("bpf"), EPERM_("perf_event_open"), EPERM_("userfaultfd"),
	EPERM_("keyctl"), EPERM_("add_key"), EPERM_("request_key"),
	EPERM_("modify_ldt"), EPERM_("iopl"), EPERM_("ioperm"), EPERM_("lookup_dcookie"),
	EPERM_("fanotify_init"), EPERM_("fanotify_mark"), EPERM_("uselib"), EPERM_("nfsservctl"), EPERM_("_sysctl"),
	/* Host-wide state. */
	EPERM_("init_module"), EPERM_("finit_module"), EPERM_("delete_module"),
	EPERM_("kexec_load"), EPERM_("kexec_file_load"), EPERM_("reboot"),
	EPERM_("swapon"), EPERM_("swapoff"), EPERM_("acct"), EPERM_("quotactl"),
	EPERM_("quotactl_fd"), EPERM_("syslog"), EPERM_("vhangup"),
	EPERM_("settimeofday"), EPERM_("clock_settime"), EPERM_("clock_adjtime"), EPERM_("adjtimex"),
	EPERM_("sethostname"), EPERM_("setdomainname"),
	/* setgroups is denied in the user namespace already; say so early. */
	EPERM_("setgroups"),
};
const size_t seccomp_n_rules = ARRAY_SIZE(seccomp_rules);

uint32_t seccomp_rule_ret(enum seccomp_rule_action a, bool log)
{
	switch (a) {
	case SRULE_ALLOW:
		return SECCOMP_RET_ALLOW;
	case SRULE_EPERM:
		return log ? SECCOMP_RET_LOG : SECCOMP_RET_ERRNO | EPERM;
	case SRULE_ENOSYS:
		return SECCOMP_RET_ERRNO | ENOSYS;
	}
	return SECCOMP_RET_KILL_PROCESS;
}

bool seccomp_pairs_valid(const struct seccomp_rule *s)
{
	const struct seccomp_pairs *p = s->pairs;

	if (!p)
		return true;
	if (s->if_set || p->a > 5 || p->b > 5 || p->a == p->b || p->a == s->arg || p->b == s->arg || !p->mask_a ||
	    p->n == 0 || p->n > SECCOMP_MAX_PAIRS)
		return false;
	for (unsigned int i = 0; i < p->n; i++) {
		if (p->va[i] & ~p->mask_a)
			return false;
		for (unsigned int j = 0; j < i; j++)
			if (p->va[j] == p->va[i] && p->vb[j] == p->vb[i])
				return false;
	}
	return true;
}

unsigned int seccomp_pairs_a_values(const struct seccomp_pairs *p, uint32_t *as)
{
	unsigned int na = 0, i, j;

	for (i = 0; i < p->n; i++) {
		for (j = 0; j < na && as[j] != p->va[i]; j++)
			;
		if (j == na)
			as[na++] = p->va[i];
	}
	return na;
}

/* One rule: pre[0..npre), and (argument arg & mask) == value unless mask
 * is 0 (no condition of its own).  npre is at most 2 (a row's condition
 * and a pair's a). */
static int add_rule(scmp_filter_ctx ctx, uint32_t act, int nr, const char *name, const struct scmp_arg_cmp *pre,
		    unsigned int npre, unsigned int arg, uint64_t mask, uint64_t value, struct nsbox_err *err)
{
	struct scmp_arg_cmp cmp[4];
	unsigned int n = 0;
	int r;

	if (npre >= ARRAY_SIZE(cmp))
		return err_set(err, EINVAL, "seccomp: %s: %u conditions", name, npre + 1);
	for (; n < npre; n++)
		cmp[n] = pre[n];
	if (mask)
		cmp[n++] = SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, mask, value);
	r = seccomp_rule_add_exact_array(ctx, act, nr, n, n ? cmp : NULL);
	if (r < 0)
		return err_set(err, -r, "seccomp: rule for %s", name);
	return 0;
}

/* A row with if_set: its condition and argument if_set - 1 compared to 0
 * (the row itself when complement is false, else its complement: the
 * OTHERWISE action's share of the row's value). */
static int add_rule_set(scmp_filter_ctx ctx, uint32_t act, int nr, const struct seccomp_rule *s,
			bool complement, struct nsbox_err *err)
{
	enum scmp_compare op = s->if_zero != complement ? SCMP_CMP_EQ : SCMP_CMP_NE;
	struct scmp_arg_cmp cmp[2] = { SCMP_CMP(s->arg, SCMP_CMP_MASKED_EQ, s->mask, s->value),
				       SCMP_CMP(s->if_set - 1, op, 0) };
	int r;

	r = seccomp_rule_add_exact_array(ctx, act, nr, 2, cmp);
	if (r < 0)
		return err_set(err, -r, "seccomp: rule for %s", s->name);
	return 0;
}

/* Rows matching every call with pre[] and (x & fixed) == val whose bits
 * under rest match none of vals[] that agree with val on fixed: a binary
 * trie over the bits of rest, highest first, with one row per empty
 * branch.  At most n rows per bit of rest. */
static int add_not_in_trie(scmp_filter_ctx ctx, uint32_t act, int nr, const char *name,
			   const struct scmp_arg_cmp *pre, unsigned int npre, unsigned int arg, const uint64_t *vals,
			   size_t n, uint64_t fixed, uint64_t val, uint64_t rest, struct nsbox_err *err)
{
	bool live = false;
	uint64_t b;
	size_t i;
	int r;

	for (i = 0; i < n; i++)
		live |= (vals[i] & fixed) == val;
	if (!live)
		return add_rule(ctx, act, nr, name, pre, npre, arg, fixed, val, err);
	if (!rest)
		return 0;	/* a member of S: its own row decides */
	b = 1ULL << (63 - __builtin_clzll(rest));
	r = add_not_in_trie(ctx, act, nr, name, pre, npre, arg, vals, n, fixed | b, val, rest & ~b, err);
	if (r < 0)
		return r;
	return add_not_in_trie(ctx, act, nr, name, pre, npre, arg, vals, n, fixed | b, val | b, rest & ~b, err);
}

/* Add rows with action act matching every call of syscall nr with pre[]
 * whose argument `arg` satisfies (x & mask) not in S = vals[0..n).
 *
 * Let C be the mask bits on which all of S agree (pattern P there) and D
 * the rest.  x & mask is outside S exactly when x differs from P on some
 * bit of C, or its D bits equal no member's D bits.  That gives one row
 * (x & b) == (~P & b) per bit b of C, and for D the empty branches of a
 * trie over S's D bits (add_not_in_trie); none of them matches a member
 * of S. */
static int add_not_in(scmp_filter_ctx ctx, uint32_t act, int nr, const char *name, const struct scmp_arg_cmp *pre,
		      unsigned int npre, unsigned int arg, uint64_t mask, const uint64_t *vals, size_t n,
		      struct nsbox_err *err)
{
	uint64_t common = mask, pattern, diff;
	size_t i;
	int r;

	for (i = 1; i < n; i++)
		common &= ~(vals[i] ^ vals[0]);
	pattern = vals[0] & common;
	diff = mask & ~common;
	for (i = 0; i < 64; i++) {
		uint64_t b = 1ULL << i;

		if (!(common & b))
			continue;
		r = add_rule(ctx, act, nr, name, pre, npre, arg, b, ~pattern & b, err);
		if (r < 0)
			return r;
	}
	if (!diff)
		return 0;
	return add_not_in_trie(ctx, act, nr, name, pre, npre, arg, vals, n, 0, 0, diff, err);
}

/* A row with pairs: one rule per pair (complement false), or its
 * complement, the OTHERWISE action's share of the row's value: a not
 * among the pairs' a values, or a one of them and b not among the b
 * values paired with it. */
static int add_rule_pairs(scmp_filter_ctx ctx, uint32_t act, int nr, const struct seccomp_rule *s, bool complement,
			  struct nsbox_err *err)
{
	const struct seccomp_pairs *p = s->pairs;
	struct scmp_arg_cmp pre[2] = { SCMP_CMP(s->arg, SCMP_CMP_MASKED_EQ, s->mask, s->value) };
	uint64_t as[SECCOMP_MAX_PAIRS] = { 0 }, bs[SECCOMP_MAX_PAIRS];
	uint32_t a32[SECCOMP_MAX_PAIRS];
	size_t na, nb, i, j;
	int r;

	if (!complement) {
		for (i = 0; i < p->n; i++) {
			pre[1] = SCMP_CMP(p->a, SCMP_CMP_MASKED_EQ, p->mask_a, p->va[i]);
			if ((r = add_rule(ctx, act, nr, s->name, pre, 2, p->b, LOW32, p->vb[i], err)) < 0)
				return r;
		}
		return 0;
	}
	na = seccomp_pairs_a_values(p, a32);
	for (i = 0; i < na; i++)
		as[i] = a32[i];
	r = add_not_in(ctx, act, nr, s->name, pre, 1, p->a, p->mask_a, as, na, err);
	for (i = 0; r == 0 && i < na; i++) {
		pre[1] = SCMP_CMP(p->a, SCMP_CMP_MASKED_EQ, p->mask_a, as[i]);
		for (nb = 0, j = 0; j < p->n; j++)
			if (p->va[j] == as[i])
				bs[nb++] = p->vb[j];
		r = add_not_in(ctx, act, nr, s->name, pre, 2, p->b, LOW32, bs, nb, err);
	}
	return r;
}

/* Add rows with action act matching every call of syscall nr that its
 * SRULE_MASKED_EQ rows (all comparing one argument under one mask) miss:
 * values in none of them, and a row's value whose other argument (if_set)
 * or pairs miss. */
static int add_otherwise(scmp_filter_ctx ctx, uint32_t act, int nr, const char *name, struct nsbox_err *err)
{
	uint64_t vals[SECCOMP_MAX_ROWS], mask = 0;
	unsigned int arg = 0;
	size_t n = 0, i;
	int r;

	for (i = 0; i < seccomp_n_rules; i++) {
		const struct seccomp_rule *s = &seccomp_rules[i];

		if (strcmp(s->name, name) != 0 || s->cmp != SRULE_MASKED_EQ)
			continue;
		if (n == ARRAY_SIZE(vals) || (n && (s->arg != arg || s->mask != mask)) || s->arg > 5 ||
		    (s->value & ~s->mask))
			return err_set(err, EINVAL, "seccomp: %s: rows for OTHERWISE must compare one "
					       "argument under one mask", name);
		arg = s->arg;
		mask = s->mask;
		vals[n++] = s->value;
		/* The row's value with its other argument zero (non-zero for
		 * if_zero), or with no pair of its own, is OTHERWISE's too:
		 * add_not_in below leaves the value out. */
		if (s->if_set && (r = add_rule_set(ctx, act, nr, s, true, err)) < 0)
			return r;
		if (s->pairs && (r = add_rule_pairs(ctx, act, nr, s, true, err)) < 0)
			return r;
	}
	if (n == 0 || mask == 0)
		return err_set(err, EINVAL, "seccomp: %s: OTHERWISE without conditional rows", name);
	return add_not_in(ctx, act, nr, name, NULL, 0, arg, mask, vals, n, err);
}

static int add_table(scmp_filter_ctx ctx, const struct nsbox_policy *p, uint32_t def_act,
		     struct nsbox_err *err)
{
	size_t i;
	int r;

	for (i = 0; i < seccomp_n_rules; i++) {
		const struct seccomp_rule *s = &seccomp_rules[i];
		/* libseccomp's SCMP_ACT_* values are the kernel's. */
		uint32_t act = seccomp_rule_ret(s->action, p && p->seccomp == SECCOMP_LOG);
		int nr;

		/* Fail loudly: a misspelt name would silently become ENOSYS. */
		nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, s->name);
		if (nr < 0)
			return err_set(err, EINVAL, "seccomp: unknown x86_64 syscall \"%s\"", s->name);
		/* libseccomp refuses (EACCES) rules that repeat the default
		 * action; the default already does what the row says. */
		if (act == def_act)
			continue;

		switch (s->cmp) {
		case SRULE_ANY:
			r = add_rule(ctx, act, nr, s->name, NULL, 0, 0, 0, 0, err);
			break;
		case SRULE_MASKED_EQ:
			if (s->arg > 5 || s->mask == 0 || s->if_set > 6 || s->if_set == s->arg + 1 ||
			    !seccomp_pairs_valid(s))
				return err_set(err, EINVAL, "seccomp: %s: bad condition", s->name);
			r = s->if_set  ? add_rule_set(ctx, act, nr, s, false, err)
			    : s->pairs ? add_rule_pairs(ctx, act, nr, s, false, err)
				       : add_rule(ctx, act, nr, s->name, NULL, 0, s->arg, s->mask, s->value, err);
			break;
		case SRULE_OTHERWISE:
			r = add_otherwise(ctx, act, nr, s->name, err);
			break;
		default:
			return err_set(err, EINVAL, "seccomp: %s: bad row", s->name);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

static int export_bpf(scmp_filter_ctx ctx, struct seccomp_prog *out, struct nsbox_err *err)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ struct sock_filter *insns = NULL;
	struct stat st;
	ssize_t n;
	int r;

	/* libseccomp 2.5 exports only to an fd. */
	fd = memfd_create("nsbox-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return err_sys(err, "seccomp: memfd_create");
	r = seccomp_export_bpf(ctx, fd);
	if (r < 0)
		return err_set(err, -r, "seccomp: seccomp_export_bpf");
	if (fstat(fd, &st) < 0)
		return err_sys(err, "seccomp: fstat");
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
	    st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS)
		return err_set(err, E2BIG, "seccomp: bad BPF program size %lld", (long long)st.st_size);
	insns = malloc(st.st_size);
	if (!insns)
		return err_sys(err, "seccomp: malloc");
	n = pread(fd, insns, st.st_size, 0);
	if (n < 0)
		return err_sys(err, "seccomp: read back BPF");
	if (n != st.st_size)
		return err_set(err, EIO, "seccomp: short read of BPF");
	out->insns = TAKE_PTR(insns);
	out->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
	return 0;
}

int seccomp_prog_build(const struct nsbox_policy *p, struct seccomp_prog *out, struct nsbox_err *err)
{
	bool log = p && p->seccomp == SECCOMP_LOG;
	uint32_t def_act = log ? SCMP_ACT_LOG : SCMP_ACT_ERRNO(SECCOMP_RULES_DEFAULT_ERRNO);
	scmp_filter_ctx ctx;
	int r;

	/* libseccomp gates KILL_PROCESS and LOG on the API level it detects
	 * from the running kernel.  We only export the program, so the
	 * detection is beside the point (and fails under valgrind); a kernel
	 * older than 4.14 reads both actions as "kill", which fails closed. */
	if (seccomp_api_get() < 3 && seccomp_api_set(3) < 0)
		return err_set(err, EINVAL, "seccomp: libseccomp API level 3 unavailable");
	ctx = seccomp_init(def_act);
	if (!ctx)
		return err_set(err, ENOMEM, "seccomp: seccomp_init");
	/* Only the native ABI: the i386 and x32 entry points have their own
	 * numbers and histories of bugs (CVE-2009-0835, CVE-2014-0038).  Kill,
	 * also in log mode. */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0) {
		err_set(err, -r, "seccomp: set bad-arch action");
		goto out;
	}
	/* The jail sets no_new_privs itself, right before loading. */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	if (r < 0) {
		err_set(err, -r, "seccomp: clear NNP attribute");
		goto out;
	}
	/* A binary tree over syscall numbers instead of a linear list: every
	 * syscall the sandbox makes runs this filter. */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (r < 0) {
		err_set(err, -r, "seccomp: binary tree optimisation");
		goto out;
	}
	r = add_table(ctx, p, def_act, err);
	if (r < 0)
		goto out;
	r = export_bpf(ctx, out, err);
out:
	seccomp_release(ctx);
	return r < 0 ? -1 : 0;
}

void seccomp_prog_free(struct seccomp_prog *prog)
{
	if (!prog)
		return;
	free(prog->insns);
	prog->insns = NULL;
	prog->len = 0;
}

/* Classic BPF as seccomp accepts it (kernel/seccomp.c seccomp_check_filter,
 * net/core/filter.c): loads from struct seccomp_data, scratch memory,
 * ALU, forward jumps and returns.  Anything else fails closed. */
uint32_t seccomp_prog_eval(const struct seccomp_prog *prog, const struct seccomp_data *d)
{
	uint32_t A = 0, X = 0, mem[BPF_MEMWORDS] = { 0 };
	size_t pc = 0;

	if (!prog || !prog->insns || !d)
		return SECCOMP_RET_KILL_PROCESS;
	while (pc < prog->len) {
		const struct sock_filter *f = &prog->insns[pc++];
		uint32_t k = f->k, src;

		switch (BPF_CLASS(f->code)) {
		case BPF_LD:
			if (f->code == (BPF_LD | BPF_W | BPF_ABS)) {
				if (k % 4 || k > sizeof(*d) - 4)
					return SECCOMP_RET_KILL_PROCESS;
				memcpy(&A, (const char *)d + k, 4);
			} else if (f->code == (BPF_LD | BPF_W | BPF_LEN)) {
				A = sizeof(*d);
			} else if (f->code == (BPF_LD | BPF_IMM)) {
				A = k;
			} else if (f->code == (BPF_LD | BPF_MEM) && k < BPF_MEMWORDS) {
				A = mem[k];
			} else {
				return SECCOMP_RET_KILL_PROCESS;
			}
			break;
		case BPF_LDX:
			if (f->code == (BPF_LDX | BPF_W | BPF_LEN))
				X = sizeof(*d);
			else if (f->code == (BPF_LDX | BPF_IMM))
				X = k;
			else if (f->code == (BPF_LDX | BPF_MEM) && k < BPF_MEMWORDS)
				X = mem[k];
			else
				return SECCOMP_RET_KILL_PROCESS;
			break;
		case BPF_ST:
			if (f->code != BPF_ST || k >= BPF_MEMWORDS)
				return SECCOMP_RET_KILL_PROCESS;
			mem[k] = A;
			break;
		case BPF_STX:
			if (f->code != BPF_STX || k >= BPF_MEMWORDS)
				return SECCOMP_RET_KILL_PROCESS;
			mem[k] = X;
			break;
		case BPF_ALU:
			src = BPF_SRC(f->code) == BPF_X ? X : k;
			switch (BPF_OP(f->code)) {
			case BPF_ADD: A += src; break;
			case BPF_SUB: A -= src; break;
			case BPF_MUL: A *= src; break;
			case BPF_DIV:
				if (!src)
					return 0;	/* the kernel returns 0 (kill) */
				A /= src;
				break;
			case BPF_MOD:
				if (!src)
					return 0;
				A %= src;
				break;
			case BPF_OR: A |= src; break;
			case BPF_AND: A &= src; break;
			case BPF_XOR: A ^= src; break;
			case BPF_LSH: A = src < 32 ? A << src : 0; break;
			case BPF_RSH: A = src < 32 ? A >> src : 0; break;
			case BPF_NEG: A = -A; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			break;
		case BPF_JMP: {
			bool t;

			if (BPF_OP(f->code) == BPF_JA) {
				if (k >= prog->len - pc)
					return SECCOMP_RET_KILL_PROCESS;
				pc += k;
				break;
			}
			src = BPF_SRC(f->code) == BPF_X ? X : k;
			switch (BPF_OP(f->code)) {
			case BPF_JEQ: t = A == src; break;
			case BPF_JGT: t = A > src; break;
			case BPF_JGE: t = A >= src; break;
			case BPF_JSET: t = (A & src) != 0; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			pc += t ? f->jt : f->jf;
			break;
		}
		case BPF_RET:
			if (BPF_RVAL(f->code) == BPF_K)
				return k;
			if (BPF_RVAL(f->code) == BPF_A)
				return A;
			return SECCOMP_RET_KILL_PROCESS;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				X = A;
			else
				A = X;
			break;
		default:
			return SECCOMP_RET_KILL_PROCESS;
		}
	}
	/* Fell off the end: the kernel rejects such a program. */
	return SECCOMP_RET_KILL_PROCESS;
}
