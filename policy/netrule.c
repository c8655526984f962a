#include "netrule.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "util.h"

static const char rule_help[] = "use NAME, *.NAME, IPV4[/LEN] or [IPV6[/LEN]], each with an optional :PORT";

bool net_name_normalize(const char *in, char *out)
{
	size_t n = strlen(in);

	/* out is "" unless in is a name: the audit line of a refused
	 * request names no host, not the part of it before the first bad
	 * byte ("secretpart" of "secretpart%zz.example.com"). */
	out[0] = '\0';
	if (n > 0 && in[n - 1] == '.')	/* the root label */
		n--;
	/* "example.com.." has an empty label: no name (found by fuzz-egress). */
	if (n == 0 || n > NET_NAME_MAX || in[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];

		/* ASCII, whatever the caller's locale (an SDK's Python sets
		 * LC_CTYPE, and the proxy inherits it: isalnum(3) in a Latin-1
		 * locale takes 0xe9). */
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');

		if ((!alnum && c != '-' && c != '.' && c != '_') || (c == '.' && (i == 0 || in[i - 1] == '.'))) {
			out[0] = '\0';
			return false;
		}
		out[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
	}
	out[n] = '\0';
	return true;
}

static int parse_port(const char *s, uint16_t *port)
{
	unsigned long v;

	if (parse_ulong(s, 65535, &v) < 0 || v == 0)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

static void mask_host_bits(uint8_t *a, unsigned len, unsigned prefix)
{
	for (unsigned i = 0; i < len; i++) {
		unsigned bits = prefix > 8 * i ? prefix - 8 * i : 0;

		if (bits < 8)
			a[i] &= (uint8_t)(0xff00u >> bits);
	}
}

static int parse_addr(char *s, struct net_rule *r)
{
	char *slash = strchr(s, '/');
	unsigned long len;
	unsigned max;

	if (slash)
		*slash = '\0';
	if (inet_pton(AF_INET, s, r->addr) == 1) {
		r->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, s, r->addr) == 1) {
		r->family = AF_INET6;
		max = 128;
	} else {
		if (slash)
			*slash = '/';
		return -1;
	}
	r->prefix = max;
	if (slash) {
		*slash = '/';
		if (parse_ulong(slash + 1, max, &len) < 0)
			return -1;
		r->prefix = (unsigned)len;
	}
	mask_host_bits(r->addr, max / 8, r->prefix);
	r->kind = NET_RULE_ADDR;
	return 0;
}

int net_rule_parse(const char *s, struct net_rule *r, struct nsbox_err *err)
{
	char buf[NET_NAME_MAX + 16];
	char *host = buf, *port = NULL;

	memset(r, 0, sizeof(*r));
	if (!s || strlen(s) >= sizeof(buf))
		return err_fail(err, NULL, EINVAL, "not a rule (%s)", rule_help);
	strcpy(buf, s);
	if (buf[0] == '[') {
		char *end = strchr(buf, ']');

		if (!end || (end[1] && end[1] != ':'))
			return err_fail(err, NULL, EINVAL, "bad [IPV6] rule (%s)", rule_help);
		*end = '\0';
		host = buf + 1;
		if (end[1] == ':')
			port = end + 2;
		if (strchr(host, '.') || parse_addr(host, r) < 0 || r->family != AF_INET6)
			return err_fail(err, NULL, EINVAL, "not an IPv6 address or range (%s)", rule_help);
	} else {
		char *colon = strchr(buf, ':');

		if (colon && strchr(colon + 1, ':'))
			return err_fail(err, NULL, EINVAL, "an IPv6 rule goes in brackets ([2001:db8::/32]:443)");
		if (colon) {
			*colon = '\0';
			port = colon + 1;
		}
		if (parse_addr(host, r) == 0) {
			if (r->family != AF_INET)
				return err_fail(err, NULL, EINVAL, "not a rule (%s)", rule_help);
		} else if (strchr(host, '/')) {
			return err_fail(err, NULL, EINVAL, "not an address range (%s)", rule_help);
		} else {
			bool wild = strncmp(host, "*.", 2) == 0;

			const char *last;

			if (!net_name_normalize(wild ? host + 2 : host, r->name) || strchr(r->name, '*'))
				return err_fail(err, NULL, EINVAL, "not a host name (%s)", rule_help);
			/* "127.1" is an address to inet_aton(3), and so to the
			 * host's resolver: no top-level domain is all digits. */
			last = strrchr(r->name, '.');
			last = last ? last + 1 : r->name;
			if (strspn(last, "0123456789") == strlen(last))
				return err_fail(err, NULL, EINVAL, "%s: not a host name nor an address (%s)", r->name, rule_help);
			/* "*.com" would be a whole top-level domain: too wide to be meant. */
			if (wild && !strchr(r->name, '.'))
				return err_fail(err, NULL, EINVAL, "*.%s: a wildcard needs at least two labels (*.example.com)",
					       r->name);
			r->kind = wild ? NET_RULE_WILD : NET_RULE_NAME;
		}
	}
	if (port && parse_port(port, &r->port) < 0)
		return err_fail(err, NULL, EINVAL, "bad port '%s' (use 1 to 65535)", port);
	return 0;
}

int net_public_suffix(const char *name, const char *path)
{
	const char *parent = strchr(name, '.');
	bool exact = false, wild = false, except = false;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while ((len = getline(&line, &cap, f)) > 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
				   line[len - 1] == '\t'))
			line[--len] = '\0';
		if (!len || line[0] == '/')
			continue;
		if (line[0] == '!')
			except |= !strcmp(line + 1, name);
		else if (line[0] == '*' && line[1] == '.')
			wild |= parent && !strcmp(line + 2, parent + 1);
		else
			exact |= !strcmp(line, name);
	}
	free(line);
	fclose(f);
	return exact || (wild && !except);
}

