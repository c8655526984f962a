#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util.h"

static const char *const type_names[] = {
	[PROTO_HELLO] = "HELLO",   [PROTO_EXEC] = "EXEC",	  [PROTO_RESULT] = "RESULT",
	[PROTO_OUTPUT] = "OUTPUT", [PROTO_CALL] = "CALL",	  [PROTO_RETURN] = "RETURN",
	[PROTO_RAISE] = "RAISE",   [PROTO_SET_VAR] = "SET_VAR", [PROTO_GET_VAR] = "GET_VAR",
	[PROTO_VALUE] = "VALUE",   [PROTO_RESET] = "RESET",	  [PROTO_CANCEL] = "CANCEL",
	[PROTO_PING] = "PING",	   [PROTO_PONG] = "PONG",	  [PROTO_BYE] = "BYE",
	[PROTO_ERROR] = "ERROR",   [PROTO_TOOLS] = "TOOLS",
	[PROTO_FILE_WRITE] = "FILE_WRITE", [PROTO_FILE_READ] = "FILE_READ", [PROTO_FILE_LIST] = "FILE_LIST",
};

const char *proto_type_name(unsigned type)
{
	if (type >= 1 && type <= PROTO_TYPE_MAX)
		return type_names[type];
	return "?";
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

void proto_hdr_encode(uint8_t out[NSBOX_PROTO_HDR_SIZE], const struct proto_hdr *h)
{
	put32(out, h->magic);
	put32(out + 4, h->len);
	put16(out + 8, h->type);
	put16(out + 10, h->flags);
	put32(out + 12, h->id);
}

bool proto_type_takes_data(unsigned type)
{
	return type == PROTO_FILE_WRITE || type == PROTO_VALUE;
}

int proto_frame_parts(const struct proto_frame *f, size_t *json_len, const char **data, size_t *dlen,
		      struct nsbox_err *err)
{
	const char *nul;

	if (!(f->hdr.flags & PROTO_FLAG_DATA)) {
		*json_len = f->hdr.len;
		*data = NULL;
		*dlen = 0;
		return 0;
	}
	nul = f->payload ? memchr(f->payload, '\0', f->hdr.len) : NULL;
	if (!nul)
		return err_set(err, EPROTO, "%s data frame without the NUL after its JSON", proto_type_name(f->hdr.type));
	*json_len = (size_t)(nul - f->payload);
	*data = nul + 1;
	*dlen = f->hdr.len - *json_len - 1;
	return 0;
}

int proto_hdr_decode(const uint8_t in[NSBOX_PROTO_HDR_SIZE], uint32_t max_len, struct proto_hdr *h,
		     struct nsbox_err *err)
{
	struct proto_hdr t = {
		.magic = get32(in),
		.len = get32(in + 4),
		.type = get16(in + 8),
		.flags = get16(in + 10),
		.id = get32(in + 12),
	};

	if (max_len == 0 || max_len > NSBOX_PROTO_MAX_FRAME)
		max_len = NSBOX_PROTO_MAX_FRAME;
	if (t.magic != NSBOX_PROTO_MAGIC)
		return err_set(err, EPROTO, "bad frame magic 0x%08x", t.magic);
	if (t.type < 1 || t.type > PROTO_TYPE_MAX)
		return err_set(err, EPROTO, "unknown frame type %u", t.type);
	if (t.flags != 0 && (t.flags != PROTO_FLAG_DATA || !proto_type_takes_data(t.type)))
		return err_set(err, EPROTO, "%s frame with unknown flags 0x%x", proto_type_name(t.type), t.flags);
	if (t.len > max_len)
		return err_set(err, EPROTO, "%s frame of %u bytes exceeds the limit of %u bytes",
			       proto_type_name(t.type), t.len, max_len);
	*h = t;
	return 0;
}

int proto_encode_raw(uint16_t type, uint32_t id, const char *payload, size_t len, uint32_t max_len,
		     char **out, size_t *out_len, struct nsbox_err *err)
{
	struct proto_hdr h = { .magic = NSBOX_PROTO_MAGIC, .type = type, .id = id };
	char *buf;

	if (max_len == 0 || max_len > NSBOX_PROTO_MAX_FRAME)
		max_len = NSBOX_PROTO_MAX_FRAME;
	if (type < 1 || type > PROTO_TYPE_MAX)
		return err_set(err, EINVAL, "cannot encode frame type %u", type);
	if (len > max_len)
		return err_set(err, EMSGSIZE, "%s message of %zu bytes exceeds the frame limit of %u bytes",
			       proto_type_name(type), len, max_len);
	h.len = (uint32_t)len;
	buf = malloc(NSBOX_PROTO_HDR_SIZE + len);
	if (!buf)
		return err_set(err, ENOMEM, "frame of %zu bytes", len);
	proto_hdr_encode((uint8_t *)buf, &h);
	if (len)
		memcpy(buf + NSBOX_PROTO_HDR_SIZE, payload, len);
	*out = buf;
	*out_len = NSBOX_PROTO_HDR_SIZE + len;
	return 0;
}

int proto_encode(uint16_t type, uint32_t id, const json_t *msg, uint32_t max_len, char **out,
		 size_t *out_len, struct nsbox_err *err)
{
	char *payload;
	int r;

	if (!json_is_object(msg))
		return err_set(err, EINVAL, "%s message is not a JSON object", proto_type_name(type));
	/* JSON_ENSURE_ASCII would bloat; jansson only holds valid UTF-8 strings. */
	payload = json_dumps(msg, JSON_COMPACT);
	if (!payload)
		return err_set(err, ENOMEM, "cannot serialise %s message", proto_type_name(type));
	r = proto_encode_raw(type, id, payload, strlen(payload), max_len, out, out_len, err);
	free(payload);
	return r;
}

int proto_encode_data(uint16_t type, uint32_t id, const json_t *msg, const void *data, size_t dlen,
		      uint32_t max_len, char **out, size_t *out_len, struct nsbox_err *err)
{
	struct proto_hdr h = { .magic = NSBOX_PROTO_MAGIC, .type = type, .id = id, .flags = PROTO_FLAG_DATA };
	char *payload, *buf;
	size_t len;

	if (max_len == 0 || max_len > NSBOX_PROTO_MAX_FRAME)
		max_len = NSBOX_PROTO_MAX_FRAME;
	if (!proto_type_takes_data(type) || !json_is_object(msg))
		return err_set(err, EINVAL, "cannot encode a %s data frame", proto_type_name(type));
	payload = json_dumps(msg, JSON_COMPACT);
	if (!payload)
		return err_set(err, ENOMEM, "cannot serialise %s message", proto_type_name(type));
	len = strlen(payload);
	if (dlen > max_len || len + 1 > max_len - dlen) {
		free(payload);
		return err_set(err, EMSGSIZE, "%s message of %zu bytes exceeds the frame limit of %u bytes",
			       proto_type_name(type), len + 1 + dlen, max_len);
	}
	h.len = (uint32_t)(len + 1 + dlen);
	buf = malloc(NSBOX_PROTO_HDR_SIZE + h.len);
	if (!buf) {
		free(payload);
		return err_set(err, ENOMEM, "frame of %u bytes", h.len);
	}
	proto_hdr_encode((uint8_t *)buf, &h);
	memcpy(buf + NSBOX_PROTO_HDR_SIZE, payload, len + 1);
	free(payload);
	if (dlen)
		memcpy(buf + NSBOX_PROTO_HDR_SIZE + len + 1, data, dlen);
	*out = buf;
	*out_len = NSBOX_PROTO_HDR_SIZE + h.len;
	return 0;
}

/* Write the segments seg[0..n) as one frame, resuming after short writes. */
static int write_segments(int fd, uint16_t type, struct iovec *seg, int n_seg, struct nsbox_err *err)
{
	size_t total = 0, done = 0;

	for (int i = 0; i < n_seg; i++)
		total += seg[i].iov_len;
	while (done < total) {
		struct iovec iov[4];
		size_t skip = done;
		int n_iov = 0;
		ssize_t n;

		for (int i = 0; i < n_seg; i++) {
			if (skip >= seg[i].iov_len) {
				skip -= seg[i].iov_len;
				continue;
			}
			iov[n_iov].iov_base = (char *)seg[i].iov_base + skip;
			iov[n_iov++].iov_len = seg[i].iov_len - skip;
			skip = 0;
		}
		n = writev(fd, iov, n_iov);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return err_sys(err, "write %s frame", proto_type_name(type));
		}
		done += (size_t)n;
	}
	return 0;
}

