/* Host paths the operator names for nsbox to write, or to hand over as a
 * tree (a status file, a network log, a display or download directory, an
 * upload's root), opened without following a symbolic link anywhere in
 * them.  Such paths often sit in a directory the sandbox writes: its
 * workspace, whose symlinks the write-back makes on the host, or a --bind.
 * A link the sandbox planted there, as the name or as a directory above
 * it, would otherwise have the host write (or read) a file of the
 * sandbox's choosing with the launcher's rights.  Callers report ELOOP
 * with HOST_PATH_LINK_HINT. */
#ifndef NSBOX_HOSTPATH_H
#define NSBOX_HOSTPATH_H

#include <stdbool.h>
#include <sys/types.h>

#define HOST_PATH_LINK_HINT \
	"a symbolic link in the path (not followed: give the path without links, as realpath(1) prints it)"

/* /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: the caller's own
 * descriptors (links the kernel or the system makes, where the sandbox
 * can make nothing), which host_path_open follows. */
bool host_path_is_descriptor(const char *path);

/* open(path, flags | O_CLOEXEC, mode) with no symbolic link followed in any
 * component (ELOOP if there is one): openat2 RESOLVE_NO_SYMLINKS, or,
 * where openat2 is missing (Linux < 5.6) or refused (a container's seccomp
 * profile older than it says EPERM), a walk of the path one component at a
 * time with O_NOFOLLOW.  Returns the descriptor, or -1 with errno. */
int host_path_open(const char *path, int flags, mode_t mode);

/* The directory path, made (mode) if it is missing, opened O_DIRECTORY
 * with no link followed (its parent's path included).  Returns the
 * descriptor, or -1 with errno. */
int host_path_mkdir_open(const char *path, mode_t mode);

#endif
