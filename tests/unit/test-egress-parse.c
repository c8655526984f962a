/* The egress proxy's parsers (egress/parse.c): table cases of what a
 * sandboxed program may send, especially the ones that would let a request
 * name one host to the check and another to the destination. */
#include <stdio.h>
#include <string.h>

#include "parse.h"
#include "tap.h"

/* A minimal ClientHello record with a server_name extension naming name. */
static size_t hello(uint8_t *b, const char *name, bool with_sni)
{
	size_t nl = strlen(name), p = 0, ext = with_sni ? 9 + nl : 0, body = 2 + 32 + 1 + 4 + 2 + 2 + ext;

	b[p++] = 0x16, b[p++] = 3, b[p++] = 1;
	b[p++] = (uint8_t)((4 + body) >> 8), b[p++] = (uint8_t)(4 + body);
	b[p++] = 1, b[p++] = 0, b[p++] = (uint8_t)(body >> 8), b[p++] = (uint8_t)body;
	b[p++] = 3, b[p++] = 3;
	memset(b + p, 0x42, 32), p += 32;
	b[p++] = 0;					      /* session id */
	b[p++] = 0, b[p++] = 2, b[p++] = 0x13, b[p++] = 0x01; /* one suite */
	b[p++] = 1, b[p++] = 0;				      /* null compression */
	b[p++] = (uint8_t)(ext >> 8), b[p++] = (uint8_t)ext;
	if (with_sni) {
		b[p++] = 0, b[p++] = 0; /* server_name */
		b[p++] = (uint8_t)((5 + nl) >> 8), b[p++] = (uint8_t)(5 + nl);
		b[p++] = (uint8_t)((3 + nl) >> 8), b[p++] = (uint8_t)(3 + nl);
		b[p++] = 0, b[p++] = (uint8_t)(nl >> 8), b[p++] = (uint8_t)nl;
		memcpy(b + p, name, nl), p += nl;
	}
	return p;
}

static uint64_t body; /* of the last http() */

static const char *http(const char *head, struct egress_http_req *h, char *out, size_t size, int *len)
{
	const char *why = egress_http_parse(head, strlen(head), h);

	*len = -1;
	if (why || h->kind != EGRESS_HTTP_PLAIN)
		return why;
	*len = egress_http_rewrite(h, out, size, &body, &why);
	return *len < 0 ? why : NULL;
}

