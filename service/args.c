#include "args.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char nsboxd_usage[] =
	"usage: nsboxd [--listen PATH [--mode MODE] [--group GROUP]] [--config FILE] [--verbose]\n"
	"       nsboxd --check-config [FILE]\n"
	"  --listen PATH     listen on this AF_UNIX SOCK_SEQPACKET socket (without socket activation)\n"
	"  --mode MODE       its permissions, octal (default 0660)\n"
	"  --group GROUP     its group (default: nsboxd's)\n"
	"  --config FILE     configuration (default " NSBOXD_CONF_DEFAULT ", nsboxd.conf(5))\n"
	"  --check-config    parse the configuration, print it in full and exit (0 valid, 2 not)\n"
	"  --verbose         say more on stderr\n"
	"Socket activation (nsboxd.socket): one listening SOCK_SEQPACKET socket, Accept=no.\n";

int nsboxd_parse_args(int argc, char **argv, struct nsboxd_args *a, char *errbuf, unsigned errlen)
{
	memset(a, 0, sizeof(*a));
	a->action = ACT_RUN;
	a->d.config_path = NSBOXD_CONF_DEFAULT;
	a->d.config_may_be_missing = true;
	a->d.listen_mode = 0660;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			a->action = ACT_HELP;
		} else if (!strcmp(o, "--version")) {
			a->action = ACT_VERSION;
		} else if (!strcmp(o, "--verbose") || !strcmp(o, "-v")) {
			a->d.verbose = true;
		} else if (!strcmp(o, "--check-config")) {
			a->action = ACT_CHECK_CONFIG;
			if (v && v[0] != '-') {
				a->d.config_path = v;
				a->d.config_may_be_missing = false;
				i++;
			}
		} else if (!strcmp(o, "--listen") || !strcmp(o, "--config") || !strcmp(o, "--mode") ||
			   !strcmp(o, "--group")) {
			if (!v) {
				snprintf(errbuf, errlen, "%s needs a value", o);
				return -1;
			}
			i++;
			if (o[2] == 'l') {
				if (v[0] != '/') {
					snprintf(errbuf, errlen, "--listen %s: an absolute path", v);
					return -1;
				}
				a->d.listen_path = v;
			} else if (o[2] == 'c') {
				a->d.config_path = v;
				a->d.config_may_be_missing = false;
			} else if (o[2] == 'm') {
				char *end;
				long m = strtol(v, &end, 8);

				if (end == v || *end || !isdigit((unsigned char)*v) || m < 0 || m > 0777) {
					snprintf(errbuf, errlen, "--mode %s: an octal mode", v);
					return -1;
				}
				a->d.listen_mode = (int)m;
			} else {
				if (!*v) {
					snprintf(errbuf, errlen, "--group '': a group name or number");
					return -1;
				}
				a->d.listen_group = v;
			}
		} else {
			snprintf(errbuf, errlen, "unknown argument '%s'", o);
			return -1;
		}
	}
	return 0;
}
