/* Egress rules (policy/netrule.c): parsing, name and address matching,
 * and the special ranges a name rule never unlocks. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netrule.h"
#include "policy.h"
#include "tap.h"

static const char *verdict(const char *const *rs, unsigned n, bool name_ok, const char *addr, unsigned port)
{
	struct net_rule rules[8];
	uint8_t a[16];
	int fam = strchr(addr, ':') ? AF_INET6 : AF_INET;

	for (unsigned i = 0; i < n; i++)
		if (net_rule_parse(rs[i], &rules[i], NULL) < 0)
			return "BAD RULE";
	inet_pton(fam, addr, a);
	return net_addr_verdict(rules, n, name_ok, fam, a, (uint16_t)port);
}

int main(void)
{
	struct net_rule r;
	static const char *const good[] = { "example.com", "*.example.com", "Example.COM:8443", "10.99.0.0/24",
					    "127.0.0.1:8080", "[::1]:443", "[2001:db8::/32]", "a_b.example." };
	static const char *const bad[] = { "*.com", "exa mple.com", "10.0.0.0/33", "example.com:0", "::1",
					   "example.com:70000", "127.1", "*.*.example.com", "", "[::1", "a..b", "a.example.." };

	{
		char out[NET_NAME_MAX + 1] = "stale";

		ok(!net_name_normalize("secretpart%zz.example.com", out) && out[0] == '\0',
		   "a name with a bad byte leaves no part of it behind");
		ok(net_name_normalize("Api.Example.COM.", out) && strcmp(out, "api.example.com") == 0,
		   "a name: lowercased, no root dot");
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ok(net_rule_parse(good[i], &r, NULL) == 0, "accepted: %s", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct nsbox_err e = { 0 };

		/* The message says it all: no strerror() after it. */
		ok(net_rule_parse(bad[i], &r, &e) < 0 && e.code == EINVAL && e.msg[0] &&
			   !strstr(e.msg, "Invalid argument"),
		   "refused: '%s' (%s)", bad[i], e.msg);
	}

	{
		/* The Public Suffix List's three kinds of rule, comments, CRLF. */
		char path[] = "/tmp/nsbox-unit-psl-XXXXXX";
		int fd = mkstemp(path);
		FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

		if (f) {
			fputs("// ===BEGIN ICANN DOMAINS===\nuk\nco.uk\r\n*.ck\n!www.ck\n\n// x.example\ngithub.io\n", f);
			fclose(f);
		}
		ok(f && net_public_suffix("co.uk", path) == 1 && net_public_suffix("github.io", path) == 1,
		   "public suffix: a rule naming it (CRLF too)");
		ok(net_public_suffix("foo.ck", path) == 1 && net_public_suffix("www.ck", path) == 0,
		   "public suffix: a wildcard rule's names, not its exception");
		ok(net_public_suffix("example.co.uk", path) == 0 && net_public_suffix("x.example", path) == 0 &&
			   net_public_suffix("a.foo.ck", path) == 0,
		   "public suffix: not a name below one, nor a comment");
		ok(net_public_suffix("co.uk", "/nonexistent/psl") == -1, "public suffix: no list, -1");
		unlink(path);
	}
	if (access(NET_PSL_PATH, R_OK) == 0) {
		static const char *const wide[] = { "*.co.uk", "*.github.io", "*.s3.amazonaws.com", "*.foo.ck" };
		static const char *const narrow[] = { "*.example.co.uk", "*.www.ck", "*.amazonaws.com", "*.example.com" };
		struct nsbox_err e = { 0 };

		for (size_t i = 0; i < sizeof(wide) / sizeof(wide[0]); i++) {
			struct nsbox_policy p = { 0 };

			ok(policy_set(&p, "Network", "Allow", wide[i], &e) < 0 && strstr(e.msg, "is a public suffix"),
			   "refused: %s (%s)", wide[i], e.msg);
			policy_free(&p);
		}
		for (size_t i = 0; i < sizeof(narrow) / sizeof(narrow[0]); i++) {
			struct nsbox_policy p = { 0 };

			ok(policy_set(&p, "Network", "Allow", narrow[i], NULL) == 0,
			   "accepted: %s (not a public suffix itself)", narrow[i]);
			policy_free(&p);
		}
	} else {
		printf("# %s is missing (Debian's publicsuffix): wildcards over public suffixes not checked\n",
		       NET_PSL_PATH);
		ok(getenv("NSBOX_MUST_WORK") == NULL, "the Public Suffix List is installed where CI needs it");
	}

	net_rule_parse("*.example.com", &r, NULL);
	ok(net_rule_match_name(&r, "a.example.com", 443) && net_rule_match_name(&r, "a.b.example.com", 80),
	   "wildcard: names below, ports 443 and 80");
	ok(!net_rule_match_name(&r, "example.com", 443) && !net_rule_match_name(&r, "aexample.com", 443) &&
		   !net_rule_match_name(&r, "a.example.com", 8080),
	   "wildcard: not the name itself, not a suffix without a dot, not another port");
	net_rule_parse("Example.COM:8443", &r, NULL);
	ok(net_rule_match_name(&r, "example.com", 8443) && !net_rule_match_name(&r, "example.com", 443),
	   "exact name, lowercased, its own port only");
	net_rule_parse("10.99.0.0/24", &r, NULL);
	ok(r.prefix == 24 && r.addr[2] == 0, "CIDR: prefix and network");

	{
		static const char *const name_only[] = { "example.com" };
		static const char *const net[] = { "10.99.0.0/24" };
		static const char *const all[] = { "0.0.0.0/0" };
		static const char *const lo[] = { "127.0.0.1:8080" };

		ok(verdict(name_only, 1, true, "93.184.216.34", 443) == NULL, "a name rule: a public address");
		ok(verdict(name_only, 1, true, "127.0.0.1", 443) != NULL, "a name rule: not loopback");
		ok(verdict(name_only, 1, true, "10.1.2.3", 443) != NULL, "a name rule: not RFC 1918");
		ok(verdict(name_only, 1, true, "169.254.169.254", 80) != NULL, "a name rule: not the metadata address");
		ok(verdict(name_only, 1, true, "100.100.100.200", 80) != NULL, "a name rule: not CGNAT");
		ok(verdict(name_only, 1, true, "168.63.129.16", 80) != NULL &&
			   verdict(all, 1, false, "168.63.129.16", 80) != NULL,
		   "a name rule, 0.0.0.0/0: not Azure's WireServer");
		ok(verdict(name_only, 1, true, "168.63.129.17", 80) == NULL, "... its neighbour is public");
		ok(verdict(name_only, 1, true, "::ffff:127.0.0.1", 80) != NULL, "a name rule: not v4-mapped");
		ok(verdict(name_only, 1, true, "fd00:ec2::254", 80) != NULL, "a name rule: not fc00::/7");
		ok(verdict(name_only, 1, true, "fe80::1", 80) != NULL, "a name rule: not fe80::/10");
		/* IPv6 forms that carry an IPv4 address to a translator or
		 * tunnel: refused to a name, and to [::/0] as to 0.0.0.0/0. */
		{
			static const char *const v6all[] = { "[::/0]" };
			static const char *const embedded[] = { "::a00:1", "::ffff:0:a00:1", "64:ff9b:1::a9fe:a9fe", "2002:a9fe:a9fe::1",
								"2001:0:4136:e378:8000:63bf:f5ff:fffe" };

			for (size_t i = 0; i < sizeof(embedded) / sizeof(embedded[0]); i++) {
				ok(verdict(name_only, 1, true, embedded[i], 443) != NULL, "a name rule: not %s",
				   embedded[i]);
				ok(verdict(v6all, 1, false, embedded[i], 443) != NULL, "[::/0]: not %s", embedded[i]);
			}
			ok(verdict(v6all, 1, false, "2001:db8::1", 443) == NULL &&
				   verdict(name_only, 1, true, "2606:4700::1", 443) == NULL,
			   "[::/0] and a name: public IPv6 still");
		}
		ok(verdict(name_only, 1, false, "93.184.216.34", 443) != NULL, "no name matched: not any address");
		ok(verdict(net, 1, false, "10.99.0.7", 443) == NULL, "10.99.0.0/24 unlocks 10.99.0.7");
		ok(verdict(net, 1, false, "10.99.1.7", 443) != NULL, "... not 10.99.1.7");
		ok(verdict(all, 1, false, "10.99.0.7", 443) != NULL, "0.0.0.0/0 unlocks nothing special");
		ok(verdict(all, 1, false, "93.184.216.34", 80) == NULL, "0.0.0.0/0: public addresses");
		ok(verdict(lo, 1, false, "127.0.0.1", 8080) == NULL && verdict(lo, 1, false, "127.0.0.1", 443) != NULL,
		   "127.0.0.1:8080: that port only");
	}
	tap_done();
}