int proto_write_frame(int fd, uint16_t type, uint32_t id, const char *payload, size_t len,
		      struct nsbox_err *err)
{
	struct proto_hdr h = { .magic = NSBOX_PROTO_MAGIC, .type = type, .id = id };
	uint8_t hdr[NSBOX_PROTO_HDR_SIZE];
	/* One writev keeps header and payload in one segment. */
	struct iovec seg[2] = { { hdr, sizeof(hdr) }, { (void *)payload, len } };

	if (len > NSBOX_PROTO_MAX_FRAME)
		return err_set(err, EMSGSIZE, "%s message of %zu bytes exceeds the frame limit",
			       proto_type_name(type), len);
	h.len = (uint32_t)len;
	proto_hdr_encode(hdr, &h);
	return write_segments(fd, type, seg, 2, err);
}

int proto_write_frame_data(int fd, uint16_t type, uint32_t id, const char *payload, size_t len, const void *data,
			   size_t dlen, struct nsbox_err *err)
{
	struct proto_hdr h = { .magic = NSBOX_PROTO_MAGIC, .type = type, .id = id, .flags = PROTO_FLAG_DATA };
	uint8_t hdr[NSBOX_PROTO_HDR_SIZE];
	struct iovec seg[4] = { { hdr, sizeof(hdr) }, { (void *)payload, len }, { (void *)"", 1 },
				{ (void *)data, dlen } };

	if (!proto_type_takes_data(type) || memchr(payload, '\0', len))
		return err_set(err, EINVAL, "cannot write a %s data frame", proto_type_name(type));
	if (dlen > NSBOX_PROTO_MAX_FRAME || len + 1 > NSBOX_PROTO_MAX_FRAME - dlen)
		return err_set(err, EMSGSIZE, "%s message of %zu bytes exceeds the frame limit",
			       proto_type_name(type), len + 1 + dlen);
	h.len = (uint32_t)(len + 1 + dlen);
	proto_hdr_encode(hdr, &h);
	return write_segments(fd, type, seg, 4, err);
}

void proto_reader_init(struct proto_reader *r, uint32_t max_len)
{
	memset(r, 0, offsetof(struct proto_reader, buf));
	r->buf_start = r->buf_end = 0;
	if (max_len == 0 || max_len > NSBOX_PROTO_MAX_FRAME)
		max_len = NSBOX_PROTO_MAX_FRAME;
	r->max_len = max_len;
}

void proto_reader_free(struct proto_reader *r)
{
	if (!r)
		return;
	free(r->payload);
	r->payload = NULL;
	r->hdr_have = r->pay_have = 0;
	r->buf_start = r->buf_end = 0;
}

void proto_frame_free(struct proto_frame *f)
{
	if (!f)
		return;
	free(f->payload);
	f->payload = NULL;
}

