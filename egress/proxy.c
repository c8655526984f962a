/* The proxy process: an HTTP proxy, a SOCKS5 proxy and a DNS responder serving
 * sockets that live on the sandbox's loopback (egress.h).  Everything from
 * inside is hostile: it is parsed by parse.c (fuzzed), request heads are
 * bounded, every wait has a timeout, and each destination is checked after
 * resolution and then connected to by address (no second lookup, so no
 * DNS rebinding between check and use).
 *
 * Threads: setup workers (at most THREADS_MAX, and no more than the
 * sandbox's Pids=, started by the main thread
 * as they are needed and kept) take turns to accept: one leads, waiting
 * on the listening sockets, and a connection it accepts it serves itself
 * through the blocking part (request, the name's pinned addresses,
 * connect, the ClientHello) while another worker takes the lead, so no
 * thread is made or woken between a connection and its setup.  An
 * established tunnel is then handed to the relay thread, one epoll loop
 * over all tunnels (at most open_max, from RLIMIT_NOFILE), which moves
 * bytes with splice(2) and ends them; a DNS thread serves the responder.
 * SIGTERM (egress_stop) is read by the relay loop, which ends the open
 * tunnels with their audit lines and exits. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <resolv.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egress.h"
#include "netrule.h"
#include "parse.h"
#include "util.h"

#define HEAD_MAX 8192
#define TLS_HELLO_MAX (16384 + 5)
#define THREADS_MAX 64
#define IO_TIMEOUT_MS 30000
#define IDLE_TIMEOUT_MS 300000
#define CONNECT_TIMEOUT_MS 10000
/* A pipe's default capacity, which the relay keeps: each pipe's pages count
 * against the host user's pipe-user-pages-soft (16384 pages, shared by all
 * the user's processes) from its creation, so a tunnel has its pipes only
 * while it moves bytes (each direction's made for its first, closed by the
 * sweep once that way has been idle for PIPE_IDLE_MS, so up to twice that:
 * a pipe made and closed each time a direction drains added 0.3 ms to a
 * response's first byte), and they are never grown (at
 * 256 KiB, 140 idle tunnels took a user's every new pipe down to 8 KiB:
 * red team 10). */
#define PIPE_SIZE (64 * 1024)
#define PIPE_PAGES (PIPE_SIZE / 4096)
#define PIPE_IDLE_MS 1000
/* The host side of a tunnel lives in the host's network namespace and the
 * launcher's cgroup: nothing of it is charged to the sandbox.  Its upstream
 * socket's buffers are fixed (the kernel doubles the value, and no longer
 * autotunes it: to tcp_rmem's maximum, 32 MiB on some hosts, for a
 * sandbox that reads fast and then stops), and the tunnels open at once
 * are capped so that their worst case, TUNNEL_MEM each, stays within the
 * sandbox's own memory limit: 400 tunnels of a 64M sandbox held 598 MiB
 * of the host's memory.  256 KiB is a full window at 20 MB/s over 100 ms. */
#define UPSTREAM_BUF (256 * 1024)
/* 2 x UPSTREAM_BUF each way upstream, the two pipes, and the sandbox-side
 * socket's queues (at most 1 MiB each way: budget_netns). */
#define TUNNEL_MEM (2 * 2 * UPSTREAM_BUF + 2 * PIPE_SIZE + 2 * (1 << 20))
#define NOTSENT_LOWAT (16 * 1024)

static struct net_rule rules[POLICY_MAX_NET_RULES];
static unsigned n_rules;
/* Where audit lines go: the Log= file and the descriptors egress_prepare
 * was given (a library's pipe, a service client's descriptor). */
static int log_fds[1 + EGRESS_AUDIT_FDS];
static size_t n_log_fds;
/* What each may still take (MaxLogBytes=): a regular file fills the host's
 * disk, so it gets that many bytes of this sandbox's lines; a pipe or
 * socket has a reader that holds the proxy back instead (UINT64_MAX). */
/* MaxLogBytes= of a regular file (UINT64_MAX: none): a cap on the file,
 * checked against its size before each line, so that restarts and
 * sessions appending to the same file stop at it together (each
 * proxy's own count let every start add the whole cap again). */
static uint64_t log_cap[1 + EGRESS_AUDIT_FDS];
static uint64_t max_out, max_in, max_conns;
static atomic_uint_fast64_t total_out, total_in, total_conns;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
/* The setup workers, under slot_lock: workers started, idle ones (not
 * serving a connection), whether one leads (waits to accept), and
 * connections in setup (active; stop waits for them on slot_free). */
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_free = PTHREAD_COND_INITIALIZER;
static pthread_cond_t lead_free = PTHREAD_COND_INITIALIZER;
static pthread_cond_t need_worker = PTHREAD_COND_INITIALIZER;
static unsigned active, workers, idle;
static bool leading;
/* THREADS_MAX, or fewer: the sandbox's own Pids= limit.  The workers are
 * threads of the host (the launcher's cgroup, nsboxd's), uncharged to the
 * sandbox: 64 idle connections from a sandbox of 8 pids kept 67 of them. */
static unsigned threads_max = THREADS_MAX;

/* Why a destination was refused, for the reply: HTTP status or SOCKS code. */
enum refusal {
	R_POLICY = 1,
	R_LIMIT,
	R_RESOLVE,
	R_CONNECT
};

struct req {
	int fd, up;
	bool socks;
	char kind[8]; /* "connect", "http", "socks", "dns" */
	struct egress_target t;
	char addr[INET6_ADDRSTRLEN];
	char sni[NET_NAME_MAX + 1];
	const char *decision, *reason;
	enum refusal refusal;
	int connect_errno;
	uint64_t out, in;
};

/* ---- audit ---- */

static size_t json_str(char *dst, size_t size, const char *s)
{
	size_t o = 0;

	for (; *s && o + 8 < size; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			o += (size_t)snprintf(dst + o, size - o, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			o += (size_t)snprintf(dst + o, size - o, "\\u%04x", c);
		else
			dst[o++] = (char)c;
	}
	dst[o] = '\0';
	return o;
}

/* The whole line, waiting while fd is full: a reader that does not keep
 * up holds the network back instead of losing lines.  A reader gone
 * (EPIPE) or a failing file gets no more. */
static void log_write(int *fd, const char *line, size_t len)
{
	while (len) {
		ssize_t n = write(*fd, line, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = *fd, .events = POLLOUT };

			if (poll(&p, 1, -1) >= 0 || errno == EINTR)
				continue;
		}
		if (n <= 0) {
			*fd = -1;
			return;
		}
		line += n;
		len -= (size_t)n;
	}
}

/* Room kept for log_full's line (its bytes are at most this). */
#define LOG_FULL_LINE 160

/* File i has no room for another line: say so in it, once, and write it no
 * more (the other destinations go on). */
static void log_full(size_t i, const struct timespec *ts)
{
	char line[LOG_FULL_LINE];
	int n = snprintf(line, sizeof(line),
			 "{\"time\":%lld.%03ld,\"kind\":\"log-full\",\"decision\":\"none\","
			 "\"reason\":\"MaxLogBytes= reached: no more lines go to this file\"}\n",
			 (long long)ts->tv_sec, ts->tv_nsec / 1000000);

	struct stat st;

	/* Once per file: a later start finding no room for it says nothing. */
	if (n > 0 && (size_t)n < sizeof(line) && fstat(log_fds[i], &st) == 0 &&
	    (uint64_t)st.st_size + (size_t)n <= log_cap[i])
		log_write(&log_fds[i], line, (size_t)n);
	log_fds[i] = -1;
}

