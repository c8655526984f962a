/* Unit tests of the runner protocol codec (proto/proto.c): headers, the
 * incremental reader, size caps, message schemas and UTF-8 cleaning. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "proto.h"
#include "tap.h"
#include "util.h"

/* tap.h's ok() evaluates its condition twice: evaluate once here. */
#define CHECK(cond, ...)                 \
	do {                             \
		bool c_ = (cond);        \
		ok(c_, __VA_ARGS__);     \
	} while (0)

static int feed_all(struct proto_reader *r, const char *data, size_t len, size_t step, struct proto_frame *f,
		    struct nsbox_err *err)
{
	size_t off = 0;

	while (off < len) {
		size_t n = len - off < step ? len - off : step, used;
		int k = proto_reader_feed(r, data + off, n, &used, f, err);

		off += used;
		if (k != 0)
			return k;
	}
	return 0;
}

static void test_header(void)
{
	struct proto_hdr h = { NSBOX_PROTO_MAGIC, 5, PROTO_EXEC, 0, 0xdeadbeef }, g;
	uint8_t b[16];
	struct nsbox_err err = { 0 };

	proto_hdr_encode(b, &h);
	CHECK(!memcmp(b, "XBSN", 4), "magic is 'NSBX' as a little-endian uint32");
	CHECK(b[4] == 5 && b[5] == 0 && b[8] == PROTO_EXEC && b[12] == 0xef && b[15] == 0xde, "little-endian fields");
	CHECK(proto_hdr_decode(b, 0, &g, &err) == 0 && g.len == 5 && g.type == PROTO_EXEC && g.id == 0xdeadbeef,
	   "header round trip");
	b[0] ^= 1;
	CHECK(proto_hdr_decode(b, 0, &g, &err) < 0 && err.code == EPROTO && strstr(err.msg, "magic"), "bad magic: %s",
	   err.msg);
	b[0] ^= 1;
	b[8] = 0;
	CHECK(proto_hdr_decode(b, 0, &g, &err) < 0 && strstr(err.msg, "type"), "type 0 rejected");
	b[8] = PROTO_TYPE_MAX + 1;
	CHECK(proto_hdr_decode(b, 0, &g, &err) < 0, "type past the last rejected");
	b[8] = PROTO_EXEC;
	b[10] = 1;
	CHECK(proto_hdr_decode(b, 0, &g, &err) < 0 && strstr(err.msg, "flags"), "unknown flags rejected");
	b[10] = 0;
	h.len = NSBOX_PROTO_MAX_FRAME + 1;
	proto_hdr_encode(b, &h);
	CHECK(proto_hdr_decode(b, 0, &g, &err) < 0 && strstr(err.msg, "exceeds"), "over the hard cap rejected");
	h.len = 1000;
	proto_hdr_encode(b, &h);
	CHECK(proto_hdr_decode(b, 999, &g, &err) < 0, "over a receiver's lower cap rejected");
	CHECK(proto_hdr_decode(b, 1000, &g, &err) == 0, "exactly the cap accepted");
	CHECK(!strcmp(proto_type_name(PROTO_CALL), "CALL") && !strcmp(proto_type_name(99), "?"), "type names");
}

