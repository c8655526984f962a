/* Loading seccomp filters in the sandbox: the compiled allowlist for the
 * payload, and pid 1's own tiny filter. */
#ifndef NSBOX_JAIL_SECCOMP_H
#define NSBOX_JAIL_SECCOMP_H

#include <stdbool.h>

#include "error.h"
#include "seccomp-rules.h"

/* Set no_new_privs and install prog as this thread's seccomp filter.  The
 * last setup step before exec: afterwards only the allowlist is reachable.
 * Allocates nothing (safe after fork of a single-threaded parent).  prog is
 * borrowed.  Returns 0, or -1 with err set (step "seccomp"). */
int seccomp_apply(const struct seccomp_prog *prog, struct nsbox_err *err);

/* pid 1's filter: only the handful of syscalls its wait loop makes; any
 * other kills it (and so the sandbox).  Twenty instructions instead of the
 * allowlist's ~700, so loading it costs next to nothing. */
int seccomp_apply_pid1(struct nsbox_err *err);

/* A second filter on every payload, stacked on the allowlist, for what
 * depends on the policy and the host or answers with a success:
 * - Sockets' queues the kernel fills and charges to no memory cgroup (v1
 *   or v2), bounded only by each socket's receive buffer times the sockets
 *   a sandbox may open (a 32M sandbox held 2 GiB, red team 12): in a
 *   network namespace of its own (!share_net) socket(AF_NETLINK) fails
 *   with EPERM (every refused rtnetlink request is acked with a copy of
 *   itself; the namespace shows only lo, /proc/net/dev says as much);
 *   IP_RECVERR and IPV6_RECVERR (and their RFC 4884 forms), which queue an
 *   ICMP error per datagram to a closed loopback port, succeed without
 *   effect (glibc's resolver refuses to run without them); SO_TIMESTAMPING,
 *   which queues a copy of each packet sent, fails with EPERM.
 * - no_unix_names: where Landlock can't scope abstract unix sockets (ABI
 *   < 6, or Landlock=off) and the sandbox shares the host's network
 *   namespace, whose abstract names (X11, D-Bus, containerd-shim...) it
 *   would reach as its host uid: socket() of AF_UNIX, and a socketpair()
 *   of AF_UNIX that is not SOCK_STREAM (a datagram end can sendto() any
 *   name), fail with EPERM.  What is left, stream pairs, is connected
 *   already: connect() and sendto() an address fail (EISCONN). */
int seccomp_apply_socket_rules(bool share_net, bool no_unix_names, struct nsbox_err *err);

#endif
