/* bpf(2): map creation and a socket filter program load (unprivileged
 * eBPF has been the root of many kernel exploits; CVE-2021-3490). */
#include <linux/bpf.h>
#include "escape.h"

int main(void)
{
	union bpf_attr a;
	struct bpf_insn prog[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};

	memset(&a, 0, sizeof(a));
	a.map_type = BPF_MAP_TYPE_ARRAY;
	a.key_size = 4;
	a.value_size = 8;
	a.max_entries = 1;
	must_fail_with("BPF_MAP_CREATE", syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof(a)), EPERM);
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
	a.insns = (unsigned long)prog;
	a.insn_cnt = 2;
	a.license = (unsigned long)"GPL";
	must_fail_with("BPF_PROG_LOAD", syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof(a)), EPERM);
	BLOCKED("bpf() is denied");
}
