/* Base64 for file data in FILE_* messages (proto.h).  Pure. */
#include "proto.h"

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t proto_b64_len(size_t n)
{
	return (n + 2) / 3 * 4;
}

void proto_b64_encode(const void *data, size_t n, char *out)
{
	const unsigned char *p = data;
	size_t i = 0;

	for (; i + 3 <= n; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];

		*out++ = b64_alphabet[v >> 18];
		*out++ = b64_alphabet[(v >> 12) & 63];
		*out++ = b64_alphabet[(v >> 6) & 63];
		*out++ = b64_alphabet[v & 63];
	}
	if (n - i == 1) {
		unsigned v = (unsigned)p[i] << 16;

		*out++ = b64_alphabet[v >> 18];
		*out++ = b64_alphabet[(v >> 12) & 63];
		*out++ = '=';
		*out++ = '=';
	} else if (n - i == 2) {
		unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;

		*out++ = b64_alphabet[v >> 18];
		*out++ = b64_alphabet[(v >> 12) & 63];
		*out++ = b64_alphabet[(v >> 6) & 63];
		*out++ = '=';
	}
	*out = '\0';
}

static int b64_val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* out == NULL: only check, and count. */
#define PUT(x)                                 \
	do {                                   \
		if (o)                         \
			*o++ = (unsigned char)(x); \
		len++;                         \
	} while (0)

static long long b64_decode(const char *s, size_t n, unsigned char *out)
{
	unsigned char *o = out;
	long long len = 0;
	size_t i;

	if (n % 4)
		return -1;
	for (i = 0; i < n; i += 4) {
		int a = b64_val((unsigned char)s[i]), b = b64_val((unsigned char)s[i + 1]);
		int c = b64_val((unsigned char)s[i + 2]), d = b64_val((unsigned char)s[i + 3]);
		bool last = i + 4 == n;

		if (a < 0 || b < 0)
			return -1;
		if (c < 0 || d < 0) {
			/* Padding only at the very end, with zero spare bits. */
			if (!last || s[i + 3] != '=')
				return -1;
			if (s[i + 2] == '=') {
				if (b & 15)
					return -1;
				PUT(a << 2 | b >> 4);
				return len;
			}
			if (c < 0 || (c & 3))
				return -1;
			PUT(a << 2 | b >> 4);
			PUT((b & 15) << 4 | c >> 2);
			return len;
		}
		PUT(a << 2 | b >> 4);
		PUT((b & 15) << 4 | c >> 2);
		PUT((c & 3) << 6 | d);
	}
	return len;
}
#undef PUT

long long proto_b64_decode(const char *s, size_t n, void *out)
{
	return b64_decode(s, n, out);
}

long long proto_b64_check(const char *s, size_t n)
{
	return b64_decode(s, n, NULL);
}
