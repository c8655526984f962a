/* Parent step: map one inside uid/gid to the invoking user's ids, or to the
 * host ids the policy names (HostUid=, HostGid=: a root launcher only). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "steps.h"
#include "util.h"

int userns_write_maps(pid_t pid, const struct nsbox_policy *p, bool deny_setgroups, struct nsbox_err *err)
{
	unsigned out_uid = p->host_uid ? (unsigned)p->host_uid : (unsigned)geteuid();
	unsigned out_gid = p->host_gid ? (unsigned)p->host_gid : (unsigned)getegid();
	char path[64], map[64];

	err_step(err, "userns");
	/* The kernel would refuse it too (EPERM: mapping another uid needs
	 * CAP_SETUID over the parent namespace, user_namespaces(7)); this
	 * says why. */
	if ((p->host_uid && p->host_uid != geteuid()) || (p->host_gid && p->host_gid != getegid()))
		if (geteuid() != 0)
			return err_set(err, EPERM, "[Sandbox] HostUid=%u, HostGid=%u: only a root launcher maps "
				       "the sandbox's user to another host uid (this one is uid %u)",
				       (unsigned)p->host_uid, (unsigned)p->host_gid, (unsigned)geteuid());
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)p->uid, out_uid);
	if (write_file(path, map) < 0)
		return err_sys(err, "write %s (\"%u %u 1\")", path, (unsigned)p->uid, out_uid);
	/* setgroups must be denied before an unprivileged gid_map
	 * (user_namespaces(7); CVE-2014-8989).  ENOENT: kernel < 3.19.  A
	 * root launcher leaves it allowed, whatever the host ids: pid 1 must
	 * drop the launcher's supplementary groups (root's, host gid 0
	 * among them) with setgroups(0), which "deny" would forbid
	 * (jail/caps.c ids_switch); after that nothing inside has
	 * CAP_SETGID, and only the one gid is mapped anyway. */
	if (deny_setgroups) {
		snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
		if (write_file(path, "deny") < 0 && errno != ENOENT)
			return err_sys(err, "write %s", path);
	}
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)p->gid, out_gid);
	if (write_file(path, map) < 0)
		return err_sys(err, "write %s (\"%u %u 1\")", path, (unsigned)p->gid, out_gid);
	return 0;
}