static void test_reader(void)
{
	json_t *m = json_pack("{s:s, s:b}", "code", "print('hé')", "want_value", 1);
	char *buf, *two;
	size_t len;
	struct proto_reader r;
	struct proto_frame f = { 0 };
	struct nsbox_err err = { 0 };
	json_t *got = NULL;

	CHECK(proto_encode(PROTO_EXEC, 7, m, 0, &buf, &len, &err) == 0, "encode EXEC");
	proto_reader_init(&r, 0);
	CHECK(feed_all(&r, buf, len, len, &f, &err) == 1 && f.hdr.id == 7 && f.hdr.type == PROTO_EXEC,
	   "whole frame decodes");
	CHECK(proto_msg_parse(&f, PROTO_TO_RUNNER, &got, &err) == 0 && json_equal(got, m), "payload round trip");
	json_decref(got);
	got = NULL;
	CHECK(proto_msg_parse(&f, PROTO_TO_HOST, &got, &err) < 0 && strstr(err.msg, "not allowed"),
	   "EXEC towards the host rejected: %s", err.msg);
	proto_frame_free(&f);
	CHECK(feed_all(&r, buf, len, 1, &f, &err) == 1 && f.hdr.id == 7, "byte-at-a-time decodes");
	proto_frame_free(&f);

	two = malloc(2 * len);
	memcpy(two, buf, len);
	memcpy(two + len, buf, len);
	{
		size_t used;

		CHECK(proto_reader_feed(&r, two, 2 * len, &used, &f, &err) == 1 && used == len,
		   "two frames: the first stops at its end");
		proto_frame_free(&f);
		CHECK(proto_reader_feed(&r, two + used, len, &used, &f, &err) == 1 && used == len, "then the second");
		proto_frame_free(&f);
	}
	free(two);
	proto_reader_free(&r);

	/* Oversize header fails before any allocation of its length. */
	proto_reader_init(&r, 64);
	{
		json_t *big = json_pack("{s:s}", "code",
					"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
		char *b2;
		size_t l2;

		CHECK(proto_encode(PROTO_EXEC, 1, big, 64, &b2, &l2, &err) < 0 && err.code == EMSGSIZE,
		   "encoder refuses over its cap");
		CHECK(proto_encode(PROTO_EXEC, 1, big, 0, &b2, &l2, &err) == 0, "encoder with default cap");
		CHECK(feed_all(&r, b2, l2, l2, &f, &err) < 0 && r.payload == NULL && strstr(err.msg, "exceeds"),
		   "reader with 64-byte cap refuses it, nothing allocated");
		free(b2);
		json_decref(big);
	}
	proto_reader_free(&r);
	free(buf);
	json_decref(m);
}

static void test_fd_reader(void)
{
	int sv[2];
	struct proto_reader r;
	struct proto_frame f = { 0 };
	struct nsbox_err err = { 0 };
	int k;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	CHECK(proto_write_frame(sv[0], PROTO_PING, 3, "{}", 2, &err) == 0, "write PING");
	proto_reader_init(&r, 0);
	CHECK(proto_reader_read(&r, sv[1], &f, &err) == 1 && f.hdr.type == PROTO_PING && !strcmp(f.payload, "{}"),
	   "read PING");
	proto_frame_free(&f);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	CHECK(proto_reader_read(&r, sv[1], &f, &err) == 0, "nothing more: would block");
	/* Half a frame then EOF is an error, not a hang. */
	CHECK(write(sv[0], "XBSN\x02\0\0\0", 8) == 8, "write half a header");
	close(sv[0]);
	k = proto_reader_read(&r, sv[1], &f, &err);
	CHECK(k < 0 && r.eof && err.code == EPROTO, "EOF inside a frame: %s", err.msg);
	proto_reader_free(&r);
	close(sv[1]);

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	close(sv[0]);
	proto_reader_init(&r, 0);
	CHECK(proto_reader_read(&r, sv[1], &f, &err) < 0 && r.eof && err.code == EPIPE, "clean EOF: %s", err.msg);
	proto_reader_free(&r);
	close(sv[1]);

	/* Descriptors with a frame (a kernel without SO_PASSRIGHTS, or a peer
	 * that turned it back on): closed here, and a protocol error.  The
	 * pipe's write end, sent and then closed by its sender, is open only
	 * in flight: once the reader closed it, the read end sees EOF. */
	{
		int p[2], fds[3];
		struct iovec iov = { "XBSN", 4 };
		char c;

		CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
		CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
		fds[0] = fds[1] = fds[2] = p[1];
		CHECK(send_with_fds(sv[0], &iov, 1, fds, 3) == 4, "send with descriptors");
		close(p[1]);
		proto_reader_init(&r, 0);
		k = proto_reader_read(&r, sv[1], &f, &err);
		CHECK(k < 0 && err.code == EPROTO && strstr(err.msg, "descriptors came with a frame"), "descriptors: %s",
		      err.msg);
		/* Closed off the reader's thread: a moment later. */
		fcntl(p[0], F_SETFL, O_NONBLOCK);
		for (int i = 0; i < 200 && read(p[0], &c, 1) < 0 && errno == EAGAIN; i++)
			usleep(10000);
		CHECK(read(p[0], &c, 1) == 0, "the descriptors the reader got are closed");
		proto_reader_free(&r);
		close(p[0]);
		close(sv[0]);
		close(sv[1]);
	}
	/* A TCP socket with unsent data and an hour's linger comes with a
	 * frame, itself (dropped by read(), the kernel closed it on the
	 * reader's thread, which waited out the linger) or in flight inside a
	 * unix socket that does (emptying that one on the reader's thread
	 * waited the same).  alarm(): a hang fails. */
	for (int nested = 0; nested < 2; nested++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);
		struct linger lg = { 1, 3600 };
		struct iovec iov = { "XBSN", 4 };
		int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int small = 4096, ab[2], sent;
		static char junk[65536];

		/* Small buffers both ends: the unsent data stays unsent. */
		setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
		CHECK(l >= 0 && t >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
			      getsockname(l, (struct sockaddr *)&a, &al) == 0,
		      "loopback listener");
		setsockopt(t, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
		CHECK(connect(t, (struct sockaddr *)&a, sizeof(a)) == 0, "connect");
		fcntl(t, F_SETFL, O_NONBLOCK);
		while (send(t, junk, sizeof(junk), MSG_NOSIGNAL) > 0)
			;
		CHECK(setsockopt(t, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0, "linger");
		sent = t;
		if (nested) {
			CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ab) == 0, "socketpair");
			CHECK(send_with_fds(ab[1], &iov, 1, &t, 1) == 4, "the TCP socket into the unix one");
			close(t);
			close(ab[1]);
			sent = ab[0];
		}
		CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
		CHECK(send_with_fds(sv[0], &iov, 1, &sent, 1) == 4, "the socket with a frame");
		close(sent); /* the one in flight is the last */
		proto_reader_init(&r, 0);
		alarm(30);
		k = proto_reader_read(&r, sv[1], &f, &err);
		alarm(0);
		CHECK(k < 0 && err.code == EPROTO, "%s: %s", nested ? "nested" : "direct", err.msg);
		proto_reader_free(&r);
		close(sv[0]);
		close(sv[1]);
		close(l); /* resets the connection: a close off the thread ends */
	}
	/* None come once the receiving end refuses them (Linux 6.16): the
	 * sender's sendmsg fails. */
	{
		int p[2];
		struct iovec iov = { "XBSN", 4 };

		CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
		CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
		if (sock_refuse_fds(sv[1]))
			CHECK(send_with_fds(sv[0], &iov, 1, &p[1], 1) < 0 && errno == EPERM, "refused: %s",
			      strerror(errno));
		else
			CHECK(errno == ENOPROTOOPT, "SO_PASSRIGHTS: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		close(sv[0]);
		close(sv[1]);
	}
}

/* PROTO_FLAG_DATA frames: only on FILE_WRITE and VALUE; the JSON ends at
 * the first NUL and only it is parsed; a large payload is read straight
 * into place (proto_reader_direct) and arrives whole. */
static void test_data_frames(void)
{
	struct proto_hdr h = { NSBOX_PROTO_MAGIC, 8, PROTO_VALUE, PROTO_FLAG_DATA, 1 }, g;
	size_t big = (1u << 20) + 17, jlen, dlen;
	struct nsbox_err err = { 0 };
	struct proto_frame f = { 0 };
	struct proto_reader r;
	const char *data;
	json_t *m = NULL;
	char *frame = NULL, *raw;
	size_t flen;
	uint8_t b[16];
	int sv[2];

	proto_hdr_encode(b, &h);
	CHECK(proto_hdr_decode(b, 0, &g, &err) == 0 && g.flags == PROTO_FLAG_DATA, "VALUE may carry data");
	h.type = PROTO_FILE_WRITE;
	proto_hdr_encode(b, &h);
	CHECK(proto_hdr_decode(b, 0, &g, &err) == 0, "FILE_WRITE may carry data");
	h.type = PROTO_RESULT;
	proto_hdr_encode(b, &h);
	CHECK(proto_hdr_decode(b, 0, &g, &err) < 0 && strstr(err.msg, "flags"), "RESULT may not: %s", err.msg);
	h.type = PROTO_VALUE;
	h.flags = 2;
	proto_hdr_encode(b, &h);
	CHECK(proto_hdr_decode(b, 0, &g, &err) < 0, "other flags rejected");

	/* the JSON part alone is parsed; the data may hold anything, NULs and
	 * braces included */
	f.hdr = (struct proto_hdr){ NSBOX_PROTO_MAGIC, 22, PROTO_VALUE, PROTO_FLAG_DATA, 1 };
	f.payload = (char *)"{\"value\":1}\0\0{\"x\":}\xff\0";
	CHECK(proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) == 0 && json_integer_value(json_object_get(m, "value")) == 1,
	      "JSON before the NUL parsed: %s", err.msg);
	json_decref(m);
	CHECK(proto_frame_parts(&f, &jlen, &data, &dlen, &err) == 0 && jlen == 11 && dlen == 10 && data[0] == '\0' &&
		      data[1] == '{',
	      "parts: 11 bytes of JSON, 10 of data");
	f.hdr.len = 11;
	CHECK(proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) < 0 && err.code == EPROTO && strstr(err.msg, "NUL"),
	      "a data frame without its NUL: %s", err.msg);
	f.hdr.flags = 0;
	f.hdr.len = 22;
	CHECK(proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) < 0, "a NUL in a plain frame is not JSON");

	raw = malloc(big);
	for (size_t i = 0; i < big; i++)
		raw[i] = (char)(i * 7);
	m = json_pack("{s:s}", "path", "/tmp/x");
	CHECK(proto_encode_data(PROTO_FILE_WRITE, 9, m, raw, big, 0, &frame, &flen, &err) == 0 &&
		      flen == 16 + strlen("{\"path\":\"/tmp/x\"}") + 1 + big,
	      "encode a data frame");
	CHECK(proto_encode_data(PROTO_FILE_WRITE, 9, m, raw, big, 1 << 20, &frame, &flen, &err) < 0 &&
		      err.code == EMSGSIZE,
	      "past the frame cap: EMSGSIZE");
	CHECK(proto_encode_data(PROTO_EXEC, 9, m, raw, 1, 0, &frame, &flen, &err) < 0, "EXEC can't carry data");
	json_decref(m);
	free(frame);

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	proto_reader_init(&r, 0);
	/* writer and reader take turns: the socket holds less than the frame */
	{
		size_t plen = strlen("{\"value\":null}");
		struct iovec seg[3];
		char hdrb[16];
		size_t total = 16 + plen + 1 + big, sent = 0;
		int got = 0;

		h = (struct proto_hdr){ NSBOX_PROTO_MAGIC, (uint32_t)(plen + 1 + big), PROTO_VALUE, PROTO_FLAG_DATA, 4 };
		proto_hdr_encode((uint8_t *)hdrb, &h);
		while (!got) {
			if (sent < total) {
				size_t skip = sent, n_iov = 0;
				const struct iovec all[3] = { { hdrb, 16 }, { (void *)"{\"value\":null}", plen + 1 },
							      { raw, big } };
				ssize_t n;

				for (int i = 0; i < 3; i++) {
					if (skip >= all[i].iov_len) {
						skip -= all[i].iov_len;
						continue;
					}
					seg[n_iov].iov_base = (char *)all[i].iov_base + skip;
					seg[n_iov++].iov_len = all[i].iov_len - skip;
					skip = 0;
				}
				n = writev(sv[0], seg, (int)n_iov);
				if (n > 0)
					sent += (size_t)n;
			}
			fcntl(sv[1], F_SETFL, O_NONBLOCK);
			got = proto_reader_read(&r, sv[1], &f, &err);
			if (got < 0)
				break;
		}
		CHECK(got == 1 && f.hdr.len == plen + 1 + big && proto_frame_parts(&f, &jlen, &data, &dlen, &err) == 0 &&
			      dlen == big && !memcmp(data, raw, big),
		      "a 1 MiB data frame read whole, in place");
		proto_frame_free(&f);
	}
	proto_reader_free(&r);
	close(sv[0]);
	close(sv[1]);
	free(raw);
}

