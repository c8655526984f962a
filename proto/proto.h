/* The runner protocol: the one wire contract between the host (host/session.c)
 * and the runner inside the sandbox (runner/).  Compiled into both sides.
 * Documented in nsbox-protocol(7); keep the two in step.
 *
 * A frame is a 16-byte little-endian header
 *	uint32 magic 'NSBX' (0x4e534258), uint32 len, uint16 type, uint16 flags, uint32 id
 * followed by len bytes of payload: one JSON object (UTF-8).  len is checked
 * against the receiver's maximum before anything is allocated.  Any malformed
 * frame or message is a protocol error that ends the session.
 *
 * Pure code apart from proto_write_frame()/proto_reader_read(): no global
 * state, no printing.  The host treats every frame from inside as hostile. */
#ifndef NSBOX_PROTO_H
#define NSBOX_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

#define NSBOX_PROTO_MAGIC 0x4e534258u	/* "NSBX" read as a little-endian uint32 */
#define NSBOX_PROTO_VERSION 1
#define NSBOX_PROTO_HDR_SIZE 16
/* Hard cap on a frame's payload; receivers may set a lower one. */
#define NSBOX_PROTO_MAX_FRAME (16u << 20)
/* Per frame: JSON objects, and objects + array elements + members. */
#define NSBOX_PROTO_MAX_OBJECTS (1u << 18)
#define NSBOX_PROTO_MAX_ELEMENTS (1u << 22)
/* Per frame: nesting of arrays and objects.  A Python value crosses at
 * most 100 levels deep (nsbox-protocol(7), VALUES), two JSON levels per
 * level with the $tuple/$dict tags, plus the message around it.  Checked
 * before parsing: jansson and the SDK's decoder recurse per level. */
#define NSBOX_PROTO_MAX_DEPTH 256
/* Per frame: what its parse may cost the receiver, estimated from the text
 * before parsing (a jansson value is 40 to 250 bytes, "0," is two): at
 * most FACTOR times the payload plus SLACK bytes. */
#define NSBOX_PROTO_COST_FACTOR 16u
#define NSBOX_PROTO_COST_SLACK (16u << 20)

enum proto_type {
	PROTO_HELLO = 1,	/* both ways: version, capabilities (host also: tools, limits) */
	PROTO_EXEC,		/* host -> runner: code to run */
	PROTO_RESULT,		/* runner -> host: outcome of an EXEC (same id) */
	PROTO_OUTPUT,		/* runner -> host: streamed output chunk of an EXEC (same id) */
	PROTO_CALL,		/* runner -> host: tool call (runner-chosen call id) */
	PROTO_RETURN,		/* host -> runner: a tool call's value (call id) */
	PROTO_RAISE,		/* host -> runner: a tool call's failure (call id) */
	PROTO_SET_VAR,		/* host -> runner: bind a global */
	PROTO_GET_VAR,		/* host -> runner: read a global */
	PROTO_VALUE,		/* runner -> host: answer to SET_VAR/GET_VAR/RESET (same id) */
	PROTO_RESET,		/* host -> runner: clear the session's globals */
	PROTO_CANCEL,		/* host -> runner: interrupt the running EXEC */
	PROTO_PING,		/* both ways: answered by PONG with the same id */
	PROTO_PONG,
	PROTO_BYE,		/* both ways: orderly end of the session */
	PROTO_ERROR,		/* both ways: the sender saw a protocol error and is ending */
	PROTO_TOOLS,		/* host -> runner: the full tool list after HELLO (answered by VALUE) */
	/* Session file operations (capability "files"), done by the runner
	 * inside the sandbox; each answered by VALUE.  Data is raw bytes after
	 * the JSON (PROTO_FLAG_DATA, capability "files-binary"), else base64. */
	PROTO_FILE_WRITE,	/* host -> runner: path, data, offset, mode, truncate, parents, kind */
	PROTO_FILE_READ,	/* host -> runner: path, offset, length, binary */
	PROTO_FILE_LIST,	/* host -> runner: path, max */
	PROTO_TYPE_MAX = PROTO_FILE_LIST,
};

