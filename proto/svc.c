#include "svc.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static const char *const type_names[] = {
	[SVC_HELLO] = "HELLO", [SVC_OPEN] = "OPEN",   [SVC_OPENED] = "OPENED", [SVC_KILL] = "KILL",
	[SVC_CLOSE] = "CLOSE", [SVC_CLOSED] = "CLOSED", [SVC_INFO] = "INFO",     [SVC_EXITED] = "EXITED",
	[SVC_OK] = "OK",       [SVC_ERROR] = "ERROR",
};

const char *svc_type_name(unsigned type)
{
	return type >= 1 && type <= SVC_TYPE_MAX ? type_names[type] : "?";
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int svc_encode(uint16_t type, uint32_t id, const json_t *msg, char **out, size_t *out_len, struct nsbox_err *err)
{
	struct proto_hdr h = { .magic = SVC_MAGIC, .type = type, .id = id };
	char *payload, *buf;
	size_t n;

	if (!json_is_object(msg))
		return err_set(err, EINVAL, "%s message is not a JSON object", svc_type_name(type));
	payload = json_dumps(msg, JSON_COMPACT);
	if (!payload)
		return err_set(err, ENOMEM, "cannot serialise %s", svc_type_name(type));
	n = strlen(payload);
	if (n + SVC_HDR_SIZE > SVC_MAX_MSG) {
		free(payload);
		return err_set(err, EMSGSIZE, "%s message of %zu bytes exceeds the limit of %u bytes",
			       svc_type_name(type), n, SVC_MAX_MSG - SVC_HDR_SIZE);
	}
	buf = malloc(SVC_HDR_SIZE + n);
	if (!buf) {
		free(payload);
		return err_set(err, ENOMEM, "%s message", svc_type_name(type));
	}
	h.len = (uint32_t)n;
	proto_hdr_encode((uint8_t *)buf, &h);
	memcpy(buf + SVC_HDR_SIZE, payload, n);
	free(payload);
	*out = buf;
	*out_len = SVC_HDR_SIZE + n;
	return 0;
}

int svc_decode(const void *buf, size_t len, uint16_t *type, uint32_t *id, json_t **msg, struct nsbox_err *err)
{
	const uint8_t *p = buf;
	uint32_t magic, plen;
	uint16_t t, flags;
	json_error_t jerr;
	json_t *m;

	if (len < SVC_HDR_SIZE)
		return err_set(err, EPROTO, "message of %zu bytes is shorter than a header", len);
	if (len > SVC_MAX_MSG)
		return err_set(err, EPROTO, "message of %zu bytes exceeds the limit of %u bytes", len, SVC_MAX_MSG);
	magic = get32(p);
	plen = get32(p + 4);
	t = (uint16_t)(p[8] | p[9] << 8);
	flags = (uint16_t)(p[10] | p[11] << 8);
	if (magic != SVC_MAGIC)
		return err_set(err, EPROTO, "bad message magic 0x%08x", magic);
	if (t < 1 || t > SVC_TYPE_MAX)
		return err_set(err, EPROTO, "unknown message type %u", t);
	if (flags)
		return err_set(err, EPROTO, "%s message with unknown flags 0x%x", svc_type_name(t), flags);
	if (plen != len - SVC_HDR_SIZE)
		return err_set(err, EPROTO, "%s message: header says %u bytes, the packet has %zu", svc_type_name(t),
			       plen, len - SVC_HDR_SIZE);
	if (!proto_utf8_valid((const char *)p + SVC_HDR_SIZE, plen))
		return err_set(err, EPROTO, "%s message is not UTF-8", svc_type_name(t));
	m = json_loadb((const char *)p + SVC_HDR_SIZE, plen, JSON_REJECT_DUPLICATES, &jerr);
	if (!m) {
		char text[sizeof(jerr.text) * 2];

		return err_set(err, EPROTO, "%s message is not JSON: %s", svc_type_name(t),
			       proto_text_inert(jerr.text, text, sizeof(text)));
	}
	if (!json_is_object(m)) {
		json_decref(m);
		return err_set(err, EPROTO, "%s message is not a JSON object", svc_type_name(t));
	}
	*type = t;
	*id = get32(p + 12);
	*msg = m;
	return 0;
}

json_t *svc_status_json(const struct svc_status *st)
{
	return json_pack("{s:b,s:i,s:i,s:b,s:b,s:I}", "exited", st->exited, "exit_code", st->exit_code, "term_signal",
			 st->term_signal, "oom_killed", st->oom_killed, "killed", st->killed, "peak_memory",
			 (json_int_t)st->peak_memory);
}

void svc_status_from_json(const json_t *j, struct svc_status *st)
{
	memset(st, 0, sizeof(*st));
	st->exited = json_is_true(json_object_get(j, "exited"));
	st->exit_code = (int)json_integer_value(json_object_get(j, "exit_code"));
	st->term_signal = (int)json_integer_value(json_object_get(j, "term_signal"));
	st->oom_killed = json_is_true(json_object_get(j, "oom_killed"));
	st->killed = json_is_true(json_object_get(j, "killed"));
	st->peak_memory = (uint64_t)json_integer_value(json_object_get(j, "peak_memory"));
}

bool svc_handle_valid(const char *h)
{
	if (!h || strlen(h) != SVC_HANDLE_LEN)
		return false;
	for (const char *c = h; *c; c++)
		if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
			return false;
	return true;
}

/* ---- OPEN ---- */

static int get_u64(const json_t *m, const char *key, uint64_t *v, struct nsbox_err *err)
{
	const json_t *j = json_object_get(m, key);

	if (!j || json_is_null(j))
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return err_set(err, EINVAL, "OPEN: %s must be a non-negative integer", key);
	*v = (uint64_t)json_integer_value(j);
	return 0;
}

static int get_double(const json_t *m, const char *key, double *v, struct nsbox_err *err)
{
	const json_t *j = json_object_get(m, key);

	if (!j || json_is_null(j))
		return 0;
	if (!json_is_number(j) || !(json_number_value(j) >= 0) || !isfinite(json_number_value(j)))
		return err_set(err, EINVAL, "OPEN: %s must be a non-negative number", key);
	*v = json_number_value(j);
	return 0;
}

static int get_bool(const json_t *m, const char *key, bool *v, struct nsbox_err *err)
{
	const json_t *j = json_object_get(m, key);

	if (!j)
		return 0;
	if (!json_is_boolean(j))
		return err_set(err, EINVAL, "OPEN: %s must be true or false", key);
	*v = json_is_true(j);
	return 0;
}

static int get_fd_index(const json_t *j, size_t n_fds, int *idx, const char *what, struct nsbox_err *err)
{
	if (!json_is_integer(j) || json_integer_value(j) < 0 || (size_t)json_integer_value(j) >= n_fds)
		return err_set(err, EINVAL, "OPEN: %s: fd must index one of the %zu descriptors sent", what, n_fds);
	*idx = (int)json_integer_value(j);
	return 0;
}

static const char *const open_keys[] = {
	"profile", "memory", "pids", "cpus", "tmp_size", "file_size", "open_files", "share_net",
	"dist_packages", "workspace", "binds", "env", "output_limit", "cold", "net", "rootfs", NULL,
};

static bool one_of(const char *key, const char *const *keys)
{
	for (size_t i = 0; keys[i]; i++)
		if (!strcmp(keys[i], key))
			return true;
	return false;
}

static int get_limit(const json_t *m, const char *key, int64_t *v, struct nsbox_err *err)
{
	const json_t *j = json_object_get(m, key);

	if (!j)
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return err_set(err, EINVAL, "OPEN: net.%s must be a non-negative integer (0: no limit)", key);
	*v = (int64_t)json_integer_value(j);
	return 0;
}

/* "net": {"allow": [RULE...], "max_bytes_out": N, "max_bytes_in": N,
 * "max_connections": N, "log": {"fd": I}}.  A rule is only shaped here
 * (printable ASCII, bounded); what it means is the policy code's. */
static int get_net(const json_t *v, size_t n_fds, bool *used, struct svc_open *o, struct nsbox_err *err)
{
	static const char *const keys[] = { "allow", "max_bytes_out", "max_bytes_in", "max_connections", "log", NULL };
	const json_t *a = json_object_get(v, "allow"), *r;
	const char *key;
	size_t i;

	if (!json_is_object(v))
		return err_set(err, EINVAL, "OPEN: net must be an object");
	json_object_foreach((json_t *)v, key, r)
		if (!one_of(key, keys))
			return err_set(err, EINVAL, "OPEN: net: unknown field '%.64s'", key);
	if (!json_is_array(a) || !json_array_size(a) || json_array_size(a) > SVC_MAX_NET_RULES)
		return err_set(err, EINVAL, "OPEN: net.allow must be an array of 1 to %d rules", SVC_MAX_NET_RULES);
	json_array_foreach(a, i, r) {
		const char *s = json_string_value(r);
		size_t n = s ? strlen(s) : 0;

		if (!s || !n || n != json_string_length(r) || n > SVC_NET_RULE_MAX)
			return err_set(err, EINVAL, "OPEN: net.allow %zu must be a rule of 1 to %d characters", i,
				       SVC_NET_RULE_MAX);
		for (const char *c = s; *c; c++)
			if (*c <= ' ' || *c > '~')
				return err_set(err, EINVAL, "OPEN: net.allow %zu: character 0x%02x in a rule", i,
					       (unsigned char)*c);
		o->net_allow[o->n_net_allow++] = s;
	}
	if (get_limit(v, "max_bytes_out", &o->net_max_out, err) < 0 ||
	    get_limit(v, "max_bytes_in", &o->net_max_in, err) < 0 ||
	    get_limit(v, "max_connections", &o->net_max_conns, err) < 0)
		return -1;
	if ((a = json_object_get(v, "log"))) {
		if (get_fd_index(json_object_get(a, "fd"), n_fds, &o->net_log_fd, "net.log", err) < 0)
			return -1;
		if (used[o->net_log_fd])
			return err_set(err, EINVAL, "OPEN: descriptor %d used twice", o->net_log_fd);
		used[o->net_log_fd] = true;
	}
	return 0;
}

int svc_open_parse(const json_t *m, size_t n_fds, struct svc_open *o, struct nsbox_err *err)
{
	const char *key;
	const json_t *v;
	bool used[SVC_MAX_FDS] = { false };

	memset(o, 0, sizeof(*o));
	o->workspace_fd = o->net_log_fd = -1;
	o->net_max_out = o->net_max_in = o->net_max_conns = -1;
	o->profile = "default";
	json_object_foreach((json_t *)m, key, v)
		if (!one_of(key, open_keys))
			return err_set(err, EINVAL, "OPEN: unknown field '%.64s'", key);
	if ((v = json_object_get(m, "profile"))) {
		if (!json_is_string(v))
			return err_set(err, EINVAL, "OPEN: profile must be a string");
		o->profile = json_string_value(v);
	}
	if (get_u64(m, "memory", &o->memory, err) < 0 || get_u64(m, "pids", &o->pids, err) < 0 ||
	    get_u64(m, "tmp_size", &o->tmp_size, err) < 0 || get_u64(m, "file_size", &o->file_size, err) < 0 ||
	    get_u64(m, "open_files", &o->open_files, err) < 0 || get_u64(m, "output_limit", &o->output_limit, err) < 0 ||
	    get_double(m, "cpus", &o->cpus, err) < 0 ||
	    get_bool(m, "share_net", &o->share_net, err) < 0 || get_bool(m, "dist_packages", &o->dist_packages, err) < 0 ||
	    get_bool(m, "cold", &o->cold, err) < 0)
		return -1;
	o->share_net_given = json_object_get(m, "share_net") != NULL;
	/* A name, never a path: the service resolves it among its own built
	 * trees (a client's directory would make it a confused deputy). */
	if ((v = json_object_get(m, "rootfs"))) {
		const char *t = json_string_value(v);
		size_t n = t ? strlen(t) : 0;

		if (!t || n == 0 || n > 64 || strspn(t, "abcdefghijklmnopqrstuvwxyz0123456789-_") != n ||
		    t[0] == '-' || t[0] == '_')
			return err_set(err, EINVAL, "OPEN: rootfs must be a built tree's name (lower-case letters, "
					  "digits, - and _; at most 64)");
		o->rootfs = t;
	}
	if (n_fds > SVC_MAX_FDS)
		return err_set(err, EINVAL, "OPEN: more than %d descriptors", SVC_MAX_FDS);
	if ((v = json_object_get(m, "workspace"))) {
		if (get_fd_index(json_object_get(v, "fd"), n_fds, &o->workspace_fd, "workspace", err) < 0)
			return -1;
		used[o->workspace_fd] = true;
	}
	if ((v = json_object_get(m, "binds"))) {
		size_t i;
		const json_t *b;

		if (!json_is_array(v) || json_array_size(v) > SVC_MAX_BINDS)
			return err_set(err, EINVAL, "OPEN: binds must be an array of at most %d", SVC_MAX_BINDS);
		json_array_foreach(v, i, b) {
			const char *dst = json_string_value(json_object_get(b, "dst"));

			if (get_fd_index(json_object_get(b, "fd"), n_fds, &o->binds[i].fd, "bind", err) < 0)
				return -1;
			if (used[o->binds[i].fd])
				return err_set(err, EINVAL, "OPEN: descriptor %d used twice", o->binds[i].fd);
			used[o->binds[i].fd] = true;
			if (!dst || dst[0] != '/' || strlen(dst) > 4096 || strchr(dst, ':'))
				return err_set(err, EINVAL, "OPEN: bind %zu: dst must be an absolute path without ':'", i);
			o->binds[i].dst = dst;
			o->binds[i].writable = json_is_true(json_object_get(b, "writable"));
			o->n_binds++;
		}
	}
	if ((v = json_object_get(m, "net")) && get_net(v, n_fds, used, o, err) < 0)
		return -1;
	for (size_t i = 0; i < n_fds; i++)
		if (!used[i])
			return err_set(err, EINVAL, "OPEN: descriptor %zu sent but not used", i);
	if ((v = json_object_get(m, "env"))) {
		size_t i;
		const json_t *e;

		if (!json_is_array(v) || json_array_size(v) > SVC_MAX_ENV)
			return err_set(err, EINVAL, "OPEN: env must be an array of at most %d", SVC_MAX_ENV);
		json_array_foreach(v, i, e) {
			const char *s = json_string_value(e);

			if (!s || !strchr(s, '=') || s[0] == '=' || strlen(s) != json_string_length(e))
				return err_set(err, EINVAL, "OPEN: env %zu must be \"NAME=VALUE\"", i);
			o->env[o->n_env++] = s;
		}
	}
	return 0;
}
