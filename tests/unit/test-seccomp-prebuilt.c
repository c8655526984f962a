/* The filters compiled into the binary must equal a fresh compile of the
 * rule table with nsbox's compiler, and act as libseccomp's compile of the
 * same table does: the same action for every syscall number, architecture
 * and the argument values the table's conditions can tell apart. */
#include <errno.h>
#include <linux/audit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <seccomp.h>

#include "seccomp-prebuilt.h"
#include "seccomp-rules.h"
#include "tap.h"

#define LOW32_MASK 0xffffffffULL

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
		for (unsigned int k = 0; s->pairs && k < s->pairs->n; k++) {
			ADD(s->pairs->va[k]);
			ADD(s->pairs->va[k] | (~(uint64_t)s->pairs->mask_a & ~0xffffULL));
			ADD(s->pairs->vb[k]);
			ADD(s->pairs->vb[k] | 0xffffffff00000000ULL);
		}
	}
	for (int i = 0; i < 64; i++)
		ADD(rand64());
#undef ADD
	return n;
}

/* A call of syscall nr matching row s's own condition (any bits outside
 * its mask), every other argument random. */
static void row_call(struct seccomp_data *d, int nr, const struct seccomp_rule *s)
{
	memset(d, 0, sizeof(*d));
	d->arch = AUDIT_ARCH_X86_64;
	d->nr = nr;
	for (int o = 0; o < 6; o++)
		d->args[o] = rand64();
	d->args[s->arg] = s->value | (rand64() & ~s->mask);
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
	/* A row that matches only with another argument non-zero (or zero): its value
	 * (any bits outside the mask) with that argument zero and over the
	 * values, and that argument zero with the first over the values. */
	for (size_t i = 0; i < seccomp_n_rules; i++) {
		const struct seccomp_rule *s = &seccomp_rules[i];
		int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, s->name);

		if (nr < 0 || s->cmp != SRULE_MASKED_EQ || !s->if_set)
			continue;
		for (size_t j = 0; j < nv; j++) {
			row_call(&d, nr, s);
			d.args[s->if_set - 1] = vals[j];
			check(&p, &d);
			d.args[s->if_set - 1] = 0;
			check(&p, &d);
			d.args[s->arg] = vals[j];
			check(&p, &d);
		}
	}
	/* A row with pairs: its value with each pair, each pair's a value with
	 * every pair's b value and one bit off each, bits outside the masks
	 * set, and both over the values. */
	for (size_t i = 0; i < seccomp_n_rules; i++) {
		const struct seccomp_rule *s = &seccomp_rules[i];
		const struct seccomp_pairs *q = s->pairs;
		int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, s->name);

		if (nr < 0 || s->cmp != SRULE_MASKED_EQ || !q)
			continue;
		for (unsigned int x = 0; x < q->n; x++) {
			for (unsigned int y = 0; y < q->n; y++) {
				for (int bit = -1; bit < 64; bit++) {
					uint64_t flip = bit < 0 ? 0 : 1ULL << bit;

					row_call(&d, nr, s);
					d.args[q->a] = (q->va[x] | (rand64() & ~(uint64_t)q->mask_a)) ^ flip;
					d.args[q->b] = q->vb[y] | (rand64() & 0xffffffff00000000ULL);
					check(&p, &d);
					d.args[q->a] = q->va[x] | (rand64() & ~(uint64_t)q->mask_a);
					d.args[q->b] = q->vb[y] ^ flip;
					check(&p, &d);
				}
			}
			for (size_t j = 0; j < nv; j++) {
				memset(&d, 0, sizeof(d));
				d.arch = AUDIT_ARCH_X86_64;
				d.nr = nr;
				d.args[s->arg] = s->value;
				d.args[q->a] = q->va[x];
				d.args[q->b] = vals[j];
				check(&p, &d);
				d.args[q->a] = vals[j];
				d.args[q->b] = q->vb[x];
				check(&p, &d);
			}
		}
	}
	ok(p.bad == 0 && p.checked > 20000, "%s: nsbox's program acts as libseccomp's on %zu inputs (%zu differ)", mode,
	   p.checked, p.bad);
}

