/* A CALL payload judged and taken apart without a jansson tree
 * (proto_call_parse, proto.h).  A recursive-descent reader of JSON as
 * jansson's lexer and parser read it with the flags proto_msg_parse()
 * gives (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL): whitespace of space,
 * tab, CR and LF only; valid UTF-8; JSON's escapes with paired
 * surrogates; integers within int64 and reals that do not overflow a
 * double; no key twice (as decoded) in any object, no U+0000 in a key; an
 * object or array at the top and nothing after it.  The depth is bounded
 * before (proto_payload_bounds), and the recursion with it.
 *
 * What it keeps is a stack of the open objects' keys (offsets, 8 bytes
 * each, escaped keys decoded into an arena), checked for duplicates when
 * each object closes: memory in proportion to the widest open objects,
 * never to the values. */
#include "proto.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A key's decoded text: in the payload, or at off & ~ARENA in the arena. */
#define ARENA 0x80000000u
struct key {
	uint32_t off, len;
};

struct reader {
	const char *p;
	size_t len, i;
	struct key *keys;
	size_t n_keys, cap_keys;
	char *arena;
	size_t n_arena, cap_arena;
	const char *why; /* the first error, at byte at */
	size_t at;
	bool oom;
};

/* The top-level object's members of the schema (where their values lie). */
struct member {
	size_t off, len;
	bool seen;
};
struct top {
	struct member name, args, kwargs;
};

static int bad(struct reader *r, const char *why)
{
	if (!r->why) {
		r->why = why;
		r->at = r->i;
	}
	return -1;
}

static bool more(struct reader *r)
{
	return r->i < r->len;
}

static void ws(struct reader *r)
{
	while (r->i < r->len) {
		char c = r->p[r->i];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		r->i++;
	}
}

/* The string whose opening quote is at r->i: r->i moves past its closing
 * quote.  *esc: it has escapes; *nul: one of them is \u0000. */
static int string(struct reader *r, bool *esc, bool *nul)
{
	const unsigned char *p = (const unsigned char *)r->p;
	size_t i = r->i + 1;

	*esc = *nul = false;
	for (;;) {
		unsigned char c;
		uint32_t cp, lo;

		r->i = i;
		if (i >= r->len)
			return bad(r, "premature end of input in a string");
		c = p[i];
		if (c == '"')
			break;
		if (c < 0x20)
			return bad(r, "control character in a string");
		if (c >= 0x80) {
			int k = proto_utf8_seq(p + i, r->len - i);

			if (k <= 0)
				return bad(r, "invalid UTF-8");
			i += (size_t)k;
			continue;
		}
		if (c != '\\') {
			i++;
			continue;
		}
		*esc = true;
		if (i + 1 >= r->len)
			return bad(r, "premature end of input in a string");
		c = p[i + 1];
		if (c != 'u') {
			if (!memchr("\"\\/bfnrt", c, 8))
				return bad(r, "invalid escape");
			i += 2;
			continue;
		}
		if (r->len - i < 6 || proto_hex4(r->p + i + 2, &cp) < 0)
			return bad(r, "invalid \\u escape");
		i += 6;
		if (cp >= 0xd800 && cp <= 0xdbff) {
			if (r->len - i < 6 || p[i] != '\\' || p[i + 1] != 'u' || proto_hex4(r->p + i + 2, &lo) < 0 ||
			    lo < 0xdc00 || lo > 0xdfff)
				return bad(r, "invalid Unicode surrogate pair");
			i += 6;
		} else if (cp >= 0xdc00 && cp <= 0xdfff) {
			return bad(r, "invalid Unicode: a low surrogate alone");
		} else if (cp == 0) {
			*nul = true;
		}
	}
	r->i = i + 1;
	return 0;
}

/* The text inside a string's quotes, p[start..end) (judged by string()),
 * with its escapes undone into w (room for end - start bytes: never longer).
 * Returns the length written. */
static size_t unescape(const char *p, size_t start, size_t end, char *w)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	size_t n = 0;

	for (size_t i = start; i < end;) {
		uint32_t cp, lo;

		if (p[i] != '\\') {
			w[n++] = p[i++];
			continue;
		}
		if (p[i + 1] == 'u') {
			(void)proto_hex4(p + i + 2, &cp);
			if (cp >= 0xd800 && cp <= 0xdbff) {
				(void)proto_hex4(p + i + 8, &lo);
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				i += 6;
			}
			n += proto_put_utf8(w + n, cp);
			i += 6;
			continue;
		}
		/* One of " \ / b f n r t (string() let no other by). */
		w[n++] = to[strchr(from, p[i + 1]) - from];
		i += 2;
	}
	return n;
}