static void audit(const struct req *r)
{
	char line[EGRESS_AUDIT_LINE_MAX], host[600], sni[600], reason[300];
	struct timespec ts;
	int n;

	if (!n_log_fds)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	json_str(host, sizeof(host), r->t.host);
	json_str(sni, sizeof(sni), r->sni);
	json_str(reason, sizeof(reason), r->reason ? r->reason : "");
	n = snprintf(line, sizeof(line),
		     "{\"time\":%lld.%03ld,\"kind\":\"%s\",\"host\":\"%s\",\"port\":%u,\"addr\":\"%s\",\"sni\":\"%s\","
		     "\"decision\":\"%s\",\"reason\":\"%s\",\"bytes_out\":%llu,\"bytes_in\":%llu}\n",
		     (long long)ts.tv_sec, ts.tv_nsec / 1000000, r->kind, host, (unsigned)r->t.port, r->addr, sni,
		     r->decision ? r->decision : "deny", reason, (unsigned long long)r->out, (unsigned long long)r->in);
	if (n <= 0 || (size_t)n >= sizeof(line))
		return;
	pthread_mutex_lock(&log_lock);
	for (size_t i = 0; i < n_log_fds; i++) {
		if (log_fds[i] < 0)
			continue;
		if (log_cap[i] != UINT64_MAX) {
			struct stat st;

			if (fstat(log_fds[i], &st) < 0 ||
			    (uint64_t)st.st_size + (size_t)n + LOG_FULL_LINE > log_cap[i]) {
				log_full(i, &ts);
				continue;
			}
		}
		log_write(&log_fds[i], line, (size_t)n);
	}
	pthread_mutex_unlock(&log_lock);
}

/* ---- io (every socket here is non-blocking) ---- */

static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r > 0 ? 0 : -1;
}

static ssize_t recv_some(int fd, void *buf, size_t len)
{
	for (;;) {
		ssize_t n = recv(fd, buf, len, 0);

		if (n >= 0 || (errno != EINTR && errno != EAGAIN))
			return n;
		if (errno == EAGAIN && wait_fd(fd, POLLIN, IO_TIMEOUT_MS) < 0)
			return -1;
	}
}

static int send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT, IO_TIMEOUT_MS) == 0)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void refuse(struct req *r, enum refusal why, const char *reason)
{
	r->decision = "deny";
	r->reason = reason;
	r->refusal = why;
}

static int deny_http(struct req *r, int status, const char *reason)
{
	char buf[512];
	const char *text = status == 403 ? "Forbidden" : status == 400 ? "Bad Request" : "Bad Gateway";
	int n;

	r->decision = "deny";
	r->reason = reason;
	n = snprintf(buf, sizeof(buf),
		     "HTTP/1.1 %d %s\r\nX-Nsbox-Deny: %s\r\nContent-Type: text/plain\r\nConnection: close\r\n"
		     "Content-Length: %zu\r\n\r\nnsbox: egress denied: %s\n",
		     status, text, reason, strlen("nsbox: egress denied: \n") + strlen(reason), reason);
	if (n > 0 && (size_t)n < sizeof(buf))
		(void)send_all(r->fd, buf, (size_t)n);
	return -1;
}

/* Returns -1 unless the reply is a success, for the callers' ease. */
static int socks_reply(struct req *r, int code)
{
	uint8_t rep[10] = { 5, (uint8_t)code, 0, 1 }; /* BND.ADDR 0.0.0.0:0 */

	return send_all(r->fd, rep, sizeof(rep)) == 0 && code == SOCKS_OK ? 0 : -1;
}

/* ---- the decision ---- */

static bool name_allowed(const char *name, uint16_t port)
{
	for (unsigned i = 0; i < n_rules; i++)
		if (net_rule_match_name(&rules[i], name, port))
			return true;
	return false;
}

/* ---- names: resolved once, pinned for PIN_TTL_MS ----
 *
 * The DNS responder and the proxies share one table: the addresses the
 * responder gave the sandbox for a name are the ones a CONNECT to that
 * name goes to (until they expire with the answer's TTL), and a tunnel
 * costs no lookup (getaddrinfo reads nsswitch.conf and /etc/hosts and
 * asks the resolver, a network round trip, each time: glibc caches
 * nothing without nscd).  What is pinned is the resolver's answer, not a
 * verdict: every use checks the addresses again against the rules for
 * its port.  At most PIN_NAMES names (a wildcard rule allows many): a new
 * one takes the slot that expires first. */

/* The DNS answers' TTL (parse.c) in ms: the sandbox may use an answer
 * that long, and the proxy goes where the answer said. */
#define PIN_TTL_MS 60000
#define PIN_NAMES 64
#define PIN_ADDRS 32

struct pinned {
	char name[NET_NAME_MAX + 1];
	uint64_t until_ms; /* 0: an empty slot */
	unsigned n;
	struct {
		int family;
		uint8_t a[16];
	} addr[PIN_ADDRS];
};

