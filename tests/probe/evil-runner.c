/* A hostile stand-in for nsbox-runner, for tests of the host side
 * (host/session.c).  Selected with NSBOX_RUNNER=.../evil-runner-MODE; the
 * host passes the file's name as argv[0], so the mode is its suffix:
 *   garbage   answer HELLO, then send random bytes
 *   oversize  answer HELLO, then a header claiming a 4 GiB payload
 *   wrongid   answer EXEC with a RESULT for another id
 *   badjson   answer EXEC with a RESULT whose payload is not JSON
 *   unexpected answer EXEC with an EXEC (a host-bound type it may not send)
 *   silent    answer HELLO, then never answer anything
 *   mute      never answer HELLO
 *   flood     answer EXEC with endless OUTPUT frames
 *   crash     answer HELLO, then die of SIGSEGV on EXEC
 *   wrongver  answer HELLO with protocol version 99
 *   bigcall   answer EXEC with CALL frames forever (tool-call cap)
 * Self-contained (no libnsbox): it writes frames by hand. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void frame(uint16_t type, uint32_t id, const char *payload)
{
	unsigned char h[16];
	size_t len = strlen(payload);

	put32(h, 0x4e534258u);
	put32(h + 4, (uint32_t)len);
	h[8] = (unsigned char)type;
	h[9] = (unsigned char)(type >> 8);
	h[10] = h[11] = 0;
	put32(h + 12, id);
	if (write(3, h, 16) != 16 || (len && write(3, payload, len) != (ssize_t)len))
		_exit(3);
}

/* Read one frame's header and skip its payload; returns its type. */
static int next(uint32_t *id)
{
	unsigned char h[16], buf[4096];
	uint32_t len;
	size_t got = 0;

	while (got < 16) {
		ssize_t n = read(3, h + got, 16 - got);
		if (n <= 0)
			_exit(0);
		got += (size_t)n;
	}
	len = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
	*id = (uint32_t)h[12] | (uint32_t)h[13] << 8 | (uint32_t)h[14] << 16 | (uint32_t)h[15] << 24;
	while (len) {
		ssize_t n = read(3, buf, len < sizeof(buf) ? len : sizeof(buf));
		if (n <= 0)
			_exit(0);
		len -= (uint32_t)n;
	}
	return h[8] | h[9] << 8;
}

static const char hello[] = "{\"version\":1,\"capabilities\":[]}";
static const char ok_result[] = "{\"error\":null,\"stdout\":\"\",\"stderr\":\"\"}";

int main(int argc, char **argv)
{
	const char *mode = argc > 0 ? strrchr(argv[0], '-') : NULL;
	uint32_t id;
	int t;

	mode = mode ? mode + 1 : "";
	if (!strcmp(mode, "mute"))
		for (;;)
			pause();
	next(&id);
	frame(1, id, strcmp(mode, "wrongver") ? hello : "{\"version\":99,\"capabilities\":[]}");
	if (!strcmp(mode, "garbage")) {
		unsigned char junk[256];
		srand(1);
		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (unsigned char)rand();
		for (;;)
			if (write(3, junk, sizeof(junk)) < 0)
				_exit(0);
	}
	if (!strcmp(mode, "oversize")) {
		unsigned char h[16] = { 'X', 'B', 'S', 'N', 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 1, 0, 0, 0 };
		if (write(3, h, 16) != 16)
			_exit(3);
		for (;;)
			pause();
	}
	for (;;) {
		t = next(&id);
		if (t == 13) {		/* PING */
			frame(14, id, "{}");
			continue;
		}
		if (t == 15) {		/* BYE */
			frame(15, id, "{}");
			_exit(0);
		}
		if (!strcmp(mode, "silent"))
			continue;
		if (t == 8) {		/* SET_VAR: harmless, so the CLI reaches EXEC */
			frame(10, id, "{\"value\":null}");
			continue;
		}
		if (t != 2) {
			frame(10, id, "{\"value\":null}");
			continue;
		}
		if (!strcmp(mode, "wrongid"))
			frame(3, id + 1000, ok_result);
		else if (!strcmp(mode, "badjson"))
			frame(3, id, "{\"error\":null,\"stdout\":");
		else if (!strcmp(mode, "unexpected"))
			frame(2, id, "{\"code\":\"1\"}");
		else if (!strcmp(mode, "crash"))
			raise(SIGSEGV);
		else if (!strcmp(mode, "flood"))
			for (;;)
				frame(4, id, "{\"stream\":\"stdout\",\"data\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}");
		else if (!strcmp(mode, "bigcall"))
			for (uint32_t c = 1;; c++) {
				uint32_t rid;

				frame(5, c, "{\"name\":\"nope\",\"args\":[],\"kwargs\":{}}");
				next(&rid);
			}
		else
			frame(3, id, ok_result);
	}
}
