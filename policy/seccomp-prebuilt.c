#include "seccomp-prebuilt.h"

#include "seccomp-bpf.gen.h"

void seccomp_prog_prebuilt(enum policy_seccomp mode, struct seccomp_prog *out)
{
	const struct sock_filter *f = mode == SECCOMP_LOG ? prebuilt_log : prebuilt_enforce;

	out->insns = (struct sock_filter *)f;
	out->len = mode == SECCOMP_LOG ? sizeof(prebuilt_log) / sizeof(prebuilt_log[0])
				       : sizeof(prebuilt_enforce) / sizeof(prebuilt_enforce[0]);
}