static bool isdigit_(char c)
{
	return c >= '0' && c <= '9';
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_make(void)
{
	c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

/* Whether the real p[from..to) overflows a double as jansson reads it
 * (strtod in the C locale; underflow to zero is accepted).  Only a number
 * whose leading digit is 10^308 can go either way: it alone is converted.
 * -1 when that can't be told (no memory). */
static int real_overflows(const char *p, size_t from, size_t to)
{
	long long point = -1, first = -1, digits = 0, e = 0, mag;
	size_t i = from;
	bool eneg = false;
	char *copy;
	double v;
	int k;

	if (p[i] == '-')
		i++;
	for (; i < to && p[i] != 'e' && p[i] != 'E'; i++) {
		if (p[i] == '.') {
			point = digits;
			continue;
		}
		if (first < 0 && p[i] != '0')
			first = digits;
		digits++;
	}
	if (first < 0)
		return 0; /* zero, whatever its exponent */
	if (point < 0)
		point = digits;
	if (i < to) {
		i++;
		if (p[i] == '+' || p[i] == '-')
			eneg = p[i++] == '-';
		for (; i < to; i++)
			if (e < 1000000000)
				e = e * 10 + (p[i] - '0');
	}
	/* The value is in [10^mag, 10^(mag + 1)); DBL_MAX is 1.8e308. */
	mag = point - first - 1 + (eneg ? -e : e);
	if (mag < 308)
		return 0;
	if (mag > 308)
		return 1;
	pthread_once(&c_locale_once, c_locale_make);
	if (!c_locale || !(copy = strndup(p + from, to - from)))
		return -1;
	errno = 0;
	v = strtod_l(copy, NULL, c_locale);
	k = (v == HUGE_VAL || v == -HUGE_VAL) && errno == ERANGE;
	free(copy);
	return k;
}

static int number(struct reader *r)
{
	const char *p = r->p;
	size_t s = r->i, i = r->i, d;
	bool neg = false, real = false;
	int k;

	if (p[i] == '-')
		neg = true, i++;
	d = i;
	if (i < r->len && p[i] == '0') {
		i++;
		if (i < r->len && isdigit_(p[i]))
			return bad(r, "invalid number (a leading zero)");
	} else if (i < r->len && isdigit_(p[i])) {
		while (i < r->len && isdigit_(p[i]))
			i++;
	} else {
		return bad(r, "invalid token");
	}
	if (i < r->len && p[i] == '.') {
		real = true;
		if (++i >= r->len || !isdigit_(p[i]))
			return r->i = i, bad(r, "invalid number (no digit after '.')");
		while (i < r->len && isdigit_(p[i]))
			i++;
	}
	if (i < r->len && (p[i] == 'e' || p[i] == 'E')) {
		real = true;
		if (++i < r->len && (p[i] == '+' || p[i] == '-'))
			i++;
		if (i >= r->len || !isdigit_(p[i]))
			return r->i = i, bad(r, "invalid number (no digit in the exponent)");
		while (i < r->len && isdigit_(p[i]))
			i++;
	}
	r->i = i;
	if (!real) {
		/* No leading zeros: the length says most of it. */
		static const char max[] = "9223372036854775807", min[] = "9223372036854775808";

		if (i - d > 19 || (i - d == 19 && memcmp(p + d, neg ? min : max, 19) > 0))
			return r->i = s, bad(r, neg ? "too big negative integer" : "too big integer");
		return 0;
	}
	k = real_overflows(p, s, i);
	if (k < 0) {
		r->oom = true;
		return bad(r, "out of memory");
	}
	if (k)
		return r->i = s, bad(r, "real number overflow");
	return 0;
}

static int literal(struct reader *r)
{
	size_t s = r->i, n;

	while (r->i < r->len && ((r->p[r->i] >= 'a' && r->p[r->i] <= 'z') || (r->p[r->i] >= 'A' && r->p[r->i] <= 'Z')))
		r->i++;
	n = r->i - s;
	if ((n == 4 && (!memcmp(r->p + s, "true", 4) || !memcmp(r->p + s, "null", 4))) ||
	    (n == 5 && !memcmp(r->p + s, "false", 5)))
		return 0;
	r->i = s;
	return bad(r, "invalid token");
}

static const char *key_text(const struct reader *r, const struct key *k)
{
	return k->off & ARENA ? r->arena + (k->off & ~ARENA) : r->p + k->off;
}

static bool key_is(const struct reader *r, const struct key *k, const char *s)
{
	return k->len == strlen(s) && !memcmp(key_text(r, k), s, k->len);
}

static int key_cmp(const void *a, const void *b, void *ctx)
{
	const struct reader *r = ctx;
	const struct key *x = a, *y = b;
	int c = memcmp(key_text(r, x), key_text(r, y), x->len < y->len ? x->len : y->len);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Push the key whose text is p[from..to) (inside its quotes). */
static int key_push(struct reader *r, size_t from, size_t to, bool esc)
{
	struct key k = { (uint32_t)from, (uint32_t)(to - from) };

	if (r->n_keys == r->cap_keys) {
		size_t cap = r->cap_keys ? 2 * r->cap_keys : 64;
		struct key *n = realloc(r->keys, cap * sizeof(*n));

		if (!n) {
			r->oom = true;
			return bad(r, "out of memory");
		}
		r->keys = n;
		r->cap_keys = cap;
	}
	if (esc) {
		if (r->cap_arena - r->n_arena < to - from) {
			size_t cap = r->cap_arena ? 2 * r->cap_arena : 4096;
			char *n;

			while (cap - r->n_arena < to - from)
				cap *= 2;
			if (!(n = realloc(r->arena, cap))) {
				r->oom = true;
				return bad(r, "out of memory");
			}
			r->arena = n;
			r->cap_arena = cap;
		}
		k.off = (uint32_t)r->n_arena | ARENA;
		k.len = (uint32_t)unescape(r->p, from, to, r->arena + r->n_arena);
		r->n_arena += k.len;
	}
	r->keys[r->n_keys++] = k;
	return 0;
}

/* Whether keys[base..n_keys) (one object's) hold a key twice. */
static bool keys_repeat(struct reader *r, size_t base)
{
	struct key *k = r->keys + base;
	size_t n = r->n_keys - base;

	if (n <= 8) {
		for (size_t a = 0; a < n; a++)
			for (size_t b = a + 1; b < n; b++)
				if (!key_cmp(&k[a], &k[b], r))
					return true;
		return false;
	}
	/* glibc's qsort_r merges: n log n whatever the keys. */
	qsort_r(k, n, sizeof(*k), key_cmp, r);
	for (size_t a = 1; a < n; a++)
		if (!key_cmp(&k[a - 1], &k[a], r))
			return true;
	return false;
}

static int value(struct reader *r, unsigned depth, struct top *top);

static int array(struct reader *r, unsigned depth)
{
	r->i++;
	ws(r);
	if (more(r) && r->p[r->i] == ']') {
		r->i++;
		return 0;
	}
	for (;;) {
		if (value(r, depth + 1, NULL) < 0)
			return -1;
		ws(r);
		if (!more(r))
			return bad(r, "premature end of input in an array");
		if (r->p[r->i] == ']') {
			r->i++;
			return 0;
		}
		if (r->p[r->i] != ',')
			return bad(r, "',' or ']' expected");
		r->i++;
		ws(r);
	}
}

/* An object; top (the payload's own object) gets where its schema's
 * members are. */
static int object(struct reader *r, unsigned depth, struct top *top)
{
	size_t base = r->n_keys, arena = r->n_arena;

	r->i++;
	ws(r);
	if (more(r) && r->p[r->i] == '}') {
		r->i++;
		return 0;
	}
	for (;;) {
		size_t from = r->i + 1, v;
		bool esc, nul;

		if (!more(r) || r->p[r->i] != '"')
			return bad(r, "string or '}' expected");
		if (string(r, &esc, &nul) < 0)
			return -1;
		if (nul)
			return r->i = from - 1, bad(r, "NUL byte in object key not supported");
		if (key_push(r, from, r->i - 1, esc) < 0)
			return -1;
		ws(r);
		if (!more(r) || r->p[r->i] != ':')
			return bad(r, "':' expected");
		r->i++;
		ws(r);
		v = r->i;
		if (value(r, depth + 1, NULL) < 0)
			return -1;
		if (top) {
			const struct key *k = &r->keys[r->n_keys - 1];
			struct member *m = key_is(r, k, "name")	    ? &top->name
					   : key_is(r, k, "args")   ? &top->args
					   : key_is(r, k, "kwargs") ? &top->kwargs
								    : NULL;

			if (m)
				*m = (struct member){ v, r->i - v, true };
		}
		ws(r);
		if (!more(r))
			return bad(r, "premature end of input in an object");
		if (r->p[r->i] == '}')
			break;
		if (r->p[r->i] != ',')
			return bad(r, "',' or '}' expected");
		r->i++;
		ws(r);
	}
	if (keys_repeat(r, base))
		return bad(r, "duplicate object key");
	r->i++;
	r->n_keys = base;
	r->n_arena = arena;
	return 0;
}

static int value(struct reader *r, unsigned depth, struct top *top)
{
	char c;

	if (!more(r))
		return bad(r, "premature end of input");
	if (depth > NSBOX_PROTO_MAX_DEPTH)
		return bad(r, "nested too deep");
	c = r->p[r->i];
	if (c == '{')
		return object(r, depth, top);
	if (c == '[')
		return array(r, depth);
	if (c == '"') {
		bool esc, nul;

		return string(r, &esc, &nul);
	}
	if (c == '-' || isdigit_(c))
		return number(r);
	return literal(r);
}

static bool is_string_without_nul(const char *p, const struct member *m, bool *nul)
{
	struct reader r = { .p = p, .len = m->off + m->len, .i = m->off };
	bool esc;

	*nul = false;
	return p[m->off] == '"' && string(&r, &esc, nul) == 0 && !*nul;
}

int proto_call_parse(const char *p, size_t len, struct proto_call *c, struct nsbox_err *err)
{
	struct reader r = { .p = p, .len = len };
	struct top t = { 0 };
	bool obj = false, nul;
	int k;

	memset(c, 0, sizeof(*c));
	if (len >= ARENA)
		return err_set(err, EPROTO, "CALL payload of %zu bytes is too large", len);
	if (proto_payload_bounds(PROTO_CALL, p, len, err) < 0)
		return -1;
	ws(&r);
	if (more(&r) && (p[r.i] == '{' || p[r.i] == '[')) {
		obj = p[r.i] == '{';
		k = value(&r, 0, obj ? &t : NULL);
	} else {
		k = bad(&r, "'[' or '{' expected");
	}
	if (k == 0) {
		ws(&r);
		if (more(&r))
			k = bad(&r, "end of file expected");
	}
	free(r.keys);
	free(r.arena);
	if (k < 0)
		return err_set(err, r.oom ? ENOMEM : EPROTO, "CALL payload is not valid JSON: %s at byte %zu", r.why,
			       r.at);
	if (!obj)
		return err_set(err, EPROTO, "CALL payload is not a JSON object");
	/* The schema's checks, in proto_msg_check()'s order. */
	if (!t.name.seen)
		return err_set(err, EPROTO, "CALL: missing field name");
	if (!is_string_without_nul(p, &t.name, &nul))
		return err_set(err, EPROTO,
			       nul ? "CALL: field name holds U+0000" : "CALL: field name has the wrong type");
	if (!t.args.seen)
		return err_set(err, EPROTO, "CALL: missing field args");
	if (p[t.args.off] != '[')
		return err_set(err, EPROTO, "CALL: field args has the wrong type");
	if (!t.kwargs.seen)
		return err_set(err, EPROTO, "CALL: missing field kwargs");
	if (p[t.kwargs.off] != '{')
		return err_set(err, EPROTO, "CALL: field kwargs has the wrong type");
	/* The name, its escapes undone, as far as it fits. */
	if (t.name.len - 2 <= PROTO_TOOL_NAME_MAX) {
		size_t n = unescape(p, t.name.off + 1, t.name.off + t.name.len - 1, c->name);

		c->name[n] = '\0';
	} else {
		char *full = malloc(t.name.len);
		size_t n;

		if (!full)
			return err_set(err, ENOMEM, "CALL: out of memory");
		n = unescape(p, t.name.off + 1, t.name.off + t.name.len - 1, full);
		c->name_cut = n > PROTO_TOOL_NAME_MAX;
		if (c->name_cut)
			n = PROTO_TOOL_NAME_MAX;
		memcpy(c->name, full, n);
		c->name[n] = '\0';
		free(full);
	}
	c->args_off = t.args.off;
	c->args_len = t.args.len;
	c->kwargs_off = t.kwargs.off;
	c->kwargs_len = t.kwargs.len;
	return 0;
}
