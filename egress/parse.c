/* The egress proxy's parsers: see parse.h. */
#include "parse.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* Decimal 1..65535, digits only (no sign, no space). */
static int parse_port(const char *s, size_t len, uint16_t *port)
{
	unsigned v = 0;

	if (len == 0 || len > 5)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

/* A host name or an address literal (len bytes) into t. */
static int parse_host(const char *s, size_t len, bool bracketed, struct egress_target *t)
{
	char tmp[NET_NAME_MAX + 2];
	uint8_t a[16];

	if (len == 0 || len >= sizeof(tmp) || memchr(s, '\0', len))
		return -1;
	memcpy(tmp, s, len);
	tmp[len] = '\0';
	if (bracketed) {
		/* Only an IPv6 literal goes in brackets (RFC 3986 3.2.2). */
		if (inet_pton(AF_INET6, tmp, a) != 1)
			return -1;
		inet_ntop(AF_INET6, a, t->host, sizeof(t->host));
		t->literal = true;
		return 0;
	}
	if (inet_pton(AF_INET6, tmp, a) == 1) {
		inet_ntop(AF_INET6, a, t->host, sizeof(t->host));
		t->literal = true;
		return 0;
	}
	if (!net_name_normalize(tmp, t->host))
		return -1;
	t->literal = inet_pton(AF_INET, t->host, a) == 1;
	return 0;
}

int egress_hostport(const char *s, size_t len, uint16_t default_port, struct egress_target *t)
{
	const char *host = s, *port = NULL;
	size_t hl = len;
	bool br = false;

	memset(t, 0, sizeof(*t));
	if (len == 0)
		return -1;
	if (s[0] == '[') {
		const char *e = memchr(s, ']', len);

		if (!e)
			return -1;
		host = s + 1;
		hl = (size_t)(e - host);
		br = true;
		if ((size_t)(e + 1 - s) < len) {
			if (e[1] != ':')
				return -1;
			port = e + 2;
		}
	} else {
		const char *c = memchr(s, ':', len);

		if (c) {
			hl = (size_t)(c - s);
			port = c + 1;
		}
	}
	if (parse_host(host, hl, br, t) < 0)
		return -1;
	if (port)
		return parse_port(port, (size_t)(s + len - port), &t->port);
	if (!default_port)
		return -1;
	t->port = default_port;
	return 0;
}

/* ---- TLS ---- */

size_t egress_tls_record_len(const uint8_t *b, size_t n)
{
	return n < 5 ? 0 : 5 + ((size_t)b[3] << 8 | b[4]);
}

int egress_tls_sni(const uint8_t *b, size_t n, char *out, size_t outsize)
{
	size_t p, end, l;

	if (n < 5 || b[0] != 0x16)
		return -1; /* not a TLS handshake record */
	end = egress_tls_record_len(b, n);
	if (end > n)
		return -1;
	p = 5;
	if (p + 4 > end || b[p] != 1)
		return -1; /* not a ClientHello */
	/* The ClientHello must fit in this record: a name split across
	 * records is refused, never guessed at. */
	if (p + 4 + ((size_t)b[p + 1] << 16 | (size_t)b[p + 2] << 8 | b[p + 3]) > end)
		return -1;
	end = p + 4 + ((size_t)b[p + 1] << 16 | (size_t)b[p + 2] << 8 | b[p + 3]);
	p += 4 + 2 + 32; /* handshake header, legacy_version, random */
	if (p + 1 > end)
		return -1;
	p += 1 + b[p]; /* session id */
	if (p + 2 > end)
		return -1;
	p += 2 + ((size_t)b[p] << 8 | b[p + 1]); /* cipher suites */
	if (p + 1 > end)
		return -1;
	p += 1 + b[p]; /* compression methods */
	if (p > end)
		return -1;
	if (p + 2 > end)
		return 0; /* no extensions: no name */
	l = (size_t)b[p] << 8 | b[p + 1];
	p += 2;
	if (p + l > end)
		return -1;
	end = p + l;
	while (p + 4 <= end) {
		size_t type = (size_t)b[p] << 8 | b[p + 1], len = (size_t)b[p + 2] << 8 | b[p + 3];

		p += 4;
		if (p + len > end)
			return -1;
		if (type == 0) { /* server_name: list length, then type 0 host_name */
			size_t q = p + 2;

			if (len < 5 || ((size_t)b[p] << 8 | b[p + 1]) + 2 != len || b[q] != 0)
				return -1;
			l = (size_t)b[q + 1] << 8 | b[q + 2];
			if (q + 3 + l > p + len || l == 0 || l >= outsize || memchr(b + q + 3, '\0', l))
				return -1;
			memcpy(out, b + q + 3, l);
			out[l] = '\0';
			return 1;
		}
		p += len;
	}
	return p == end ? 0 : -1;
}

/* ---- HTTP ---- */

/* RFC 9110 5.6.2 tchar */
static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

const char *egress_http_parse(const char *head, size_t len, struct egress_http_req *h)
{
	const char *eol = strstr(head, "\r\n"), *sp1, *sp2, *target, *hs, *he;
	size_t ml, vl, tl;

	memset(h, 0, sizeof(*h));
	if (!eol || (size_t)(eol - head) + 4 > len)
		return "not an HTTP request line";
	sp1 = memchr(head, ' ', (size_t)(eol - head));
	sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (!sp1 || !sp2)
		return "not an HTTP request line";
	ml = (size_t)(sp1 - head);
	if (ml == 0 || ml >= sizeof(h->method))
		return "not an HTTP request line";
	for (size_t i = 0; i < ml; i++)
		if (!is_tchar(head[i]))
			return "not an HTTP request line";
	memcpy(h->method, head, ml);
	vl = (size_t)(eol - sp2 - 1);
	if (vl != 8 || (strncmp(sp2 + 1, "HTTP/1.1", 8) != 0 && strncmp(sp2 + 1, "HTTP/1.0", 8) != 0))
		return "not HTTP/1.x";
	memcpy(h->version, sp2 + 1, vl);
	target = sp1 + 1;
	tl = (size_t)(sp2 - target);
	for (size_t i = 0; i < tl; i++)
		if ((unsigned char)target[i] <= 0x20 || (unsigned char)target[i] >= 0x7f)
			return "bad request target";
	h->headers = eol + 2;
	h->body_at = len;
	if (strcmp(h->method, "CONNECT") == 0) {
		h->kind = EGRESS_HTTP_CONNECT;
		if (egress_hostport(target, tl, 0, &h->t) < 0)
			return "CONNECT needs HOST:PORT";
		return NULL;
	}
	h->kind = EGRESS_HTTP_PLAIN;
	if (tl < 7 || strncasecmp(target, "http://", 7) != 0)
		return "only absolute http:// URIs and CONNECT are proxied";
	hs = target + 7;
	he = hs;
	while (he < sp2 && *he != '/' && *he != '?' && *he != '#')
		he++;
	if (memchr(hs, '@', (size_t)(he - hs)))
		return "userinfo in the URI";
	if (egress_hostport(hs, (size_t)(he - hs), 80, &h->t) < 0)
		return "bad host in the URI";
	if (he < sp2 && *he == '#')
		return "fragment in the URI";
	if (he < sp2) {
		h->path = he;
		h->pathlen = (size_t)(sp2 - he);
	} else {
		h->path = "/";
		h->pathlen = 1;
	}
	return NULL;
}

static int append(char *out, size_t size, size_t *o, const char *s, size_t n)
{
	if (n >= size - *o)
		return -1;
	memcpy(out + *o, s, n);
	*o += n;
	out[*o] = '\0';
	return 0;
}

static bool header_is(const char *line, size_t namelen, const char *name)
{
	return strlen(name) == namelen && strncasecmp(line, name, namelen) == 0;
}

/* A Content-Length value: one decimal number (RFC 9110 8.6; a list of
 * equal ones is refused too, as a smuggler's tool), at most 2^53. */
static bool content_length(const char *v, const char *ve, uint64_t *len)
{
	uint64_t n = 0;

	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	if (v == ve || ve - v > 16)
		return false;
	for (; v < ve; v++) {
		if (*v < '0' || *v > '9')
			return false;
		n = n * 10 + (uint64_t)(*v - '0');
	}
	*len = n;
	return n <= (1ull << 53);
}

int egress_http_rewrite(const struct egress_http_req *h, char *out, size_t size, uint64_t *body, const char **why)
{
	const char *line = h->headers;
	bool host_seen = false, length_seen = false;
	char hostline[NET_NAME_MAX + 32];
	size_t o = 0;
	int n;

	*body = 0;
	*why = "request head too long";
	if (size == 0 || append(out, size, &o, h->method, strlen(h->method)) < 0 || append(out, size, &o, " ", 1) < 0 ||
	    append(out, size, &o, h->path, h->pathlen) < 0 || append(out, size, &o, " ", 1) < 0 ||
	    append(out, size, &o, h->version, strlen(h->version)) < 0 || append(out, size, &o, "\r\n", 2) < 0)
		return -1;
	while (!(line[0] == '\r' && line[1] == '\n')) {
		const char *eol = strstr(line, "\r\n"), *colon;
		size_t ll, nl;

		if (!eol) {
			*why = "bad header line";
			return -1;
		}
		ll = (size_t)(eol - line);
		/* A header a lenient origin server would read differently
		 * (obs-fold, bare CR or LF, space before the colon) could
		 * smuggle a second Host: refused (RFC 9112 5.1, 5.2). */
		colon = memchr(line, ':', ll);
		if (!colon || colon == line) {
			*why = "bad header line";
			return -1;
		}
		nl = (size_t)(colon - line);
		for (size_t i = 0; i < nl; i++)
			if (!is_tchar(line[i])) {
				*why = "bad header line";
				return -1;
			}
		for (size_t i = nl; i < ll; i++)
			if (((unsigned char)line[i] < 0x20 && line[i] != '\t') || line[i] == 0x7f) {
				*why = "bad header line";
				return -1;
			}
		if (header_is(line, nl, "Host")) {
			struct egress_target t;
			const char *v = colon + 1, *ve = eol;

			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			if (host_seen || egress_hostport(v, (size_t)(ve - v), 80, &t) < 0 ||
			    strcmp(t.host, h->t.host) != 0 || t.port != h->t.port) {
				*why = "Host header names another host";
				return -1;
			}
			host_seen = true;
		}
		if (header_is(line, nl, "Transfer-Encoding")) {
			*why = "a Transfer-Encoding request body is not relayed (send Content-Length)";
			return -1;
		}
		if (header_is(line, nl, "Content-Length")) {
			if (length_seen || !content_length(colon + 1, eol, body)) {
				*why = "bad Content-Length";
				return -1;
			}
			length_seen = true;
		}
		if (!(nl > 6 && strncasecmp(line, "Proxy-", 6) == 0) && !header_is(line, nl, "Connection") &&
		    !header_is(line, nl, "Keep-Alive") && !header_is(line, nl, "TE") &&
		    !header_is(line, nl, "Upgrade")) {
			*why = "request head too long";
			if (append(out, size, &o, line, ll + 2) < 0)
				return -1;
		}
		line = eol + 2;
	}
	*why = "request head too long";
	if (!host_seen) {
		if (strchr(h->t.host, ':'))
			n = snprintf(hostline, sizeof(hostline), "Host: [%s]:%u\r\n", h->t.host, (unsigned)h->t.port);
		else
			n = snprintf(hostline, sizeof(hostline), "Host: %s:%u\r\n", h->t.host, (unsigned)h->t.port);
		if (n < 0 || (size_t)n >= sizeof(hostline) || append(out, size, &o, hostline, (size_t)n) < 0)
			return -1;
	}
	if (append(out, size, &o, "Connection: close\r\n\r\n", 21) < 0 || o > (size_t)INT32_MAX)
		return -1;
	return (int)o;
}

/* ---- DNS ---- */

int egress_dns_parse(const uint8_t *q, size_t n, struct egress_dns_query *d)
{
	size_t p = 12, o = 0;
	bool name_ok = true;
	char raw[NET_NAME_MAX + 2];

	memset(d, 0, sizeof(*d));
	/* A query (QR 0), opcode QUERY, one question. */
	if (n < 12 || n > EGRESS_DNS_MAX || (q[2] & 0x80) || (q[2] & 0x78) || q[4] != 0 || q[5] != 1)
		return -1;
	for (;;) {
		size_t l;

		if (p >= n)
			return -1;
		l = q[p];
		if (l == 0)
			break;
		if (l > 63 || p + 1 + l > n)
			return -1; /* compression pointers or junk: no name here */
		if (o + l + 1 > NET_NAME_MAX)
			name_ok = false;
		for (size_t i = 0; name_ok && i < l; i++) {
			uint8_t c = q[p + 1 + i];

			/* A label holding '.', NUL or other bytes is no host name
			 * (it would read as another name once joined). */
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
			      c == '_'))
				name_ok = false;
		}
		if (name_ok) {
			if (o)
				raw[o++] = '.';
			memcpy(raw + o, q + p + 1, l);
			o += l;
		}
		p += 1 + l;
	}
	if (p + 5 > n)
		return -1;
	raw[o] = '\0';
	if (!name_ok || !o || !net_name_normalize(raw, d->name))
		d->name[0] = '\0';
	d->qtype = (uint16_t)(q[p + 1] << 8 | q[p + 2]);
	d->qend = p + 5;
	return 0;
}

