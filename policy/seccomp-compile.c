/* nsbox's own compiler of the rule table to classic BPF.
 *
 * Why not libseccomp's program: the kernel converts every loaded filter to
 * eBPF and JITs it, in the sandbox's start path, and that cost grows with the
 * program's length.  libseccomp's binary tree (SCMP_FLTATR_CTL_OPTIMIZE=2)
 * spends 825 instructions on this table: it tests one syscall number per
 * node and repeats the argument checks' loads.  Most of the table is runs of
 * consecutive numbers with one action (read..close allowed, the mount family
 * denied, ...), so a binary search over those runs, with the argument checks
 * at the leaves of the few syscalls that have them, needs about a quarter of
 * that.  Measured (make bench): loading the filter went from ~155 us to ~59 us
 * (201 instructions; the README's design notes).
 *
 * libseccomp stays the reference: tests/unit/test-seccomp-prebuilt.c runs
 * both programs over every syscall number, the architectures and the
 * argument values that matter and requires the same action for each.
 *
 * The program:
 *   ld arch; jeq AUDIT_ARCH_X86_64 else kill
 *   ld nr;   nr >= 0x40000000 (x32) and nr != -1: kill
 *   binary search over [lo, hi) runs of numbers -> a leaf:
 *     ret ACTION, or for a syscall with argument rows:
 *     ld the argument's word(s); and mask; jeq value -> ret its action ...;
 *     ret the OTHERWISE action (the default when there is none).  A row
 *     with pairs (socket's inet type and protocol) checks them after its
 *     value: emit_pairs. */
#include <errno.h>
#include <linux/audit.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "seccomp-rules.h"
#include "util.h"

#define X32_SYSCALL_BIT 0x40000000U
/* Highest x86_64 syscall number the table may name, plus one. */
#define NR_LIMIT 1024
/* Argument rows per syscall. */
#define MAX_VALS SECCOMP_MAX_ROWS

struct leaf {
	bool complex;
	uint32_t ret; /* the action, when !complex */
	/* when complex: (arg & mask) == vals[i] -> rets[i], else other; a row
	 * with sets[i] (1 + an argument's index) only when that argument is
	 * non-zero (zero when zeros[i]), else other */
	unsigned int arg, n, sets[MAX_VALS];
	bool zeros[MAX_VALS];
	const struct seccomp_pairs *pairs[MAX_VALS];
	uint64_t mask, vals[MAX_VALS];
	uint32_t rets[MAX_VALS], other;
};

struct code {
	struct sock_filter *insns;
	size_t len, cap;
	bool oom;
};

static void emit(struct code *c, uint16_t code, uint8_t jt, uint8_t jf, uint32_t k)
{
	if (c->len == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct sock_filter *n = realloc(c->insns, cap * sizeof(*n));

		if (!n) {
			c->oom = true;
			return;
		}
		c->insns = n;
		c->cap = cap;
	}
	c->insns[c->len++] = (struct sock_filter){ code, jt, jf, k };
}

static void append(struct code *c, const struct code *d)
{
	for (size_t i = 0; i < d->len && !c->oom; i++)
		emit(c, d->insns[i].code, d->insns[i].jt, d->insns[i].jf, d->insns[i].k);
	if (d->oom)
		c->oom = true;
}

static bool leaf_eq(const struct leaf *a, const struct leaf *b)
{
	return !a->complex && !b->complex && a->ret == b->ret;
}

#define ARG_LO(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i)))
#define ARG_HI(i) (ARG_LO(i) + 4)

/* One word of the argument: ld; and mask unless all ones. */
static void emit_word(struct code *c, uint32_t off, uint32_t mask)
{
	emit(c, BPF_LD | BPF_W | BPF_ABS, 0, 0, off);
	if (mask != 0xffffffffU)
		emit(c, BPF_ALU | BPF_AND | BPF_K, 0, 0, mask);
}

/* What a row with pairs runs once its own condition matched: per distinct
 * a value, ld a; [and;] jeq a -> (ld b; jeq b1 -> ret act; ...; ret other),
 * else the next; ret other after the last.  Returns its length; emits it
 * when c is not NULL. */
