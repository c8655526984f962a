/* mount(2): a new tmpfs, proc, a bind of / over /tmp, remounting / or
 * /usr read-write, a cgroup v1 hierarchy with a release_agent
 * (CVE-2022-0492), and umount to uncover what lies below. */
#include <sys/mount.h>
#include "escape.h"

int main(void)
{
	must_fail_with("mount tmpfs", mount("none", "/tmp", "tmpfs", 0, NULL), EPERM);
	must_fail_with("mount proc", mount("proc", "/tmp", "proc", 0, NULL), EPERM);
	must_fail_with("mount sysfs", mount("sysfs", "/tmp", "sysfs", 0, NULL), EPERM);
	must_fail_with("mount cgroup v1", mount("cgroup", "/tmp", "cgroup", 0, "rdma,release_agent=/tmp/x"), EPERM);
	must_fail_with("mount cgroup2", mount("cgroup2", "/tmp", "cgroup2", 0, NULL), EPERM);
	must_fail_with("bind / on /tmp", mount("/", "/tmp", NULL, MS_BIND | MS_REC, NULL), EPERM);
	must_fail_with("remount / rw", mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL), EPERM);
	must_fail_with("remount /usr rw", mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL), EPERM);
	must_fail_with("make / shared", mount(NULL, "/", NULL, MS_SHARED | MS_REC, NULL), EPERM);
	must_fail_with("umount /proc", umount2("/proc", MNT_DETACH), EPERM);
	must_fail_with("umount /usr", umount2("/usr", MNT_DETACH), EPERM);
	must_fail_with("umount /", umount2("/", MNT_DETACH), EPERM);
	BLOCKED("mount and umount are denied");
}