static int parse_str(uint16_t type, enum proto_dir dir, const char *s, struct nsbox_err *err)
{
	struct proto_frame f = { { NSBOX_PROTO_MAGIC, (uint32_t)strlen(s), type, 0, 1 }, (char *)s };
	json_t *m = NULL;
	int r = proto_msg_parse(&f, dir, &m, err);

	json_decref(m);
	return r;
}

static void test_schemas(void)
{
	struct nsbox_err err = { 0 };
	const enum proto_dir H = PROTO_TO_HOST, R = PROTO_TO_RUNNER;

	CHECK(parse_str(PROTO_HELLO, H, "{\"version\":1,\"capabilities\":[\"exec\"]}", &err) == 0, "HELLO ok");
	CHECK(parse_str(PROTO_HELLO, H, "{\"version\":1,\"capabilities\":[1]}", &err) < 0, "capabilities of ints");
	CHECK(parse_str(PROTO_HELLO, R,
		     "{\"version\":1,\"capabilities\":[],\"tools\":[{\"name\":\"add\",\"schema\":{}}]}", &err) == 0,
	   "HELLO with tools");
	CHECK(parse_str(PROTO_HELLO, R, "{\"version\":1,\"capabilities\":[],\"tools\":[{\"name\":\"a b\"}]}", &err) < 0,
	   "tool name must be an identifier");
	CHECK(parse_str(PROTO_EXEC, R, "{\"code\":\"1\",\"code\":\"2\"}", &err) < 0 && strstr(err.msg, "JSON"),
	   "duplicate keys rejected");
	CHECK(parse_str(PROTO_EXEC, R, "{\"code\":1}", &err) < 0 && strstr(err.msg, "code"), "EXEC code not a string");
	CHECK(parse_str(PROTO_EXEC, R, "[1]", &err) < 0, "payload not an object");
	CHECK(parse_str(PROTO_EXEC, R, "", &err) < 0, "empty payload");
	CHECK(parse_str(PROTO_EXEC, R, "{\"code\":\"x\"} trailing", &err) < 0, "trailing junk");
	CHECK(parse_str(PROTO_RESULT, H, "{\"error\":null,\"stdout\":\"\",\"stderr\":\"\",\"value\":{\"$int\":\"1\"}}",
		     &err) == 0,
	   "RESULT ok");
	CHECK(parse_str(PROTO_RESULT, H, "{\"error\":{\"type\":\"E\"},\"stdout\":\"\",\"stderr\":\"\"}", &err) < 0,
	   "RESULT error without message");
	CHECK(parse_str(PROTO_RESULT, H, "{\"stdout\":\"\",\"stderr\":\"\"}", &err) < 0, "RESULT without error");
	CHECK(parse_str(PROTO_OUTPUT, H, "{\"stream\":\"stdin\",\"data\":\"\"}", &err) < 0, "bad stream name");
	CHECK(parse_str(PROTO_CALL, H, "{\"name\":\"t\",\"args\":[],\"kwargs\":{}}", &err) == 0, "CALL ok");
	CHECK(parse_str(PROTO_CALL, H, "{\"name\":\"t\",\"args\":{},\"kwargs\":{}}", &err) < 0, "CALL args not array");
	CHECK(parse_str(PROTO_CALL, R, "{\"name\":\"t\",\"args\":[],\"kwargs\":{}}", &err) < 0, "CALL to runner");
	CHECK(parse_str(PROTO_RETURN, R, "{}", &err) < 0, "RETURN without value");
	CHECK(parse_str(PROTO_RETURN, R, "{\"value\":null}", &err) == 0, "RETURN null");
	CHECK(parse_str(PROTO_PONG, H, "{}", &err) == 0, "PONG");
	CHECK(parse_str(PROTO_ERROR, H, "{\"message\":\"x\"}", &err) == 0, "ERROR");
	CHECK(parse_str(PROTO_RESULT, H, "{\"error\":null,\"stdout\":\"\\ud800\",\"stderr\":\"\"}", &err) < 0,
	   "lone surrogate escape rejected");
	CHECK(parse_str(PROTO_VALUE, H, "{\"value\":123456789012345678901234567890}", &err) < 0,
	   "raw big integer rejected (must be {\"$int\":...})");
	{
		char deep[5000];
		size_t n = 0;

		for (int i = 0; i < 2400; i++)
			deep[n++] = '[';
		deep[n] = 0;
		CHECK(parse_str(PROTO_RETURN, R, deep, &err) < 0, "deep nesting rejected without a crash");
	}
}