static unsigned int emit_pairs(struct code *c, const struct seccomp_pairs *p, uint32_t act, uint32_t other)
{
	uint32_t as[SECCOMP_MAX_PAIRS];
	unsigned int na = seccomp_pairs_a_values(p, as), len = 1, g, i;
	uint8_t and_len = p->mask_a == 0xffffffffU ? 0 : 1;

	for (g = 0; g < na; g++) {
		unsigned int k = 0, j = 0;

		for (i = 0; i < p->n; i++)
			k += p->va[i] == as[g];
		len += 1 + and_len + 1 + 1 + k + 2;
		if (!c)
			continue;
		emit_word(c, ARG_LO(p->a), p->mask_a);
		emit(c, BPF_JMP | BPF_JEQ | BPF_K, 0, (uint8_t)(k + 3), as[g]);
		emit(c, BPF_LD | BPF_W | BPF_ABS, 0, 0, ARG_LO(p->b));
		for (i = 0; i < p->n; i++)
			if (p->va[i] == as[g])
				emit(c, BPF_JMP | BPF_JEQ | BPF_K, (uint8_t)(k - ++j + 1), 0, p->vb[i]);
		emit(c, BPF_RET | BPF_K, 0, 0, other);
		emit(c, BPF_RET | BPF_K, 0, 0, act);
	}
	if (c)
		emit(c, BPF_RET | BPF_K, 0, 0, other);
	return len;
}

/* The argument checks of one syscall.  The rows are disjoint (distinct
 * values under one mask), so their order does not matter. */
static void emit_complex(struct code *c, const struct leaf *l)
{
	uint32_t mhi = (uint32_t)(l->mask >> 32), mlo = (uint32_t)l->mask;
	unsigned int i;
	bool sets = false;

	for (i = 0; i < l->n; i++)
		sets |= l->sets[i] != 0 || l->pairs[i];
	if (mhi == 0 && !sets) {
		/* ld; and; jeq v0 -> R(v0); ...; then the returns, other first,
		 * each action once. */
		uint32_t pool[MAX_VALS + 1] = { l->other };
		unsigned int np = 1, j;

		for (i = 0; i < l->n; i++) {
			for (j = 0; j < np && pool[j] != l->rets[i]; j++)
				;
			if (j == np)
				pool[np++] = l->rets[i];
		}
		emit_word(c, ARG_LO(l->arg), mlo);
		for (i = 0; i < l->n; i++) {
			for (j = 0; pool[j] != l->rets[i]; j++)
				;
			emit(c, BPF_JMP | BPF_JEQ | BPF_K, (uint8_t)(l->n - 1 - i + j), 0, (uint32_t)l->vals[i]);
		}
		for (j = 0; j < np; j++)
			emit(c, BPF_RET | BPF_K, 0, 0, pool[j]);
		return;
	}
	/* Per row: [ld hi; and; jeq ->] ld lo; and; jeq -> the row's tail,
	 * else the next row.  The tail is ret, or for a row with sets[i]:
	 * ld lo of that argument; jeq 0 -> ld hi; jeq 0 -> ret other; and
	 * ret the row's action for a non-zero word (the two returns swapped
	 * for zeros[i]); for a row with pairs, emit_pairs. */
	for (i = 0; i < l->n; i++) {
		unsigned int tail_len = l->pairs[i] ? emit_pairs(NULL, l->pairs[i], 0, 0) : l->sets[i] ? 6 : 1;
		uint8_t lo_len = mlo == 0xffffffffU ? 1 : 2, tail = (uint8_t)tail_len;

		if (tail_len + lo_len + 1 > 255) {
			c->oom = true; /* SECCOMP_MAX_PAIRS keeps it far below */
			return;
		}

		if (mhi != 0) {
			emit_word(c, ARG_HI(l->arg), mhi);
			emit(c, BPF_JMP | BPF_JEQ | BPF_K, 0, (uint8_t)(lo_len + 1 + tail),
			     (uint32_t)(l->vals[i] >> 32));
		}
		emit_word(c, ARG_LO(l->arg), mlo);
		emit(c, BPF_JMP | BPF_JEQ | BPF_K, 0, tail, (uint32_t)l->vals[i]);
		if (l->pairs[i]) {
			emit_pairs(c, l->pairs[i], l->rets[i], l->other);
			continue;
		}
		if (l->sets[i]) {
			emit(c, BPF_LD | BPF_W | BPF_ABS, 0, 0, ARG_LO(l->sets[i] - 1));
			emit(c, BPF_JMP | BPF_JEQ | BPF_K, 0, 3, 0);
			emit(c, BPF_LD | BPF_W | BPF_ABS, 0, 0, ARG_HI(l->sets[i] - 1));
			emit(c, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0);
			emit(c, BPF_RET | BPF_K, 0, 0, l->zeros[i] ? l->rets[i] : l->other);
		}
		emit(c, BPF_RET | BPF_K, 0, 0, l->sets[i] && l->zeros[i] ? l->other : l->rets[i]);
	}
	emit(c, BPF_RET | BPF_K, 0, 0, l->other);
}