int proto_reader_feed(struct proto_reader *r, const void *data, size_t len, size_t *used,
		      struct proto_frame *out, struct nsbox_err *err)
{
	const uint8_t *p = data;
	size_t off = 0;

	*used = 0;
	while (off < len || (r->hdr_have == NSBOX_PROTO_HDR_SIZE && r->pay_have == r->h.len)) {
		if (r->hdr_have < NSBOX_PROTO_HDR_SIZE) {
			size_t n = NSBOX_PROTO_HDR_SIZE - r->hdr_have;

			if (n > len - off)
				n = len - off;
			memcpy(r->hdr + r->hdr_have, p + off, n);
			r->hdr_have += n;
			off += n;
			if (r->hdr_have < NSBOX_PROTO_HDR_SIZE)
				break;
			/* Size is checked before the allocation: a hostile
			 * length never makes us allocate more than max_len. */
			/* On an error the reader starts over at a header: a
			 * caller that feeds it again never finds a header
			 * without its payload buffer. */
			if (proto_hdr_decode(r->hdr, r->max_len, &r->h, err) < 0) {
				r->hdr_have = 0;
				*used = off;
				return -1;
			}
			r->payload = malloc((size_t)r->h.len + 1);
			if (!r->payload) {
				r->hdr_have = 0;
				*used = off;
				return err_set(err, ENOMEM, "frame of %u bytes", r->h.len);
			}
			r->pay_have = 0;
		}
		if (r->pay_have < r->h.len) {
			size_t n = r->h.len - r->pay_have;

			if (n > len - off)
				n = len - off;
			memcpy(r->payload + r->pay_have, p + off, n);
			r->pay_have += n;
			off += n;
			if (r->pay_have < r->h.len)
				break;
		}
		r->payload[r->h.len] = '\0';
		out->hdr = r->h;
		out->payload = r->payload;
		r->payload = NULL;
		r->hdr_have = 0;
		r->pay_have = 0;
		*used = off;
		return 1;
	}
	*used = off;
	return 0;
}

char *proto_reader_direct(struct proto_reader *r, size_t *room)
{
	if (r->buf_start < r->buf_end || r->hdr_have < NSBOX_PROTO_HDR_SIZE || !r->payload ||
	    r->h.len - r->pay_have < sizeof(r->buf))
		return NULL;
	*room = r->h.len - r->pay_have;
	return r->payload + r->pay_have;
}

void proto_reader_got(struct proto_reader *r, size_t n)
{
	r->pay_have += n;
}

bool proto_reader_pending(const struct proto_reader *r)
{
	return r->hdr_have == NSBOX_PROTO_HDR_SIZE && r->payload && r->pay_have == r->h.len;
}

int proto_reader_read(struct proto_reader *r, int fd, struct proto_frame *out, struct nsbox_err *err)
{
	for (;;) {
		size_t room;
		char *direct;
		ssize_t n;

		if (r->buf_start < r->buf_end || proto_reader_pending(r)) {
			size_t used;
			int k = proto_reader_feed(r, r->buf + r->buf_start, r->buf_end - r->buf_start, &used,
						  out, err);

			r->buf_start += used;
			if (k != 0)
				return k;
		}
		r->buf_start = r->buf_end = 0;
		if (r->eof)
			return err_set(err, EPIPE, "connection closed");
		direct = proto_reader_direct(r, &room);
		/* The protocol has no descriptors in it: any that come are
		 * closed (util.h) and end the session. */
		n = direct ? recv_no_fds(fd, direct, room) : recv_no_fds(fd, r->buf, sizeof(r->buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EBADMSG)
				return err_set(err, EPROTO, "descriptors came with a frame (SCM_RIGHTS): closed");
			return err_sys(err, "read frame");
		}
		if (n == 0) {
			r->eof = true;
			if (r->hdr_have || r->payload)
				return err_set(err, EPROTO, "connection closed in the middle of a frame");
			return err_set(err, EPIPE, "connection closed");
		}
		if (direct)
			proto_reader_got(r, (size_t)n);
		else
			r->buf_end = (size_t)n;
	}
}

/* ---- message schemas ---- */

/* Payloads are parsed with JSON_ALLOW_NUL: what Python code prints, raises
 * or returns may hold U+0000.  A name, path, type or other string the
 * receiver uses as a C string is F_STR, which refuses one; F_TEXT is text
 * carried with its length. */
enum fkind {
	F_STR = 1,	/* a string without U+0000 */
	F_TEXT,		/* any string */
	F_INT,
	F_NUM,
	F_BOOL,
	F_ARR,
	F_OBJ,
	F_ANY,
	F_OBJ_OR_NULL,
	F_STR_ARR,	/* array of strings */
	F_STREAM,	/* "stdout" or "stderr" */
	F_ERROR,	/* null or {type, message, traceback: strings} */
	F_TOOLS,	/* array of {name: identifier, description?: str, schema?: object} */
};

struct field {
	const char *name;
	enum fkind kind;
	bool required;
};

struct schema {
	unsigned dirs;	/* PROTO_TO_RUNNER | PROTO_TO_HOST */
	struct field fields[18];
};

#define BOTH (PROTO_TO_RUNNER | PROTO_TO_HOST)