static void test_utf8(void)
{
	char *o;
	size_t n, pend;

	CHECK(proto_utf8_sanitize("h\xc3\xa9llo", 6, &o, &n, &pend) == 0 && n == 6 && pend == 0 && !strcmp(o, "h\xc3\xa9llo"),
	   "valid UTF-8 unchanged");
	free(o);
	CHECK(proto_utf8_sanitize("a\xffz", 3, &o, &n, NULL) == 0 && !strcmp(o, "a\xef\xbf\xbdz"), "invalid byte replaced");
	free(o);
	CHECK(proto_utf8_sanitize("ab\xe2\x82", 4, &o, &n, &pend) == 0 && pend == 2 && !strcmp(o, "ab"),
	   "incomplete tail held back");
	free(o);
	CHECK(proto_utf8_sanitize("ab\xe2\x82", 4, &o, &n, NULL) == 0 && !strcmp(o, "ab\xef\xbf\xbd\xef\xbf\xbd"),
	   "incomplete tail replaced without pending");
	free(o);
	CHECK(proto_utf8_sanitize("\xed\xa0\x80", 3, &o, &n, &pend) == 0 && pend == 0 && n == 9, "surrogate replaced");
	free(o);
	CHECK(proto_utf8_sanitize("\xc0\xaf", 2, &o, &n, &pend) == 0 && n == 6, "overlong replaced");
	free(o);
}

static void test_amplification(void)
{
	/* {"value": [{},{},...]} with 300000 objects: refused before parsing. */
	size_t n = 300000, len = 0;
	char *buf = malloc(16 + n * 3);
	struct proto_frame f = { 0 };
	struct nsbox_err err = { 0 };
	json_t *m = NULL;

	len += (size_t)sprintf(buf, "{\"v\":[");
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(buf + len, i ? ",{}" : "{}");
	len += (size_t)sprintf(buf + len, "]}");
	f.hdr.type = PROTO_RESULT;
	f.hdr.len = (uint32_t)len;
	f.payload = buf;
	CHECK(proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) < 0 && err.code == EPROTO && strstr(err.msg, "JSON objects"),
	      "300000 objects refused before parsing (%s)", err.msg);
	/* The same count inside a string is just text. */
	len = (size_t)sprintf(buf, "{\"v\":\"");
	for (size_t i = 0; i < n; i++)
		buf[len++] = '{';
	len += (size_t)sprintf(buf + len, "\"}");
	f.hdr.len = (uint32_t)len;
	err_clear(&err);
	CHECK(proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) < 0 && !strstr(err.msg, "JSON objects"),
	      "braces inside a string are not counted (%s)", err.msg);
	json_decref(m);
	free(buf);
}

/* FILE_* data: RFC 4648 vectors, round trips of every length mod 3, and
 * strictness (bad characters, misplaced padding, non-zero spare bits). */