/* Which way a frame travels; each type is only valid in some directions. */
enum proto_dir {
	PROTO_TO_RUNNER = 1,
	PROTO_TO_HOST = 2,
};

struct proto_hdr {
	uint32_t magic;
	uint32_t len;
	uint16_t type;
	uint16_t flags;		/* 0, or PROTO_FLAG_DATA where allowed */
	uint32_t id;
};

/* A frame with raw data (capability "files-binary", nsbox-protocol(7)):
 * the payload is the JSON object, one NUL byte, then the data, the rest of
 * len.  Allowed on FILE_WRITE (the data to write) and VALUE (the answer to
 * a FILE_READ that asked for it with "binary": true) only: file data
 * crosses without base64 or JSON string parsing. */
#define PROTO_FLAG_DATA 0x1u

/* Whether a frame of type may carry PROTO_FLAG_DATA. */
bool proto_type_takes_data(unsigned type);

/* A received frame.  payload is NUL-terminated (len + 1 bytes allocated) and
 * owned by the frame: proto_frame_free() it. */
struct proto_frame {
	struct proto_hdr hdr;
	char *payload;
};

/* Name of a type ("EXEC"), or "?" for an unknown one.  Never NULL. */
const char *proto_type_name(unsigned type);

/* Serialise a header into 16 bytes. */
void proto_hdr_encode(uint8_t out[NSBOX_PROTO_HDR_SIZE], const struct proto_hdr *h);

/* Parse and check a header: magic, flags, known type, len <= max_len.
 * Returns 0, or -1 with err (code EPROTO) naming what is wrong. */
int proto_hdr_decode(const uint8_t in[NSBOX_PROTO_HDR_SIZE], uint32_t max_len, struct proto_hdr *h,
		     struct nsbox_err *err);

/* Build a whole frame (header + compact JSON of msg) in a malloc'd buffer.
 * msg must be an object.  Fails (EMSGSIZE) if the payload exceeds max_len.
 * On success *out and *out_len own the buffer (caller frees). */
int proto_encode(uint16_t type, uint32_t id, const json_t *msg, uint32_t max_len, char **out,
		 size_t *out_len, struct nsbox_err *err);

/* Same with an already serialised payload (not checked here). */
int proto_encode_raw(uint16_t type, uint32_t id, const char *payload, size_t len, uint32_t max_len,
		     char **out, size_t *out_len, struct nsbox_err *err);

/* Blocking: write header + payload to fd (retrying short writes and EINTR). */
int proto_write_frame(int fd, uint16_t type, uint32_t id, const char *payload, size_t len,
		      struct nsbox_err *err);
/* The same for a PROTO_FLAG_DATA frame: payload (JSON, no NUL in it), a
 * NUL byte, data[0..dlen), in one writev per try, nothing copied. */
int proto_write_frame_data(int fd, uint16_t type, uint32_t id, const char *payload, size_t len, const void *data,
			   size_t dlen, struct nsbox_err *err);
/* A whole PROTO_FLAG_DATA frame of msg and data in one malloc'd buffer
 * (as proto_encode).  EMSGSIZE past max_len. */
int proto_encode_data(uint16_t type, uint32_t id, const json_t *msg, const void *data, size_t dlen,
		      uint32_t max_len, char **out, size_t *out_len, struct nsbox_err *err);
/* A received frame's parts: the JSON text's length, and its data (NULL, 0
 * without PROTO_FLAG_DATA).  -1 (EPROTO) when a data frame has no NUL. */
int proto_frame_parts(const struct proto_frame *f, size_t *json_len, const char **data, size_t *dlen,
		      struct nsbox_err *err);

/* Incremental frame decoder.  Owns a read buffer and the frame being
 * assembled.  Initialise with proto_reader_init(), release with
 * proto_reader_free(). */
