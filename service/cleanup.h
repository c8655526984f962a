/* What a SIGKILLed nsboxd (and its libnsbox helper) leaves behind. */
#ifndef NSBOXD_CLEANUP_H
#define NSBOXD_CLEANUP_H

#include <stdbool.h>

/* Under this process's own cgroups (v2 and each v1 controller): every
 * nsbox-PID-N cgroup whose launcher PID is gone has its processes killed
 * and is removed.  Returns how many were removed. */
int cleanup_stale_cgroups(bool verbose);

#endif