static void test_b64(void)
{
	static const char *const vec[][2] = { { "", "" },	  { "f", "Zg==" },	   { "fo", "Zm8=" },
					      { "foo", "Zm9v" }, { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" },
					      { "foobar", "Zm9vYmFy" } };
	static const char *const bad[] = { "Zg=", "Zg=a", "Z===", "Zh==", "Zm9=", "Zm8=Zm8=", "Zm 9", "Zm9v\n",
					   "====", "Zm-v" };
	unsigned char raw[256], dec[300];
	char enc[400];

	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		proto_b64_encode(vec[i][0], strlen(vec[i][0]), enc);
		CHECK(!strcmp(enc, vec[i][1]), "b64 encode \"%s\"", vec[i][0]);
		CHECK(proto_b64_decode(vec[i][1], strlen(vec[i][1]), dec) == (long long)strlen(vec[i][0]) &&
			      !memcmp(dec, vec[i][0], strlen(vec[i][0])),
		      "b64 decode \"%s\"", vec[i][1]);
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		raw[i] = (unsigned char)(i * 7 + 3);
	for (size_t n = 0; n < sizeof(raw); n++) {
		proto_b64_encode(raw, n, enc);
		if (strlen(enc) != proto_b64_len(n) || proto_b64_decode(enc, strlen(enc), dec) != (long long)n ||
		    memcmp(dec, raw, n)) {
			ok(0, "b64 round trip of %zu bytes", n);
			return;
		}
	}
	ok(1, "b64 round trips of 0..255 bytes");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(proto_b64_decode(bad[i], strlen(bad[i]), dec) == -1, "b64 rejects \"%s\"", bad[i]);
}

static int parse_text(const char *text, size_t len, struct nsbox_err *err)
{
	struct proto_frame f = { .hdr = { .type = PROTO_RESULT, .len = (uint32_t)len }, .payload = (char *)text };
	json_t *m = NULL;
	int r;

	err_clear(err);
	r = proto_msg_parse(&f, PROTO_TO_HOST, &m, err);
	json_decref(m);
	return r;
}

static void test_depth_and_cost(void)
{
	size_t n = 4000000, len = 0;
	char *buf = malloc(2 * n + 64);
	char name[PROTO_TOOL_NAME_MAX + 1];
	struct nsbox_err err = { 0 };

	/* 300 levels: refused before jansson (and the SDK) recurse into them. */
	len = (size_t)sprintf(buf, "{\"error\":null,\"stdout\":\"\",\"stderr\":\"\",\"value\":");
	memset(buf + len, '[', 300);
	memset(buf + len + 300, ']', 300);
	len += 600;
	buf[len++] = '}';
	CHECK(parse_text(buf, len, &err) < 0 && strstr(err.msg, "deeper"), "300 levels refused (%s)", err.msg);
	/* 200 levels (a 100-deep tuple) pass. */
	len = (size_t)sprintf(buf, "{\"error\":null,\"stdout\":\"\",\"stderr\":\"\",\"value\":");
	memset(buf + len, '[', 200);
	memset(buf + len + 200, ']', 200);
	len += 400;
	buf[len++] = '}';
	CHECK(parse_text(buf, len, &err) == 0, "200 levels pass (%s)", err.msg);
	/* 4 million zeros (8 MB, ~170 MB parsed): over 16x + 16 MiB. */
	len = (size_t)sprintf(buf, "{\"error\":null,\"stdout\":\"\",\"stderr\":\"\",\"value\":[0");
	for (size_t i = 1; i < n; i++)
		buf[len++] = ',', buf[len++] = '0';
	len += (size_t)sprintf(buf + len, "]}");
	CHECK(parse_text(buf, len, &err) < 0 && strstr(err.msg, "cost"), "4M zeros refused (%s)", err.msg);
	/* A million of them (2 MB) pass. */
	len = (size_t)sprintf(buf, "{\"error\":null,\"stdout\":\"\",\"stderr\":\"\",\"value\":[0");
	for (size_t i = 1; i < n / 4; i++)
		buf[len++] = ',', buf[len++] = '0';
	len += (size_t)sprintf(buf + len, "]}");
	CHECK(parse_text(buf, len, &err) == 0, "1M zeros pass (%s)", err.msg);
	free(buf);

	{
		const char *t = "{\"name\":\"nope\",\"args\":[1,{\"name\":\"x\"}],\"kwargs\":{}}";

		CHECK(proto_call_name(t, strlen(t), name) == 0 && !strcmp(name, "nope"), "CALL name found without parsing");
		t = "{\"args\":[{\"name\":\"inner\"}], \"kwargs\":{\"name\":1}, \"name\" : \"outer\"}";

		CHECK(proto_call_name(t, strlen(t), name) == 0 && !strcmp(name, "outer"), "only the top-level name");
		t = "{\"args\":[\"a\\\"]\"],\"name\":\"ok\"}";
		CHECK(proto_call_name(t, strlen(t), name) == 0 && !strcmp(name, "ok"), "escapes inside values skipped");
		t = "{\"na\\u006de\":\"x\"}";
		CHECK(proto_call_name(t, strlen(t), name) < 0, "an escaped key: parse instead");
		t = "{\"name\":\"n\\u0041\"}";
		CHECK(proto_call_name(t, strlen(t), name) < 0, "an escaped name: parse instead");
	}
	CHECK(proto_utf8_chars("a\xef\xbf\xbd\xc3\xa9", 6) == 3, "code points counted");
}

/* RESULT's displays and files (proto/rich.c): what the host accepts. */
static void test_rich(void)
{
	struct nsbox_err err = { 0 };
	const enum proto_dir H = PROTO_TO_HOST;
	char buf[600];
	static const struct {
		const char *fields, *why;	/* NULL why: accepted */
	} cases[] = {
		{ "\"displays\":[{\"image/png\":\"iVBORw0=\",\"text/plain\":\"x\"}],\"displays_truncated\":false", NULL },
		{ "\"displays\":[],\"files\":[],\"files_truncated\":true", NULL },
		{ "\"files\":[{\"name\":\"a b.png\",\"size\":3,\"data\":\"AAEC\"},{\"name\":\"big\",\"size\":99}]", NULL },
		{ "\"displays\":[{\"text/html\":\"<b>\",\"application/vnd.x+json\":\"{}\"}]", NULL },
		{ "\"displays\":{}", "displays has the wrong type" },
		{ "\"displays\":[{}]", "non-empty object" },
		{ "\"displays\":[\"x\"]", "non-empty object" },
		{ "\"displays\":[{\"Image/PNG\":\"AAAA\"}]", "invalid MIME" },
		{ "\"displays\":[{\"image\":\"AAAA\"}]", "invalid MIME" },
		{ "\"displays\":[{\"image/png/x\":\"AAAA\"}]", "invalid MIME" },
		{ "\"displays\":[{\"text/ html\":\"x\"}]", "invalid MIME" },
		{ "\"displays\":[{\"text/\\u0000html\":\"x\"}]", "NUL" },
		{ "\"displays\":[{\"text/plain\":1}]", "not a string" },
		{ "\"displays\":[{\"image/png\":\"AAA\"}]", "base64" },
		{ "\"displays\":[{\"image/png\":\"AA\\nAA\"}]", "base64" },
		{ "\"displays\":[{\"image/png\":\"AB==\"}]", "base64" },
		{ "\"displays\":[{\"text/plain\":\"a\\u0000b\"}]", "NUL" },
		{ "\"displays_truncated\":1", "boolean" },
		{ "\"files\":[{\"name\":\"../x\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"..\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"a\\nb\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"a\\u0085b\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"a\\u202eb\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"a\\u2067b\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"a\\u0000b\",\"size\":0}]", "invalid name" },
		{ "\"files\":[{\"name\":\"a\",\"size\":-1}]", "size >= 0" },
		{ "\"files\":[{\"name\":\"a\",\"size\":4,\"data\":\"AAEC\"}]", "its size says" },
		{ "\"files\":[{\"name\":\"a\",\"size\":0},{\"name\":\"a\",\"size\":0}]", "repeats" },
		{ "\"files\":[{\"name\":\"a\",\"size\":3,\"data\":\"A-EC\"}]", "base64" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int k;

		snprintf(buf, sizeof(buf), "{\"error\":null,\"stdout\":\"\",\"stderr\":\"\",%s}", cases[i].fields);
		k = parse_str(PROTO_RESULT, H, buf, &err);
		if (!cases[i].why)
			CHECK(k == 0, "rich: accepted: %s (%s)", cases[i].fields, k ? err.msg : "");
		else
			CHECK(k < 0 && strstr(err.msg, cases[i].why), "rich: %s: %s (%s)", cases[i].why, cases[i].fields,
			      k < 0 ? err.msg : "accepted");
	}
	/* The caps: bundles, MIME types per bundle, files, bytes. */
	{
		json_t *m = json_pack("{s:n,s:s,s:s}", "error", "stdout", "", "stderr", "");
		json_t *ds = json_array(), *fs = json_array(), *b = json_object();
		char *big = malloc((8u << 20) + 8);

		for (int i = 0; i < NSBOX_PROTO_DISPLAY_MAX; i++)
			json_array_append_new(ds, json_pack("{s:s}", "text/plain", "x"));
		json_object_set(m, "displays", ds);
		CHECK(proto_msg_check(PROTO_RESULT, H, m, &err) == 0, "rich: %u displays pass", NSBOX_PROTO_DISPLAY_MAX);
		json_array_append_new(ds, json_pack("{s:s}", "text/plain", "x"));
		CHECK(proto_msg_check(PROTO_RESULT, H, m, &err) < 0 && strstr(err.msg, "over the cap"),
		      "rich: one display more is refused");
		json_array_clear(ds);
		for (int i = 0; i <= NSBOX_PROTO_DISPLAY_MIMES; i++) {
			char mime[32];

			snprintf(mime, sizeof(mime), "text/x%d", i);
			json_object_set_new(b, mime, json_string(""));
		}
		json_array_append(ds, b);
		CHECK(proto_msg_check(PROTO_RESULT, H, m, &err) < 0 && strstr(err.msg, "MIME types, over"),
		      "rich: %u MIME types in a bundle are refused", NSBOX_PROTO_DISPLAY_MIMES + 1);
		json_array_clear(ds);
		memset(big, 'a', (8u << 20) + 4);
		big[(8u << 20) + 4] = '\0';
		json_array_append_new(ds, json_pack("{s:s}", "text/plain", big));
		CHECK(proto_msg_check(PROTO_RESULT, H, m, &err) < 0 && strstr(err.msg, "bytes of displays and files"),
		      "rich: more than %u bytes are refused", NSBOX_PROTO_RICH_BYTES);
		json_object_del(m, "displays");
		for (int i = 0; i <= NSBOX_PROTO_OUT_FILES_MAX; i++) {
			char name[32];

			snprintf(name, sizeof(name), "f%d", i);
			json_array_append_new(fs, json_pack("{s:s,s:i}", "name", name, "size", 0));
		}
		json_object_set(m, "files", fs);
		CHECK(proto_msg_check(PROTO_RESULT, H, m, &err) < 0 && strstr(err.msg, "files, over the cap"),
		      "rich: %u files are refused", NSBOX_PROTO_OUT_FILES_MAX + 1);
		free(big);
		json_decref(b);
		json_decref(ds);
		json_decref(fs);
		json_decref(m);
	}
	CHECK(proto_mime_text("image/svg+xml") && proto_mime_text("text/csv") && proto_mime_text("application/geo+json") &&
		      !proto_mime_text("image/png") && !proto_mime_text("application/pdf"),
	      "rich: which MIME types are text");
}

/* proto_output_decode against the parser: what it decodes, the parser
 * reads the same; what it refuses, the parser refuses; what it leaves, it
 * leaves untouched.  0 when they agree. */
static int output_vs_parser(const char *text, size_t len, int *fast_out)
{
	struct proto_frame f = { .hdr = { .magic = NSBOX_PROTO_MAGIC, .type = PROTO_OUTPUT, .len = (uint32_t)len } };
	struct nsbox_err err = { 0 };
	char *copy = malloc(len + 1);
	const char *data = NULL;
	size_t dlen = 0;
	int stream = 0, fast, r = 0;
	json_t *m = NULL;

	if (!copy)
		return -1;
	memcpy(copy, text, len);
	copy[len] = '\0';
	f.payload = (char *)text;
	fast = proto_output_decode(copy, len, &stream, &data, &dlen);
	*fast_out = fast;
	if (proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) < 0)
		m = NULL;
	if (fast == 1) {
		json_t *d = m ? json_object_get(m, "data") : NULL;
		const char *st = m ? json_string_value(json_object_get(m, "stream")) : NULL;

		if (!d || json_string_length(d) != dlen || memcmp(json_string_value(d), data, dlen) || data[dlen] ||
		    stream != (!strcmp(st, "stdout") ? 1 : 2))
			r = -1;
	} else if (fast < 0) {
		r = m ? -1 : 0;
	} else if (memcmp(copy, text, len)) {
		r = -1;
	}
	json_decref(m);
	free(copy);
	return r;
}

static void test_output_decode(void)
{
	static const struct {
		const char *text;
		int fast;
	} cases[] = {
		{ "{\"stream\":\"stdout\",\"data\":\"1\\n2\\n\"}", 1 },
		{ "{\"stream\":\"stderr\",\"data\":\"\"}", 1 },
		{ "{\"stream\":\"stdout\",\"data\":\"\\\"q\\\\ \\/ \\b\\f\\r\\t\"}", 1 },
		{ "{\"stream\":\"stdout\",\"data\":\"\\u00e9\\u20ac\\ud83d\\ude00 \xc3\xa9\"}", 1 },
		{ "{\"stream\":\"stdout\",\"data\":\"a\\u0000b\"}", 1 },
		{ "{\"stream\":\"stdout\",\"data\":\"lone \\ud800 x\"}", -1 },
		{ "{\"stream\":\"stdout\",\"data\":\"lone \\udc00\"}", -1 },
		{ "{\"stream\":\"stdout\",\"data\":\"raw\ttab\"}", -1 },
		{ "{\"stream\":\"stdout\",\"data\":\"bad \xff byte\"}", -1 },
		{ "{\"stream\":\"stdout\",\"data\":\"bad \\x escape\"}", -1 },
		{ "{\"stream\":\"stdout\",\"data\":\"short \\u12\"}", -1 },
		{ "{\"stream\":\"stdout\",\"data\":\"a\",\"x\":\"b\"}", 0 },
		{ "{\"stream\":\"stdout\",\"data\":\"a\\\"}", 0 },
		{ "{\"data\":\"a\",\"stream\":\"stdout\"}", 0 },
		{ "{\"stream\": \"stdout\", \"data\": \"a\"}", 0 },
		{ "{\"stream\":\"stdin\",\"data\":\"a\"}", 0 },
	};
	static const char *const bits[] = { "a", "\\n", "\\\"", "\\\\", "\\u", "d83d", "de00", "00e9", "0000",
					    "\"", "\\", "\x01", "\xc3", "\xa9", "\xff", "\xe2\x82\xac", "u", "/" };
	char buf[256];
	unsigned seed = 12345;
	int fast, bad = 0, seen[3] = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int r = output_vs_parser(cases[i].text, strlen(cases[i].text), &fast);

		CHECK(r == 0 && fast == cases[i].fast, "OUTPUT decoded by hand as the parser reads it: %s (%d)",
		      cases[i].text, fast);
	}
	/* Random strings of the tricky pieces between the runner's prefix and
	 * suffix: the two must agree on every one. */
	for (int n = 0; n < 20000; n++) {
		size_t len = (size_t)sprintf(buf, "{\"stream\":\"std%s\",\"data\":\"", n & 1 ? "err" : "out");
		int pieces = (int)((seed = seed * 1103515245u + 12345u) >> 16) % 12;

		for (int k = 0; k < pieces; k++) {
			const char *b = bits[((seed = seed * 1103515245u + 12345u) >> 16) % ARRAY_SIZE(bits)];

			len += (size_t)sprintf(buf + len, "%s", b);
		}
		len += (size_t)sprintf(buf + len, "\"}");
		if (output_vs_parser(buf, len, &fast) != 0 && bad++ < 3)
			fprintf(stderr, "# disagree on %s\n", buf);
		seen[fast + 1]++;
	}
	CHECK(bad == 0, "20000 random OUTPUT payloads: the hand decoder and the parser agree (%d refused, %d left, %d decoded)",
	      seen[0], seen[1], seen[2]);
}