size_t egress_dns_answer_start(const uint8_t *q, const struct egress_dns_query *d, uint8_t *a)
{
	memcpy(a, q, d->qend);
	a[2] = (uint8_t)(0x80 | (q[2] & 0x79)); /* QR, opcode, RD */
	a[3] = 0x80;				/* RA */
	a[4] = 0, a[5] = 1;
	memset(a + 6, 0, 6);
	return d->qend;
}

int egress_dns_answer_add(uint8_t *a, size_t *o, uint16_t qtype, const uint8_t *addr, size_t len)
{
	/* name: a pointer to the question's (offset 12), type, class IN,
	 * TTL 60, rdlength */
	uint8_t rr[12] = { 0xc0, 12, (uint8_t)(qtype >> 8), (uint8_t)qtype, 0, 1, 0, 0, 0, 60, 0, (uint8_t)len };

	if (*o + sizeof(rr) + len > EGRESS_DNS_MAX)
		return -1;
	memcpy(a + *o, rr, sizeof(rr));
	memcpy(a + *o + sizeof(rr), addr, len);
	*o += sizeof(rr) + len;
	return 0;
}

void egress_dns_answer_finish(uint8_t *a, int rcode, unsigned ancount)
{
	a[3] = (uint8_t)(0x80 | (rcode & 0xf));
	a[6] = (uint8_t)(ancount >> 8);
	a[7] = (uint8_t)ancount;
}

