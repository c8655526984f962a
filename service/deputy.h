/* No confused deputy: a host path a client wants in its sandbox reaches
 * nsboxd only as a descriptor the client opened (SCM_RIGHTS), and is then
 * checked with the client's credentials, never the service's. */
#ifndef NSBOXD_DEPUTY_H
#define NSBOXD_DEPUTY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Whether uid/gid/groups may read (and with writable, write) the file or
 * directory fd refers to, checked by a child process that takes those ids
 * (faccessat2 with AT_EACCESS on the fd itself: no path is resolved).
 * Returns 0, or a positive errno with a message in errbuf. */
int deputy_check(int fd, bool writable, uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups, char *errbuf,
		 size_t errlen);

/* Whether fd can be a session's network audit log ([Network] Log=): a
 * regular file or a pipe that the client opened for writing itself (the
 * service only ever writes through that very descriptor, never opens a
 * path).  O_PATH and read-only descriptors are refused.  Returns 0, or a
 * positive errno with a message in errbuf. */
int deputy_check_log(int fd, char *errbuf, size_t errlen);

#endif