static const struct schema schemas[PROTO_TYPE_MAX + 1] = {
	[PROTO_HELLO] = { BOTH, { { "version", F_INT, true }, { "capabilities", F_STR_ARR, true },
				  { "tools", F_TOOLS, false }, { "limits", F_OBJ, false },
				  { "python", F_STR, false }, { "pid", F_INT, false } } },
	[PROTO_EXEC] = { PROTO_TO_RUNNER, { { "code", F_STR, true }, { "filename", F_STR, false },
					    { "want_value", F_BOOL, false }, { "stream", F_BOOL, false },
					    { "display", F_BOOL, false }, { "check_complete", F_BOOL, false },
					    { "stream_all", F_BOOL, false }, { "rich", F_BOOL, false },
					    { "timeout", F_NUM, false } } },
	[PROTO_RESULT] = { PROTO_TO_HOST, { { "error", F_ERROR, true }, { "value", F_ANY, false },
					    { "stdout", F_TEXT, true }, { "stderr", F_TEXT, true },
					    { "stdout_truncated", F_BOOL, false }, { "stderr_truncated", F_BOOL, false },
					    { "stdout_bytes", F_INT, false }, { "stderr_bytes", F_INT, false },
					    { "duration", F_NUM, false }, { "usage", F_OBJ, false },
					    { "incomplete", F_BOOL, false }, { "exit_code", F_INT, false },
					    /* checked by proto_rich_check */
					    { "displays", F_ARR, false }, { "files", F_ARR, false } } },
	[PROTO_OUTPUT] = { PROTO_TO_HOST, { { "stream", F_STREAM, true }, { "data", F_TEXT, true } } },
	[PROTO_CALL] = { PROTO_TO_HOST, { { "name", F_STR, true }, { "args", F_ARR, true },
					  { "kwargs", F_OBJ, true } } },
	[PROTO_RETURN] = { PROTO_TO_RUNNER, { { "value", F_ANY, true } } },
	[PROTO_RAISE] = { PROTO_TO_RUNNER, { { "message", F_STR, true }, { "type", F_STR, false } } },
	[PROTO_SET_VAR] = { PROTO_TO_RUNNER, { { "name", F_STR, true }, { "value", F_ANY, true } } },
	[PROTO_GET_VAR] = { PROTO_TO_RUNNER, { { "name", F_STR, true } } },
	[PROTO_VALUE] = { PROTO_TO_HOST, { { "value", F_ANY, false }, { "error", F_ERROR, false } } },
	[PROTO_RESET] = { PROTO_TO_RUNNER, { { NULL } } },
	[PROTO_CANCEL] = { PROTO_TO_RUNNER, { { "reason", F_STR, false } } },
	[PROTO_PING] = { BOTH, { { NULL } } },
	[PROTO_PONG] = { BOTH, { { NULL } } },
	[PROTO_BYE] = { BOTH, { { NULL } } },
	[PROTO_ERROR] = { BOTH, { { "message", F_STR, true } } },
	[PROTO_TOOLS] = { PROTO_TO_RUNNER, { { "tools", F_TOOLS, true } } },
	[PROTO_FILE_WRITE] = { PROTO_TO_RUNNER, { { "path", F_STR, true }, { "data", F_STR, false },
						  { "offset", F_INT, false }, { "mode", F_INT, false },
						  { "truncate", F_BOOL, false }, { "parents", F_BOOL, false },
						  { "kind", F_STR, false }, { "fd", F_BOOL, false },
						  { "length", F_INT, false } } },
	[PROTO_FILE_READ] = { PROTO_TO_RUNNER, { { "path", F_STR, true }, { "offset", F_INT, false },
						 { "length", F_INT, false }, { "binary", F_BOOL, false },
						 { "fd", F_BOOL, false } } },
	[PROTO_FILE_LIST] = { PROTO_TO_RUNNER, { { "path", F_STR, true }, { "max", F_INT, false } } },
};

bool proto_is_identifier(const char *s)
{
	if (!s || !*s)
		return false;
	if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
		return false;
	for (s++; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      *s == '_'))
			return false;
	return true;
}

/* CPython 3.11's keywords, soft keywords and builtins (python3.11 -S:
 * without site's exit, quit, help...), sorted for bsearch(). */
static const char *const reserved_names[] = {
	"ArithmeticError", "AssertionError", "AttributeError", "BaseException", "BaseExceptionGroup",
	"BlockingIOError", "BrokenPipeError", "BufferError", "BytesWarning", "ChildProcessError",
	"ConnectionAbortedError", "ConnectionError", "ConnectionRefusedError", "ConnectionResetError",
	"DeprecationWarning", "EOFError", "Ellipsis", "EncodingWarning", "EnvironmentError", "Exception",
	"ExceptionGroup", "False", "FileExistsError", "FileNotFoundError", "FloatingPointError", "FutureWarning",
	"GeneratorExit", "IOError", "ImportError", "ImportWarning", "IndentationError", "IndexError",
	"InterruptedError", "IsADirectoryError", "KeyError", "KeyboardInterrupt", "LookupError", "MemoryError",
	"ModuleNotFoundError", "NameError", "None", "NotADirectoryError", "NotImplemented", "NotImplementedError",
	"OSError", "OverflowError", "PendingDeprecationWarning", "PermissionError", "ProcessLookupError",
	"RecursionError", "ReferenceError", "ResourceWarning", "RuntimeError", "RuntimeWarning",
	"StopAsyncIteration", "StopIteration", "SyntaxError", "SyntaxWarning", "SystemError", "SystemExit",
	"TabError", "TimeoutError", "True", "TypeError", "UnboundLocalError", "UnicodeDecodeError",
	"UnicodeEncodeError", "UnicodeError", "UnicodeTranslateError", "UnicodeWarning", "UserWarning", "ValueError",
	"Warning", "ZeroDivisionError", "_", "abs", "aiter", "all", "and", "anext", "any", "as", "ascii", "assert",
	"async", "await", "bin", "bool", "break", "breakpoint", "bytearray", "bytes", "callable", "case", "chr",
	"class", "classmethod", "compile", "complex", "continue", "def", "del", "delattr", "dict", "dir", "divmod",
	"elif", "else", "enumerate", "eval", "except", "exec", "filter", "finally", "float", "for", "format", "from",
	"frozenset", "getattr", "global", "globals", "hasattr", "hash", "hex", "id", "if", "import", "in", "input",
	"int", "is", "isinstance", "issubclass", "iter", "lambda", "len", "list", "locals", "map", "match", "max",
	"memoryview", "min", "next", "nonlocal", "not", "object", "oct", "open", "or", "ord", "pass", "pow", "print",
	"property", "raise", "range", "repr", "return", "reversed", "round", "set", "setattr", "slice", "sorted",
	"staticmethod", "str", "sum", "super", "try", "tuple", "type", "vars", "while", "with", "yield", "zip",
};

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