static void test_reserved_names(void)
{
	static const char *const reserved[] = { "len", "print", "open", "ArithmeticError", "zip", "_", "match",
						"case", "class", "False", "None", "__import__", "__name__", "__x__",
						"abs", "yield" };
	static const char *const fine[] = { "lens", "Len", "zip2", "a", "__x", "x__", "quit", "exit", "help",
					    "ArithmeticErrors", "aaa", "zzz" };

	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		CHECK(proto_is_reserved_name(reserved[i]), "%s is reserved", reserved[i]);
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		CHECK(!proto_is_reserved_name(fine[i]), "%s is not reserved", fine[i]);
	CHECK(!proto_is_reserved_name(NULL), "NULL is not reserved");
}

/* Nothing in s that drives a terminal: C0, DEL, C1 (UTF-8 c2 80..c2 9f),
 * RLO and friends (e2 80 aa..ae, e2 81 a6..a9), or bytes that are not UTF-8. */
static bool inert(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	if (!proto_utf8_valid(s, strlen(s)))
		return false;
	for (; *p; p++)
		if (*p < 0x20 || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) ||
		    (p[0] == 0xe2 && p[1] == 0x80 && p[2] >= 0xaa && p[2] <= 0xae) ||
		    (p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9))
			return false;
	return true;
}