static struct pinned pins[PIN_NAMES];
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sa_bytes(const struct sockaddr *sa, int *family, const uint8_t **a)
{
	*family = sa->sa_family;
	*a = sa->sa_family == AF_INET ? (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr
				      : (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
}

/* ---- pacing: what the sandbox can make the host side do ----
 *
 * Every DNS query and every connection costs the proxy CPU outside the
 * sandbox's cgroup (its cpu.max does not hold it), an audit line in the
 * caller's --net-log file, and for a listed name a lookup or two at the
 * host's resolver.  Unpaced, a DNS flood from a sandbox held to --cpus
 * 0.2 made the proxy spend as much CPU again and write 8 MB/s of audit
 * lines (110,000 lines/s unlimited), and the host's resolver was asked
 * 11,800 times a second (A and AAAA for names under a wildcard rule).
 * So the requests of both proxies and the responder share one token
 * bucket: PACE_BURST at once, then PACE_RATE a second; one over it waits
 * its turn (none is refused and each decided one is audited; a flood of
 * queries overflows the DNS socket's queue, as at any resolver).  That
 * bounds the lines' rate (about 125 KB/s), not their total: a budget for
 * that is a policy decision (Log= has none). */
#define PACE_RATE 500
#define PACE_BURST 2000

static pthread_mutex_t pace_lock = PTHREAD_MUTEX_INITIALIZER;
static double pace_tokens = PACE_BURST;
static uint64_t pace_last_ms;

static void pace(void)
{
	uint64_t now = now_ms();
	double wait_ms;

	pthread_mutex_lock(&pace_lock);
	if (pace_last_ms)
		pace_tokens += (double)(now - pace_last_ms) * PACE_RATE / 1000;
	if (pace_tokens > PACE_BURST)
		pace_tokens = PACE_BURST;
	pace_last_ms = now;
	/* Taken now, below zero if need be: the waiters' turns queue up. */
	pace_tokens -= 1;
	wait_ms = pace_tokens < 0 ? -pace_tokens * 1000 / PACE_RATE : 0;
	pthread_mutex_unlock(&pace_lock);
	if (wait_ms > 0) {
		uint64_t ns = (uint64_t)(wait_ms * 1000000);
		struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000) };

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
}

/* ---- the host's own addresses ----
 *
 * The proxy lives in the host's network namespace: an address of the
 * host's own (its public address on eth0, a local route's range) reached
 * from there is the host itself, every service bound to 0.0.0.0 or to
 * that address, which no firewall in front of the machine guards.  Such an
 * address is in no special range (net_addr_special), so a name rule whose
 * answer pointed there, or 0.0.0.0/0, reached it.  The kernel tells: the
 * route to the address is of type local (or anycast) in the host's
 * routing.  A netlink RTM_GETROUTE sends nothing anywhere. */

/* 1 if the kernel would deliver the address to this host, 0 if not, -1 if
 * it cannot be told. */
static int route_is_local(int family, const uint8_t *a)
{
	struct {
		struct nlmsghdr nh;
		struct rtmsg rt;
		struct rtattr rta;
		uint8_t addr[16];
	} q;
	union {
		struct nlmsghdr nh;
		char buf[4096];
	} ans;
	size_t alen = family == AF_INET ? 4 : 16;
	_cleanup_close_ int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	struct timeval tv = { .tv_sec = 2 };
	ssize_t n;

	if (fd < 0)
		return -1;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	memset(&q, 0, sizeof(q));
	q.nh.nlmsg_len = (uint32_t)NLMSG_LENGTH(sizeof(struct rtmsg) + RTA_LENGTH(alen));
	q.nh.nlmsg_type = RTM_GETROUTE;
	q.nh.nlmsg_flags = NLM_F_REQUEST;
	q.nh.nlmsg_seq = 1;
	q.rt.rtm_family = (unsigned char)family;
	q.rt.rtm_dst_len = (unsigned char)(8 * alen);
	q.rta.rta_type = RTA_DST;
	q.rta.rta_len = (unsigned short)RTA_LENGTH(alen);
	memcpy(q.addr, a, alen);
	if (send(fd, &q, q.nh.nlmsg_len, 0) != (ssize_t)q.nh.nlmsg_len)
		return -1;
	do
		n = recv(fd, &ans, sizeof(ans), 0);
	while (n < 0 && errno == EINTR);
	if (n < (ssize_t)NLMSG_HDRLEN || !NLMSG_OK(&ans.nh, (size_t)n))
		return -1;
	if (ans.nh.nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(&ans.nh);

		/* No route at all: not this host. */
		return ans.nh.nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error != 0 ? 0 : -1;
	}
	if (ans.nh.nlmsg_type != RTM_NEWROUTE || ans.nh.nlmsg_len < NLMSG_LENGTH(sizeof(struct rtmsg)))
		return -1;
	{
		const struct rtmsg *rt = NLMSG_DATA(&ans.nh);

		return rt->rtm_type == RTN_LOCAL || rt->rtm_type == RTN_ANYCAST;
	}
}

/* net_addr_verdict, and then the host's own addresses: refused unless an
 * address rule names that one address (a /32 or /128; a wider range, as
 * 0.0.0.0/0 or 10.0.0.0/8 around the host's 10.0.0.5, unlocks it no more
 * than 0.0.0.0/0 unlocks loopback), or refused when the kernel cannot
 * tell.  Loopback itself passed net_addr_verdict only through a rule
 * inside 127.0.0.0/8 or naming ::1: the host, asked for.  *local caches
 * the kernel's answer for this address across ports (start it at
 * LOCAL_UNKNOWN): the responder asks for every port a rule names, and a
 * query per port and address was up to 32 x 66 netlink round trips. */
#define LOCAL_UNKNOWN (-2)
static const char *addr_verdict(bool name_ok, int family, const uint8_t *a, uint16_t port, int *local)
{
	static const uint8_t v6_loopback[16] = { [15] = 1 };
	const char *v = net_addr_verdict(rules, n_rules, name_ok, family, a, port);
	unsigned full = family == AF_INET ? 32 : 128;

	if (v || (family == AF_INET ? a[0] == 127 : !memcmp(a, v6_loopback, 16)))
		return v;
	for (unsigned i = 0; i < n_rules; i++)
		if (rules[i].prefix == full && net_rule_match_addr(&rules[i], family, a, port))
			return NULL;
	if (*local == LOCAL_UNKNOWN)
		*local = route_is_local(family, a);
	if (*local < 0)
		return "cannot tell whether the address is the host's own";
	return *local ? "the host's own address" : NULL;
}

/* The addresses of host name (lowercase, no trailing dot) into *out: the
 * pinned ones while they last, else the host's resolver's (both families,
 * in its order), pinned from now.  A failed lookup is not pinned.
 * Returns 0, or -1 when the name does not resolve (to any address). */
static int resolve_pinned(const char *name, struct pinned *out)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	uint64_t now = now_ms();
	struct pinned *slot = NULL;

	pthread_mutex_lock(&pin_lock);
	for (size_t i = 0; i < PIN_NAMES; i++)
		if (pins[i].until_ms > now && strcmp(pins[i].name, name) == 0) {
			*out = pins[i];
			pthread_mutex_unlock(&pin_lock);
			return 0;
		}
	pthread_mutex_unlock(&pin_lock);
	/* The name the sandbox chose, and no other: resolv.conf's search
	 * list would send a query for NAME.corp.example (any NAME, under a
	 * wildcard rule) to the host's resolver when NAME has no address
	 * (glibc's res_search: RES_DNSRCH, and RES_DEFNAMES for a name with
	 * no dot).  _res is this thread's.  res_init from the default options
	 * loads the current resolv.conf (a stat(2) when unchanged, so a new
	 * one is still read); the options cleared after it make glibc take
	 * the state as the caller's own, which getaddrinfo keeps.  (res_init
	 * over already cleared options makes a configuration of them that
	 * getaddrinfo then swaps for resolv.conf's, with the search list:
	 * every second lookup leaked.)  An absolute name ("NAME.") would skip
	 * the search list too, but /etc/hosts never matches one.  NSS modules
	 * other than dns (resolve, mdns) read their own configuration. */
	_res.options = RES_DEFAULT;
	if (res_init() < 0)
		return -1;
	_res.options &= ~(unsigned long)(RES_DNSRCH | RES_DEFNAMES);
	if (getaddrinfo(name, NULL, &hints, &res) != 0 || !res)
		return -1;
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->n = 0;
	for (struct addrinfo *ai = res; ai && out->n < PIN_ADDRS; ai = ai->ai_next) {
		int family;
		const uint8_t *a;

		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		sa_bytes(ai->ai_addr, &family, &a);
		out->addr[out->n].family = family;
		memcpy(out->addr[out->n].a, a, family == AF_INET ? 4 : 16);
		out->n++;
	}
	freeaddrinfo(res);
	if (!out->n)
		return -1;
	/* Two threads may have looked the name up at once: the first to
	 * pin it wins, and both go where the table says. */
	pthread_mutex_lock(&pin_lock);
	now = now_ms();
	for (size_t i = 0; i < PIN_NAMES; i++) {
		if (pins[i].until_ms > now && strcmp(pins[i].name, name) == 0) {
			*out = pins[i];
			pthread_mutex_unlock(&pin_lock);
			return 0;
		}
		/* Else the slot that expires first (an expired or empty one). */
		if (!slot || pins[i].until_ms < slot->until_ms)
			slot = &pins[i];
	}
	out->until_ms = now + PIN_TTL_MS;
	*slot = *out;
	pthread_mutex_unlock(&pin_lock);
	return 0;
}

/* An address literal, held to the address rules alone, into *out.
 * Returns 0, or -1 with the refusal in r. */
static int literal_checked(struct req *r, struct sockaddr_storage *out, socklen_t *outlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	char port[8];
	int family;
	const uint8_t *a;
	const char *v;

	snprintf(port, sizeof(port), "%u", (unsigned)r->t.port);
	if (getaddrinfo(r->t.host, port, &hints, &res) != 0 || !res ||
	    (res->ai_family != AF_INET && res->ai_family != AF_INET6)) {
		if (res)
			freeaddrinfo(res);
		refuse(r, R_RESOLVE, "cannot resolve the name on the host");
		return -1;
	}
	sa_bytes(res->ai_addr, &family, &a);
	inet_ntop(family, a, r->addr, sizeof(r->addr));
	v = addr_verdict(false, family, a, r->t.port, &(int){ LOCAL_UNKNOWN });
	if (!v) {
		memcpy(out, res->ai_addr, res->ai_addrlen);
		*outlen = res->ai_addrlen;
	}
	freeaddrinfo(res);
	if (v) {
		refuse(r, R_POLICY, v);
		return -1;
	}
	return 0;
}

/* Pick the first of the name's pinned addresses the rules allow (for its
 * port) into *out.  Returns 0, or -1 with the refusal in r. */