struct proto_reader {
	uint32_t max_len;
	uint8_t hdr[NSBOX_PROTO_HDR_SIZE];
	size_t hdr_have;
	struct proto_hdr h;
	char *payload;		/* h.len + 1 bytes once the header is complete */
	size_t pay_have;
	bool eof;		/* proto_reader_read saw end of file */
	uint8_t buf[65536];	/* bytes read from the fd, not yet fed */
	size_t buf_start, buf_end;
};

void proto_reader_init(struct proto_reader *r, uint32_t max_len);
void proto_reader_free(struct proto_reader *r);

/* Feed bytes.  Consumes bytes (reported in *used) until one frame is
 * complete (returns 1, *out filled, ownership moves to the caller) or the
 * data is used up (returns 0).  -1 with err (EPROTO) on a malformed or
 * oversize header; the reader is then unusable. */
int proto_reader_feed(struct proto_reader *r, const void *data, size_t len, size_t *used,
		      struct proto_frame *out, struct nsbox_err *err);

/* A large payload is read straight into place rather than through buf:
 * when buf is empty and at least sizeof(buf) bytes of the frame being
 * assembled are missing, proto_reader_direct() returns where they go (and
 * *room, how many); NULL otherwise.  After n bytes were read there,
 * proto_reader_got(r, n); proto_reader_pending(r) then says a complete
 * frame waits for proto_reader_feed() (with no new bytes) to hand it out. */
char *proto_reader_direct(struct proto_reader *r, size_t *room);
void proto_reader_got(struct proto_reader *r, size_t n);
bool proto_reader_pending(const struct proto_reader *r);

/* Read from fd (blocking or not) and return the next frame: 1 = *out
 * filled, 0 = the fd would block (EAGAIN) with no complete frame yet, -1 =
 * error with err; r->eof is set when the peer closed the connection (a
 * frame cut short at EOF is also an error). */
int proto_reader_read(struct proto_reader *r, int fd, struct proto_frame *out, struct nsbox_err *err);

void proto_frame_free(struct proto_frame *f);

/* Parse a frame's payload as a message travelling in direction dir and
 * check its fields against the schema of its type (nsbox-protocol(7)).
 * Returns 0 with *out a new reference to the JSON object, or -1 with err
 * (EPROTO).  This is where hostile input is judged: keep it strict. */
int proto_msg_parse(const struct proto_frame *f, enum proto_dir dir, json_t **out, struct nsbox_err *err);

/* Check an already parsed message (used by proto_msg_parse and by senders
 * in debug builds/tests). */
int proto_msg_check(uint16_t type, enum proto_dir dir, const json_t *msg, struct nsbox_err *err);

/* An ASCII Python identifier ([A-Za-z_][A-Za-z0-9_]*): names of tools and
 * variables.  Tool names are at most PROTO_TOOL_NAME_MAX bytes. */
#define PROTO_TOOL_NAME_MAX 64
bool proto_is_identifier(const char *s);
/* A tool name: an identifier, or two joined by one dot ("NS.NAME", a
 * function NAME in a namespace object NS inside), at most
 * PROTO_TOOL_NAME_MAX bytes. */
bool proto_is_tool_name(const char *s);
/* Whether s is a name a tool must not take: a keyword or soft keyword of
 * Python 3.11, a name of its builtins module (a tool is a global inside:
 * it would replace len, print, open...), or a dunder. */
bool proto_is_reserved_name(const char *s);
/* Whether a tool name (NAME or NS.NAME) would take a name it must not:
 * NAME, or NS, reserved as above; in NS.NAME, NAME a keyword (unreachable
 * as an attribute) or a dunder (the namespace object's own). */
bool proto_tool_name_reserved(const char *s);

/* Whether s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms,
 * surrogates or code points past U+10FFFF), as jansson requires. */
bool proto_utf8_valid(const char *s, size_t n);

/* s (NUL-terminated) for a message: printable ASCII and valid UTF-8 as
 * they are, controls (C0, DEL, C1), bidirectional overrides and isolates
 * and bytes that are not UTF-8 as \xNN or \uNNNN, cut to fit out[size]
 * (size > 0).  For text from a peer (jansson's error quotes the input it
 * stopped at, a runner's error message) that the host puts in its own
 * messages: none of it may drive the terminal that shows them.  Returns
 * out. */