bool proto_is_reserved_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n > 4 && !strncmp(s, "__", 2) && !strcmp(s + n - 2, "__"))
		return true;
	return s && bsearch(&s, reserved_names, sizeof(reserved_names) / sizeof(reserved_names[0]),
			    sizeof(reserved_names[0]), cmp_name) != NULL;
}

static bool is_hard_keyword(const char *s)
{
	static const char *const kw[] = { "False", "None",   "True",	 "and",	     "as",     "assert", "async",
					  "await", "break",  "class",	 "continue", "def",    "del",	 "elif",
					  "else",  "except", "finally", "for",	     "from",   "global", "if",
					  "import", "in",    "is",	 "lambda",   "nonlocal", "not",	 "or",
					  "pass",  "raise",  "return",	 "try",	     "while",  "with",	 "yield" };

	for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
		if (!strcmp(s, kw[i]))
			return true;
	return false;
}

bool proto_tool_name_reserved(const char *s)
{
	char ns[PROTO_TOOL_NAME_MAX + 1];
	const char *dot = s ? strchr(s, '.') : NULL;
	size_t n;

	if (!dot)
		return proto_is_reserved_name(s);
	if ((size_t)(dot - s) > PROTO_TOOL_NAME_MAX)
		return true;
	memcpy(ns, s, (size_t)(dot - s));
	ns[dot - s] = '\0';
	n = strlen(dot + 1);
	return proto_is_reserved_name(ns) || is_hard_keyword(dot + 1) ||
	       (n > 4 && !strncmp(dot + 1, "__", 2) && !strcmp(dot + 1 + n - 2, "__"));
}

bool proto_is_tool_name(const char *s)
{
	char ns[PROTO_TOOL_NAME_MAX + 1];
	const char *dot;

	if (!s || strlen(s) > PROTO_TOOL_NAME_MAX)
		return false;
	dot = strchr(s, '.');
	if (!dot)
		return proto_is_identifier(s);
	memcpy(ns, s, (size_t)(dot - s));
	ns[dot - s] = '\0';
	return proto_is_identifier(ns) && proto_is_identifier(dot + 1);
}

static int check_field(const char *tname, const struct field *fd, const json_t *v, struct nsbox_err *err)
{
	size_t i;
	json_t *e;

	switch (fd->kind) {
	case F_STR:
		if (json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v))
			return err_set(err, EPROTO, "%s: field %s holds U+0000", tname, fd->name);
		if (json_is_string(v))
			return 0;
		break;
	case F_TEXT:
		if (json_is_string(v))
			return 0;
		break;
	case F_INT:
		if (json_is_integer(v))
			return 0;
		break;
	case F_NUM:
		if (json_is_number(v))
			return 0;
		break;
	case F_BOOL:
		if (json_is_boolean(v))
			return 0;
		break;
	case F_ARR:
		if (json_is_array(v))
			return 0;
		break;
	case F_OBJ:
		if (json_is_object(v))
			return 0;
		break;
	case F_ANY:
		return 0;
	case F_OBJ_OR_NULL:
		if (json_is_object(v) || json_is_null(v))
			return 0;
		break;
	case F_STR_ARR:
		if (!json_is_array(v))
			break;
		json_array_foreach(v, i, e)
			if (!json_is_string(e))
				return err_set(err, EPROTO, "%s: %s[%zu] is not a string", tname, fd->name, i);
		return 0;
	case F_STREAM:
		if (json_is_string(v) &&
		    (!strcmp(json_string_value(v), "stdout") || !strcmp(json_string_value(v), "stderr")))
			return 0;
		break;
	case F_ERROR:
		if (json_is_null(v))
			return 0;
		if (!json_is_object(v))
			break;
		e = json_object_get(v, "type");
		if (!json_is_string(e) || strlen(json_string_value(e)) != json_string_length(e) ||
		    !json_is_string(json_object_get(v, "message")))
			return err_set(err, EPROTO, "%s: %s needs string fields type (without U+0000) and message", tname,
				       fd->name);
		e = json_object_get(v, "traceback");
		if (e && !json_is_string(e) && !json_is_null(e))
			return err_set(err, EPROTO, "%s: %s.traceback is not a string", tname, fd->name);
		return 0;
	case F_TOOLS:
		if (!json_is_array(v))
			break;
		json_array_foreach(v, i, e) {
			json_t *x;

			if (!json_is_object(e) || !proto_is_tool_name(json_string_value(json_object_get(e, "name"))))
				return err_set(err, EPROTO, "%s: tools[%zu] needs a tool name (NAME or NS.NAME)", tname, i);
			x = json_object_get(e, "description");
			if (x && !json_is_string(x))
				return err_set(err, EPROTO, "%s: tools[%zu].description is not a string", tname, i);
			x = json_object_get(e, "schema");
			if (x && !json_is_object(x) && !json_is_null(x))
				return err_set(err, EPROTO, "%s: tools[%zu].schema is not an object", tname, i);
		}
		return 0;
	}
	return err_set(err, EPROTO, "%s: field %s has the wrong type", tname, fd->name);
}

