/* The proxy process: an HTTP proxy and a DNS stub serving sockets that
 * live on the sandbox's loopback (egress.h).  Everything from inside is
 * hostile: request heads are bounded, every wait has a timeout, the
 * number of connection threads is capped, and each destination is checked
 * after resolution and then connected to by address (no second lookup, so
 * no DNS rebinding between check and use). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "egress.h"
#include "netrule.h"
#include "util.h"

#define HEAD_MAX 8192
#define TLS_HELLO_MAX (16384 + 5)
#define THREADS_MAX 64
#define IO_TIMEOUT_MS 30000
#define CONNECT_TIMEOUT_MS 10000

static struct net_rule rules[POLICY_MAX_NET_RULES];
static unsigned n_rules;
static int log_fd = -1;
static uint64_t max_out, max_in, max_conns;
static atomic_uint_fast64_t total_out, total_in, total_conns;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_free = PTHREAD_COND_INITIALIZER;
static unsigned active;

struct req {
	int fd, up;
	char kind[8];			/* "connect", "http", "dns" */
	char host[NET_NAME_MAX + 1];
	uint16_t port;
	char addr[INET6_ADDRSTRLEN];
	char sni[NET_NAME_MAX + 1];
	const char *decision, *reason;
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

static void audit(const struct req *r)
{
	char line[2048], host[600], sni[600], reason[300];
	struct timespec ts;
	int n;

	if (log_fd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	json_str(host, sizeof(host), r->host);
	json_str(sni, sizeof(sni), r->sni);
	json_str(reason, sizeof(reason), r->reason ? r->reason : "");
	n = snprintf(line, sizeof(line),
		     "{\"time\":%lld.%03ld,\"kind\":\"%s\",\"host\":\"%s\",\"port\":%u,\"addr\":\"%s\",\"sni\":\"%s\","
		     "\"decision\":\"%s\",\"reason\":\"%s\",\"bytes_out\":%llu,\"bytes_in\":%llu}\n",
		     (long long)ts.tv_sec, ts.tv_nsec / 1000000, r->kind, host, (unsigned)r->port, r->addr, sni,
		     r->decision ? r->decision : "deny", reason, (unsigned long long)r->out,
		     (unsigned long long)r->in);
	if (n <= 0 || (size_t)n >= sizeof(line))
		return;
	pthread_mutex_lock(&log_lock);
	(void)write_full(log_fd, line, (size_t)n);
	pthread_mutex_unlock(&log_lock);
}

/* ---- io ---- */

static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r > 0 ? 0 : -1;
}

static ssize_t recv_some(int fd, char *buf, size_t len)
{
	ssize_t n;

	if (wait_fd(fd, POLLIN, IO_TIMEOUT_MS) < 0)
		return -1;
	do
		n = recv(fd, buf, len, 0);
	while (n < 0 && errno == EINTR);
	return n;
}

static int send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT, IO_TIMEOUT_MS) == 0)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void deny(struct req *r, int status, const char *reason)
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
}

/* ---- the decision ---- */

static bool name_allowed(const char *name, uint16_t port)
{
	for (unsigned i = 0; i < n_rules; i++)
		if (net_rule_match_name(&rules[i], name, port))
			return true;
	return false;
}

