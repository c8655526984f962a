/* The egress allowlist's host side ([Network] Allow=, nsbox-policy(5)).
 *
 * With any Allow= rule the sandbox keeps its own network namespace with
 * only lo, and two sockets on that loopback are served from outside:
 *   127.0.0.1:3128/tcp  an HTTP proxy (CONNECT for TLS, absolute-URI
 *                       requests for plain HTTP), named by HTTP_PROXY &c.
 *   127.0.0.1:1080/tcp  a SOCKS5 proxy (RFC 1928: no authentication,
 *                       CONNECT with remote name resolution), named by
 *                       ALL_PROXY=socks5h://...
 *   127.0.0.1:53/udp    a DNS responder that answers allowlisted names only and
 *                       forwards nothing (/etc/resolv.conf names it).
 * pid 1's network thread makes both sockets in the new namespace before
 * anything of the sandbox runs there (egress_ns_listen) and sends them
 * with SCM_RIGHTS to a proxy process the launcher forks once the sandbox
 * is in its cgroups (egress_fork), or, for a caller that waits in
 * jail_wait_with (nsbox run), at the first connection or query queued on
 * them (jail_spec.egress_lazy, egress_recv_socks): that process lives in the host's network namespace and
 * the launcher's cgroup, not the sandbox's, so the sandbox can neither
 * reach the host's network except through it nor starve it.  It resolves
 * names itself (pinning a name's addresses for the DNS answers' TTL, the
 * same for the responder and the proxies), checks every resolved address
 * for each use (policy/netrule.h, and the host's own addresses, which only
 * a rule naming that one address unlocks), connects to the address it checked, and
 * checks a CONNECT's TLS server name. */
#ifndef NSBOX_EGRESS_H
#define NSBOX_EGRESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "policy.h"

#define EGRESS_PROXY_PORT 3128
#define EGRESS_SOCKS_PORT 1080
#define EGRESS_DNS_PORT 53

/* The sockets pid 1 makes and sends, in this order. */
enum { EGRESS_NS_HTTP, EGRESS_NS_SOCKS, EGRESS_NS_DNS, EGRESS_NS_SOCKETS };

/* The proxy variables for the payload's environment (NULL-terminated). */
extern const char *const egress_env[];

/* At most this many audit descriptors besides the Log= file. */
#define EGRESS_AUDIT_FDS 2
/* An audit line's size cap, newline included (the proxy never writes a
 * longer one; a reader may drop one that is). */
#define EGRESS_AUDIT_LINE_MAX 2048

/* The proxy process for policy p (p->n_net_allow > 0), in two steps, so
 * that its fork is off the sandbox's start path.  egress_prepare, before
 * the clone: opens the audit log (p->net_log) with the caller's rights and
 * makes the socket pair; *ns_fd (the caller's, CLOEXEC) is the end pid 1
 * sends the sandbox's listening sockets over, which wait there until the
 * proxy runs.  audit_fds[0..n) (borrowed until egress_fork; n <=
 * EGRESS_AUDIT_FDS) get every audit line too, written whole, waiting while
 * one is full (a pipe its reader does not drain holds the sandbox's
 * network back; no line is dropped).  egress_fork, once the sandbox is in
 * its cgroups: forks the proxy (*pid: egress_stop it); ep is closed either
 * way.  confine (may be NULL) runs in the proxy before it reads anything
 * the sandbox sends: it parses what the sandbox chose, so it keeps no
 * capability and writes nothing through a path (jail's confine_proxy); if
 * confine fails the proxy says why on stderr and exits, and the sandbox's
 * connections are refused.  egress_prep_close drops a prepared proxy that is not forked.  The
 * caller must be single-threaded. */
struct egress_prep {
	int proxy_fd;		/* the proxy's end of the pair, or -1 */
	int log_fd;		/* Log=, or -1 */
	const int *audit_fds;
	size_t n_audit_fds;
};
/* Open Log= (path) for appending, created 0600, with the caller's rights:
 * CLOEXEC, and blocking once open.  A FIFO with no reader is an error at
 * once (ENXIO) instead of a wait no signal ends (nsbox run catches SIGINT
 * and SIGTERM with SA_RESTART).  fd, or -1 with err set. */
int egress_open_log(const char *path, struct nsbox_err *err);
int egress_prepare(const struct nsbox_policy *p, const int *audit_fds, size_t n_audit_fds, struct egress_prep *ep,
		   int *ns_fd, struct nsbox_err *err);
int egress_fork(const struct nsbox_policy *p, struct egress_prep *ep, const int *socks,
		int (*confine)(const struct nsbox_policy *p, struct nsbox_err *err), pid_t *pid, struct nsbox_err *err);
/* For a proxy forked later (jail_spec.egress_lazy): read pid 1's sockets
 * from the pair's end (ep->proxy_fd) without waiting, into socks (CLOEXEC,
 * the caller's); egress_fork then takes them (socks non-NULL: the child
 * uses them instead of reading the pair).  -1 if they are not there. */
int egress_recv_socks(int proxy_fd, int socks[EGRESS_NS_SOCKETS]);
void egress_prep_close(struct egress_prep *ep);

/* In the sandbox's new network namespace, with lo up: make the proxies'
 * and the DNS responder's sockets on 127.0.0.1 and send them over ns_fd. */
int egress_ns_listen(int ns_fd, struct nsbox_err *err);

/* How long the proxy gets after SIGTERM to end its tunnels and write
 * their audit lines before SIGKILL. */
#define EGRESS_STOP_MS 200

/* Stop and reap the proxy: SIGTERM, at most EGRESS_STOP_MS, SIGKILL; with
 * no audit destination (audited false: no Log=, no audit fds) SIGKILL at
 * once, as the lines it would end with go nowhere (the wait for its
 * threads to end cost each such sandbox ~0.2 ms).  Accepts 0. */
void egress_stop(pid_t pid, bool audited);

/* The start of egress_stop, for a caller with other teardown to do before
 * it reaps: SIGKILL now when audited is false (the proxy's exit then runs
 * beside that teardown; egress_stop reaps it), nothing otherwise.
 * Accepts 0. */
void egress_stop_begin(pid_t pid, bool audited);

/* The proxy's body (proxy.c); never returns. */
__attribute__((noreturn)) void egress_proxy_main(const struct nsbox_policy *p, int ns_fd, const int *socks,
						 const int *audit_fds, size_t n_audit_fds);

#endif