int proto_msg_check(uint16_t type, enum proto_dir dir, const json_t *msg, struct nsbox_err *err)
{
	const struct schema *s;
	const char *tname = proto_type_name(type);

	if (type < 1 || type > PROTO_TYPE_MAX)
		return err_set(err, EPROTO, "unknown message type %u", type);
	s = &schemas[type];
	if (!(s->dirs & (unsigned)dir))
		return err_set(err, EPROTO, "%s message not allowed towards the %s", tname,
			       dir == PROTO_TO_HOST ? "host" : "runner");
	if (!json_is_object(msg))
		return err_set(err, EPROTO, "%s payload is not a JSON object", tname);
	for (const struct field *fd = s->fields; fd->name; fd++) {
		json_t *v = json_object_get(msg, fd->name);

		if (!v) {
			if (fd->required)
				return err_set(err, EPROTO, "%s: missing field %s", tname, fd->name);
			continue;
		}
		if (check_field(tname, fd, v, err) < 0)
			return -1;
	}
	if (type == PROTO_RESULT)
		return proto_rich_check(msg, err);
	return 0;
}

void proto_json_scan(const char *p, size_t len, struct proto_json_scan *st)
{
	/* jansson's sizes, measured (glibc malloc, 64-bit), each rounded up:
	 * an object ~235 bytes and ~110 per member, an array ~140, a string
	 * ~90, a number or literal ~42 with its slot in the array. */
	enum { C_OBJECT = 256, C_ARRAY = 160, C_STRING = 96, C_SCALAR = 40, C_SLOT = 4 };
	size_t depth = 0;
	bool in_str = false, want_value = true;

	memset(st, 0, sizeof(*st));
	for (size_t i = 0; i < len; i++) {
		char c = p[i];

		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = false;
			continue;
		}
		switch (c) {
		case '"':
			in_str = true;
			st->cost += C_STRING;
			want_value = false;
			break;
		case '{':
		case '[':
			if (c == '{')
				st->objects++, st->cost += C_OBJECT;
			else
				st->elements++, st->cost += C_ARRAY;
			if (++depth > st->depth)
				st->depth = depth;
			want_value = true;
			break;
		case '}':
		case ']':
			if (depth)
				depth--;
			want_value = false;
			break;
		case ',':
		case ':':
			st->elements++;
			st->cost += C_SLOT;
			want_value = true;
			break;
		case ' ':
		case '\t':
		case '\n':
		case '\r':
			break;
		default:
			/* The first byte of a number or literal. */
			if (want_value)
				st->cost += C_SCALAR;
			want_value = false;
		}
	}
	st->cost += len;
}

int proto_payload_bounds(unsigned type, const char *p, size_t len, struct nsbox_err *err)
{
	struct proto_json_scan st;

	/* A parsed JSON value costs up to ~100 times its text ("{}," is
	 * three bytes, a jansson object with its table some 250), and the
	 * parsers recurse per level: bound the count, the cost and the depth
	 * of what the sandbox sent before parsing it. */
	proto_json_scan(p, len, &st);
	if (st.objects > NSBOX_PROTO_MAX_OBJECTS || st.elements + st.objects > NSBOX_PROTO_MAX_ELEMENTS)
		return err_set(err, EPROTO, "%s payload has more than %u JSON objects or %u elements",
			       proto_type_name(type), NSBOX_PROTO_MAX_OBJECTS, NSBOX_PROTO_MAX_ELEMENTS);
	if (st.depth > NSBOX_PROTO_MAX_DEPTH)
		return err_set(err, EPROTO, "%s payload nests deeper than %u levels", proto_type_name(type),
			       NSBOX_PROTO_MAX_DEPTH);
	if (st.cost > (uint64_t)NSBOX_PROTO_COST_FACTOR * len + NSBOX_PROTO_COST_SLACK)
		return err_set(err, EPROTO,
			       "%s payload of %zu bytes would cost about %llu MiB to parse (over %u times its size "
			       "plus %u MiB): too many small values",
			       proto_type_name(type), len, (unsigned long long)(st.cost >> 20),
			       NSBOX_PROTO_COST_FACTOR, NSBOX_PROTO_COST_SLACK >> 20);
	return 0;
}

int proto_msg_parse(const struct proto_frame *f, enum proto_dir dir, json_t **out, struct nsbox_err *err)
{
	json_error_t jerr;
	json_t *msg;

	size_t jlen, dlen;
	const char *data;

	if (!f->payload)
		return err_set(err, EPROTO, "%s frame without payload", proto_type_name(f->hdr.type));
	/* A data frame's JSON is what comes before its NUL; the data is
	 * the caller's to check (proto_frame_parts). */
	if (proto_frame_parts(f, &jlen, &data, &dlen, err) < 0)
		return -1;
	if (proto_payload_bounds(f->hdr.type, f->payload, jlen, err) < 0)
		return -1;
	/* Duplicate keys could make the two sides see different messages. */
	msg = json_loadb(f->payload, jlen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!msg) {
		char text[sizeof(jerr.text) * 2];

		/* jansson quotes the input it stopped at: the peer's bytes. */
		return err_set(err, EPROTO, "%s payload is not valid JSON: %s at byte %d",
			       proto_type_name(f->hdr.type), proto_text_inert(jerr.text, text, sizeof(text)),
			       jerr.position);
	}
	if (proto_msg_check(f->hdr.type, dir, msg, err) < 0) {
		json_decref(msg);
		return -1;
	}
	*out = msg;
	return 0;
}