static void sa_bytes(const struct sockaddr *sa, int *family, const uint8_t **a)
{
	*family = sa->sa_family;
	*a = sa->sa_family == AF_INET ? (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr
				      : (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
}

/* Pick the first resolved address the rules allow into *out.  Returns
 * NULL, or why not (static strings). */
static const char *resolve_checked(struct req *r, struct sockaddr_storage *out, socklen_t *outlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	uint8_t lit[16];
	char port[8];
	const char *why = NULL;
	bool literal = false, name_ok = false;

	if (inet_pton(AF_INET, r->host, lit) == 1 || inet_pton(AF_INET6, r->host, lit) == 1) {
		literal = true;
		hints.ai_flags |= AI_NUMERICHOST;
	} else {
		name_ok = name_allowed(r->host, r->port);
		if (!name_ok)
			return "name not on the allowlist";
	}
	snprintf(port, sizeof(port), "%u", (unsigned)r->port);
	if (getaddrinfo(r->host, port, &hints, &res) != 0 || !res)
		return "cannot resolve the name on the host";
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int family;
		const uint8_t *a;
		const char *v;

		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		sa_bytes(ai->ai_addr, &family, &a);
		v = net_addr_verdict(rules, n_rules, name_ok, family, a, r->port);
		if (!v) {
			memcpy(out, ai->ai_addr, ai->ai_addrlen);
			*outlen = ai->ai_addrlen;
			inet_ntop(family, a, r->addr, sizeof(r->addr));
			freeaddrinfo(res);
			return NULL;
		}
		if (!why) {
			why = v;
			inet_ntop(family, a, r->addr, sizeof(r->addr));
		}
	}
	freeaddrinfo(res);
	(void)literal;
	return why ? why : "no usable address";
}

static int connect_to(const struct sockaddr_storage *sa, socklen_t len)
{
	int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e = 0;
	socklen_t el = sizeof(e);

	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)sa, len) < 0 &&
	    (errno != EINPROGRESS || wait_fd(fd, POLLOUT, CONNECT_TIMEOUT_MS) < 0 ||
	     getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e != 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- TLS: the server_name of a ClientHello (RFC 8446 4.1.2, RFC 6066 3) ---- */

static int tls_sni(const uint8_t *b, size_t n, char *out, size_t outsize)
{
	size_t p, end, l;

	if (n < 5 || b[0] != 0x16)
		return -1;	/* not a TLS handshake record */
	end = 5 + ((size_t)b[3] << 8 | b[4]);
	if (end > n)
		return -1;
	p = 5;
	if (p + 4 > end || b[p] != 1)
		return -1;	/* not a ClientHello */
	p += 4 + 2 + 32;	/* handshake header, legacy_version, random */
	if (p + 1 > end)
		return -1;
	p += 1 + b[p];		/* session id */
	if (p + 2 > end)
		return -1;
	p += 2 + ((size_t)b[p] << 8 | b[p + 1]);	/* cipher suites */
	if (p + 1 > end)
		return -1;
	p += 1 + b[p];		/* compression methods */
	if (p + 2 > end)
		return 0;	/* no extensions: no name */
	l = (size_t)b[p] << 8 | b[p + 1];
	p += 2;
	if (p + l < end)
		end = p + l;
	while (p + 4 <= end) {
		size_t type = (size_t)b[p] << 8 | b[p + 1], len = (size_t)b[p + 2] << 8 | b[p + 3];

		p += 4;
		if (p + len > end)
			return -1;
		if (type == 0) {	/* server_name: list length, then type 0 host_name */
			size_t q = p + 2;

			if (len < 5 || b[q] != 0)
				return -1;
			l = (size_t)b[q + 1] << 8 | b[q + 2];
			if (q + 3 + l > p + len || l == 0 || l >= outsize)
				return -1;
			memcpy(out, b + q + 3, l);
			out[l] = '\0';
			if (memchr(out, '\0', l))
				return -1;
			return 1;
		}
		p += len;
	}
	return 0;
}

/* ---- relaying ---- */

static bool over_limit(void)
{
	return (max_out && atomic_load(&total_out) >= max_out) || (max_in && atomic_load(&total_in) >= max_in);
}

static void relay(struct req *r)
{
	struct pollfd p[2] = { { .fd = r->fd, .events = POLLIN }, { .fd = r->up, .events = POLLIN } };
	char buf[65536];
	bool open_[2] = { true, true };

	while (open_[0] || open_[1]) {
		int n = poll(p, 2, 300000);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r->reason = "idle timeout";
			return;
		}
		for (int i = 0; i < 2; i++) {
			ssize_t got;
			uint64_t room;

			if (!open_[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			/* Never past the sandbox's budget: read no more than is left. */
			{
				uint64_t lim = i == 0 ? max_out : max_in;
				uint64_t used = atomic_load(i == 0 ? &total_out : &total_in);

				room = !lim ? sizeof(buf) : used >= lim ? 0 : lim - used;
			}
			if (over_limit() || room == 0) {
				r->reason = i == 0 ? "byte limit (MaxBytesOut)" : "byte limit (MaxBytesIn)";
				return;
			}
			got = recv(p[i].fd, buf, room < sizeof(buf) ? (size_t)room : sizeof(buf), 0);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got <= 0) {
				open_[i] = false;
				p[i].fd = -1;
				(void)shutdown(i == 0 ? r->up : r->fd, SHUT_WR);
				continue;
			}
			if (i == 0) {
				atomic_fetch_add(&total_out, (uint64_t)got);
				r->out += (uint64_t)got;
			} else {
				atomic_fetch_add(&total_in, (uint64_t)got);
				r->in += (uint64_t)got;
			}
			if (send_all(i == 0 ? r->up : r->fd, buf, (size_t)got) < 0)
				return;
		}
	}
}

/* "host:port" or "[v6]:port" into r; default_port when none. */
static int split_hostport(const char *s, size_t len, uint16_t default_port, struct req *r)
{
	char tmp[NET_NAME_MAX + 8];
	const char *port = NULL;
	char *h = tmp;
	unsigned long v;

	if (len == 0 || len >= sizeof(tmp))
		return -1;
	memcpy(tmp, s, len);
	tmp[len] = '\0';
	if (tmp[0] == '[') {
		char *e = strchr(tmp, ']');

		if (!e || (e[1] && e[1] != ':'))
			return -1;
		*e = '\0';
		h = tmp + 1;
		if (e[1] == ':')
			port = e + 2;
		if (strlen(h) >= sizeof(r->host))
			return -1;
		strcpy(r->host, h);
	} else {
		char *c = strchr(tmp, ':');

		if (c) {
			*c = '\0';
			port = c + 1;
		}
		if (!net_name_normalize(h, r->host))
			return -1;
	}
	if (port) {
		if (parse_ulong(port, 65535, &v) < 0 || v == 0)
			return -1;
		r->port = (uint16_t)v;
	} else {
		if (!default_port)
			return -1;
		r->port = default_port;
	}
	return 0;
}

/* The header lines of a plain HTTP request, for the origin server: no
 * Proxy-* or hop-by-hop ones, Connection: close (one request per proxied
 * connection: the Host header checked below is the one sent).  Returns
 * the new length or -1. */
static int rewrite_head(struct req *r, const char *method, const char *path, const char *version,
			const char *headers, char *out, size_t size, const char **why)
{
	size_t o = (size_t)snprintf(out, size, "%s %s %s\r\n", method, path, version);
	const char *line = headers;
	bool host_seen = false;

	while (*line && !(line[0] == '\r' && line[1] == '\n')) {
		const char *eol = strstr(line, "\r\n");
		size_t ll;

		if (!eol)
			return -1;
		ll = (size_t)(eol - line);
		if (strncasecmp(line, "Host:", 5) == 0) {
			struct req h = { 0 };
			const char *v = line + 5;

			while (*v == ' ' || *v == '\t')
				v++;
			if (host_seen || split_hostport(v, (size_t)(eol - v), r->port, &h) < 0 ||
			    strcmp(h.host, r->host) != 0 || h.port != r->port) {
				*why = "Host header names another host";
				return -1;
			}
			host_seen = true;
		}
		if (strncasecmp(line, "Proxy-", 6) != 0 && strncasecmp(line, "Connection:", 11) != 0 &&
		    strncasecmp(line, "Keep-Alive:", 11) != 0) {
			if (o + ll + 2 >= size)
				return -1;
			memcpy(out + o, line, ll + 2);
			o += ll + 2;
		}
		line = eol + 2;
	}
	o += (size_t)snprintf(out + o, size - o, "%sConnection: close\r\n\r\n", "");
	if (!host_seen) {
		int n = snprintf(out + o - 2, size - o + 2, "Host: %s:%u\r\n\r\n", r->host, (unsigned)r->port);

		o += (size_t)n - 2;
	}
	return o < size ? (int)o : -1;
}

static void serve(struct req *r)
{
	char head[HEAD_MAX + 1], method[16], version[16];
	static __thread char out[HEAD_MAX + 512];
	uint8_t *hello = NULL;
	size_t have = 0, body_at;
	struct sockaddr_storage sa;
	socklen_t salen = 0;
	const char *why, *target, *sp1, *sp2, *eoh;

	snprintf(r->kind, sizeof(r->kind), "http");
	for (;;) {
		ssize_t n = recv_some(r->fd, head + have, HEAD_MAX - have);

		if (n <= 0)
			return;
		have += (size_t)n;
		head[have] = '\0';
		if (memchr(head, '\0', have))
			return deny(r, 400, "NUL in the request head");
		if ((eoh = strstr(head, "\r\n\r\n")))
			break;
		if (have >= HEAD_MAX)
			return deny(r, 400, "request head too long");
	}
	body_at = (size_t)(eoh - head) + 4;
	sp1 = strchr(head, ' ');
	sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1 - head >= (long)sizeof(method) || strstr(head, "\r\n") < sp2)
		return deny(r, 400, "not an HTTP request line");
	memcpy(method, head, (size_t)(sp1 - head));
	method[sp1 - head] = '\0';
	{
		const char *eol = strstr(sp2, "\r\n");
		size_t vl = (size_t)(eol - sp2 - 1);

		if (vl >= sizeof(version) || strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
			return deny(r, 400, "not HTTP/1.x");
		memcpy(version, sp2 + 1, vl);
		version[vl] = '\0';
	}
	target = sp1 + 1;
	const char *path = "/";
	size_t pathlen = 1;
	if (strcmp(method, "CONNECT") == 0) {
		snprintf(r->kind, sizeof(r->kind), "connect");
		if (split_hostport(target, (size_t)(sp2 - target), 0, r) < 0)
			return deny(r, 400, "CONNECT needs HOST:PORT");
	} else {
		const char *hs, *he;

		if (strncasecmp(target, "http://", 7) != 0)
			return deny(r, 400, "only absolute http:// URIs and CONNECT are proxied");
		hs = target + 7;
		he = hs + strcspn(hs, "/? ");
		if (he > sp2)
			he = sp2;
		if (split_hostport(hs, (size_t)(he - hs), 80, r) < 0)
			return deny(r, 400, "bad host in the URI");
		if (memchr(hs, '@', (size_t)(he - hs)))
			return deny(r, 400, "userinfo in the URI");
		if (*he == '/' || *he == '?') {
			path = he;
			pathlen = (size_t)(sp2 - he);
		}
	}
	if (atomic_fetch_add(&total_conns, 1) >= max_conns && max_conns)
		return deny(r, 403, "connection limit (MaxConnections)");
	if (over_limit())
		return deny(r, 403, "byte limit");
	why = resolve_checked(r, &sa, &salen);
	if (why)
		return deny(r, 403, why);
	r->up = connect_to(&sa, salen);
	if (r->up < 0)
		return deny(r, 502, "cannot connect to the destination");

	if (strcmp(r->kind, "connect") == 0) {
		uint8_t alert[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31 };	/* fatal access_denied */
		uint8_t lit[16];
		bool is_name = inet_pton(AF_INET, r->host, lit) != 1 && inet_pton(AF_INET6, r->host, lit) != 1;
		size_t hl = have - body_at;
		int s;

		if (send_all(r->fd, "HTTP/1.1 200 Connection established\r\n\r\n", 39) < 0)
			return;
		r->decision = "allow";
		if (is_name) {
			/* A name was allowed: the TLS handshake must name it too,
			 * or the tunnel could carry anything to this address. */
			hello = malloc(TLS_HELLO_MAX);
			if (!hello)
				return;
			memcpy(hello, head + body_at, hl);
			while (hl < 5 || hl < 5 + ((size_t)hello[3] << 8 | hello[4])) {
				ssize_t n;

				if (hl >= 5 && hello[0] != 0x16)
					break;
				n = recv_some(r->fd, (char *)hello + hl, TLS_HELLO_MAX - hl);
				if (n <= 0)
					break;
				hl += (size_t)n;
			}
			s = tls_sni(hello, hl, r->sni, sizeof(r->sni));
			if (s < 0) {
				r->decision = "deny";
				r->reason = "not a TLS ClientHello";
			} else if (s == 0) {
				r->decision = "deny";
				r->reason = "no server name (SNI) in the ClientHello";
			} else {
				char norm[NET_NAME_MAX + 1];

				if (!net_name_normalize(r->sni, norm) || strcmp(norm, r->host) != 0) {
					r->decision = "deny";
					r->reason = "TLS server name (SNI) is not the CONNECT host";
				}
			}
			if (strcmp(r->decision, "deny") == 0) {
				(void)send_all(r->fd, (const char *)alert, sizeof(alert));
				free(hello);
				return;
			}
			atomic_fetch_add(&total_out, hl);
			r->out += hl;
			if (send_all(r->up, (const char *)hello, hl) < 0) {
				free(hello);
				return;
			}
			free(hello);
		} else if (hl) {
			atomic_fetch_add(&total_out, hl);
			r->out += hl;
			if (send_all(r->up, head + body_at, hl) < 0)
				return;
		}
	} else {
		char p[HEAD_MAX];
		int n;

		memcpy(p, path, pathlen);
		p[pathlen] = '\0';
		n = rewrite_head(r, method, p, version, strstr(head, "\r\n") + 2, out, sizeof(out), &why);
		if (n < 0) {
			close(r->up);
			r->up = -1;
			return deny(r, 403, why ? why : "request head too long");
		}
		r->decision = "allow";
		r->out += (uint64_t)n + (have - body_at);
		atomic_fetch_add(&total_out, (uint64_t)n + (have - body_at));
		if (send_all(r->up, out, (size_t)n) < 0 || send_all(r->up, head + body_at, have - body_at) < 0)
			return;
	}
	relay(r);
}

static void *conn_thread(void *arg)
{
	struct req *r = arg;

	r->up = -1;
	serve(r);
	audit(r);
	if (r->up >= 0)
		close(r->up);
	close(r->fd);
	free(r);
	pthread_mutex_lock(&slot_lock);
	active--;
	pthread_cond_signal(&slot_free);
	pthread_mutex_unlock(&slot_lock);
	return NULL;
}

/* ---- DNS stub (RFC 1035 4.1): answers allowlisted names, forwards nothing ---- */

static void *dns_thread(void *arg)
{
	int fd = *(int *)arg;
	uint8_t q[512], a[512];

	for (;;) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
		struct req r = { .port = 443 };
		size_t p = 12, o = 0, qend;
		uint16_t qtype, ancount = 0;
		int rcode = 0;

		if (n < 12 || (q[2] & 0x80) || q[4] != 0 || q[5] != 1)
			continue;	/* not a query with one question */
		snprintf(r.kind, sizeof(r.kind), "dns");
		while (p < (size_t)n && q[p] && o < NET_NAME_MAX) {
			size_t l = q[p];

			if (l > 63 || p + 1 + l > (size_t)n || o + l + 1 > NET_NAME_MAX)
				break;
			if (o)
				r.host[o++] = '.';
			memcpy(r.host + o, q + p + 1, l);
			o += l;
			p += 1 + l;
		}
		r.host[o] = '\0';
		if (p + 5 > (size_t)n || q[p] != 0)
			continue;
		qend = p + 5;
		qtype = (uint16_t)(q[p + 1] << 8 | q[p + 2]);
		memcpy(a, q, qend);
		a[2] = (uint8_t)(0x80 | (q[2] & 0x79));	/* QR, opcode, RD */
		a[4] = 0, a[5] = 1;
		memset(a + 6, 0, 6);
		o = qend;
		{
			char norm[NET_NAME_MAX + 1];
			bool ok = false;

			if (net_name_normalize(r.host, norm)) {
				strcpy(r.host, norm);
				for (unsigned i = 0; i < n_rules && !ok; i++)
					ok = net_rule_match_name(&rules[i], norm, rules[i].port ? rules[i].port : 443) ||
					     net_rule_match_name(&rules[i], norm, 80);
			}
			if (!ok) {
				rcode = 3;	/* NXDOMAIN, here: the query goes nowhere */
				r.decision = "deny";
				r.reason = "name not on the allowlist";
			} else if (qtype == 1 || qtype == 28) {
				struct addrinfo hints = { .ai_family = qtype == 1 ? AF_INET : AF_INET6,
							  .ai_socktype = SOCK_STREAM };
				struct addrinfo *res = NULL;

				r.decision = "allow";
				if (getaddrinfo(norm, NULL, &hints, &res) == 0) {
					for (struct addrinfo *ai = res; ai && ancount < 8; ai = ai->ai_next) {
						int family;
						const uint8_t *ad;
						size_t al = qtype == 1 ? 4 : 16;

						sa_bytes(ai->ai_addr, &family, &ad);
						/* Only what the proxy would connect to. */
						if (net_addr_verdict(rules, n_rules, true, family, ad, 443) &&
						    net_addr_verdict(rules, n_rules, true, family, ad, 80))
							continue;
						if (o + 12 + al > sizeof(a))
							break;
						uint8_t rr[12] = { 0xc0, 12, 0, (uint8_t)qtype, 0, 1, 0, 0, 0, 60, 0,
								   (uint8_t)al };
						memcpy(a + o, rr, 12);
						memcpy(a + o + 12, ad, al);
						o += 12 + al;
						ancount++;
						if (!r.addr[0])
							inet_ntop(family, ad, r.addr, sizeof(r.addr));
					}
					freeaddrinfo(res);
				}
			} else {
				r.decision = "allow";
			}
		}
		a[3] = (uint8_t)(0x80 | rcode);	/* RA */
		a[6] = (uint8_t)(ancount >> 8);
		a[7] = (uint8_t)ancount;
		(void)sendto(fd, a, o, MSG_NOSIGNAL, (struct sockaddr *)&from, fl);
		audit(&r);
	}
	return NULL;
}

