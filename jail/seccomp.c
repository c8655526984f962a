/* Loading the seccomp filter.  The program itself is built in the parent
 * (policy/seccomp-rules.c) so the child only makes two system calls. */
#include <errno.h>
#include <linux/audit.h>
#include <stddef.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/errqueue.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "seccomp-load.h"

int seccomp_apply(const struct seccomp_prog *prog, struct nsbox_err *err)
{
	struct sock_fprog fprog;

	err_step(err, "seccomp");
	if (!prog || !prog->insns || prog->len == 0)
		return err_set(err, EINVAL, "seccomp: no filter program");
	fprog.len = prog->len;
	fprog.filter = prog->insns;

	/* Required to load a filter without CAP_SYS_ADMIN, and what stops a
	 * setuid binary from running under a filter it doesn't expect
	 * (seccomp(2), prctl(2) PR_SET_NO_NEW_PRIVS). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return err_sys(err, "seccomp: prctl(PR_SET_NO_NEW_PRIVS)");
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) == 0)
		return 0;
	if (errno != ENOSYS)
		return err_sys(err, "seccomp: seccomp(SECCOMP_SET_MODE_FILTER)");
	/* Kernels before 3.17 only have the prctl interface. */
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) < 0)
		return err_sys(err, "seccomp: prctl(PR_SET_SECCOMP)");
	return 0;
}

#define PID1_ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

int seccomp_apply_pid1(struct nsbox_err *err)
{
	static struct sock_filter insns[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		PID1_ALLOW(__NR_rt_sigtimedwait),
		PID1_ALLOW(__NR_wait4),
		PID1_ALLOW(__NR_kill),
		PID1_ALLOW(__NR_sendto),
		PID1_ALLOW(__NR_exit_group),
		PID1_ALLOW(__NR_exit),
		PID1_ALLOW(__NR_rt_sigreturn),
		PID1_ALLOW(__NR_restart_syscall),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct seccomp_prog prog = { .insns = insns, .len = sizeof(insns) / sizeof(insns[0]) };

	return seccomp_apply(&prog, err);
}

int seccomp_apply_socket_rules(bool share_net, bool no_unix_names, struct nsbox_err *err)
{
	enum { ALLOW = 27, UNIX, NETLINK, FAKE, DENY };
#define JMP_TO(from, to) ((to) - (from)-1)
	struct sock_filter insns[] = {
		/* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		/* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, JMP_TO(1, ALLOW)),
		/* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		/* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, JMP_TO(3, 7)),
		/* 4: the family */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		/* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, JMP_TO(5, UNIX), 0),
		/* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, JMP_TO(6, NETLINK), JMP_TO(6, ALLOW)),
		/* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, 0, JMP_TO(7, 13)),
		/* 8 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		/* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, JMP_TO(9, ALLOW)),
		/* 10: the type */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		/* 11: without SOCK_CLOEXEC... */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf),
		/* 12 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOCK_STREAM, JMP_TO(12, ALLOW), JMP_TO(12, UNIX)),
		/* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setsockopt, 0, JMP_TO(13, ALLOW)),
		/* 14: the level */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		/* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOL_IP, 0, JMP_TO(15, 19)),
		/* 16: the name */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		/* 17 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IP_RECVERR, JMP_TO(17, FAKE), 0),
		/* 18 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IP_RECVERR_RFC4884, JMP_TO(18, FAKE), JMP_TO(18, ALLOW)),
		/* 19 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOL_IPV6, 0, JMP_TO(19, 23)),
		/* 20 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		/* 21 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPV6_RECVERR, JMP_TO(21, FAKE), 0),
		/* 22 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPV6_RECVERR_RFC4884, JMP_TO(22, FAKE), JMP_TO(22, ALLOW)),
		/* 23 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOL_SOCKET, 0, JMP_TO(23, ALLOW)),
		/* 24 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		/* 25 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SO_TIMESTAMPING_OLD, JMP_TO(25, DENY), 0),
		/* 26 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SO_TIMESTAMPING_NEW, JMP_TO(26, DENY), JMP_TO(26, ALLOW)),
		[ALLOW] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		[UNIX] = BPF_STMT(BPF_RET | BPF_K,
				  no_unix_names ? SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA) : SECCOMP_RET_ALLOW),
		[NETLINK] = BPF_STMT(BPF_RET | BPF_K,
				     share_net ? SECCOMP_RET_ALLOW : SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		[FAKE] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0),
		[DENY] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
	};
#undef JMP_TO
	struct seccomp_prog prog = { .insns = insns, .len = sizeof(insns) / sizeof(insns[0]) };

	return seccomp_apply(&prog, err);
}