/* ---- SOCKS5 ---- */

int egress_socks_greeting(const uint8_t *b, size_t n, bool *noauth)
{
	size_t need;

	if (n >= 1 && b[0] != 5)
		return -1;
	if (n < 2)
		return 0;
	if (b[1] == 0)
		return -1;
	need = 2 + (size_t)b[1];
	if (n < need)
		return 0;
	*noauth = memchr(b + 2, 0, b[1]) != NULL;
	return (int)need;
}

int egress_socks_request(const uint8_t *b, size_t n, struct egress_socks_req *r)
{
	size_t need, al;
	const uint8_t *a;

	memset(r, 0, sizeof(*r));
	if (n >= 1 && b[0] != 5)
		return -SOCKS_FAIL;
	if (n < 5)
		return 0;
	if (b[2] != 0)
		return -SOCKS_FAIL;
	r->cmd = b[1];
	r->atyp = b[3];
	switch (b[3]) {
	case 1:
		al = 4;
		a = b + 4;
		break;
	case 4:
		al = 16;
		a = b + 4;
		break;
	case 3:
		al = b[4];
		a = b + 5;
		if (al == 0)
			return -SOCKS_HOST_UNREACH;
		break;
	default:
		return -SOCKS_BAD_ATYP;
	}
	need = (size_t)(a - b) + al + 2;
	if (n < need)
		return 0;
	r->t.port = (uint16_t)(a[al] << 8 | a[al + 1]);
	if (b[3] == 3) {
		/* A name (remote resolution); an address written as a name
		 * is an address, held to the address rules. */
		if (parse_host((const char *)a, al, false, &r->t) < 0)
			return -SOCKS_HOST_UNREACH;
	} else {
		inet_ntop(b[3] == 1 ? AF_INET : AF_INET6, a, r->t.host, sizeof(r->t.host));
		r->t.literal = true;
	}
	if (r->t.port == 0)
		return -SOCKS_FAIL;
	return (int)need;
}
