/* libFuzzer target for the egress proxy's parsers (egress/parse.h): what a
 * sandboxed program sends the host side.  The first byte picks the parser:
 *   0  a TLS ClientHello (the SNI check of CONNECT and SOCKS tunnels)
 *   1  a DNS query, and the responder's answer to it
 *   2  an HTTP proxy request head, and the head sent on for a plain one
 *   3  a SOCKS5 greeting followed by a request
 * Besides crashes and sanitizer reports, each checks what its callers
 * rely on, and aborts if it fails. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A target's host is a normalized name or an address literal. */
static void check_target(const struct egress_target *t)
{
	char norm[NET_NAME_MAX + 1];

	if (strlen(t->host) > NET_NAME_MAX || !t->host[0])
		abort();
	if (!t->literal && (!net_name_normalize(t->host, norm) || strcmp(norm, t->host) != 0))
		abort();
}

static void fuzz_tls(const uint8_t *b, size_t n)
{
	char sni[NET_NAME_MAX + 1];
	int r;

	memset(sni, 'x', sizeof(sni));
	r = egress_tls_sni(b, n, sni, sizeof(sni));
	if (r == 1 && (!memchr(sni, '\0', sizeof(sni)) || !sni[0]))
		abort();
	if (r == 1 && egress_tls_record_len(b, n) > n)
		abort();
}

static void fuzz_dns(const uint8_t *b, size_t n)
{
	struct egress_dns_query d;
	uint8_t a[EGRESS_DNS_MAX];
	const uint8_t addr[16] = { 192, 0, 2, 1 };
	unsigned an = 0;
	size_t o;

	if (egress_dns_parse(b, n, &d) < 0)
		return;
	if (d.qend > n || d.qend < 17 || strlen(d.name) > NET_NAME_MAX)
		abort();
	if (d.name[0]) {
		char norm[NET_NAME_MAX + 1];

		if (!net_name_normalize(d.name, norm) || strcmp(norm, d.name) != 0)
			abort();
	}
	o = egress_dns_answer_start(b, &d, a);
	while (an < 64 && egress_dns_answer_add(a, &o, d.qtype, addr, d.qtype == 28 ? 16 : 4) == 0)
		an++;
	egress_dns_answer_finish(a, 3, an);
	if (o > EGRESS_DNS_MAX || !(a[2] & 0x80) || a[5] != 1)
		abort();
}

static void fuzz_http(const uint8_t *b, size_t n)
{
	static char head[8193], out[8192 + 512];
	struct egress_http_req h;
	const char *why, *eoh, *p;
	uint64_t body;
	int len, hosts = 0;

	/* As serve_http hands it over: no NUL, up to the first blank line. */
	if (n > 8192 || memchr(b, '\0', n))
		return;
	memcpy(head, b, n);
	head[n] = '\0';
	eoh = strstr(head, "\r\n\r\n");
	if (!eoh)
		return;
	if (egress_http_parse(head, (size_t)(eoh - head) + 4, &h))
		return;
	check_target(&h.t);
	if (h.kind == EGRESS_HTTP_CONNECT)
		return;
	if (h.kind != EGRESS_HTTP_PLAIN || !h.pathlen || (h.path[0] != '/' && h.path[0] != '?'))
		abort();
	len = egress_http_rewrite(&h, out, sizeof(out), &body, &why);
	if (len < 0) {
		if (!why)
			abort();
		return;
	}
	/* One head, ending in one blank line, with exactly one Host. */
	if ((size_t)len >= sizeof(out) || strlen(out) != (size_t)len || strstr(out, "\r\n\r\n") != out + len - 4)
		abort();
	for (p = strstr(out, "\r\n"); p && p < out + len - 4; p = strstr(p + 2, "\r\n"))
		if (strncasecmp(p + 2, "Host:", 5) == 0)
			hosts++;
	if (hosts != 1)
		abort();
}

static void fuzz_socks(const uint8_t *b, size_t n)
{
	struct egress_socks_req r;
	bool noauth = false;
	int g = egress_socks_greeting(b, n, &noauth), q;

	if (g <= 0)
		return;
	if ((size_t)g > n)
		abort();
	q = egress_socks_request(b + g, n - (size_t)g, &r);
	if (q > 0) {
		if ((size_t)q > n - (size_t)g || r.t.port == 0)
			abort();
		check_target(&r.t);
	} else if (q < 0 && q != -SOCKS_FAIL && q != -SOCKS_BAD_ATYP && q != -SOCKS_HOST_UNREACH) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;

	if (size < 1)
		return 0;
	/* An exact-size copy, so ASan sees any read past the end. */
	copy = malloc(size - 1 ? size - 1 : 1);
	if (!copy)
		abort();
	memcpy(copy, data + 1, size - 1);
	switch (data[0] % 4) {
	case 0:
		fuzz_tls(copy, size - 1);
		break;
	case 1:
		fuzz_dns(copy, size - 1);
		break;
	case 2:
		fuzz_http(copy, size - 1);
		break;
	default:
		fuzz_socks(copy, size - 1);
		break;
	}
	free(copy);
	return 0;
}