/* ---- synthetic tables: the compiler's paths the real table does not take
 * (masks with high-word bits, programs longer than a conditional jump
 * reaches, OTHERWISE before its rows), against the table's meaning read
 * directly, and loaded into the kernel. */

#define SYN_NR 460

struct syn {
	struct seccomp_rule rows[SYN_NR * 10];
	struct seccomp_pairs pairs[SYN_NR * 10]; /* rows[i]'s, when it has them */
	int nrs[SYN_NR * 10];			 /* rows[i]'s syscall number */
	size_t n;
	char *names[SYN_NR];
};

/* What the table says for d, read row by row. */
static uint32_t table_says(const struct syn *t, bool log, const struct seccomp_data *d)
{
	uint32_t def = log ? SECCOMP_RET_LOG : SECCOMP_RET_ERRNO | ENOSYS, other = def;
	bool cond = false;

	if (d->arch != AUDIT_ARCH_X86_64)
		return SECCOMP_RET_KILL_PROCESS;
	if ((uint32_t)d->nr >= 0x40000000U && (uint32_t)d->nr != 0xffffffffU)
		return SECCOMP_RET_KILL_PROCESS;
	for (size_t i = 0; i < t->n; i++) {
		const struct seccomp_rule *r = &t->rows[i];

		if (t->nrs[i] != d->nr)
			continue;
		if (r->cmp == SRULE_ANY)
			return seccomp_rule_ret(r->action, log);
		if (r->cmp == SRULE_OTHERWISE) {
			other = seccomp_rule_ret(r->action, log);
			continue;
		}
		cond = true;
		if ((d->args[r->arg] & r->mask) != r->value)
			continue;
		if (r->pairs) {
			for (unsigned int k = 0; k < r->pairs->n; k++)
				if (((uint32_t)d->args[r->pairs->a] & r->pairs->mask_a) == r->pairs->va[k] &&
				    (uint32_t)d->args[r->pairs->b] == r->pairs->vb[k])
					return seccomp_rule_ret(r->action, log);
			continue; /* the value is this row's alone: OTHERWISE decides */
		}
		if (!r->if_set || (d->args[r->if_set - 1] != 0) != r->if_zero)
			return seccomp_rule_ret(r->action, log);
	}
	return cond ? other : def;
}

static uint64_t syn_mask(void)
{
	switch (rand64() % 5) {
	case 0:
		return 0xffffffffULL;
	case 1:
		return rand64() & 0xffff0000ffff0000ULL; /* both words */
	case 2:
		return rand64() & 0xffffffff00000000ULL; /* high word only */
	case 3:
		return ~0ULL;
	default:
		return (rand64() & 0xffff) | 1;
	}
}

/* Random pairs for row r: two other arguments, a mask of few or many bits,
 * 1..SECCOMP_MAX_PAIRS distinct pairs, a values often shared. */
static void syn_pairs(struct seccomp_pairs *q, struct seccomp_rule *r)
{
	static const uint32_t masks[] = { 0xf, 0xffffffffU, 0x00ff00f0U, 1 };

	q->a = (r->arg + 1 + (unsigned int)(rand64() % 5)) % 6;
	do
		q->b = (unsigned int)(rand64() % 6);
	while (q->b == q->a || q->b == r->arg);
	q->mask_a = masks[rand64() % 4];
	q->n = 0;
	for (unsigned int want = 1 + (unsigned int)(rand64() % (rand64() % 4 ? 3 : SECCOMP_MAX_PAIRS)), tries = 0;
	     q->n < want && tries < 64; tries++) {
		uint32_t va = (q->n && rand64() % 2 ? q->va[rand64() % q->n] : (uint32_t)rand64()) & q->mask_a;
		uint32_t vb = rand64() % 3 ? (uint32_t)(rand64() % 8) : (uint32_t)rand64();
		unsigned int j;

		for (j = 0; j < q->n && !(q->va[j] == va && q->vb[j] == vb); j++)
			;
		if (j < q->n)
			continue;
		q->va[q->n] = va;
		q->vb[q->n++] = vb;
	}
	r->pairs = q;
}