const char *proto_text_inert(const char *s, char *out, size_t size);

/* The number of code points in s[0..n) (valid UTF-8). */
size_t proto_utf8_chars(const char *s, size_t n);

/* What a payload would cost to parse, from one pass over its text: the
 * nesting depth and an estimate in bytes of the parsed tree (jansson's
 * sizes).  proto_msg_parse() refuses payloads past the caps above. */
struct proto_json_scan {
	size_t objects, elements, depth;
	uint64_t cost;
};
void proto_json_scan(const char *p, size_t len, struct proto_json_scan *st);

/* An OUTPUT payload in the runner's own spelling, exactly
 * {"stream":"stdout","data":"..."} (or "stderr"), decoded in place without
 * a jansson tree (nsbox python's printing speed): the data's escapes are
 * undone into p itself (never longer than its text) and NUL-terminated.
 * 1 with *stream (1 stdout, 2 stderr), *data (into p) and *len; 0 when the
 * payload is spelt otherwise, p untouched (parse it with proto_msg_parse,
 * which judges it); -1 when it is not valid JSON (or holds \u0000), the
 * verdict proto_msg_parse would give: p is then garbage.  Never accepts
 * what proto_msg_parse refuses, nor reads anything differently. */
int proto_output_decode(char *p, size_t len, int *stream, const char **data, size_t *dlen);

/* The "name" member of a CALL payload, found without parsing the rest:
 * copied to name (size PROTO_TOOL_NAME_MAX + 1) when it is a plain string
 * at the top level (no escapes).  Returns 0, or -1 when it can't be told
 * this way (then parse the frame). */
int proto_call_name(const char *p, size_t len, char name[PROTO_TOOL_NAME_MAX + 1]);

/* A CALL payload judged as proto_msg_parse() judges it (the same bounds,
 * JSON as strict as jansson's with duplicate keys and \u0000 in keys
 * refused, the schema's fields), without building a tree: a tool call's
 * arguments are passed on as the sandbox's text, and a 16 MiB CALL costs
 * one pass over it instead of a jansson tree some 16 times its size and a
 * dump (proto/calljson.c).  Returns 0 with *c filled (offsets into p), or
 * -1 with err (EPROTO) when proto_msg_parse() would refuse the payload as
 * a CALL, or it holds a NUL byte (jansson drops one after a number or a
 * literal: "[1\0,2]" is [1,2] to it; the text passed on must not hold
 * one).  Never accepts what it refuses, nor reads anything differently
 * (tests/fuzz/fuzz-proto.c checks both). */
struct proto_call {
	char name[PROTO_TOOL_NAME_MAX + 1]; /* the name, cut to fit when name_cut */
	bool name_cut;			    /* longer than PROTO_TOOL_NAME_MAX bytes: no tool's */
	size_t args_off, args_len;	    /* the "args" array's text */
	size_t kwargs_off, kwargs_len;	    /* the "kwargs" object's text */
};
int proto_call_parse(const char *p, size_t len, struct proto_call *c, struct nsbox_err *err);

/* proto_msg_parse()'s bounds on what a payload (len bytes of JSON) may
 * cost to parse: its objects, elements, depth and estimated tree size.  0,
 * or -1 with err (EPROTO) naming the frame type. */
int proto_payload_bounds(unsigned type, const char *p, size_t len, struct nsbox_err *err);

/* Pieces of JSON's and UTF-8's rules shared by the hand decoders: the
 * length of the valid UTF-8 sequence at s (at most n bytes: >0 its length,
 * 0 incomplete but could become valid, -1 invalid: no overlong forms,
 * surrogates or code points past U+10FFFF); four hex digits (0, or -1);
 * cp written as UTF-8 (returns its length, 1 to 4). */
int proto_utf8_seq(const unsigned char *s, size_t n);
int proto_hex4(const char *p, uint32_t *out);
size_t proto_put_utf8(char *w, uint32_t cp);

