/* The "shocker" escape: open_by_handle_at with a guessed handle of the
 * host's root inode (ext4 root is inode 2), and name_to_handle_at to get
 * real handles to forge from. */
#include "escape.h"

struct handle {
	unsigned int handle_bytes;
	int handle_type;
	unsigned char f_handle[128];
};

int main(void)
{
	struct handle h = { .handle_bytes = 8, .handle_type = 1 };
	int mount_id, dfd = open("/usr", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	must_fail_with("name_to_handle_at(/usr)", syscall(SYS_name_to_handle_at, AT_FDCWD, "/usr", &h, &mount_id, 0),
		       EPERM);
	h.handle_bytes = 8;
	h.handle_type = 1; /* FILEID_INO32_GEN: inode 2, generation 0 */
	memset(h.f_handle, 0, sizeof(h.f_handle));
	h.f_handle[0] = 2;
	must_fail_with("open_by_handle_at(usr, ino 2)", syscall(SYS_open_by_handle_at, dfd, &h, O_RDONLY), EPERM);
	must_fail_with("open_by_handle_at(cwd, ino 2)", syscall(SYS_open_by_handle_at, AT_FDCWD, &h, O_RDONLY), EPERM);
	BLOCKED("file handles are denied");
}