static void syn_make(struct syn *t)
{
	static const enum seccomp_rule_action acts[] = { SRULE_ALLOW, SRULE_EPERM, SRULE_ENOSYS };

	t->n = 0;
	for (int nr = 0; nr < SYN_NR; nr++) {
		char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
		unsigned int kind = (unsigned int)(rand64() % 20);

		t->names[nr] = name;
		if (!name)
			continue;
		/* The child that loads it must be able to exit. */
		if (strcmp(name, "exit") == 0 || strcmp(name, "exit_group") == 0)
			kind = 0;
		if (kind < 9) { /* one action for the whole syscall */
			t->rows[t->n++] = (struct seccomp_rule){ name,	    kind < 5 ? SRULE_ALLOW : acts[kind % 3],
								 SRULE_ANY, 0,
								 0,	    0 };
		} else if (kind < 14) { /* argument rows, OTHERWISE first or last or none */
			unsigned int arg = (unsigned int)(rand64() % 6), nv = 1 + (unsigned int)(rand64() % 8);
			uint64_t mask = syn_mask(), vals[8];
			int where = (int)(rand64() % 3);
			size_t k = 0;

			if (where == 0)
				t->rows[t->n++] = (struct seccomp_rule){
					name, acts[rand64() % 3], SRULE_OTHERWISE, 0, 0, 0
				};
			while (k < nv) {
				uint64_t v = rand64() & mask;
				size_t j;

				for (j = 0; j < k && vals[j] != v; j++)
					;
				if (j < k) {
					if (mask == 1 || __builtin_popcountll(mask) <= 3)
						break; /* few distinct values under this mask */
					continue;
				}
				vals[k++] = v;
				t->rows[t->n] = (struct seccomp_rule){
					name, acts[rand64() % 3], SRULE_MASKED_EQ, arg, mask, v,
					/* now and then only with another argument set, or
					 * zero */
					rand64() % 4 ? 0 : 1 + (arg + 1 + (unsigned int)(rand64() % 5)) % 6,
					rand64() % 2 == 0
				};
				/* or with pairs of two other arguments */
				if (!t->rows[t->n].if_set && rand64() % 32 == 0)
					syn_pairs(&t->pairs[t->n], &t->rows[t->n]);
				t->n++;
			}
			if (where == 1)
				t->rows[t->n++] = (struct seccomp_rule){
					name, acts[rand64() % 3], SRULE_OTHERWISE, 0, 0, 0
				};
		} /* else: no row, the default */
	}
	for (size_t i = 0; i < t->n; i++)
		t->nrs[i] = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, t->rows[i].name);
}

static void syn_free(struct syn *t)
{
	for (int nr = 0; nr < SYN_NR; nr++)
		free(t->names[nr]);
}

