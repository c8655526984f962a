/* Egress allowlist rules ([Network] Allow=, --allow-net): parsing and
 * matching, pure code.  A rule is one of
 *   NAME[:PORT]        an exact host name (example.com)
 *   *.NAME[:PORT]      any name below NAME (not NAME itself)
 *   IPV4[/LEN][:PORT]  an address or a CIDR range (10.99.0.0/24)
 *   [IPV6[/LEN]][:PORT]
 * PORT 0 (none given) means 443 and 80.  Address rules are the only way
 * to reach the special ranges (loopback, RFC 1918, link-local, CGNAT,
 * multicast, metadata...): a rule unlocks such an address only when the
 * rule lies inside that range (10.99.0.0/24 unlocks 10.99.0.7, 0.0.0.0/0
 * unlocks nothing special).  See nsbox-policy(5), [Network]. */
#ifndef NSBOX_NETRULE_H
#define NSBOX_NETRULE_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

enum net_rule_kind { NET_RULE_NAME = 1, NET_RULE_WILD, NET_RULE_ADDR };

#define NET_NAME_MAX 253

struct net_rule {
	enum net_rule_kind kind;
	char name[NET_NAME_MAX + 1];	/* lowercase; for WILD the suffix without "*." */
	int family;			/* AF_INET or AF_INET6 (ADDR) */
	uint8_t addr[16];		/* network address, host bits zero */
	unsigned prefix;		/* 0..32 or 0..128 */
	uint16_t port;			/* 0: 443 and 80 */
};

/* Parse one rule.  Returns 0, or -1 with err saying what is accepted. */
int net_rule_parse(const char *s, struct net_rule *r, struct nsbox_err *err);
/* Where Debian's publicsuffix package puts the Public Suffix List. */
#define NET_PSL_PATH "/usr/share/publicsuffix/public_suffix_list.dat"
/* Whether name (normalized: lower case, no trailing dot) is itself a public
 * suffix by the list at path (its ICANN and private sections: co.uk,
 * github.io): a rule naming it, or a wildcard rule naming its parent
 * without an exception for it.  1 yes, 0 no, -1 no list to read. */
int net_public_suffix(const char *name, const char *path);

/* A host name as a request gives it: letters, digits, '-', '.', '_';
 * lowercased into out (NET_NAME_MAX + 1 bytes).  Returns false if not a
 * name. */
bool net_name_normalize(const char *in, char *out);

/* Does rule r allow the name (normalized) on port? */
bool net_rule_match_name(const struct net_rule *r, const char *name, uint16_t port);
/* Does rule r allow the address on port (ADDR rules only)? */
bool net_rule_match_addr(const struct net_rule *r, int family, const uint8_t *addr, uint16_t port);

/* If the address is in a range refused by default, its description
 * ("loopback", "private (RFC 1918)", ...) and, in *range_prefix, that
 * range's prefix length; else NULL. */
const char *net_addr_special(int family, const uint8_t *addr, unsigned *range_prefix);

/* The decision for one resolved address: allowed by some rule in rules[]
 * for this port, given that the request itself matched (name_ok: a name
 * rule matched the host name).  Special addresses need an ADDR rule that
 * lies inside their range.  Returns NULL if allowed, else the reason. */
const char *net_addr_verdict(const struct net_rule *rules, unsigned n, bool name_ok, int family,
			     const uint8_t *addr, uint16_t port);

#endif