static int resolve_checked(struct req *r, struct sockaddr_storage *out, socklen_t *outlen)
{
	struct pinned p;
	const char *why = NULL;

	if (r->t.literal)
		return literal_checked(r, out, outlen);
	if (!name_allowed(r->t.host, r->t.port)) {
		refuse(r, R_POLICY, "name not on the allowlist");
		return -1;
	}
	if (resolve_pinned(r->t.host, &p) < 0) {
		refuse(r, R_RESOLVE, "cannot resolve the name on the host");
		return -1;
	}
	for (unsigned i = 0; i < p.n; i++) {
		int family = p.addr[i].family;
		const uint8_t *a = p.addr[i].a;
		const char *v = addr_verdict(true, family, a, r->t.port, &(int){ LOCAL_UNKNOWN });

		if (!why || !v)
			inet_ntop(family, a, r->addr, sizeof(r->addr));
		if (v) {
			why = why ? why : v;
			continue;
		}
		memset(out, 0, sizeof(*out));
		if (family == AF_INET) {
			struct sockaddr_in *sin = (struct sockaddr_in *)out;

			sin->sin_family = AF_INET;
			sin->sin_port = htons(r->t.port);
			memcpy(&sin->sin_addr, a, 4);
			*outlen = sizeof(*sin);
		} else {
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;

			sin6->sin6_family = AF_INET6;
			sin6->sin6_port = htons(r->t.port);
			memcpy(&sin6->sin6_addr, a, 16);
			*outlen = sizeof(*sin6);
		}
		return 0;
	}
	refuse(r, R_POLICY, why);
	return -1;
}

static int connect_to(const struct sockaddr_storage *sa, socklen_t len, int *err)
{
	int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e = 0;
	socklen_t el = sizeof(e);

	if (fd < 0) {
		*err = errno;
		return -1;
	}
	/* Before the connection, so that the window it offers is this. */
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &(int){ UPSTREAM_BUF }, sizeof(int));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){ UPSTREAM_BUF }, sizeof(int));
	if (connect(fd, (const struct sockaddr *)sa, len) < 0) {
		if (errno != EINPROGRESS)
			e = errno;
		else if (wait_fd(fd, POLLOUT, CONNECT_TIMEOUT_MS) < 0)
			e = ETIMEDOUT;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
			e = errno;
		if (e) {
			*err = e;
			close(fd);
			return -1;
		}
	}
	return fd;
}

static bool over_limit(void)
{
	return (max_out && atomic_load(&total_out) >= max_out) || (max_in && atomic_load(&total_in) >= max_in);
}

/* Limits, then the checked address, then a connection to it in r->up.
 * Returns 0, or -1 with the refusal in r. */
static int open_upstream(struct req *r)
{
	struct sockaddr_storage sa;
	socklen_t salen = 0;

	if (atomic_fetch_add(&total_conns, 1) >= max_conns && max_conns) {
		refuse(r, R_LIMIT, "connection limit (MaxConnections)");
		return -1;
	}
	if (over_limit()) {
		refuse(r, R_LIMIT, "byte limit");
		return -1;
	}
	if (resolve_checked(r, &sa, &salen) < 0)
		return -1;
	r->up = connect_to(&sa, salen, &r->connect_errno);
	if (r->up < 0) {
		refuse(r, R_CONNECT, "cannot connect to the destination");
		return -1;
	}
	return 0;
}

/* The first bytes a connection sends (a ClientHello, a plain request's
 * head, what came behind a CONNECT head), counted before they go: if they
 * would take the sandbox past MaxBytesOut they do not go, and the
 * connection ends.  (open_upstream's check alone let each connection set
 * up at once send them: 16,000 bytes reached an upstream under a 1 KiB
 * limit.)  Returns 0, or -1 with r's reason set. */
static int count_out(struct req *r, size_t n)
{
	uint64_t before = atomic_fetch_add(&total_out, n);

	if (max_out && before + n > max_out) {
		r->reason = "byte limit (MaxBytesOut)";
		return -1;
	}
	r->out += n;
	return 0;
}

/* A tunnel to a name (CONNECT or SOCKS) must open with a TLS ClientHello
 * naming that host, or it could carry anything to that address (another
 * name on a shared CDN address, say).  have bytes of it are in buf
 * already.  Forwards the hello; returns 0, or -1 (refused: r says why, and
 * the sandbox got a TLS access_denied alert). */
static int check_tunnel(struct req *r, const uint8_t *buf, size_t have)
{
	static const uint8_t alert[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31 }; /* fatal access_denied */
	_cleanup_free_ uint8_t *hello = malloc(TLS_HELLO_MAX);
	char norm[NET_NAME_MAX + 1];
	size_t hl = have;
	int s;

	if (!hello || have > TLS_HELLO_MAX)
		return -1;
	memcpy(hello, buf, have);
	while (hl < 5 || hl < egress_tls_record_len(hello, hl)) {
		ssize_t n;

		if (hl >= 1 && hello[0] != 0x16)
			break;
		n = recv_some(r->fd, hello + hl, TLS_HELLO_MAX - hl);
		if (n <= 0)
			break;
		hl += (size_t)n;
	}
	s = egress_tls_sni(hello, hl, r->sni, sizeof(r->sni));
	if (s < 0)
		refuse(r, R_POLICY, "not a TLS ClientHello");
	else if (s == 0)
		refuse(r, R_POLICY, "no server name (SNI) in the ClientHello");
	else if (!net_name_normalize(r->sni, norm) || strcmp(norm, r->t.host) != 0)
		refuse(r, R_POLICY, "TLS server name (SNI) is not the CONNECT host");
	else {
		if (count_out(r, hl) < 0)
			return -1;
		return send_all(r->up, hello, hl);
	}
	(void)send_all(r->fd, alert, sizeof(alert));
	return -1;
}

/* ---- relaying: one thread, an epoll loop over the established tunnels;
 * splice(2) through a pipe each way, no copies ---- */

struct dir {
	int from, to, pipe[2];
	size_t inpipe;
	bool eof;
	/* d->to was full with bytes in the pipe (the last pump stopped
	 * there): its writability is what this direction waits for. */
	bool blocked;
	uint64_t *count, max;
	atomic_uint_fast64_t *total;
	const char *limit;
	const char *why;  /* pump's reason for ending the tunnel, if its own */
	uint64_t last_ms; /* when bytes last moved this way: its pipe goes when idle */
	/* Plain HTTP, towards the server: the request body's bytes still to
	 * go; past them nothing more is read from the sandbox (a pipelined
	 * request would reach the server with no Host check).  Unbounded:
	 * UINT64_MAX. */
	uint64_t left;
};

struct tunnel {
	struct req *r;
	struct dir d[2]; /* each with its last_ms: the tunnel's idleness is theirs */
	bool dead, listed;
	/* Whether side 0 (the sandbox's socket) and side 1 (the
	 * destination's) are registered for writability too: only from the
	 * first time a direction waits for it (a tunnel that never fills a
	 * socket, a TLS handshake, gets no wakeup for each ACK). */
	bool out_armed[2];
	struct tunnel *prev, *next; /* the loop's list of tunnels */
	struct tunnel *next_dead;   /* to free; also the queue of new ones */
};

/* Setup threads queue a tunnel under new_lock and wake the loop through
 * an eventfd; from then on only the loop's thread touches it. */
static int relay_ep = -1, relay_wake = -1;
static struct tunnel relay_stop; /* the epoll tag of the SIGTERM signalfd */
static pthread_mutex_t new_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tunnel *new_tunnels, *tunnels;
/* Connections open (in a setup worker or a tunnel), under slot_lock:
 * each tunnel holds six fds, so the cap follows RLIMIT_NOFILE. */
static unsigned open_conns, open_max = 512;

static void conn_closed(void)
{
	pthread_mutex_lock(&slot_lock);
	open_conns--;
	/* An idle worker may wait for room to lead. */
	pthread_cond_signal(&lead_free);
	pthread_mutex_unlock(&slot_lock);
}