static bool loads(const struct seccomp_prog *pr)
{
	struct sock_fprog f = { .len = pr->len, .filter = pr->insns };
	pid_t c = fork();
	int st;

	if (c == 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &f) < 0)
			_exit(1);
		/* Straight to exit_group (allowed by every synthetic table):
		 * _exit's sanitizer hooks make calls the filter may deny. */
		for (;;)
			syscall(SYS_exit_group, 0);
	}
	return c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void synthetic(void)
{
	static struct syn t;
	size_t checked = 0, bad = 0, longest = 0, ja = 0, rejected = 0, refused = 0, too_long = 0, with_pairs = 0;

	for (int round = 0; round < 12; round++) {
		bool log = round & 1;
		struct seccomp_prog pr;
		struct nsbox_err err = { 0 };

		int r;

		/* A random table may be too long for the kernel (E2BIG, said
		 * so): another one then. */
		for (int tries = 0;; tries++) {
			memset(&err, 0, sizeof(err));
			syn_make(&t);
			r = seccomp_prog_compile_rules(t.rows, t.n, log, &pr, &err);
			if (r == 0 || err.code != E2BIG || tries == 4)
				break;
			too_long++;
			syn_free(&t);
		}
		if (r < 0) {
			printf("# synthetic table %d: %s\n", round, err.msg);
			refused++;
			syn_free(&t);
			continue;
		}
		for (size_t i = 0; i < t.n; i++)
			with_pairs += t.rows[i].pairs != NULL;
		if (pr.len > longest)
			longest = pr.len;
		for (unsigned i = 0; i < pr.len; i++)
			ja += pr.insns[i].code == (BPF_JMP | BPF_JA);
		rejected += !loads(&pr);
		for (uint32_t nr = 0; nr < SYN_NR + 40; nr++) {
			struct seccomp_data d = { .nr = (int)nr, .arch = AUDIT_ARCH_X86_64 };

			for (int k = 0; k < 24; k++) {
				for (int a = 0; a < 6; a++)
					d.args[a] = rand64();
				/* Now and then a row's own value, or one bit off it. */
				for (size_t i = 0; k % 3 && i < t.n; i++)
					if (t.rows[i].cmp == SRULE_MASKED_EQ && t.nrs[i] == (int)nr && rand64() % 2) {
						d.args[t.rows[i].arg] = ((d.args[t.rows[i].arg] & ~t.rows[i].mask) |
									 t.rows[i].value) ^
									(k % 3 == 2 ? 1ULL << (rand64() % 64) : 0);
						/* one of its pairs, or one bit off one */
						if (t.rows[i].pairs && rand64() % 4) {
							const struct seccomp_pairs *q = t.rows[i].pairs;
							unsigned int x = (unsigned int)(rand64() % q->n);

							d.args[q->a] = (d.args[q->a] & ~(uint64_t)q->mask_a) | q->va[x];
							d.args[q->b] = (d.args[q->b] & ~0xffffffffULL) |
								       q->vb[rand64() % 2 ? x : rand64() % q->n];
							if (rand64() % 3 == 0)
								d.args[rand64() % 2 ? q->a : q->b] ^= 1ULL
												      << (rand64() %
													  40);
						}
						/* the other argument zero, or one word of it */
						if (t.rows[i].if_set && rand64() % 2)
							d.args[t.rows[i].if_set - 1] &= rand64() % 3   ? 0
											: rand64() % 2 ? 0xffffffffULL
												       : ~0xffffffffULL;
					}
				checked++;
				if (seccomp_prog_eval(&pr, &d) != table_says(&t, log, &d) && bad++ < 10)
					printf("# synthetic %d: nr %u args[0..1] %#llx %#llx: program %#x, table %#x\n",
					       round, nr, (unsigned long long)d.args[0], (unsigned long long)d.args[1],
					       seccomp_prog_eval(&pr, &d), table_says(&t, log, &d));
			}
		}
		seccomp_prog_free(&pr);
		syn_free(&t);
	}
	ok(refused == 0, "synthetic tables all compile (%zu refused; %zu too long for the kernel, made again)", refused,
	   too_long);
	ok(with_pairs > 10, "synthetic tables have rows with pairs (%zu)", with_pairs);
	ok(bad == 0 && checked > 100000,
	   "synthetic tables: the program does what the table says on %zu inputs (%zu differ)", checked, bad);
	ok(longest > 255 && ja > 0, "synthetic tables reach the long paths (longest %zu instructions, %zu JA)", longest,
	   ja);
	ok(rejected == 0, "the kernel loads every synthetic program (%zu refused)", rejected);
}