static bool port_ok(const struct net_rule *r, uint16_t port)
{
	return r->port ? r->port == port : (port == 443 || port == 80);
}

bool net_rule_match_name(const struct net_rule *r, const char *name, uint16_t port)
{
	size_t n, m;

	if (!port_ok(r, port))
		return false;
	if (r->kind == NET_RULE_NAME)
		return strcmp(r->name, name) == 0;
	if (r->kind != NET_RULE_WILD)
		return false;
	n = strlen(name);
	m = strlen(r->name);
	return n > m + 1 && name[n - m - 1] == '.' && strcmp(name + n - m, r->name) == 0;
}

static bool in_prefix(const uint8_t *net, unsigned prefix, const uint8_t *a)
{
	unsigned full = prefix / 8, rest = prefix % 8;

	if (memcmp(net, a, full) != 0)
		return false;
	return rest == 0 || ((net[full] ^ a[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}

bool net_rule_match_addr(const struct net_rule *r, int family, const uint8_t *addr, uint16_t port)
{
	return r->kind == NET_RULE_ADDR && r->family == family && port_ok(r, port) &&
	       in_prefix(r->addr, r->prefix, addr);
}

struct special {
	int family;
	uint8_t net[16];
	unsigned prefix;
	const char *what;
};

/* Refused unless a rule names them (RFC 6890 and the clouds' metadata
 * addresses: 169.254.169.254 is link-local, fd00:ec2::254 unique-local,
 * Alibaba's 100.100.100.200 CGNAT; Azure's WireServer, 168.63.129.16, is
 * in a public range, answers every VM on the platform and serves its
 * goal state, extension settings and certificates: it has an entry of
 * its own, else 0.0.0.0/0 or a name resolving there reached it). */
static const struct special specials[] = {
	{ AF_INET, { 168, 63, 129, 16 }, 32, "cloud platform endpoint (Azure WireServer 168.63.129.16)" },
	{ AF_INET, { 0 }, 8, "unspecified (0.0.0.0/8)" },
	{ AF_INET, { 127 }, 8, "loopback (127.0.0.0/8)" },
	{ AF_INET, { 10 }, 8, "private (10.0.0.0/8)" },
	{ AF_INET, { 172, 16 }, 12, "private (172.16.0.0/12)" },
	{ AF_INET, { 192, 168 }, 16, "private (192.168.0.0/16)" },
	{ AF_INET, { 169, 254 }, 16, "link-local or cloud metadata (169.254.0.0/16)" },
	{ AF_INET, { 100, 64 }, 10, "shared CGNAT or cloud metadata (100.64.0.0/10)" },
	{ AF_INET, { 192, 0, 0 }, 24, "IETF protocol assignments (192.0.0.0/24)" },
	{ AF_INET, { 198, 18 }, 15, "benchmarking (198.18.0.0/15)" },
	{ AF_INET, { 224 }, 4, "multicast (224.0.0.0/4)" },
	{ AF_INET, { 240 }, 4, "reserved or broadcast (240.0.0.0/4)" },
	{ AF_INET6, { 0 }, 128, "unspecified (::)" },
	{ AF_INET6, { [15] = 1 }, 128, "loopback (::1)" },
	{ AF_INET6, { [10] = 0xff, [11] = 0xff }, 96, "IPv4-mapped (::ffff:0:0/96)" },
	/* Each of these embeds an IPv4 address that a host with the
	 * matching translator or tunnel (a sit device, miredo, a local
	 * NAT64) goes to: 10.0.0.1 or 169.254.169.254 behind a name or a
	 * [::/0] rule, held to nothing here.  Refused whole, as the mapped
	 * and NAT64 ranges are (RFC 4291 2.5.5.1, 2765, 6052, 8215, 3056, 4380). */
	{ AF_INET6, { 0 }, 96, "IPv4-compatible (::/96)" },
	{ AF_INET6, { [8] = 0xff, [9] = 0xff }, 96, "IPv4-translated (::ffff:0:0:0/96)" },
	{ AF_INET6, { 0, 0x64, 0xff, 0x9b }, 96, "NAT64 (64:ff9b::/96)" },
	{ AF_INET6, { 0, 0x64, 0xff, 0x9b, 0, 1 }, 48, "NAT64 local-use (64:ff9b:1::/48)" },
	{ AF_INET6, { 0x20, 0x02 }, 16, "6to4 (2002::/16)" },
	{ AF_INET6, { 0x20, 0x01, 0, 0 }, 32, "Teredo (2001::/32)" },
	{ AF_INET6, { 0xfc }, 7, "unique-local or cloud metadata (fc00::/7)" },
	{ AF_INET6, { 0xfe, 0x80 }, 10, "link-local (fe80::/10)" },
	{ AF_INET6, { 0xff }, 8, "multicast (ff00::/8)" },
};

const char *net_addr_special(int family, const uint8_t *addr, unsigned *range_prefix)
{
	for (size_t i = 0; i < ARRAY_SIZE(specials); i++)
		if (specials[i].family == family && in_prefix(specials[i].net, specials[i].prefix, addr)) {
			if (range_prefix)
				*range_prefix = specials[i].prefix;
			return specials[i].what;
		}
	return NULL;
}

const char *net_addr_verdict(const struct net_rule *rules, unsigned n, bool name_ok, int family,
			     const uint8_t *addr, uint16_t port)
{
	unsigned rp = 0;
	const char *special = net_addr_special(family, addr, &rp);

	for (unsigned i = 0; i < n; i++)
		if (net_rule_match_addr(&rules[i], family, addr, port) && (!special || rules[i].prefix >= rp))
			return NULL;
	if (special)
		return special;
	return name_ok ? NULL : "address not on the allowlist";
}