/* jansson's error quotes the input where it stopped ("near '...'"): a
 * hostile runner's bytes, printed by nsbox python on the host's terminal
 * (red team 4: a raw ESC). */
static void test_parse_errors_are_inert(void)
{
	static const char *const bad[] = {
		"{\x1b]0;pwned\x07\x1b[31m",				  /* ESC, BEL outside strings */
		"[\x1b[2J]",
		"{\"a\":1,\"\xc2\x9b" "31m\":2,\"\xc2\x9b" "31m\":3}",	  /* a C1 CSI in a repeated key */
		"{\"a\":1,\"\xe2\x80\xae" "gnp.exe\":2,\"\xe2\x80\xae" "gnp.exe\":3}", /* RLO */
		"{\"a\":\x7f}",
		"{\"a\":tru\x08}",
	};
	struct nsbox_err err = { 0 };
	char out[32];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = parse_str(PROTO_ERROR, PROTO_TO_HOST, bad[i], &err);

		CHECK(r < 0 && strstr(err.msg, "not valid JSON") && inert(err.msg), "parse error %zu is inert: %s", i,
		      err.msg);
	}
	CHECK(!strcmp(proto_text_inert("a\x1b\xc3\xa9\xff\xc2\x85z", out, sizeof(out)), "a\\x1b\xc3\xa9\\xff\\u0085z"),
	      "escapes controls and bad bytes, keeps UTF-8");
	CHECK(!strcmp(proto_text_inert("abcdefgh\x01\x02\x03", out, 12), "abcdefgh"), "cut at a whole escape");
}

