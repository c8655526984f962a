/* No confused deputy: a host path a client wants in its sandbox reaches
 * nsboxd only as a descriptor the client opened (SCM_RIGHTS), and is then
 * checked with the client's credentials, never the service's. */
#ifndef NSBOXD_DEPUTY_H
#define NSBOXD_DEPUTY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "svc.h"

/* An OPEN's host objects: its workspace and its binds. */
#define DEPUTY_MAX_OBJS (1 + SVC_MAX_BINDS)

/* One host object an OPEN carries: the client's descriptor, and whether the
 * sandbox would write through it. */
struct deputy_obj {
	int fd;
	bool writable;
};

/* Whether uid/gid/groups may read (and with writable, write) each file or
 * directory objs[i].fd refers to, in order, checked by the calling thread
 * with those ids taken for the checks alone (faccessat2 with AT_EACCESS on
 * the fd itself: no path is resolved; the effective ids only, of this
 * thread only, and its own back before it returns): no child process.
 * Returns 0, or a positive errno with *failed set to the
 * index of the first object refused and a message about it in errbuf (the
 * same as checking the objects one by one would give). */
int deputy_check(const struct deputy_obj *objs, size_t n, uid_t uid, gid_t gid, const gid_t *groups,
		 size_t n_groups, size_t *failed, char *errbuf, size_t errlen);

/* Whether fd can be a session's network audit log ([Network] Log=): a
 * regular file or a pipe that the client opened for writing itself (the
 * service only ever writes through that very descriptor, never opens a
 * path).  O_PATH and read-only descriptors are refused.  Returns 0, or a
 * positive errno with a message in errbuf. */
int deputy_check_log(int fd, char *errbuf, size_t errlen);

#endif
