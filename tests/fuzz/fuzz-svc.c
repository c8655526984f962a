/* libFuzzer target for nsboxd's input: a control packet as the daemon
 * receives it (svc_decode, then svc_open_parse whatever its type, with a
 * descriptor count from the input), the payload also parsed as OPEN
 * without a header, and the bytes read as nsboxd.conf(5) (conf_parse).
 * Must never crash, leak, read past the buffer or accept what it then
 * can't re-encode. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "svc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void open_parse(const json_t *m, size_t n_fds)
{
	struct svc_open o;
	struct nsbox_err e = { 0 };

	if (svc_open_parse(m, n_fds, &o, &e) < 0)
		return;
	/* What parsed must be what the daemon may index and use. */
	if (!o.profile || (o.workspace_fd >= 0 && (size_t)o.workspace_fd >= n_fds) || o.n_binds > SVC_MAX_BINDS ||
	    o.n_env > SVC_MAX_ENV)
		abort();
	for (size_t i = 0; i < o.n_binds; i++)
		if (o.binds[i].fd < 0 || (size_t)o.binds[i].fd >= n_fds || !o.binds[i].dst || o.binds[i].dst[0] != '/')
			abort();
	for (size_t i = 0; i < o.n_env; i++)
		if (!strchr(o.env[i], '='))
			abort();
	if (o.n_net_allow > SVC_MAX_NET_RULES || (o.net_log_fd >= 0 && (size_t)o.net_log_fd >= n_fds) ||
	    (o.net_log_fd >= 0 && !o.n_net_allow) || o.net_max_out < -1 || o.net_max_in < -1 || o.net_max_conns < -1)
		abort();
	for (size_t i = 0; i < o.n_net_allow; i++) {
		size_t n = strlen(o.net_allow[i]);

		if (!n || n > SVC_NET_RULE_MAX)
			abort();
		for (const char *c = o.net_allow[i]; *c; c++)
			if (*c <= ' ' || *c > '~')
				abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nsbox_err e = { 0 };
	uint16_t type;
	uint32_t id;
	json_t *m = NULL;
	size_t n_fds;

	if (size < 1)
		return 0;
	n_fds = data[0] % (SVC_MAX_FDS + 1);
	data++;
	size--;
	if (svc_decode(data, size, &type, &id, &m, &e) == 0) {
		char *buf = NULL;
		size_t len;
		struct svc_status st;

		if (!json_is_object(m) || type < 1 || type > SVC_TYPE_MAX)
			abort();
		open_parse(m, n_fds);
		svc_status_from_json(json_object_get(m, "status"), &st);
		/* A decoded message re-encodes, unless over the size cap. */
		if (svc_encode(type, id, m, &buf, &len, &e) == 0) {
			uint16_t t2;
			uint32_t id2;
			json_t *m2 = NULL;

			if (svc_decode(buf, len, &t2, &id2, &m2, &e) < 0 || t2 != type || id2 != id ||
			    !json_equal(m, m2))
				abort();
			json_decref(m2);
			free(buf);
		}
		json_decref(m);
	}
	/* The payload alone, so the parser is reached without a header. */
	m = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	if (m) {
		open_parse(m, n_fds);
		json_decref(m);
	}
	{
		struct conf c;
		char eb[512];

		conf_defaults(&c);
		if (conf_parse(&c, (const char *)data, size, "fuzz", eb, sizeof(eb)) == 0 &&
		    (c.n_rules > CONF_MAX_RULES || c.n_allow_uids > CONF_MAX_IDS || c.n_allow_gids > CONF_MAX_IDS))
			abort();
	}
	return 0;
}