struct run {
	uint32_t lo; /* first syscall number of the run */
	const struct leaf *leaf;
};

/* A jump of a chunk's tree to one of the returns pooled at its end. */
struct fixup {
	size_t at;
	bool jt;
	uint32_t ret;
};

struct chunk {
	struct code code;
	struct fixup *fix;
	size_t nfix;
};

static bool simple(const struct run *r)
{
	return !r->leaf->complex;
}

/* The tree of a chunk: a jump whose child is a simple leaf goes straight
 * to the chunk's pooled return for it (a return is two eBPF instructions,
 * a second jump target at most one), other children follow inline. */
static void chunk_tree(struct chunk *k, const struct run *runs, size_t n)
{
	size_t mid = n / 2, at;

	if (n == 1) {
		/* A simple leaf's parent jumps to the pool: a syscall with
		 * argument rows, its checks inline. */
		emit_complex(&k->code, runs[0].leaf);
		return;
	}
	at = k->code.len;
	emit(&k->code, BPF_JMP | BPF_JGE | BPF_K, 0, 0, runs[mid].lo);
	if (mid == 1 && simple(&runs[0]))
		k->fix[k->nfix++] = (struct fixup){ at, false, runs[0].leaf->ret };
	else
		chunk_tree(k, runs, mid);
	if (n - mid == 1 && simple(&runs[mid])) {
		k->fix[k->nfix++] = (struct fixup){ at, true, runs[mid].leaf->ret };
	} else {
		size_t left = k->code.len - at - 1;

		if (left > 255) {
			k->code.oom = true; /* too far: not a chunk */
			return;
		}
		k->code.insns[at].jt = (uint8_t)left;
		chunk_tree(k, runs + mid, n - mid);
	}
}

/* runs[0..n) as one chunk: its tree, then one return per action its
 * leaves jump to.  False when a jump would not reach (over 255). */
static bool emit_chunk(struct code *c, const struct run *runs, size_t n)
{
	struct chunk k = { 0 };
	uint32_t pool[NR_LIMIT + 1];
	size_t npool = 0, i, j;
	bool fits = false;

	k.fix = calloc(2 * n, sizeof(*k.fix));
	if (!k.fix) {
		c->oom = true;
		return true;
	}
	chunk_tree(&k, runs, n);
	for (i = 0; i < k.nfix; i++) {
		for (j = 0; j < npool && pool[j] != k.fix[i].ret; j++)
			;
		if (j == npool)
			pool[npool++] = k.fix[i].ret;
	}
	if (k.code.oom)
		goto out;
	for (i = 0; i < k.nfix; i++) {
		size_t off;

		for (j = 0; pool[j] != k.fix[i].ret; j++)
			;
		off = k.code.len + j - k.fix[i].at - 1;
		if (off > 255)
			goto out;
		if (k.fix[i].jt)
			k.code.insns[k.fix[i].at].jt = (uint8_t)off;
		else
			k.code.insns[k.fix[i].at].jf = (uint8_t)off;
	}
	for (j = 0; j < npool; j++)
		emit(&k.code, BPF_RET | BPF_K, 0, 0, pool[j]);
	append(c, &k.code);
	fits = true;
out:
	free(k.code.insns);
	free(k.fix);
	return fits;
}

