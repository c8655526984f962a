/* The egress proxy's parsers of what the sandbox sends: pure functions
 * over bytes, no I/O, each bounded by the length it is given and fuzzed
 * (tests/fuzz/fuzz-egress.c).  Everything here is input from inside the
 * sandbox: hostile. */
#ifndef NSBOX_EGRESS_PARSE_H
#define NSBOX_EGRESS_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netrule.h"

/* A destination as a request names it: a normalized host name or an
 * address literal (v6 without brackets), and a port. */
struct egress_target {
	char host[NET_NAME_MAX + 1];
	uint16_t port;
	bool literal; /* host is an IPv4 or IPv6 address */
};

/* "host:port" or "[v6]:port" (len bytes, no NUL needed) into t;
 * default_port when none is given (0: a port is required).  Returns 0 or
 * -1. */
int egress_hostport(const char *s, size_t len, uint16_t default_port, struct egress_target *t);

/* ---- TLS (RFC 8446 4.1.2, RFC 6066 3) ---- */

/* The server_name of the ClientHello in the first record of b[0..n).
 * Returns 1 with the name in out (outsize bytes, NUL-terminated), 0 if
 * the ClientHello names no server, -1 if b is not a whole ClientHello
 * record. */
int egress_tls_sni(const uint8_t *b, size_t n, char *out, size_t outsize);

/* How many bytes the first TLS record in b[0..n) needs in all (header
 * included), or 0 if fewer than 5 bytes are there to tell. */
size_t egress_tls_record_len(const uint8_t *b, size_t n);

/* ---- HTTP/1.x proxy requests (RFC 9112 3.2.2, 9.3.6) ---- */

enum egress_http_kind {
	EGRESS_HTTP_CONNECT = 1,
	EGRESS_HTTP_PLAIN
};

struct egress_http_req {
	enum egress_http_kind kind;
	char method[16];
	char version[16];
	struct egress_target t;
	const char *path; /* into the head; origin-form path and query */
	size_t pathlen;
	const char *headers; /* into the head: the first header line */
	size_t body_at;	     /* bytes of the head, blank line included */
};

/* Parse a request head: head[0..len) holds no NUL and ends with the first
 * CRLFCRLF in it (head[len] is '\0').  Returns NULL, or why it is refused
 * (a static string, for a 400). */
const char *egress_http_parse(const char *head, size_t len, struct egress_http_req *h);

/* The head to send to the origin server for a plain request h: origin-form
 * request line, no Proxy-* or hop-by-hop headers, Connection: close, and a
 * Host header that must name h's host and port (added if absent).  *body
 * gets the length of the request's body (Content-Length, 0 without it):
 * the proxy relays that many bytes and no more, so a second, pipelined
 * request never reaches the server unchecked.  A Transfer-Encoding body
 * or a Content-Length that is not one decimal number is refused.  Returns
 * the length written into out (size bytes), or -1 with *why set. */
int egress_http_rewrite(const struct egress_http_req *h, char *out, size_t size, uint64_t *body, const char **why);

/* ---- DNS (RFC 1035 4.1) ---- */

#define EGRESS_DNS_MAX 512

struct egress_dns_query {
	char name[NET_NAME_MAX + 1]; /* normalized; "" if not a host name */
	uint16_t qtype;
	size_t qend; /* header and question: what the answer repeats */
};

/* Parse a standard query with one question from q[0..n).  Returns 0, or
 * -1 if the packet is to be dropped (a response, several questions,
 * compression or junk in the question). */
int egress_dns_parse(const uint8_t *q, size_t n, struct egress_dns_query *d);

/* Start an answer to query q (parsed into d) in a (EGRESS_DNS_MAX bytes):
 * its header and question; returns the length so far. */
size_t egress_dns_answer_start(const uint8_t *q, const struct egress_dns_query *d, uint8_t *a);

/* Append an A (len 4) or AAAA (len 16) record for the question's name
 * (TTL 60 s).  Returns 0, or -1 if there is no room. */
int egress_dns_answer_add(uint8_t *a, size_t *o, uint16_t qtype, const uint8_t *addr, size_t len);

/* Set the answer's rcode and answer count. */
void egress_dns_answer_finish(uint8_t *a, int rcode, unsigned ancount);

/* ---- SOCKS5 (RFC 1928) ---- */

enum {
	SOCKS_OK = 0,
	SOCKS_FAIL = 1,	       /* general SOCKS server failure */
	SOCKS_NOT_ALLOWED = 2, /* connection not allowed by ruleset */
	SOCKS_NET_UNREACH = 3,
	SOCKS_HOST_UNREACH = 4,
	SOCKS_REFUSED = 5,
	SOCKS_BAD_COMMAND = 7,
	SOCKS_BAD_ATYP = 8,
};

/* The method-selection message in b[0..n): 0 if more bytes are needed,
 * -1 if it is not SOCKS5, else its length, with *noauth set if it offers
 * method 0 (no authentication). */
int egress_socks_greeting(const uint8_t *b, size_t n, bool *noauth);

struct egress_socks_req {
	uint8_t cmd;  /* 1 CONNECT, 2 BIND, 3 UDP ASSOCIATE */
	uint8_t atyp; /* 1 IPv4, 3 domain name, 4 IPv6 */
	struct egress_target t;
};

/* The request in b[0..n): 0 if more bytes are needed, else its length,
 * or -(SOCKS reply code) if it is refused as malformed (-SOCKS_FAIL,
 * -SOCKS_BAD_ATYP, -SOCKS_HOST_UNREACH for a domain name that is no host
 * name).  Any command parses; the caller refuses all but CONNECT. */
int egress_socks_request(const uint8_t *b, size_t n, struct egress_socks_req *r);

#endif