int main(void)
{
	uint8_t b[600];
	char sni[NET_NAME_MAX + 1], out[9000];
	struct egress_http_req h;
	struct egress_dns_query d;
	struct egress_socks_req s;
	bool noauth = false;
	size_t n;
	int len;

	n = hello(b, "Files.Example.com", true);
	ok(egress_tls_sni(b, n, sni, sizeof(sni)) == 1 && strcmp(sni, "Files.Example.com") == 0, "SNI read");
	ok(egress_tls_sni(b, n - 1, sni, sizeof(sni)) == -1, "a truncated record: no name guessed");
	n = hello(b, "x", false);
	ok(egress_tls_sni(b, n, sni, sizeof(sni)) == 0, "no server_name: 0");
	b[0] = 0x17;
	ok(egress_tls_sni(b, n, sni, sizeof(sni)) == -1, "not a handshake record");

	ok(http("GET http://Example.COM:8080/a?b HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Authorization: x\r\n"
		"Connection: keep-alive\r\n\r\n",
		&h, out, sizeof(out), &len) == NULL &&
		   strcmp(out, "GET /a?b HTTP/1.1\r\nHost: example.com:8080\r\nConnection: close\r\n\r\n") == 0,
	   "plain request: origin form, no Proxy-* or Connection, one Host");
	ok(http("GET http://example.com HTTP/1.0\r\n\r\n", &h, out, sizeof(out), &len) == NULL &&
		   strstr(out, "GET / HTTP/1.0\r\nHost: example.com:80\r\n"),
	   "no path, no Host: / and a Host added");
	ok(http("GET http://example.com/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", &h, out, sizeof(out), &len) &&
		   len < 0,
	   "a Host naming another host: refused");
	ok(http("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nHost: evil.example\r\n\r\n", &h, out,
		sizeof(out), &len) &&
		   len < 0,
	   "two Hosts: refused");
	ok(http("GET http://example.com/ HTTP/1.1\r\nX: a\r\n Host: evil.example\r\n\r\n", &h, out, sizeof(out),
		&len) &&
		   len < 0,
	   "obs-fold: refused");
	ok(http("GET http://example.com/ HTTP/1.1\r\nX: a\nHost: evil.example\r\n\r\n", &h, out, sizeof(out), &len) &&
		   len < 0,
	   "a bare LF inside a header line: refused");
	ok(http("GET http://example.com/ HTTP/1.1\r\nHost : evil.example\r\n\r\n", &h, out, sizeof(out), &len) &&
		   len < 0,
	   "space before the colon: refused");
	ok(http("GET http://user@evil.example@example.com/ HTTP/1.1\r\n\r\n", &h, out, sizeof(out), &len) != NULL,
	   "userinfo: refused");
	ok(http("GET https://example.com/ HTTP/1.1\r\n\r\n", &h, out, sizeof(out), &len) != NULL,
	   "https:// without CONNECT: refused");
	ok(http("GET http://example.com/ HTTP/2.0\r\n\r\n", &h, out, sizeof(out), &len) != NULL, "HTTP/2.0: refused");
	/* The body the proxy relays, and no more (a pipelined request). */
	ok(http("GET http://example.com/ HTTP/1.1\r\n\r\n", &h, out, sizeof(out), &len) == NULL && body == 0,
	   "no Content-Length: no body");
	ok(http("POST http://example.com/ HTTP/1.1\r\ncontent-length:  1234 \r\n\r\n", &h, out, sizeof(out), &len) ==
			   NULL &&
		   body == 1234,
	   "Content-Length: the body's length");
	ok(http("POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", &h, out,
		sizeof(out), &len) != NULL,
	   "two Content-Lengths: refused");
	ok(http("POST http://example.com/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", &h, out, sizeof(out), &len) &&
		   http("POST http://example.com/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", &h, out, sizeof(out),
			&len) &&
		   http("POST http://example.com/ HTTP/1.1\r\nContent-Length: 99999999999999999\r\n\r\n", &h, out,
			sizeof(out), &len) &&
		   http("POST http://example.com/ HTTP/1.1\r\nContent-Length:\r\n\r\n", &h, out, sizeof(out), &len),
	   "a list, a sign, a huge or an empty Content-Length: refused");
	ok(http("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &h, out, sizeof(out),
		&len) != NULL,
	   "Transfer-Encoding: refused");
	ok(egress_http_parse("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", 31, &h) == NULL && h.t.literal &&
		   strcmp(h.t.host, "::1") == 0 && h.t.port == 443,
	   "CONNECT to a bracketed v6 literal");
	ok(egress_http_parse("CONNECT [example.com]:443 HTTP/1.1\r\n\r\n", 39, &h) != NULL,
	   "a name in brackets: refused");
	ok(egress_http_parse("CONNECT example.com HTTP/1.1\r\n\r\n", 32, &h) != NULL,
	   "CONNECT without a port: refused");
	ok(egress_http_parse("CONNECT example.com:+443 HTTP/1.1\r\n\r\n", 37, &h) != NULL, "a signed port: refused");

	{
		/* id, flags RD, one question: a.b (with '.' inside a label), A */
		static const uint8_t dotted[] = { 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', '.', 'b', 0, 0, 1, 0, 1 };
		static const uint8_t good[] = { 0, 1,	1,   0, 0,   1,	  0,   0, 0, 0,	 0, 0,
						2, 'E', 'x', 3, 'c', 'o', 'm', 0, 0, 28, 0, 1 };
		static const uint8_t ptr[] = { 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1 };
		uint8_t a[EGRESS_DNS_MAX];
		size_t o;

		ok(egress_dns_parse(good, sizeof(good), &d) == 0 && strcmp(d.name, "ex.com") == 0 && d.qtype == 28,
		   "DNS: name lowercased, AAAA");
		o = egress_dns_answer_start(good, &d, a);
		ok(egress_dns_answer_add(a, &o, 28, (const uint8_t *)"0123456789abcdef", 16) == 0, "DNS: an answer");
		egress_dns_answer_finish(a, 0, 1);
		ok(o == sizeof(good) + 28 && a[2] == 0x81 && a[3] == 0x80 && a[7] == 1, "DNS: answer header");
		ok(egress_dns_parse(dotted, sizeof(dotted), &d) == 0 && d.name[0] == '\0',
		   "DNS: a label with a dot is no host name");
		ok(egress_dns_parse(ptr, sizeof(ptr), &d) < 0, "DNS: a compression pointer in a question: dropped");
	}

	ok(egress_socks_greeting((const uint8_t *)"\x05\x02\x02\x00", 4, &noauth) == 4 && noauth,
	   "SOCKS: greeting offering no-auth");
	ok(egress_socks_greeting((const uint8_t *)"\x05\x02\x02", 3, &noauth) == 0, "SOCKS: a short greeting waits");
	ok(egress_socks_greeting((const uint8_t *)"\x04\x01", 2, &noauth) < 0, "SOCKS4: refused");
	ok(egress_socks_request((const uint8_t *)"\x05\x01\x00\x03\x0b"
						 "Example.COM"
						 "\x01\xbb",
				18, &s) == 18 &&
		   s.cmd == 1 && !s.t.literal && strcmp(s.t.host, "example.com") == 0 && s.t.port == 443,
	   "SOCKS: CONNECT to a name");
	ok(egress_socks_request((const uint8_t *)"\x05\x01\x00\x03\x07"
						 "1.2.3.4\x00\x50",
				14, &s) == 14 &&
		   s.t.literal,
	   "SOCKS: an address given as a name is an address");
	ok(egress_socks_request((const uint8_t *)"\x05\x01\x00\x03\x03"
						 "a\0b\x00\x50",
				10, &s) == -SOCKS_HOST_UNREACH,
	   "SOCKS: NUL in a name: refused");
	ok(egress_socks_request((const uint8_t *)"\x05\x01\x00\x05\x00", 5, &s) == -SOCKS_BAD_ATYP,
	   "SOCKS: unknown address type: 8");
	ok(egress_socks_request((const uint8_t *)"\x05\x01\x00\x01\x7f\x00", 6, &s) == 0,
	   "SOCKS: a short request waits");
	tap_done();
}
