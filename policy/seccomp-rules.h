/* The seccomp policy as data: one table of {syscall, action, argument
 * condition} rows for x86_64, compiled to classic BPF (by nsbox's compiler,
 * policy/seccomp-compile.c, and by libseccomp as the reference), and a pure
 * evaluator of classic seccomp BPF so the table can be tested offline as
 * (syscall, arguments) -> action.
 *
 * Pure code: building touches no kernel state (the program is exported
 * through a memfd, nothing is loaded).  jail/seccomp.c loads it. */
#ifndef NSBOX_SECCOMP_RULES_H
#define NSBOX_SECCOMP_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "error.h"
#include "policy.h"

enum seccomp_rule_action {
	SRULE_ALLOW = 0,
	SRULE_EPERM,	/* denied with EPERM; SECCOMP_RET_LOG in Seccomp=log mode */
	SRULE_ENOSYS,	/* ENOSYS so libc falls back to an older call; kept in log mode */
};

enum seccomp_rule_cmp {
	SRULE_ANY = 0,		/* no condition: every call of the syscall */
	SRULE_MASKED_EQ,	/* (arg & mask) == value, and argument if_set - 1
				 * non-zero when if_set is (a pointer given) */
	SRULE_OTHERWISE,	/* every call the syscall's SRULE_MASKED_EQ rows miss
				 * (they must share one arg and mask) */
};

/* Pairs of values two other arguments of a row may take together, compared
 * on their low 32 bits (int arguments, of which the kernel reads no more):
 * socket()'s type under SOCK_TYPE_MASK and protocol, where what the kernel
 * does (or which module it loads) depends on the pair. */
#define SECCOMP_MAX_PAIRS 8
struct seccomp_pairs {
	unsigned int a, b;	/* argument indexes, distinct, and not the row's */
	uint32_t mask_a;	/* a is compared under mask_a, b whole */
	unsigned int n;		/* 1..SECCOMP_MAX_PAIRS, no pair twice */
	uint32_t va[SECCOMP_MAX_PAIRS], vb[SECCOMP_MAX_PAIRS];
};

struct seccomp_rule {
	const char *name;	/* x86_64 syscall name as libseccomp spells it */
	enum seccomp_rule_action action;
	enum seccomp_rule_cmp cmp;
	unsigned int arg;	/* argument index 0..5 when cmp != SRULE_ANY */
	uint64_t mask;
	uint64_t value;
	/* 0, or 1 + the index of an argument that must be non-zero for an
	 * SRULE_MASKED_EQ row to match (prlimit64's new limit: a set, not a
	 * get); a call matching the row's condition with that argument zero
	 * gets the syscall's OTHERWISE action.  With if_zero, the argument
	 * must be zero instead (socket's protocol), and a non-zero one gets
	 * OTHERWISE's. */
	unsigned int if_set;
	bool if_zero;
	/* NULL, or an SRULE_MASKED_EQ row (without if_set) that matches only
	 * when the call's (args[a] & mask_a, args[b]) is one of these pairs;
	 * a call matching the row's condition with no pair gets OTHERWISE's
	 * action. */
	const struct seccomp_pairs *pairs;
};

/* The allowlist.  Rows for one syscall with conditions are complementary
 * (every call matches exactly one row), see seccomp-rules.c. */
extern const struct seccomp_rule seccomp_rules[];
extern const size_t seccomp_n_rules;

/* Whether s->pairs (if any) is one both compilers take: see struct
 * seccomp_pairs; not beside if_set. */
bool seccomp_pairs_valid(const struct seccomp_rule *s);

/* The pairs' distinct a values, in order of first appearance, into as[]
 * (room for SECCOMP_MAX_PAIRS); returns how many.  Both compilers group a
 * row's pairs by them. */
unsigned int seccomp_pairs_a_values(const struct seccomp_pairs *p, uint32_t *as);

/* Conditional rows one syscall may have (both compilers). */
#define SECCOMP_MAX_ROWS 16

/* Action for syscalls missing from the table (enforce mode). */
#define SECCOMP_RULES_DEFAULT_ERRNO 38	/* ENOSYS */

/* The SECCOMP_RET_* value of a row's action (log: Seccomp=log, where
 * SRULE_EPERM only logs). */
uint32_t seccomp_rule_ret(enum seccomp_rule_action a, bool log);

/* A compiled filter.  insns is malloc'ed and owned by the struct. */
struct seccomp_prog {
	struct sock_filter *insns;
	unsigned short len;
};

/* Compile the table for policy p (p->seccomp picks enforce or log) into
 * *out with libseccomp.  Call it in the unconfined, single-threaded parent.
 * Returns 0, or -1 with err set (out untouched): unknown syscall name,
 * libseccomp failure, or a program too long for the kernel. */
int seccomp_prog_build(const struct nsbox_policy *p, struct seccomp_prog *out, struct nsbox_err *err);

/* Compile the same table with nsbox's own compiler (policy/seccomp-compile.c):
 * a binary search over runs of syscall numbers, about a quarter of
 * libseccomp's length, with the same action for every input (tested against
 * seccomp_prog_build).  This is the program the jail loads.  Same contract as
 * seccomp_prog_build. */
int seccomp_prog_compile(const struct nsbox_policy *p, struct seccomp_prog *out, struct nsbox_err *err);
/* The same for any table (tests/unit/test-seccomp-prebuilt.c gives it
 * synthetic ones): log picks Seccomp=log's actions. */
int seccomp_prog_compile_rules(const struct seccomp_rule *rules, size_t nrules, bool log, struct seccomp_prog *out,
			       struct nsbox_err *err);

/* Free prog->insns and zero *prog.  Accepts NULL and a zeroed prog. */
void seccomp_prog_free(struct seccomp_prog *prog);

/* Run the classic BPF program on d the way the kernel would and return the
 * SECCOMP_RET_* value (action | data).  A malformed program (bad opcode,
 * out-of-range load or jump, no return) yields SECCOMP_RET_KILL_PROCESS. */
uint32_t seccomp_prog_eval(const struct seccomp_prog *prog, const struct seccomp_data *d);

#endif
