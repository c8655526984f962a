/* The new mount API (fsopen/fsmount/move_mount, open_tree, fspick,
 * mount_setattr): a second way to mount that a filter checking only
 * mount(2) would miss. */
#include <linux/mount.h>
#include "escape.h"

int main(void)
{
	struct mount_attr a = { .attr_clr = MOUNT_ATTR_RDONLY };

	must_fail_with("fsopen(tmpfs)", syscall(SYS_fsopen, "tmpfs", 0), EPERM);
	must_fail_with("fsopen(proc)", syscall(SYS_fsopen, "proc", 0), EPERM);
	must_fail_with("fspick(/)", syscall(SYS_fspick, AT_FDCWD, "/", 0), EPERM);
	must_fail_with("open_tree(/usr, CLONE)", syscall(SYS_open_tree, AT_FDCWD, "/usr", 1 /* OPEN_TREE_CLONE */),
		       EPERM);
	must_fail_with("move_mount", syscall(SYS_move_mount, AT_FDCWD, "/usr", AT_FDCWD, "/tmp", 0), EPERM);
	must_fail_with("fsconfig", syscall(SYS_fsconfig, 3, 6 /* FSCONFIG_CMD_CREATE */, NULL, NULL, 0), EPERM);
	must_fail_with("fsmount", syscall(SYS_fsmount, 3, 0, 0), EPERM);
	must_fail_with("mount_setattr(/usr, rw)", syscall(SYS_mount_setattr, AT_FDCWD, "/usr", 0, &a, sizeof(a)),
		       EPERM);
	BLOCKED("the new mount API is denied");
}