const char *proto_text_inert(const char *s, char *out, size_t size)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t w = 0, n = strlen(s);

	for (size_t r = 0; r < n;) {
		int k = proto_utf8_seq(p + r, n - r);
		uint32_t cp = k == 2   ? (uint32_t)(p[r] & 0x1f) << 6 | (p[r + 1] & 0x3f)
			      : k == 3 ? (uint32_t)(p[r] & 0x0f) << 12 | (uint32_t)(p[r + 1] & 0x3f) << 6 |
					 (p[r + 2] & 0x3f)
				       : p[r];
		char esc[8];
		const char *piece = (const char *)p + r;
		size_t len = k > 0 ? (size_t)k : 1;

		if (k <= 0 || (k == 1 && (cp < 0x20 || cp == 0x7f))) {
			snprintf(esc, sizeof(esc), "\\x%02x", p[r]);
			piece = esc;
			len = 4;
			k = 1;
		} else if ((k == 2 && cp <= 0x9f) || (k == 3 && ((cp >= 0x202a && cp <= 0x202e) ||
								 (cp >= 0x2066 && cp <= 0x2069)))) {
			snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
			piece = esc;
			len = 6;
		}
		if (w + len >= size)
			break;
		memcpy(out + w, piece, len);
		w += len;
		r += (size_t)k;
	}
	out[w] = '\0';
	return out;
}

int proto_utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	int need;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		need = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 4;
		cp = c & 0x07;
	} else {
		return -1;
	}
	for (int i = 1; i < need; i++) {
		if ((size_t)i >= n)
			return 0;
		if ((s[i] & 0xc0) != 0x80)
			return -1;
		cp = cp << 6 | (s[i] & 0x3f);
		/* Reject overlongs, surrogates and > U+10FFFF as early as the
		 * second byte allows, so "incomplete" is never a lie. */
		if (i == 1) {
			if (need == 3 && c == 0xe0 && s[1] < 0xa0)
				return -1;
			if (need == 3 && c == 0xed && s[1] >= 0xa0)
				return -1;
			if (need == 4 && c == 0xf0 && s[1] < 0x90)
				return -1;
			if (need == 4 && c == 0xf4 && s[1] >= 0x90)
				return -1;
		}
	}
	(void)cp;
	return need;
}

bool proto_utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		int k = proto_utf8_seq((const unsigned char *)s + i, n - i);

		if (k <= 0)
			return false;
		i += (size_t)k;
	}
	return true;
}