/* A growing buffer for frames written by hand, without a jansson tree and
 * dump, on the exec round trip (the host's EXEC, the runner's RESULT).
 * After a failed allocation it stays bad and ignores writes; otherwise it
 * is NUL-terminated.  Zero-initialise; free(b.p) when done. */
struct proto_buf {
	char *p;
	size_t len, cap;
	bool bad;
};
void proto_buf_put(struct proto_buf *b, const char *s, size_t n);
void proto_buf_puts(struct proto_buf *b, const char *s);
/* s[0..n) as a JSON string, escaped as json.dumps(s, ensure_ascii=False)
 * does (s must be valid UTF-8). */
void proto_buf_json_str(struct proto_buf *b, const char *s, size_t n);

/* Replace invalid UTF-8 in buf[0..len) with U+FFFD into a new malloc'd,
 * NUL-terminated string (*out, length *out_len).  An incomplete sequence at
 * the very end is left out and its length returned in *pending (0..3) so a
 * stream can carry it to the next chunk; pass pending == NULL to replace it
 * too.  Returns 0 or -1 (ENOMEM). */
int proto_utf8_sanitize(const char *buf, size_t len, char **out, size_t *out_len, size_t *pending);

/* Base64 (RFC 4648, standard alphabet, padded), for file data in FILE_*
 * messages.  proto_b64_encode: out has room for proto_b64_len(n) + 1 bytes
 * (NUL-terminated).  proto_b64_decode: out has room for n / 4 * 3 bytes;
 * returns the decoded length, or -1 when s[0..n) is not canonical padded
 * base64 (no whitespace). */
size_t proto_b64_len(size_t n);
void proto_b64_encode(const void *data, size_t n, char *out);
long long proto_b64_decode(const char *s, size_t n, void *out);
/* The decoded length of s[0..n), or -1 as proto_b64_decode, writing nothing. */
long long proto_b64_check(const char *s, size_t n);

/* Rich results: the "displays" and "files" of a RESULT (nsbox-protocol(7),
 * RICH RESULTS).  Caps per RESULT, which the runner keeps and the host
 * checks: bundles, MIME types per bundle, /out files, and the bytes of
 * their data as sent (base64 for binary types and files, the string's
 * UTF-8 for text types), all of it together. */
#define NSBOX_PROTO_DISPLAY_MAX 64
#define NSBOX_PROTO_DISPLAY_MIMES 16
#define NSBOX_PROTO_OUT_FILES_MAX 64
#define NSBOX_PROTO_RICH_BYTES (8u << 20)
#define PROTO_MIME_MAX 127
#define PROTO_OUT_NAME_MAX 255

/* A MIME type name as the wire allows it: "type/subtype", lower case, each
 * part 1..63 of [a-z0-9!#$&^_.+-] starting with a letter or digit (RFC
 * 6838's restricted names), at most PROTO_MIME_MAX bytes. */
bool proto_mime_valid(const char *s);
/* Whether a MIME type's data travels as text (a JSON string as is) rather
 * than base64: text/..., image/svg+xml, application/json, application/
 * javascript, application/xml and any ...+json or ...+xml. */
bool proto_mime_text(const char *s);
/* A file name from the sandbox as the host takes it (an /out file, an
 * entry nsbox_download_dir makes): 1..PROTO_OUT_NAME_MAX bytes of UTF-8,
 * no '/', not "." or "..", no leading '-', no control characters (C0,
 * DEL, C1), bidi overrides or isolates, and none of the invisible
 * U+00AD, U+061C, U+200B..U+200F, U+2028, U+2029, U+2060..U+2064,
 * U+FEFF.  runner.py's _host_name_ok is the same rule. */
bool proto_out_name_valid(const char *s, size_t n);
/* Check a RESULT's displays, displays_truncated, files and files_truncated
 * against the rules and caps above (each optional).  0, or -1 with err
 * (EPROTO) naming the first offence. */
int proto_rich_check(const json_t *result, struct nsbox_err *err);

#endif
