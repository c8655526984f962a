/* The filters compiled into the binary must equal a fresh compile of the
 * rule table with nsbox's compiler, and act as libseccomp's compile of the
 * same table does: the same action for every syscall number, architecture
 * and the argument values the table's conditions can tell apart. */
#include <errno.h>
#include <linux/audit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <seccomp.h>

#include "seccomp-prebuilt.h"
#include "seccomp-rules.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rand64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

struct pair {
	const struct seccomp_prog *ref, *ours;
	size_t checked, bad;
};

static void check(struct pair *p, const struct seccomp_data *d)
{
	uint32_t a = seccomp_prog_eval(p->ref, d), b = seccomp_prog_eval(p->ours, d);

	p->checked++;
	if (a != b && p->bad++ < 10)
		printf("# arch %#x nr %d args %#llx %#llx %#llx %#llx: libseccomp %#x, ours %#x\n", d->arch, d->nr,
		       (unsigned long long)d->args[0], (unsigned long long)d->args[1], (unsigned long long)d->args[2],
		       (unsigned long long)d->args[3], a, b);
}

/* Values that tell the table's conditions apart: every row's value, with
 * each of its mask's bits flipped and with bits outside the mask set, plus
 * 0, ~0, single bits and random words. */
static size_t interesting(uint64_t *v, size_t cap)
{
	size_t n = 0;

#define ADD(x)                        \
	do {                          \
		if (n < cap)          \
			v[n++] = (x); \
	} while (0)
	ADD(0);
	ADD(~0ULL);
	ADD(0xffffffffULL);
	ADD(0xffffffff00000000ULL);
	for (int b = 0; b < 64; b++)
		ADD(1ULL << b);
	for (size_t i = 0; i < seccomp_n_rules; i++) {
		const struct seccomp_rule *s = &seccomp_rules[i];

		if (s->cmp != SRULE_MASKED_EQ)
			continue;
		ADD(s->value);
		ADD(s->value | ~s->mask);
		ADD(s->value | (~s->mask & 0xffffffff00000000ULL));
		ADD(s->value | (rand64() & ~s->mask));
		for (int b = 0; b < 64; b++)
			if (s->mask & (1ULL << b))
				ADD(s->value ^ (1ULL << b));
	}
	for (int i = 0; i < 64; i++)
		ADD(rand64());
#undef ADD
	return n;
}

static void equivalent(const struct seccomp_prog *ref, const struct seccomp_prog *ours, const char *mode)
{
	static const uint32_t arches[] = { AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, 0 };
	static const uint32_t odd_nrs[] = { 0x3fffffff, 0x40000000, 0x40000001, 0x40000000 + 59,
					    0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff };
	static uint64_t vals[4096];
	struct pair p = { ref, ours, 0, 0 };
	struct seccomp_data d;
	size_t nv = interesting(vals, sizeof(vals) / sizeof(vals[0]));

	/* Every number a syscall table could use, every architecture, with
	 * zero and random arguments. */
	for (size_t a = 0; a < sizeof(arches) / sizeof(arches[0]); a++) {
		for (uint32_t nr = 0; nr < 2048 + sizeof(odd_nrs) / sizeof(odd_nrs[0]); nr++) {
			memset(&d, 0, sizeof(d));
			d.arch = arches[a];
			d.nr = (int)(nr < 2048 ? nr : odd_nrs[nr - 2048]);
			check(&p, &d);
			for (int k = 0; k < 6; k++)
				d.args[k] = rand64();
			check(&p, &d);
		}
	}
	/* Each argument of each syscall the table names, over the values its
	 * conditions can tell apart, the other arguments random. */
	for (size_t i = 0; i < seccomp_n_rules; i++) {
		int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, seccomp_rules[i].name);

		if (nr < 0 || seccomp_rules[i].cmp == SRULE_ANY)
			continue;
		for (int k = 0; k < 6; k++) {
			for (size_t j = 0; j < nv; j++) {
				memset(&d, 0, sizeof(d));
				d.arch = AUDIT_ARCH_X86_64;
				d.nr = nr;
				for (int o = 0; o < 6; o++)
					d.args[o] = o == k ? vals[j] : rand64();
				check(&p, &d);
			}
		}
	}
	ok(p.bad == 0 && p.checked > 20000, "%s: nsbox's program acts as libseccomp's on %zu inputs (%zu differ)", mode,
	   p.checked, p.bad);
}

int main(void)
{
	for (int mode = SECCOMP_ENFORCE; mode <= SECCOMP_LOG; mode++) {
		const char *name = mode == SECCOMP_LOG ? "log" : "enforce";
		struct nsbox_policy p = { .seccomp = mode };
		struct seccomp_prog fresh, pre, ref;
		struct nsbox_err err = { 0 };

		ok(seccomp_prog_compile(&p, &fresh, &err) == 0, "%s: compile: %s", name, err.msg);
		seccomp_prog_prebuilt(mode, &pre);
		ok(pre.len == fresh.len && pre.len > 0, "%s: same length (%u, %u)", name, pre.len, fresh.len);
		ok(pre.len == fresh.len && memcmp(pre.insns, fresh.insns, pre.len * sizeof(*pre.insns)) == 0,
		   "%s: same instructions", name);
		ok(seccomp_prog_build(&p, &ref, &err) == 0, "%s: libseccomp build: %s", name, err.msg);
		printf("# %s: %u instructions, libseccomp's %u\n", name, fresh.len, ref.len);
		ok(fresh.len * 2 < ref.len, "%s: under half of libseccomp's length (%u < %u / 2)", name, fresh.len,
		   ref.len);
		equivalent(&ref, &pre, name);
		seccomp_prog_free(&fresh);
		seccomp_prog_free(&ref);
	}
	tap_done();
}
