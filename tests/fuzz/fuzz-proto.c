/* libFuzzer target for the runner protocol: the frame decoder fed in
 * irregular chunks, then every complete frame parsed as a message in both
 * directions (proto/proto.c), and OUTPUT frames through the host's hand
 * decoder too, which must read them as the parser does.  Must never crash,
 * leak or over-allocate. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct proto_reader r;
	struct nsbox_err err;
	size_t off = 0, chunk;

	if (size < 1)
		return 0;
	/* First byte picks the chunk size so split headers get exercised. */
	chunk = (size_t)data[0] % 23 + 1;
	data++;
	size--;
	/* A small cap keeps oversize headers on the error path. */
	proto_reader_init(&r, 1 << 16);
	while (off < size) {
		struct proto_frame f = { 0 };
		size_t n = size - off < chunk ? size - off : chunk, used;
		int k = proto_reader_feed(&r, data + off, n, &used, &f, &err);

		off += used;
		if (k < 0)
			break;
		if (k == 1) {
			json_t *m = NULL;

			if (proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) == 0)
				json_decref(m);
			m = NULL;
			if (proto_msg_parse(&f, PROTO_TO_RUNNER, &m, &err) == 0) {
				char *buf;
				size_t len;

				if (proto_encode(f.hdr.type, f.hdr.id, m, 0, &buf, &len, &err) == 0)
					free(buf);
				json_decref(m);
			}
			{
				char name[PROTO_TOOL_NAME_MAX + 1];

				/* The host answers unknown CALLs from this alone. */
				if (proto_call_name(f.payload, f.hdr.len, name) == 0 && strlen(name) > PROTO_TOOL_NAME_MAX)
					abort();
			}
			if (f.hdr.type == PROTO_OUTPUT) {
				/* The host's hand decoder of OUTPUT agrees with the
				 * parser: same reading, same refusals, and what it
				 * leaves to the parser is left untouched. */
				char *copy = malloc((size_t)f.hdr.len + 1);
				const char *d = NULL;
				size_t dl = 0;
				int st = 0, k;
				json_t *ref = NULL;

				if (!copy)
					abort();
				memcpy(copy, f.payload, f.hdr.len);
				copy[f.hdr.len] = '\0';
				k = proto_output_decode(copy, f.hdr.len, &st, &d, &dl);
				if (proto_msg_parse(&f, PROTO_TO_HOST, &ref, &err) < 0)
					ref = NULL;
				if (k == 1) {
					json_t *v = ref ? json_object_get(ref, "data") : NULL;
					const char *sn = ref ? json_string_value(json_object_get(ref, "stream")) : NULL;

					if (!v || json_string_length(v) != dl || memcmp(json_string_value(v), d, dl) ||
					    st != (sn && !strcmp(sn, "stdout") ? 1 : 2))
						abort();
				} else if (k < 0 ? ref != NULL : memcmp(copy, f.payload, f.hdr.len) != 0) {
					abort();
				}
				json_decref(ref);
				free(copy);
			}
			{
				/* The host's CALL reader agrees with the parser: the
				 * same verdict, and the same name, args and kwargs. */
				struct proto_frame cf = f;
				struct proto_call c;
				json_t *ref = NULL;
				int a, b;

				cf.hdr.type = PROTO_CALL;
				cf.hdr.flags = 0;
				a = proto_call_parse(f.payload, f.hdr.len, &c, &err);
				b = proto_msg_parse(&cf, PROTO_TO_HOST, &ref, &err);
				/* Stricter in one thing: a NUL byte, which jansson
				 * drops after a number or a literal ("1\0,2" is
				 * [1,2] to it) but would cut the text passed on. */
				if ((a == 0) != (b == 0) && !(a < 0 && f.hdr.len && memchr(f.payload, 0, f.hdr.len)))
					abort();
				if (a == 0) {
					const char *n = json_string_value(json_object_get(ref, "name"));
					size_t nl = strlen(n);
					json_t *x = json_loadb(f.payload + c.args_off, c.args_len,
							       JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
					json_t *y = json_loadb(f.payload + c.kwargs_off, c.kwargs_len,
							       JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);

					if (c.name_cut != (nl > PROTO_TOOL_NAME_MAX) ||
					    strncmp(c.name, n, PROTO_TOOL_NAME_MAX) || strlen(c.name) != (c.name_cut ? PROTO_TOOL_NAME_MAX : nl))
						abort();
					if (!json_equal(x, json_object_get(ref, "args")) ||
					    !json_equal(y, json_object_get(ref, "kwargs")))
						abort();
					json_decref(x);
					json_decref(y);
				}
				json_decref(ref);
			}
			{
				char *o;
				size_t ol, pend;

				if (proto_utf8_sanitize(f.payload, f.hdr.len, &o, &ol, &pend) == 0)
					free(o);
			}
			proto_frame_free(&f);
		}
	}
	proto_reader_free(&r);
	return 0;
}