size_t proto_utf8_chars(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

int proto_hex4(const char *p, uint32_t *out)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++) {
		char c = p[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

size_t proto_put_utf8(char *w, uint32_t cp)
{
	if (cp < 0x80) {
		w[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		w[0] = (char)(0xc0 | (cp >> 6));
		w[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		w[0] = (char)(0xe0 | (cp >> 12));
		w[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		w[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	w[0] = (char)(0xf0 | (cp >> 18));
	w[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	w[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	w[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

int proto_output_decode(char *p, size_t len, int *stream, const char **data, size_t *dlen)
{
	static const char pre_out[] = "{\"stream\":\"stdout\",\"data\":\"";
	static const char pre_err[] = "{\"stream\":\"stderr\",\"data\":\"";
	const size_t np = sizeof(pre_out) - 1;
	size_t r, w, end;
	bool esc = false;

	if (len < np + 2 || p[len - 2] != '"' || p[len - 1] != '}')
		return 0;
	if (!memcmp(p, pre_out, np))
		*stream = 1;
	else if (!memcmp(p, pre_err, np))
		*stream = 2;
	else
		return 0;
	/* The string must end exactly at the closing quote before '}': an
	 * unescaped quote earlier means another spelling (more members). */
	end = len - 2;
	for (const char *q = p + np; (q = memchr(q, '"', (size_t)(p + end - q))); q++) {
		size_t bs = 0;

		while (q - bs > p + np && q[-1 - (ptrdiff_t)bs] == '\\')
			bs++;
		if (!(bs & 1))
			return 0;
	}
	for (r = end; r > np && p[r - 1] == '\\'; r--)
		esc = !esc;
	if (esc)
		return 0;
	/* Decode: what jansson's lexer accepts, no more (no raw control
	 * characters, valid UTF-8, escapes of JSON, paired surrogates, no
	 * \u0000). */
	for (r = w = np; r < end;) {
		unsigned char c = (unsigned char)p[r];
		uint32_t cp, lo;

		if (c >= 0x80) {
			int k = proto_utf8_seq((const unsigned char *)p + r, end - r);

			if (k <= 0)
				return -1;
			memmove(p + w, p + r, (size_t)k);
			r += (size_t)k;
			w += (size_t)k;
			continue;
		}
		if (c < 0x20)
			return -1;
		if (c != '\\') {
			p[w++] = (char)c;
			r++;
			continue;
		}
		switch (p[r + 1]) {
		case '"': p[w++] = '"'; r += 2; continue;
		case '\\': p[w++] = '\\'; r += 2; continue;
		case '/': p[w++] = '/'; r += 2; continue;
		case 'b': p[w++] = '\b'; r += 2; continue;
		case 'f': p[w++] = '\f'; r += 2; continue;
		case 'n': p[w++] = '\n'; r += 2; continue;
		case 'r': p[w++] = '\r'; r += 2; continue;
		case 't': p[w++] = '\t'; r += 2; continue;
		case 'u': break;
		default: return -1;
		}
		if (end - r < 6 || proto_hex4(p + r + 2, &cp) < 0)
			return -1;
		r += 6;
		if (cp >= 0xdc00 && cp <= 0xdfff)
			return -1;
		if (cp >= 0xd800 && cp <= 0xdbff) {
			if (end - r < 6 || p[r] != '\\' || p[r + 1] != 'u' || proto_hex4(p + r + 2, &lo) < 0 || lo < 0xdc00 ||
			    lo > 0xdfff)
				return -1;
			r += 6;
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		}
		w += proto_put_utf8(p + w, cp);	/* U+0000 too: the data has its length */
	}
	p[w] = '\0';
	*data = p + np;
	*dlen = w - np;
	return 1;
}

static size_t skip_ws(const char *p, size_t len, size_t i)
{
	while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
		i++;
	return i;
}

int proto_call_name(const char *p, size_t len, char name[PROTO_TOOL_NAME_MAX + 1])
{
	size_t depth = 0, key_start = 0;
	bool in_str = false, is_key = false, want_key = false;

	for (size_t i = 0; i < len; i++) {
		char c = p[i];

		if (in_str) {
			if (c == '\\') {
				if (is_key)
					return -1;
				i++;
			} else if (c == '"') {
				in_str = false;
				if (is_key && i - key_start == 4 && !memcmp(p + key_start, "name", 4)) {
					size_t j = skip_ws(p, len, i + 1), v;

					if (j >= len || p[j] != ':')
						return -1;
					j = skip_ws(p, len, j + 1);
					if (j >= len || p[j] != '"')
						return -1;
					for (v = ++j; j < len && p[j] != '"' && p[j] != '\\'; j++)
						if (j - v > PROTO_TOOL_NAME_MAX)
							return -1;
					if (j >= len || p[j] != '"' || j - v > PROTO_TOOL_NAME_MAX)
						return -1;
					memcpy(name, p + v, j - v);
					name[j - v] = '\0';
					/* Anything but a tool name (bytes that aren't
					 * UTF-8 among them) goes to the parser and its
					 * schema, which say what is wrong with it. */
					return proto_is_tool_name(name) ? 0 : -1;
				}
			}
			continue;
		}
		switch (c) {
		case '"':
			in_str = true;
			is_key = depth == 1 && want_key;
			key_start = i + 1;
			want_key = false;
			break;
		case '{':
		case '[':
			depth++;
			want_key = depth == 1;
			break;
		case '}':
		case ']':
			if (!depth)
				return -1;
			depth--;
			break;
		case ',':
			want_key = depth == 1;
			break;
		default:
			break;
		}
		if (depth == 0 && i > 0 && c != ' ')
			return -1;
	}
	return -1;
}

void proto_buf_put(struct proto_buf *b, const char *s, size_t n)
{
	if (b->bad)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 512;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->bad = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void proto_buf_puts(struct proto_buf *b, const char *s)
{
	proto_buf_put(b, s, strlen(s));
}

/* Room for n more bytes (and the NUL) in b: false once b is bad. */
static bool buf_reserve(struct proto_buf *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 512;
	char *p;

	if (b->bad)
		return false;
	if (b->len + n + 1 <= b->cap)
		return true;
	while (cap < b->len + n + 1)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->bad = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void proto_buf_json_str(struct proto_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	char *w;

	/* Escaped in place, room made for the text plus a quarter (a short
	 * line's newline) up front and more only when escapes need it: one
	 * pass, no call per escape (nsbox python's output travels here). */
	if (!buf_reserve(b, n + n / 4 + 16))
		return;
	w = b->p + b->len;
	*w++ = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		/* Worst case from here: 6 bytes per byte left, the quote. */
		if ((size_t)(b->p + b->cap - w) < 8) {
			b->len = (size_t)(w - b->p);
			if (!buf_reserve(b, (n - i) * 6 + 8))
				return;
			w = b->p + b->len;
		}
		if (c >= 0x20 && c != '"' && c != '\\') {
			*w++ = (char)c;
			continue;
		}
		*w++ = '\\';
		switch (c) {
		case '"': *w++ = '"'; break;
		case '\\': *w++ = '\\'; break;
		case '\n': *w++ = 'n'; break;
		case '\r': *w++ = 'r'; break;
		case '\t': *w++ = 't'; break;
		case '\b': *w++ = 'b'; break;
		case '\f': *w++ = 'f'; break;
		default:
			memcpy(w, "u00", 3);
			w[3] = hex[c >> 4];
			w[4] = hex[c & 15];
			w += 5;
		}
	}
	*w++ = '"';
	*w = '\0';
	b->len = (size_t)(w - b->p);
}

int proto_utf8_sanitize(const char *buf, size_t len, char **out, size_t *out_len, size_t *pending)
{
	const unsigned char *s = (const unsigned char *)buf;
	size_t i = 0, o = 0;
	char *res;

	if (len > (SIZE_MAX - 1) / 3)
		return -ENOMEM;
	/* Worst case every byte becomes the 3-byte U+FFFD. */
	res = malloc(len * 3 + 1);
	if (!res)
		return -ENOMEM;
	if (pending)
		*pending = 0;
	while (i < len) {
		size_t run = i;
		int k;

		/* ASCII runs at once: most output is ASCII. */
		while (run < len && s[run] < 0x80)
			run++;
		if (run > i) {
			memcpy(res + o, s + i, run - i);
			o += run - i;
			i = run;
			continue;
		}
		k = proto_utf8_seq(s + i, len - i);
		if (k > 0) {
			memcpy(res + o, s + i, (size_t)k);
			o += (size_t)k;
			i += (size_t)k;
			continue;
		}
		if (k == 0 && pending) {
			*pending = len - i;
			break;
		}
		memcpy(res + o, "\xef\xbf\xbd", 3);
		o += 3;
		i++;
	}
	res[o] = '\0';
	/* Embedded NULs are valid UTF-8 and fine for json_stringn. */
	*out = res;
	*out_len = o;
	return 0;
}
