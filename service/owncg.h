/* nsboxd's own cgroup on a delegated cgroup v2 subtree (nsboxd(8),
 * CGROUPS): a leaf of its own, the sandboxes beside it, itself favoured. */
#ifndef NSBOXD_OWNCG_H
#define NSBOXD_OWNCG_H

#include <stddef.h>

/* The leaf's name and its cpu.weight (a sandbox's is the kernel's default,
 * 100). */
#define OWNCG_LEAF "nsboxd"
#define OWNCG_CPU_WEIGHT "1000"

/* Call while nsboxd is one thread and has no children.  On a pure v2 host,
 * when this process is alone in a cgroup it may manage (its directory,
 * cgroup.procs and cgroup.subtree_control writable: what systemd's
 * Delegate=yes grants; Debian 12's systemd 252 has no DelegateSubgroup=),
 * move into the leaf OWNCG_LEAF inside it, enable the cpu, memory and pids
 * controllers for its children and give the leaf OWNCG_CPU_WEIGHT.
 * libnsbox then makes the sandboxes' cgroups beside the leaf, in the
 * delegated cgroup (jail/cgroup.c: beside the launcher's own).
 * Returns 1 when moved, 0 when left where it was, -1 when a step failed
 * (in all three cases msg says what, for the log; after -1 nsboxd may be
 * in the leaf without the weight). */
int owncg_enter_leaf(char *msg, size_t size);

#endif
