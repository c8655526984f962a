/* Parent step: map one inside uid/gid to the invoking user's ids. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "steps.h"
#include "util.h"

int userns_write_maps(pid_t pid, uid_t in_uid, gid_t in_gid, bool deny_setgroups, struct nsbox_err *err)
{
	char path[64], map[64];

	err_step(err, "userns");
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)in_uid, (unsigned)geteuid());
	if (write_file(path, map) < 0)
		return err_sys(err, "write %s (\"%u %u 1\")", path, (unsigned)in_uid, (unsigned)geteuid());
	/* setgroups must be denied before an unprivileged gid_map
	 * (user_namespaces(7); CVE-2014-8989).  ENOENT: kernel < 3.19. */
	if (deny_setgroups) {
		snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
		if (write_file(path, "deny") < 0 && errno != ENOENT)
			return err_sys(err, "write %s", path);
	}
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)in_gid, (unsigned)getegid());
	if (write_file(path, map) < 0)
		return err_sys(err, "write %s (\"%u %u 1\")", path, (unsigned)in_gid, (unsigned)getegid());
	return 0;
}
