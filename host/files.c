/* Session file operations over the runner protocol: see files.h. */
#include "files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "session.h"
#include "util.h"

static bool runner_has_files(const struct nsbox_session *s)
{
	const json_t *h = session_hello(s);
	json_t *c = json_object_get(h, "capabilities"), *e;
	size_t i;

	json_array_foreach(c, i, e)
		if (json_is_string(e) && !strcmp(json_string_value(e), "files"))
			return true;
	return false;
}

/* The runner's errno, trusted only to name an error: anything outside the
 * kernel's range becomes EIO. */
static int answer_error(const json_t *a, const char *op, const char *path, struct nsbox_err *err)
{
	json_t *e = json_object_get(a, "error");
	json_int_t no;
	const char *msg;

	if (!json_is_object(e))
		return 0;
	no = json_integer_value(json_object_get(e, "errno"));
	if (no <= 0 || no > 4095)
		no = EIO;
	msg = json_string_value(json_object_get(e, "message"));
	if (!msg || !strcmp(msg, strerror((int)no)))
		return err_set(err, (int)no, "%s %s", op, path);
	return err_set(err, (int)no, "%s %s (%.400s)", op, path, msg);
}

static int request(struct nsbox_session *s, uint16_t type, json_t *msg, const char *op, const char *path,
		   json_t **value, struct nsbox_err *err)
{
	json_t *a = NULL;

	if (!msg)
		return err_set(err, ENOMEM, "%s %s", op, path);
	if (!runner_has_files(s)) {
		json_decref(msg);
		return err_set(err, ENOTSUP, "%s %s: the runner does not do file operations", op, path);
	}
	if (session_request(s, type, msg, &a, err) < 0)
		return err_wrap(err, "%s %s", op, path);
	if (answer_error(a, op, path, err) < 0) {
		json_decref(a);
		return -1;
	}
	*value = json_incref(json_object_get(a, "value"));
	json_decref(a);
	if (!*value)
		return err_set(err, EPROTO, "%s %s: the runner's answer has no value", op, path);
	return 0;
}

/* Raw bytes per frame: the chunk, or less when the session's frame cap is
 * low (base64 costs 4/3, the rest of the message a little). */
static size_t chunk_size(const struct nsbox_session *s)
{
	uint32_t mf = session_max_frame(s);
	size_t room = mf > 8192 ? (mf - 4096) / 4 * 3 : 3072;

	return room < SESSION_FILE_CHUNK ? room : SESSION_FILE_CHUNK;
}

int session_file_write(struct nsbox_session *s, const char *path, const void *data, size_t len, int mode,
		       struct nsbox_err *err)
{
	size_t chunk = chunk_size(s), off = 0;
	char *b64 = NULL;

	if (mode < 0)
		mode = 0644;
	b64 = malloc(proto_b64_len(len < chunk ? len : chunk) + 1);
	if (!b64)
		return err_set(err, ENOMEM, "write %s", path);
	do {
		size_t n = len - off < chunk ? len - off : chunk;
		json_t *v = NULL;

		proto_b64_encode((const char *)data + off, n, b64);
		if (request(s, PROTO_FILE_WRITE,
			    json_pack("{s:s,s:s,s:I,s:i,s:b}", "path", path, "data", b64, "offset",
				      (json_int_t)off, "mode", mode, "truncate", off == 0),
			    "write", path, &v, err) < 0) {
			free(b64);
			return -1;
		}
		json_decref(v);
		off += n;
	} while (off < len);
	free(b64);
	return 0;
}

int session_file_read(struct nsbox_session *s, const char *path, uint64_t max, char **data, size_t *len,
		      struct nsbox_err *err)
{
	size_t chunk = chunk_size(s);
	_cleanup_free_ char *buf = NULL;
	size_t have = 0, cap = 0;

	if (!max)
		max = SESSION_FILE_MAX_DEFAULT;
	for (;;) {
		json_t *v = NULL, *d;
		const char *text;
		size_t tn;
		long long got;
		bool eof;
		/* Ask for one byte past the cap so that a file of exactly max
		 * bytes is told from a larger one. */
		uint64_t want = max + 1 - have < chunk ? max + 1 - have : chunk;

		if (request(s, PROTO_FILE_READ,
			    json_pack("{s:s,s:I,s:I}", "path", path, "offset", (json_int_t)have, "length",
				      (json_int_t)want),
			    "read", path, &v, err) < 0)
			return -1;
		d = json_object_get(v, "data");
		eof = json_is_true(json_object_get(v, "eof"));
		if (!json_is_string(d)) {
			json_decref(v);
			return err_set(err, EPROTO, "read %s: the runner's answer has no data", path);
		}
		text = json_string_value(d);
		tn = json_string_length(d);
		if (tn / 4 * 3 > want + 2 || tn % 4) {
			json_decref(v);
			return err_set(err, EPROTO, "read %s: the runner sent more than was asked for", path);
		}
		if (have + tn / 4 * 3 + 1 > cap) {
			size_t ncap = have + tn / 4 * 3 + 1;
			char *nb = realloc(buf, ncap);

			if (!nb) {
				json_decref(v);
				return err_set(err, ENOMEM, "read %s", path);
			}
			buf = nb;
			cap = ncap;
		}
		got = proto_b64_decode(text, tn, buf + have);
		json_decref(v);
		if (got < 0 || (uint64_t)got > want)
			return err_set(err, EPROTO, "read %s: bad data from the runner", path);
		have += (size_t)got;
		if (have > max)
			return err_set(err, EFBIG, "read %s: larger than the cap of %llu bytes", path,
				       (unsigned long long)max);
		if (eof || got == 0)
			break;
	}
	if (!buf && !(buf = malloc(1)))
		return err_set(err, ENOMEM, "read %s", path);
	buf[have] = '\0';
	*data = TAKE_PTR(buf);
	*len = have;
	return 0;
}

int session_file_list(struct nsbox_session *s, const char *path, json_t **out, struct nsbox_err *err)
{
	json_t *v = NULL, *ents, *e;
	size_t i;

	if (request(s, PROTO_FILE_LIST, json_pack("{s:s,s:i}", "path", path, "max", SESSION_LIST_MAX), "list",
		    path, &v, err) < 0)
		return -1;
	ents = json_object_get(v, "entries");
	if (!json_is_array(ents) || json_array_size(ents) > SESSION_LIST_MAX) {
		json_decref(v);
		return err_set(err, EPROTO, "list %s: bad entries from the runner", path);
	}
	json_array_foreach(ents, i, e) {
		if (!json_is_object(e) || !json_is_string(json_object_get(e, "name")) ||
		    !json_is_string(json_object_get(e, "type")) || !json_is_integer(json_object_get(e, "size"))) {
			json_decref(v);
			return err_set(err, EPROTO, "list %s: entry %zu from the runner is malformed", path, i);
		}
	}
	*out = v;
	return 0;
}

int session_file_mkdir(struct nsbox_session *s, const char *path, int mode, struct nsbox_err *err)
{
	json_t *v = NULL;

	if (mode < 0)
		mode = 0755;
	if (request(s, PROTO_FILE_WRITE,
		    json_pack("{s:s,s:s,s:i,s:b}", "path", path, "kind", "dir", "mode", mode, "parents", 1), "mkdir",
		    path, &v, err) < 0)
		return -1;
	json_decref(v);
	return 0;
}
