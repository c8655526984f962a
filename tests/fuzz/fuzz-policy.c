/* libFuzzer target for the nsbox-policy(5) parser: parse arbitrary bytes on
 * top of the default policy, print the result, and check that the printed
 * form parses back to an equal policy (the property `nsbox policy show`
 * relies on).  Any crash, sanitizer report or round-trip mismatch aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool str_eq(const char *a, const char *b)
{
	return (!a || !b) ? a == b : strcmp(a, b) == 0;
}

static bool same(const struct nsbox_policy *a, const struct nsbox_policy *b)
{
	if (a->uid != b->uid || a->gid != b->gid || a->share_net != b->share_net ||
	    !str_eq(a->hostname, b->hostname) || a->memory != b->memory || a->pids != b->pids ||
	    a->cpus != b->cpus || a->time_limit != b->time_limit || a->tmp_size != b->tmp_size ||
	    a->file_size != b->file_size || a->nofile != b->nofile || a->cgroups != b->cgroups ||
	    !str_eq(a->rootfs, b->rootfs) || !str_eq(a->workspace, b->workspace) ||
	    a->n_mounts != b->n_mounts || a->n_env != b->n_env || a->seccomp != b->seccomp ||
	    a->landlock != b->landlock || a->dist_packages != b->dist_packages)
		return false;
	for (size_t i = 0; i < a->n_mounts; i++)
		if (!str_eq(a->mounts[i].src, b->mounts[i].src) ||
		    !str_eq(a->mounts[i].dst, b->mounts[i].dst) || a->mounts[i].rw != b->mounts[i].rw)
			return false;
	for (size_t i = 0; i < a->n_env; i++)
		if (!str_eq(a->env[i], b->env[i]))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	struct nsbox_policy p = { 0 }, q = { 0 };
	struct nsbox_err err = { 0 };
	char *text = NULL;
	size_t len = 0;
	FILE *mem;

	if (!devnull && !(devnull = fopen("/dev/null", "we")))
		abort();
	if (policy_init_builtin(&p, "default", &err) < 0)
		abort();
	if (policy_parse(&p, (const char *)data, size, "fuzz", &err) < 0) {
		/* A failed parse must leave the policy as it was. */
		if (p.pids != 128 || p.n_mounts || p.n_env || !err.msg[0])
			abort();
		policy_free(&p);
		return 0;
	}
	policy_print(&p, devnull);
	(void)policy_validate(&p, &err);

	mem = open_memstream(&text, &len);
	if (!mem)
		abort();
	policy_print(&p, mem);
	fclose(mem);
	if (policy_init_builtin(&q, "strict", &err) < 0)
		abort();
	if (policy_parse(&q, text, len, "printed", &err) < 0 || !same(&p, &q)) {
		fprintf(stderr, "round trip failed: %s\n%s", err.msg, text);
		abort();
	}
	free(text);
	policy_free(&q);
	policy_free(&p);
	return 0;
}
