/* The filters compiled into the binary must equal a fresh libseccomp
 * compile of the rule table: the table is the source of truth. */
#include <string.h>

#include "seccomp-prebuilt.h"
#include "tap.h"

int main(void)
{
	for (int mode = SECCOMP_ENFORCE; mode <= SECCOMP_LOG; mode++) {
		struct nsbox_policy p = { .seccomp = mode };
		struct seccomp_prog fresh, pre;
		struct nsbox_err err = { 0 };

		ok(seccomp_prog_build(&p, &fresh, &err) == 0, "build mode %d: %s", mode, err.msg);
		seccomp_prog_prebuilt(mode, &pre);
		ok(pre.len == fresh.len && pre.len > 0, "mode %d: same length (%u, %u)", mode, pre.len, fresh.len);
		ok(pre.len == fresh.len && memcmp(pre.insns, fresh.insns, pre.len * sizeof(*pre.insns)) == 0,
		   "mode %d: same instructions", mode);
		seccomp_prog_free(&fresh);
	}
	tap_done();
}