/* ---- main ---- */

static int recv_fds(int sock, int fds[2])
{
	char c;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(2 * sizeof(int)))
		return -1;
	memcpy(fds, CMSG_DATA(cm), 2 * sizeof(int));
	return 0;
}

void egress_proxy_main(const struct nsbox_policy *p, int ns_fd, int logfd)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t none;
	int fds[2];

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (size_t i = 0; i < p->n_net_allow && n_rules < POLICY_MAX_NET_RULES; i++)
		if (net_rule_parse(p->net_allow[i], &rules[n_rules], NULL) == 0)
			n_rules++;
	log_fd = logfd;
	max_out = p->net_max_out;
	max_in = p->net_max_in;
	max_conns = p->net_max_conns;
	/* EOF here: pid 1 died before its network was made. */
	if (recv_fds(ns_fd, fds) < 0)
		_exit(0);
	close(ns_fd);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	if (pthread_create(&t, &attr, dns_thread, &fds[1]) != 0)
		_exit(1);
	for (;;) {
		struct req *r;
		int c = accept4(fds[0], NULL, NULL, SOCK_CLOEXEC);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				continue;
			_exit(1);
		}
		pthread_mutex_lock(&slot_lock);
		while (active >= THREADS_MAX)
			pthread_cond_wait(&slot_free, &slot_lock);
		active++;
		pthread_mutex_unlock(&slot_lock);
		r = calloc(1, sizeof(*r));
		if (r)
			r->fd = c;
		if (!r || pthread_create(&t, &attr, conn_thread, r) != 0) {
			free(r);
			close(c);
			pthread_mutex_lock(&slot_lock);
			active--;
			pthread_mutex_unlock(&slot_lock);
			continue;
		}
	}
}