/* Binary search over runs[0..n): if nr >= runs[mid].lo, the right half.
 * Subtrees small enough for 8-bit jumps are chunks with pooled returns. */
static void emit_tree(struct code *c, const struct run *runs, size_t n)
{
	struct code left = { 0 }, right = { 0 };
	size_t mid = n / 2;

	if (n == 1) {
		if (runs[0].leaf->complex)
			emit_complex(c, runs[0].leaf);
		else
			emit(c, BPF_RET | BPF_K, 0, 0, runs[0].leaf->ret);
		return;
	}
	if (emit_chunk(c, runs, n))
		return;
	emit_tree(&left, runs, mid);
	emit_tree(&right, runs + mid, n - mid);
	if (left.len <= 255) {
		emit(c, BPF_JMP | BPF_JGE | BPF_K, (uint8_t)left.len, 0, runs[mid].lo);
	} else {
		/* Conditional jumps reach 255 ahead: jump over a JA. */
		emit(c, BPF_JMP | BPF_JGE | BPF_K, 0, 1, runs[mid].lo);
		emit(c, BPF_JMP | BPF_JA, 0, 0, (uint32_t)left.len);
	}
	append(c, &left);
	append(c, &right);
	free(left.insns);
	free(right.insns);
}

/* Fill leaves[0..NR_LIMIT) from rules[0..n); numbers no row names keep
 * the default.  What this compiler can't express exactly is refused, by
 * name: a syscall's conditional rows must compare one argument under one
 * mask, with distinct values, at most MAX_VALS of them and at most one
 * OTHERWISE, and none beside an unconditional row. */
static int classify(const struct seccomp_rule *rules, size_t nrules, struct leaf *leaves, bool log, uint32_t def,
		    struct nsbox_err *err)
{
	bool named[NR_LIMIT] = { false }, other_set[NR_LIMIT] = { false };

	for (size_t i = 0; i < NR_LIMIT; i++)
		leaves[i] = (struct leaf){ .ret = def };
	for (size_t i = 0; i < nrules; i++) {
		const struct seccomp_rule *s = &rules[i];
		int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, s->name);
		struct leaf *l;

		if (nr < 0)
			return err_set(err, EINVAL, "seccomp: unknown x86_64 syscall \"%s\"", s->name);
		if (nr >= NR_LIMIT)
			return err_set(err, EINVAL, "seccomp: %s: number %d past %d", s->name, nr, NR_LIMIT);
		l = &leaves[nr];
		if (s->cmp == SRULE_ANY) {
			if (named[nr])
				return err_set(err, EINVAL, "seccomp: %s: an unconditional row beside others", s->name);
			named[nr] = true;
			l->ret = seccomp_rule_ret(s->action, log);
			continue;
		}
		if (s->cmp != SRULE_MASKED_EQ && s->cmp != SRULE_OTHERWISE)
			return err_set(err, EINVAL, "seccomp: %s: bad row", s->name);
		if (named[nr] && !l->complex)
			return err_set(err, EINVAL, "seccomp: %s: a conditional row beside an unconditional one",
				       s->name);
		if (!l->complex)
			*l = (struct leaf){ .complex = true, .other = def };
		named[nr] = true;
		if (s->cmp == SRULE_OTHERWISE) {
			if (other_set[nr])
				return err_set(err, EINVAL, "seccomp: %s: two OTHERWISE rows", s->name);
			other_set[nr] = true;
			l->other = seccomp_rule_ret(s->action, log);
			continue;
		}
		if (s->arg > 5 || s->mask == 0 || (s->value & ~s->mask) || s->if_set > 6 || s->if_set == s->arg + 1 ||
		    !seccomp_pairs_valid(s))
			return err_set(err, EINVAL, "seccomp: %s: bad condition (arg %u, mask %#llx, value %#llx)",
				       s->name, s->arg, (unsigned long long)s->mask, (unsigned long long)s->value);
		if (l->n == 0) {
			l->arg = s->arg;
			l->mask = s->mask;
		} else if (s->arg != l->arg || s->mask != l->mask) {
			return err_set(err, EINVAL,
				       "seccomp: %s: conditional rows must compare one argument under "
				       "one mask",
				       s->name);
		}
		if (l->n == MAX_VALS)
			return err_set(err, EINVAL, "seccomp: %s: more than %d conditional rows", s->name, MAX_VALS);
		for (unsigned int j = 0; j < l->n; j++)
			if (l->vals[j] == s->value)
				return err_set(err, EINVAL, "seccomp: %s: value %#llx twice", s->name,
					       (unsigned long long)s->value);
		l->vals[l->n] = s->value;
		l->sets[l->n] = s->if_set;
		l->zeros[l->n] = s->if_set && s->if_zero;
		l->pairs[l->n] = s->pairs;
		l->rets[l->n++] = seccomp_rule_ret(s->action, log);
	}
	for (size_t i = 0; i < NR_LIMIT; i++)
		if (leaves[i].complex && leaves[i].n == 0)
			return err_set(err, EINVAL, "seccomp: syscall %zu: OTHERWISE without conditional rows", i);
	return 0;
}