/* proto_call_parse: the parser's verdict on every CALL below (jansson's
 * edges: escaped and duplicate keys at any depth, int64 and double range,
 * surrogates, UTF-8, what may follow), the same name and argument texts. */
static void test_call_parse(void)
{
	static const char *const cases[] = {
		"{\"name\":\"f\",\"args\":[1,\"x\"],\"kwargs\":{\"k\":null}}",
		" {\"kwargs\" : {} ,\"other\":[{}], \"args\": [ ] , \"name\" :\"f\"}\r\n",
		"{\"\\u006eame\":\"\\u0066\",\"args\":[],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[{\"a\":1,\"\\u0061\":2}],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"g\":6,\"h\":7,\"i\":8,\"j\":9,\"a\":0}],"
		"\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[{\"a\":{\"a\":1},\"b\":{\"a\":1}}],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[],\"kwargs\":{\"\\u0000\":1}}",
		"{\"name\":\"f\\u0000\",\"args\":[],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\\u0000\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[9223372036854775807,-9223372036854775808],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[9223372036854775808],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[-9223372036854775809],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[1.7976931348623157e308,17976931348623157e292,0e999999,1e-400],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[1.7976931348623159e308],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[0.0000000000000000000001e330],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[-1e309],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[01],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[1.],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[1e+],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[-],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[True],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[nulls],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\\ud83d\\ude00\",\"\\u00e9\\/\\b\\f\\n\\r\\t\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\\ud800\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\\udc00\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\\ud800\\u0041\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\\x\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\xc3\xa9\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\xc0\xaf\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\xed\xa0\x80\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[\"\t\"],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[1,],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[],\"kwargs\":{},}",
		"{\"name\":\"f\",\"args\":[],\"kwargs\":{}} x",
		"{\"name\":\"f\",\"args\":[],\"kwargs\":{}}{}",
		"[1]",
		"\"f\"",
		"",
		"{\"name\":\"f\",\"args\":[],\"kwargs\":[]}",
		"{\"name\":1,\"args\":[],\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":{},\"kwargs\":{}}",
		"{\"args\":[],\"kwargs\":{}}",
		"{\"name\":\"f\",\"kwargs\":{}}",
		"{\"name\":\"f\",\"args\":[]}",
		"{\"name\":\"f\",\"name\":\"g\",\"args\":[],\"kwargs\":{}}",
		"{\"name\":\"a123456789a123456789a123456789a123456789a123456789a123456789a1234\",\"args\":[],\"kwargs\":{}}",
		"{\"name\":\"a123456789a123456789a123456789a123456789a123456789a123456789a123\",\"args\":[],\"kwargs\":{}}",
	};
	struct nsbox_err err = { 0 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i]);
		struct proto_frame f = { .hdr = { .len = (uint32_t)len, .type = PROTO_CALL } };
		struct proto_call c;
		json_t *m = NULL;
		int a, b;

		f.payload = strndup(cases[i], len);
		a = proto_call_parse(cases[i], len, &c, &err);
		b = proto_msg_parse(&f, PROTO_TO_HOST, &m, &err);
		CHECK((a == 0) == (b == 0), "CALL case %zu: the parser's verdict (%d, %d: %s)", i, a, b,
		      a || b ? err.msg : "");
		if (a == 0 && b == 0) {
			const char *n = json_string_value(json_object_get(m, "name"));
			json_t *x = json_loadb(cases[i] + c.args_off, c.args_len, JSON_ALLOW_NUL, NULL);
			json_t *y = json_loadb(cases[i] + c.kwargs_off, c.kwargs_len, JSON_ALLOW_NUL, NULL);

			CHECK(!strncmp(c.name, n, PROTO_TOOL_NAME_MAX) && c.name_cut == (strlen(n) > PROTO_TOOL_NAME_MAX) &&
				      json_equal(x, json_object_get(m, "args")) &&
				      json_equal(y, json_object_get(m, "kwargs")),
			      "CALL case %zu: the same name (%s%s), args and kwargs", i, c.name, c.name_cut ? "..." : "");
			json_decref(x);
			json_decref(y);
		}
		json_decref(m);
		free(f.payload);
	}
	{
		/* Stricter than jansson in one thing: it drops a NUL after a
		 * number or literal, which would cut the text passed on. */
		static const char nul[] = "{\"name\":\"f\",\"args\":[1\0,true\0],\"kwargs\":{}}";
		struct proto_frame f = { .hdr = { .len = sizeof(nul) - 1, .type = PROTO_CALL } };
		struct proto_call c;
		json_t *m = NULL;

		f.payload = malloc(sizeof(nul));
		memcpy(f.payload, nul, sizeof(nul));
		CHECK(proto_msg_parse(&f, PROTO_TO_HOST, &m, &err) == 0, "jansson takes [1\\0,true\\0] as [1,true]");
		CHECK(proto_call_parse(nul, sizeof(nul) - 1, &c, &err) < 0, "a NUL byte is refused (%s)", err.msg);
		json_decref(m);
		free(f.payload);
	}
}

int main(void)
{
	test_parse_errors_are_inert();
	test_reserved_names();
	test_b64();
	test_header();
	test_reader();
	test_fd_reader();
	test_data_frames();
	test_schemas();
	test_utf8();
	test_amplification();
	test_depth_and_cost();
	test_rich();
	test_output_decode();
	test_call_parse();
	tap_done();
}