/* Tables the compiler can't express exactly are refused by name. */
static void refusals(void)
{
	/* a on the row's argument; a value outside mask_a; no pair; a pair
	 * twice; an argument past 5; a good one beside if_set. */
	static const struct seccomp_pairs bad_pairs[] = {
		{ 0, 2, 0xf, 1, { 1 }, { 0 } },	      { 1, 2, 0xf, 1, { 0x10 }, { 0 } }, { 1, 2, 0xf, 0, { 0 }, { 0 } },
		{ 1, 2, 0xf, 2, { 1, 1 }, { 6, 6 } }, { 1, 6, 0xf, 1, { 1 }, { 0 } },	 { 1, 2, 0xf, 1, { 1 }, { 0 } },
	};
	static const struct {
		struct seccomp_rule rows[3];
		size_t n;
		const char *want;
	} cases[] = {
		{ { { "ioctl", SRULE_ALLOW, SRULE_ANY, 0, 0, 0 },
		    { "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 1, 0xff, 1 } },
		  2,
		  "beside an unconditional" },
		{ { { "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 1, 0xff, 1 },
		    { "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 2, 0xff, 2 } },
		  2,
		  "one argument under one mask" },
		{ { { "ioctl", SRULE_ALLOW, SRULE_OTHERWISE, 0, 0, 0 } }, 1, "OTHERWISE without conditional rows" },
		{ { { "ioctl", SRULE_ALLOW, SRULE_OTHERWISE, 0, 0, 0 },
		    { "ioctl", SRULE_EPERM, SRULE_OTHERWISE, 0, 0, 0 },
		    { "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 1, 0xff, 1 } },
		  3,
		  "two OTHERWISE rows" },
		{ { { "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 1, 0xff, 0x100 } }, 1, "bad condition" },
		{ { { "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 1, 0xff, 1, 2 } }, 1, "bad condition" },
		{ { { "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 1, 0xff, 1, 7 } }, 1, "bad condition" },
		{ { { "no_such_call", SRULE_ALLOW, SRULE_ANY, 0, 0, 0 } }, 1, "unknown x86_64 syscall" },
	};
	struct seccomp_rule first[] = { { "ioctl", SRULE_ALLOW, SRULE_OTHERWISE, 0, 0, 0 },
					{ "ioctl", SRULE_EPERM, SRULE_MASKED_EQ, 1, LOW32_MASK, 0x5412 } };
	struct seccomp_prog pr;
	struct nsbox_err err = { 0 };
	struct seccomp_data d = { .nr = 16, .arch = AUDIT_ARCH_X86_64, .args = { 0, 0x5412 } };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&err, 0, sizeof(err));
		ok(seccomp_prog_compile_rules(cases[i].rows, cases[i].n, false, &pr, &err) < 0 &&
			   strstr(err.msg, cases[i].want),
		   "refused: %s (%s)", cases[i].want, err.msg);
	}
	for (size_t i = 0; i < sizeof(bad_pairs) / sizeof(bad_pairs[0]); i++) {
		/* The last pairs are good, on a row with if_set. */
		struct seccomp_rule r = { "socket",	  SRULE_ALLOW, SRULE_MASKED_EQ, 0, 0xff, 2,
					  i == 5 ? 4 : 0, false,       &bad_pairs[i] };

		memset(&err, 0, sizeof(err));
		ok(seccomp_prog_compile_rules(&r, 1, false, &pr, &err) < 0 && strstr(err.msg, "bad condition"),
		   "refused: bad pairs %zu (%s)", i, err.msg);
	}
	memset(&err, 0, sizeof(err));
	ok(seccomp_prog_compile_rules(first, 2, false, &pr, &err) == 0, "OTHERWISE before its rows compiles: %s",
	   err.msg);
	ok(seccomp_prog_eval(&pr, &d) == (SECCOMP_RET_ERRNO | EPERM), "... and denies the row's value");
	d.args[1] = 0x5413;
	ok(seccomp_prog_eval(&pr, &d) == SECCOMP_RET_ALLOW, "... and allows the others");
	seccomp_prog_free(&pr);
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
	synthetic();
	refusals();
	tap_done();
}