static void dir_unpipe(struct dir *d)
{
	if (d->pipe[0] >= 0) {
		close(d->pipe[0]);
		close(d->pipe[1]);
	}
	d->pipe[0] = d->pipe[1] = -1;
}

/* Move what can be moved from d->from into d->to, until either side would
 * block (the loop is edge-triggered).  Returns 0, 1 on a limit, -1 when
 * the connection is to end; sets *moved if anything moved.  The pipe is
 * made when bytes are first to go into it (and closed by the sweep once
 * this way has been idle PIPE_IDLE_MS with the pipe empty). */
static int pump(struct dir *d, bool *moved)
{
	for (;;) {
		bool progress = false;

		if (!d->eof && d->inpipe == 0 && d->left == 0) {
			/* The request was relayed whole: nothing more goes this
			 * way; the server's answer still comes back. */
			d->eof = true;
			progress = true;
		} else if (!d->eof && d->inpipe == 0) {
			uint64_t used = atomic_load(d->total),
				 room = d->max ? (used >= d->max ? 0 : d->max - used) : PIPE_SIZE;
			ssize_t n;
			char c;

			if (room > d->left)
				room = d->left;
			/* The budget is spent: a limit only if bytes wait to go
			 * that way (the other way may still be busy). */
			if (room == 0)
				n = recv(d->from, &c, 1, MSG_PEEK | MSG_DONTWAIT);
			else if (d->pipe[0] < 0 && (n = recv(d->from, &c, 1, MSG_PEEK | MSG_DONTWAIT)) <= 0)
				; /* no pipe before there are bytes: nothing yet, or the end */
			else if (d->pipe[0] < 0 && pipe2(d->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
				d->why = "out of file descriptors or pipes";
				return -1;
			} else
				n = splice(d->from, NULL, d->pipe[1], NULL, room < PIPE_SIZE ? (size_t)room : PIPE_SIZE,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (room == 0 && n > 0)
				return 1;
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				n = 0; /* reset: the same as an end */
			if (n == 0) {
				d->eof = true;
				(void)shutdown(d->to, SHUT_WR);
				progress = true;
			} else if (n > 0) {
				/* ACK now: the sender's Nagle holds its sub-MSS tail
				 * (on loopback, MSS is 64 KiB: most writes) until this
				 * ACK, which the kernel would delay by 40 ms.  Quick-ack
				 * mode does not stick: re-armed after every read. */
				(void)setsockopt(d->from, IPPROTO_TCP, TCP_QUICKACK, &(int){ 1 }, sizeof(int));
				atomic_fetch_add(d->total, (uint64_t)n);
				*d->count += (uint64_t)n;
				if (d->left != UINT64_MAX)
					d->left -= (uint64_t)n;
				d->inpipe = (size_t)n;
				progress = true;
			}
		}
		d->blocked = false;
		if (d->inpipe) {
			ssize_t n = splice(d->pipe[0], NULL, d->to, NULL, d->inpipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);

			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return -1;
			d->blocked = n < 0 && errno == EAGAIN;
			if (n > 0) {
				d->inpipe -= (size_t)n;
				progress = true;
			}
		}
		if (!progress)
			return 0;
		*moved = true;
	}
}

static void tunnel_free(struct tunnel *t)
{
	struct req *r = t->r;

	for (int i = 0; i < 2; i++)
		dir_unpipe(&t->d[i]);
	audit(r);
	close(r->up);
	close(r->fd);
	free(r);
	free(t);
	conn_closed();
}

/* Out of the loop and its list; freed after the batch of events, which
 * may name it again. */
static void tunnel_kill(struct tunnel *t, struct tunnel **dead)
{
	if (t->dead)
		return;
	t->dead = true;
	(void)epoll_ctl(relay_ep, EPOLL_CTL_DEL, t->r->fd, NULL);
	(void)epoll_ctl(relay_ep, EPOLL_CTL_DEL, t->r->up, NULL);
	if (t->listed) {
		if (t->prev)
			t->prev->next = t->next;
		else
			tunnels = t->next;
		if (t->next)
			t->next->prev = t->prev;
	}
	t->next_dead = *dead;
	*dead = t;
}

/* The directions an event can unblock, as a mask of 1 << index into d:
 * d[0] moves the sandbox's socket (side 0) to the destination's (side 1),
 * d[1] the other way.  Readable feeds the direction reading that side,
 * writable drains the one writing to it; an error or a hang-up runs
 * both (to end the tunnel). */
#define DIRS_BOTH 3u
static unsigned event_dirs(uint32_t ev, unsigned side)
{
	unsigned dirs = 0;

	if (ev & (EPOLLERR | EPOLLHUP))
		return DIRS_BOTH;
	if (ev & (EPOLLIN | EPOLLRDHUP))
		dirs |= 1u << side;
	if (ev & EPOLLOUT)
		dirs |= 1u << (1 - side);
	return dirs;
}

/* The epoll registration of side (0: the sandbox's socket, 1: the
 * destination's), edge-triggered, tagged with the side: the tunnel is
 * aligned, bit 0 is free. */
static struct epoll_event tunnel_event(struct tunnel *t, unsigned side)
{
	return (struct epoll_event){ .events = EPOLLIN | EPOLLRDHUP | EPOLLET | (t->out_armed[side] ? EPOLLOUT : 0),
				     .data.u64 = (uintptr_t)t | side };
}

/* Run the directions in dirs (a mask, event_dirs) until they would block. */
static void tunnel_run(struct tunnel *t, unsigned dirs, uint64_t now, struct tunnel **dead)
{
	for (int i = 0; i < 2; i++) {
		bool moved = false;
		int s;

		if (!(dirs & (1u << i)))
			continue;
		s = pump(&t->d[i], &moved);
		if (moved)
			t->d[i].last_ms = now;
		if (s > 0)
			t->r->reason = t->d[i].limit;
		else if (s < 0 && t->d[i].why && !t->r->reason)
			t->r->reason = t->d[i].why;
		if (s != 0)
			return tunnel_kill(t, dead);
	}
	if (t->d[0].eof && !t->d[0].inpipe && t->d[1].eof && !t->d[1].inpipe)
		return tunnel_kill(t, dead);
	for (unsigned i = 0; i < 2; i++) {
		/* d[i] writes to side 1 - i.  Armed while already writable,
		 * the edge is reported at once: no wakeup is lost. */
		unsigned side = 1 - i;
		struct epoll_event ev;

		if (!t->d[i].blocked || t->out_armed[side])
			continue;
		t->out_armed[side] = true;
		ev = tunnel_event(t, side);
		if (epoll_ctl(relay_ep, EPOLL_CTL_MOD, side ? t->r->up : t->r->fd, &ev) < 0) {
			t->r->reason = "out of memory for the relay";
			return tunnel_kill(t, dead);
		}
	}
}

/* Take the queued tunnels into the loop and run each once. */
static void tunnels_add(uint64_t now, struct tunnel **dead)
{
	struct tunnel *q;
	uint64_t v;

	(void)!read(relay_wake, &v, sizeof(v));
	pthread_mutex_lock(&new_lock);
	q = new_tunnels;
	new_tunnels = NULL;
	pthread_mutex_unlock(&new_lock);
	while (q) {
		struct tunnel *t = q;
		struct epoll_event ev0 = tunnel_event(t, 0), ev1 = tunnel_event(t, 1);

		q = t->next_dead;
		t->next_dead = NULL;
		t->next = tunnels;
		t->prev = NULL;
		if (tunnels)
			tunnels->prev = t;
		tunnels = t;
		t->listed = true;
		if (epoll_ctl(relay_ep, EPOLL_CTL_ADD, t->r->fd, &ev0) < 0 ||
		    epoll_ctl(relay_ep, EPOLL_CTL_ADD, t->r->up, &ev1) < 0) {
			t->r->reason = "out of memory for the relay";
			tunnel_kill(t, dead);
			continue;
		}
		tunnel_run(t, DIRS_BOTH, now, dead);
	}
}

/* Free the tunnels a pass of the loop ended (linked by next_dead). */
static void free_dead(struct tunnel *dead)
{
	while (dead) {
		struct tunnel *t = dead;

		dead = t->next_dead;
		tunnel_free(t);
	}
}

/* How long stop() waits for connections still in a setup worker: their
 * sandbox end has gone with the sandbox, so most finish at once (a denied
 * request between its reply and its audit line, a read meeting EOF). */
#define STOP_SETUP_MS 100

/* SIGTERM (egress_stop): the sandbox has ended.  Give the setup workers
 * STOP_SETUP_MS to finish and write their audit lines (one that is still
 * waiting on an upstream then ends unaudited), take in the queued
 * tunnels, move what is still there, end every tunnel (dead: those this
 * batch of events already ended) with its audit line, and exit. */
static __attribute__((noreturn)) void stop(uint64_t now, struct tunnel *dead)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += STOP_SETUP_MS * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&slot_lock);
	while (active > 0 && pthread_cond_timedwait(&slot_free, &slot_lock, &dl) == 0)
		;
	pthread_mutex_unlock(&slot_lock);
	tunnels_add(now, &dead);
	for (struct tunnel *t = tunnels, *next; t; t = next) {
		next = t->next;
		tunnel_run(t, DIRS_BOTH, now, &dead);
		if (!t->dead) {
			if (!t->r->reason)
				t->r->reason = "the sandbox ended";
			tunnel_kill(t, &dead);
		}
	}
	free_dead(dead);
	_exit(0);
}

