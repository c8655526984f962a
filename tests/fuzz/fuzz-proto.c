/* libFuzzer target for the runner protocol: the frame decoder fed in
 * irregular chunks, then every complete frame parsed as a message in both
 * directions (proto/proto.c).  Must never crash, leak or over-allocate. */
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