int seccomp_prog_compile_rules(const struct seccomp_rule *rules, size_t nrules, bool log, struct seccomp_prog *out,
			       struct nsbox_err *err)
{
	uint32_t def = log ? SECCOMP_RET_LOG : SECCOMP_RET_ERRNO | SECCOMP_RULES_DEFAULT_ERRNO;
	_cleanup_free_ struct leaf *leaves = NULL;
	_cleanup_free_ struct run *runs = NULL;
	struct leaf tail = { .ret = def };
	struct code c = { 0 };
	size_t n = 0;

	leaves = calloc(NR_LIMIT, sizeof(*leaves));
	runs = calloc(NR_LIMIT + 1, sizeof(*runs));
	if (!leaves || !runs)
		return err_set(err, ENOMEM, "seccomp: compile");
	if (classify(rules, nrules, leaves, log, def, err) < 0)
		return -1;
	for (uint32_t nr = 0; nr < NR_LIMIT; nr++)
		if (n == 0 || !leaf_eq(runs[n - 1].leaf, &leaves[nr]))
			runs[n++] = (struct run){ nr, &leaves[nr] };
	/* Numbers past the table, and -1 (a tracer's skipped call). */
	if (!leaf_eq(runs[n - 1].leaf, &tail))
		runs[n++] = (struct run){ NR_LIMIT, &tail };

	/* Only the native ABI: i386 and x32 calls kill, also in log mode. */
	emit(&c, BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(struct seccomp_data, arch));
	emit(&c, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, AUDIT_ARCH_X86_64);
	emit(&c, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_KILL_PROCESS);
	emit(&c, BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(struct seccomp_data, nr));
	emit(&c, BPF_JMP | BPF_JGE | BPF_K, 0, 2, X32_SYSCALL_BIT);
	emit(&c, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 0xffffffffU);
	emit(&c, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_KILL_PROCESS);
	emit_tree(&c, runs, n);
	if (c.oom) {
		free(c.insns);
		return err_set(err, ENOMEM, "seccomp: compile");
	}
	if (c.len > BPF_MAXINSNS) {
		free(c.insns);
		return err_set(err, E2BIG, "seccomp: program of %zu instructions", c.len);
	}
	out->insns = c.insns;
	out->len = (unsigned short)c.len;
	return 0;
}

int seccomp_prog_compile(const struct nsbox_policy *p, struct seccomp_prog *out, struct nsbox_err *err)
{
	return seccomp_prog_compile_rules(seccomp_rules, seccomp_n_rules, p && p->seccomp == SECCOMP_LOG, out, err);
}