static void *relay_thread(void *arg)
{
	struct epoll_event ev[64];
	uint64_t swept = now_ms();

	(void)arg;
	for (;;) {
		int n = epoll_wait(relay_ep, ev, 64, 1000);
		uint64_t now = now_ms();
		struct tunnel *dead = NULL;

		for (int i = 0; i < n; i++) {
			struct tunnel *t = (struct tunnel *)(uintptr_t)(ev[i].data.u64 & ~(uint64_t)1);

			if (t == &relay_stop)
				stop(now, dead);
			else if (!t)
				tunnels_add(now, &dead);
			else if (!t->dead)
				/* Only the directions this event can move: an ACK
				 * from one side (writable) costs no read of the other. */
				tunnel_run(t, event_dirs(ev[i].events, (unsigned)(ev[i].data.u64 & 1)), now, &dead);
		}
		if (now - swept >= 1000) {
			swept = now;
			for (struct tunnel *t = tunnels, *next; t; t = next) {
				next = t->next;
				uint64_t last = t->d[0].last_ms > t->d[1].last_ms ? t->d[0].last_ms : t->d[1].last_ms;

				if (now - last >= IDLE_TIMEOUT_MS) {
					t->r->reason = "idle timeout";
					tunnel_kill(t, &dead);
				} else {
					/* A direction idle: its pipe's pages back to the
					 * user (a trickle one way keeps only that way's). */
					for (int i = 0; i < 2; i++)
						if (!t->d[i].inpipe && now - t->d[i].last_ms >= PIPE_IDLE_MS)
							dir_unpipe(&t->d[i]);
				}
			}
		}
		free_dead(dead);
	}
	return NULL;
}

/* Hand r's connection, its destination connected and its first bytes
 * sent, to the relay loop.  Returns 0 (the loop owns r now) or -1 (the
 * caller still does). */
