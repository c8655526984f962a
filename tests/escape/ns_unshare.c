/* unshare(2) into new namespaces: a nested user namespace would give
 * back a full capability set over new namespaces, the first step of
 * most container escapes (CVE-2022-0185). */
#include <sched.h>
#include "escape.h"

int main(void)
{
	int flags[] = { CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS,
			CLONE_NEWCGROUP, 0x80 /* CLONE_NEWTIME */, CLONE_NEWUSER | CLONE_NEWNS };

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		char what[64];
		snprintf(what, sizeof(what), "unshare(%#x)", flags[i]);
		must_fail_with(what, unshare(flags[i]), EPERM);
	}
	BLOCKED("unshare is denied");
}