static int relay(struct req *r, uint64_t up_left)
{
	struct tunnel *t = calloc(1, sizeof(*t));
	uint64_t one = 1;

	if (!t) {
		r->reason = "out of memory";
		return -1;
	}
	t->r = r;
	t->d[0] = (struct dir){ .from = r->fd,
				.to = r->up,
				.pipe = { -1, -1 },
				.count = &r->out,
				.max = max_out,
				.total = &total_out,
				.limit = "byte limit (MaxBytesOut)",
				.left = up_left };
	t->d[1] = (struct dir){ .from = r->up,
				.to = r->fd,
				.pipe = { -1, -1 },
				.count = &r->in,
				.max = max_in,
				.total = &total_in,
				.limit = "byte limit (MaxBytesIn)",
				.left = UINT64_MAX };
	t->d[0].last_ms = t->d[1].last_ms = now_ms();
	/* A relay forwards what it got at once: Nagle would hold a short
	 * tail (the end of a TLS record) until the peer's delayed ACK. */
	(void)setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	(void)setsockopt(r->up, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	/* Towards the sandbox, queue little beyond what its receive window
	 * takes; the rest waits in the pipe.  Data queued unsent goes out
	 * when the reader's window update arrives, and on loopback that ACK
	 * is processed at once inside the reader's own read(2): the sandboxed
	 * program paid for the proxy's transmit and its own receive path (ss:
	 * rwnd-limited, up to 1 MiB unsent; perf: the reader's CPU per 16 MiB
	 * HTTPS fetch 45 ms, 38 ms from the origin directly, 38 ms with this).
	 * Bounded, the proxy sends on EPOLLOUT, in its own thread. */
	(void)setsockopt(r->fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &(int){ NOTSENT_LOWAT }, sizeof(int));
	pthread_mutex_lock(&new_lock);
	t->next_dead = new_tunnels;
	new_tunnels = t;
	pthread_mutex_unlock(&new_lock);
	(void)!write(relay_wake, &one, sizeof(one));
	return 0;
}

/* ---- the HTTP proxy ---- */

/* Returns 0 when the relay loop took r over. */
static int serve_http(struct req *r)
{
	/* On the stack (256 KiB a thread here), never __thread: static TLS
	 * of libnsbox is in every thread of every program that links it. */
	char head[HEAD_MAX + 1], out[HEAD_MAX + 512];
	struct egress_http_req h;
	size_t have = 0;
	const char *why, *eoh = NULL;
	uint64_t body = 0;
	int status, outlen = 0;

	snprintf(r->kind, sizeof(r->kind), "http");
	for (;;) {
		ssize_t n = recv_some(r->fd, head + have, HEAD_MAX - have);

		if (n <= 0)
			return -1;
		have += (size_t)n;
		head[have] = '\0';
		if (memchr(head, '\0', have))
			return deny_http(r, 400, "NUL in the request head");
		if ((eoh = strstr(head, "\r\n\r\n")))
			break;
		if (have >= HEAD_MAX)
			return deny_http(r, 400, "request head too long");
	}
	/* What follows the head is the body, or the tunnel's first bytes. */
	why = egress_http_parse(head, (size_t)(eoh - head) + 4, &h);
	if (h.kind == EGRESS_HTTP_CONNECT)
		snprintf(r->kind, sizeof(r->kind), "connect");
	r->t = h.t;
	if (why)
		return deny_http(r, 400, why);
	/* A plain request's head is judged whole before anything connects. */
	if (h.kind != EGRESS_HTTP_CONNECT && (outlen = egress_http_rewrite(&h, out, sizeof(out), &body, &why)) < 0)
		return deny_http(r, 403, why);
	if (open_upstream(r) < 0) {
		status = r->refusal == R_CONNECT ? 502 : 403;
		return deny_http(r, status, r->reason);
	}
	if (h.kind == EGRESS_HTTP_CONNECT) {
		if (send_all(r->fd, "HTTP/1.1 200 Connection established\r\n\r\n", 39) < 0)
			return -1;
		r->decision = "allow";
		if (!r->t.literal) {
			if (check_tunnel(r, (const uint8_t *)head + h.body_at, have - h.body_at) < 0)
				return -1;
		} else if (have > h.body_at) {
			if (count_out(r, have - h.body_at) < 0 ||
			    send_all(r->up, head + h.body_at, have - h.body_at) < 0)
				return -1;
		}
	} else {
		size_t first;

		/* The body's bytes that came with the head; what follows them
		 * (a pipelined request) is not relayed. */
		first = have - h.body_at < body ? have - h.body_at : (size_t)body;
		if (count_out(r, (size_t)outlen + first) < 0)
			return deny_http(r, 403, r->reason);
		r->decision = "allow";
		if (send_all(r->up, out, (size_t)outlen) < 0 || send_all(r->up, head + h.body_at, first) < 0)
			return -1;
		return relay(r, body - first);
	}
	return relay(r, UINT64_MAX);
}

/* ---- the SOCKS5 proxy (RFC 1928; no authentication, CONNECT only) ---- */

static int socks_code(const struct req *r)
{
	if (r->refusal != R_CONNECT)
		return r->refusal == R_RESOLVE ? SOCKS_HOST_UNREACH : SOCKS_NOT_ALLOWED;
	switch (r->connect_errno) {
	case ECONNREFUSED:
		return SOCKS_REFUSED;
	case ENETUNREACH:
		return SOCKS_NET_UNREACH;
	case EHOSTUNREACH:
	case ETIMEDOUT:
		return SOCKS_HOST_UNREACH;
	default:
		return SOCKS_FAIL;
	}
}

/* Returns 0 when the relay loop took r over. */
static int serve_socks(struct req *r)
{
	uint8_t buf[600];
	struct egress_socks_req s;
	size_t have = 0;
	bool noauth = false;
	int n;

	snprintf(r->kind, sizeof(r->kind), "socks");
	while ((n = egress_socks_greeting(buf, have, &noauth)) == 0) {
		ssize_t got = recv_some(r->fd, buf + have, sizeof(buf) - have);

		if (got <= 0)
			return -1;
		have += (size_t)got;
	}
	if (n < 0) {
		r->reason = "not SOCKS5";
		return -1;
	}
	if (!noauth) {
		r->reason = "SOCKS5 without the no-authentication method";
		(void)send_all(r->fd, "\x05\xff", 2);
		return -1;
	}
	if (send_all(r->fd, "\x05\x00", 2) < 0)
		return -1;
	/* The client may have sent its request with the greeting. */
	have -= (size_t)n;
	memmove(buf, buf + n, have);
	while ((n = egress_socks_request(buf, have, &s)) == 0) {
		ssize_t got = recv_some(r->fd, buf + have, sizeof(buf) - have);

		if (got <= 0)
			return -1;
		have += (size_t)got;
	}
	r->t = s.t;
	if (n < 0) {
		r->reason = -n == SOCKS_BAD_ATYP       ? "SOCKS address type not supported"
			    : -n == SOCKS_HOST_UNREACH ? "not a host name"
						       : "not a SOCKS5 request";
		return socks_reply(r, -n);
	}
	if (s.cmd != 1) {
		r->reason = s.cmd == 2	 ? "SOCKS BIND is not supported"
			    : s.cmd == 3 ? "SOCKS UDP ASSOCIATE is not supported"
					 : "unknown SOCKS command";
		return socks_reply(r, SOCKS_BAD_COMMAND);
	}
	if (open_upstream(r) < 0)
		return socks_reply(r, socks_code(r));
	if (socks_reply(r, SOCKS_OK) < 0)
		return -1;
	r->decision = "allow";
	have -= (size_t)n;
	if (!r->t.literal) {
		if (check_tunnel(r, buf + n, have) < 0)
			return -1;
	} else if (have) {
		if (count_out(r, have) < 0 || send_all(r->up, buf + n, have) < 0)
			return -1;
	}
	return relay(r, UINT64_MAX);
}

/* Serve connection c (from the SOCKS listener if socks) through its setup. */
static void serve(int c, bool socks)
{
	struct req *r = calloc(1, sizeof(*r));

	if (!r) {
		close(c);
		conn_closed();
		return;
	}
	r->fd = c;
	r->socks = socks;
	r->up = -1;
	if ((r->socks ? serve_socks(r) : serve_http(r)) < 0) {
		audit(r);
		if (r->up >= 0)
			close(r->up);
		close(r->fd);
		free(r);
		conn_closed();
	}
}

/* The leader's wait: the next connection on either listening socket. */
static int accept_next(const int *listen_fds, bool *socks)
{
	for (;;) {
		struct pollfd l[2] = { { .fd = listen_fds[EGRESS_NS_HTTP], .events = POLLIN },
				       { .fd = listen_fds[EGRESS_NS_SOCKS], .events = POLLIN } };

		if (poll(l, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		for (int i = 0; i < 2; i++) {
			int c;

			if (!(l[i].revents & POLLIN))
				continue;
			c = accept4(l[i].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (c >= 0) {
				*socks = i == 1;
				return c;
			}
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED && errno != EMFILE &&
			    errno != ENFILE && errno != ENOBUFS && errno != ENOMEM)
				_exit(1);
		}
	}
}

static void *worker_thread(void *arg)
{
	const int *listen_fds = arg;

	pthread_mutex_lock(&slot_lock);
	for (;;) {
		bool socks = false, spawn;
		int c;

		while (leading || open_conns >= open_max)
			pthread_cond_wait(&lead_free, &slot_lock);
		leading = true;
		pthread_mutex_unlock(&slot_lock);
		c = accept_next(listen_fds, &socks);
		pthread_mutex_lock(&slot_lock);
		leading = false;
		idle--;
		active++;
		open_conns++;
		spawn = !idle && workers < threads_max;
		pthread_mutex_unlock(&slot_lock);
		/* The lead passes on; the main thread starts a worker when none
		 * is idle, off this connection's path.  Signalled unlocked: the
		 * woken thread does not wait for this one's mutex. */
		if (spawn)
			pthread_cond_signal(&need_worker);
		pthread_cond_signal(&lead_free);
		pace();
		serve(c, socks);
		/* Back to the lead if no one has it (no one else is woken). */
		pthread_mutex_lock(&slot_lock);
		active--;
		idle++;
		/* stop() may be waiting. */
		pthread_cond_broadcast(&slot_free);
	}
	return NULL;
}

/* ---- DNS responder: answers allowlisted names, forwards nothing ---- */

static bool dns_name_allowed(const char *name)
{
	for (unsigned i = 0; i < n_rules; i++)
		if (net_rule_match_name(&rules[i], name, rules[i].port ? rules[i].port : 443) ||
		    net_rule_match_name(&rules[i], name, 80))
			return true;
	return false;
}

/* Whether the proxy would connect to the address on some port a rule
 * names (443 and 80 for rules without one). */
static bool dns_addr_allowed(int family, const uint8_t *ad)
{
	int local = LOCAL_UNKNOWN;

	if (!addr_verdict(true, family, ad, 443, &local) || !addr_verdict(true, family, ad, 80, &local))
		return true;
	for (unsigned i = 0; i < n_rules; i++)
		if (rules[i].port && !addr_verdict(true, family, ad, rules[i].port, &local))
			return true;
	return false;
}

static void *dns_thread(void *arg)
{
	int fd = *(int *)arg;
	uint8_t q[EGRESS_DNS_MAX], a[EGRESS_DNS_MAX];

	for (;;) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
		struct egress_dns_query d;
		struct req r = { .t.port = 53 };
		unsigned ancount = 0;
		int rcode = 0;
		size_t o;

		if (n < 0)
			continue;
		pace();
		if (egress_dns_parse(q, (size_t)n, &d) < 0)
			continue;
		snprintf(r.kind, sizeof(r.kind), "dns");
		snprintf(r.t.host, sizeof(r.t.host), "%s", d.name);
		o = egress_dns_answer_start(q, &d, a);
		if (!d.name[0] || !dns_name_allowed(d.name)) {
			rcode = 3; /* NXDOMAIN, here: the query goes nowhere */
			r.decision = "deny";
			r.reason = d.name[0] ? "name not on the allowlist" : "not a host name";
		} else if (d.qtype == 1 || d.qtype == 28) {
			struct pinned p;
			int want = d.qtype == 1 ? AF_INET : AF_INET6;

			r.decision = "allow";
			/* The name as the proxy will see it: lowercase, no dot. */
			if (resolve_pinned(d.name, &p) == 0) {
				for (unsigned i = 0; i < p.n && ancount < 8; i++) {
					const uint8_t *ad = p.addr[i].a;

					/* Only what the proxy would connect to. */
					if (p.addr[i].family != want || !dns_addr_allowed(want, ad))
						continue;
					if (egress_dns_answer_add(a, &o, d.qtype, ad, want == AF_INET ? 4 : 16) < 0)
						break;
					ancount++;
					if (!r.addr[0])
						inet_ntop(want, ad, r.addr, sizeof(r.addr));
				}
			}
		} else {
			r.decision = "allow";
		}
		egress_dns_answer_finish(a, rcode, ancount);
		/* Logged before the answer goes: once the sandbox has it, it
		 * may end, and the proxy with it, before a line written after
		 * (CI found the query missing from the log under load). */
		audit(&r);
		(void)sendto(fd, a, o, MSG_NOSIGNAL, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

/* ---- main ---- */

static int recv_fds(int sock, int fds[EGRESS_NS_SOCKETS], int flags)
{
	char c;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(EGRESS_NS_SOCKETS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
	    cm->cmsg_len != CMSG_LEN(EGRESS_NS_SOCKETS * sizeof(int))) {
		/* Whatever came is closed, not kept. */
		for (; cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
					int fd;

					memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
					close(fd);
				}
		return -1;
	}
	memcpy(fds, CMSG_DATA(cm), EGRESS_NS_SOCKETS * sizeof(int));
	return 0;
}

int egress_recv_socks(int proxy_fd, int socks[EGRESS_NS_SOCKETS])
{
	return recv_fds(proxy_fd, socks, MSG_DONTWAIT);
}

void egress_proxy_main(const struct nsbox_policy *p, int ns_fd, const int *socks, const int *audit_fds,
		       size_t n_audit_fds)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t term;
	struct rlimit nofile;
	int fds[EGRESS_NS_SOCKETS], term_fd;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&term);
	sigprocmask(SIG_SETMASK, &term, NULL);
	for (size_t i = 0; i < p->n_net_allow && n_rules < POLICY_MAX_NET_RULES; i++)
		if (net_rule_parse(p->net_allow[i], &rules[n_rules], NULL) == 0)
			n_rules++;
	for (size_t i = 0; i < n_audit_fds && n_log_fds < ARRAY_SIZE(log_fds); i++) {
		struct stat st;

		log_cap[n_log_fds] = UINT64_MAX;
		if (p->net_max_log && fstat(audit_fds[i], &st) == 0 && S_ISREG(st.st_mode)) {
			log_cap[n_log_fds] = p->net_max_log;
			/* Full already, by its size alone (an earlier start
			 * wrote it up to the cap, its last line saying so; its
			 * content, perhaps in the sandbox's workspace, is not
			 * read): no room for a longest line and the log-full
			 * line, so not even a shorter line goes after that. */
			if ((uint64_t)st.st_size + EGRESS_AUDIT_LINE_MAX + LOG_FULL_LINE > p->net_max_log) {
				close(audit_fds[i]);
				continue;
			}
		}
		log_fds[n_log_fds++] = audit_fds[i];
	}
	max_out = p->net_max_out;
	max_in = p->net_max_in;
	max_conns = p->net_max_conns;
	/* EOF here: pid 1 died before its network was made. */
	if (socks)
		memcpy(fds, socks, sizeof(fds));
	else if (recv_fds(ns_fd, fds, 0) < 0)
		_exit(0);
	close(ns_fd);
	/* From here SIGTERM is read by the relay loop (stop), and every
	 * thread blocks it; until here it ends the process at once. */
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_SETMASK, &term, NULL);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	/* Six fds a tunnel (two sockets, two pipes); a few for the rest. */
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
		nofile.rlim_cur = nofile.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &nofile);
		if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
		    (nofile.rlim_cur - 32) / 6 < open_max)
			open_max = nofile.rlim_cur > 6 * 8 + 32 ? (unsigned)((nofile.rlim_cur - 32) / 6) : 8;
	}
	/* No more setup workers than the sandbox may have tasks (at least 2:
	 * one accepts while another serves). */
	if (p->pids && p->pids < threads_max)
		threads_max = p->pids > 2 ? (unsigned)p->pids : 2;
	/* And no more than the sandbox's memory limit pays for (at least 4). */
	if (p->memory && p->memory / TUNNEL_MEM < open_max)
		open_max = p->memory / TUNNEL_MEM > 4 ? (unsigned)(p->memory / TUNNEL_MEM) : 4;
	/* Nor, with both pipes full, more than a quarter of the user's pipe
	 * pages (at least 8 tunnels). */
	{
		char v[32];
		unsigned long soft = 0, cap;

		if (read_file("/proc/sys/fs/pipe-user-pages-soft", v, sizeof(v)) > 0) {
			v[strcspn(v, "\n")] = '\0';
			if (parse_ulong(v, ULONG_MAX, &soft) < 0)
				soft = 0;
		}
		cap = soft / 4 / (2 * PIPE_PAGES);
		if (soft && cap < open_max)
			open_max = cap > 8 ? (unsigned)cap : open_max > 8 ? 8 : open_max;
	}
	term_fd = signalfd(-1, &term, SFD_CLOEXEC | SFD_NONBLOCK);
	if (term_fd < 0)
		_exit(1);
	/* Nothing more until the sandbox first asks: most sandboxes with an
	 * allowlist start, run and end without a connection or a lookup, and
	 * a proxy of one thread costs their start and their end less (the
	 * threads' stacks, and the kill and reap of four threads at the end).
	 * A connection or a query waits meanwhile in its socket's queue. */
	{
		struct pollfd pf[] = { { .fd = fds[EGRESS_NS_HTTP], .events = POLLIN },
				       { .fd = fds[EGRESS_NS_SOCKS], .events = POLLIN },
				       { .fd = fds[EGRESS_NS_DNS], .events = POLLIN },
				       { .fd = term_fd, .events = POLLIN } };
		int n;

		while ((n = poll(pf, ARRAY_SIZE(pf), -1)) < 0 && errno == EINTR)
			;
		/* Stopped before any request: no tunnel, no audit line. */
		if (n < 0 || pf[3].revents)
			_exit(0);
	}
	relay_ep = epoll_create1(EPOLL_CLOEXEC);
	relay_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (relay_ep < 0 || relay_wake < 0 ||
	    epoll_ctl(relay_ep, EPOLL_CTL_ADD, relay_wake, &(struct epoll_event){ .events = EPOLLIN }) < 0 ||
	    epoll_ctl(relay_ep, EPOLL_CTL_ADD, term_fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.ptr = &relay_stop }) < 0 ||
	    pthread_create(&t, &attr, dns_thread, &fds[EGRESS_NS_DNS]) != 0 ||
	    pthread_create(&t, &attr, relay_thread, NULL) != 0)
		_exit(1);
	/* Start setup workers as they are needed: one at first, another
	 * whenever none is idle (up to threads_max); they stay. */
	pthread_mutex_lock(&slot_lock);
	for (;;) {
		while (idle || workers >= threads_max)
			pthread_cond_wait(&need_worker, &slot_lock);
		workers++;
		idle++;
		pthread_mutex_unlock(&slot_lock);
		if (pthread_create(&t, &attr, worker_thread, fds) != 0) {
			pthread_mutex_lock(&slot_lock);
			workers--;
			idle--;
			if (!workers)
				_exit(1);
			/* Out of threads: the ones there are serve; try later. */
			pthread_mutex_unlock(&slot_lock);
			(void)nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000000L }, NULL);
		}
		pthread_mutex_lock(&slot_lock);
	}
}
