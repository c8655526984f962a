/* Rich results in a RESULT: display bundles and /out files (proto.h,
 * nsbox-protocol(7), RICH RESULTS).  Pure.  What the sandbox sends here
 * later becomes file names and file contents on the host (nsbox python
 * --display-dir), so the names and sizes are judged strictly. */
#include "proto.h"

#include <errno.h>
#include <string.h>

static bool mime_char(char c, bool first)
{
	if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
		return true;
	return !first && c && strchr("!#$&^_.+-", c);
}

bool proto_mime_valid(const char *s)
{
	const char *slash;
	size_t n, a;

	if (!s || (n = strlen(s)) > PROTO_MIME_MAX || !(slash = strchr(s, '/')))
		return false;
	a = (size_t)(slash - s);
	if (a < 1 || a > 63 || n - a - 1 < 1 || n - a - 1 > 63)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (i == a)
			continue;
		if (!mime_char(s[i], i == 0 || i == a + 1))
			return false;
	}
	return true;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !strcmp(s + n - k, suffix);
}

bool proto_mime_text(const char *s)
{
	return !strncmp(s, "text/", 5) || !strcmp(s, "image/svg+xml") || !strcmp(s, "application/json") ||
	       !strcmp(s, "application/javascript") || !strcmp(s, "application/xml") || ends_with(s, "+json") ||
	       ends_with(s, "+xml");
}

bool proto_out_name_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	/* A leading '-' reads as an option where the host's user later runs
	 * a command on the directory's names (tar cf x.tar *, rm *). */
	if (!s || n < 1 || n > PROTO_OUT_NAME_MAX || !strcmp(s, ".") || !strcmp(s, "..") || strlen(s) != n ||
	    s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		if (u[i] < 0x20 || u[i] == 0x7f || u[i] == '/')
			return false;
		/* C1 controls U+0080..U+009F, the soft hyphen U+00AD */
		if (u[i] == 0xc2 && i + 1 < n && ((u[i + 1] >= 0x80 && u[i + 1] <= 0x9f) || u[i + 1] == 0xad))
			return false;
		/* the Arabic letter mark U+061C */
		if (u[i] == 0xd8 && i + 1 < n && u[i + 1] == 0x9c)
			return false;
		/* Invisible or reordering: U+200B..U+200F (zero widths, LRM,
		 * RLM), U+2028/U+2029 (line and paragraph separators),
		 * U+202A..U+202E and U+2066..U+2069 (bidi overrides and
		 * isolates), U+2060..U+2064 (word joiner, invisible operators),
		 * U+FEFF (zero-width no-break space): a name that shows as
		 * another where the host's user lists it, or reorders the line */
		if (u[i] == 0xe2 && i + 2 < n &&
		    ((u[i + 1] == 0x80 && ((u[i + 2] >= 0x8b && u[i + 2] <= 0x8f) || u[i + 2] == 0xa8 ||
					   u[i + 2] == 0xa9 || (u[i + 2] >= 0xaa && u[i + 2] <= 0xae))) ||
		     (u[i + 1] == 0x81 &&
		      ((u[i + 2] >= 0xa0 && u[i + 2] <= 0xa4) || (u[i + 2] >= 0xa6 && u[i + 2] <= 0xa9)))))
			return false;
		if (u[i] == 0xef && i + 2 < n && u[i + 1] == 0xbb && u[i + 2] == 0xbf)
			return false;
	}
	return proto_utf8_valid(s, n);
}

static int check_flag(const json_t *m, const char *key, struct nsbox_err *err)
{
	json_t *v = json_object_get(m, key);

	if (v && !json_is_boolean(v))
		return err_set(err, EPROTO, "RESULT: %s is not a boolean", key);
	return 0;
}

static int check_displays(const json_t *d, uint64_t *bytes, struct nsbox_err *err)
{
	size_t i;
	json_t *b;

	if (!json_is_array(d))
		return err_set(err, EPROTO, "RESULT: displays is not an array");
	if (json_array_size(d) > NSBOX_PROTO_DISPLAY_MAX)
		return err_set(err, EPROTO, "RESULT: %zu displays, over the cap of %u", json_array_size(d),
			       NSBOX_PROTO_DISPLAY_MAX);
	json_array_foreach(d, i, b)
	{
		const char *mime;
		size_t klen;
		json_t *v;

		if (!json_is_object(b) || !json_object_size(b))
			return err_set(err, EPROTO, "RESULT: displays[%zu] is not a non-empty object", i);
		if (json_object_size(b) > NSBOX_PROTO_DISPLAY_MIMES)
			return err_set(err, EPROTO, "RESULT: displays[%zu] has %zu MIME types, over the cap of %u", i,
				       json_object_size(b), NSBOX_PROTO_DISPLAY_MIMES);
		json_object_keylen_foreach(b, mime, klen, v)
		{
			size_t n;

			if (klen != strlen(mime) || !proto_mime_valid(mime))
				return err_set(err, EPROTO, "RESULT: displays[%zu] has an invalid MIME type name", i);
			if (!json_is_string(v))
				return err_set(err, EPROTO, "RESULT: displays[%zu][%s] is not a string", i, mime);
			n = json_string_length(v);
			if (!proto_mime_text(mime) && proto_b64_check(json_string_value(v), n) < 0)
				return err_set(err, EPROTO, "RESULT: displays[%zu][%s] is not valid base64", i, mime);
			if (proto_mime_text(mime) && strlen(json_string_value(v)) != n)
				return err_set(err, EPROTO, "RESULT: displays[%zu][%s] contains NUL", i, mime);
			*bytes += n;
		}
	}
	return 0;
}

static int check_files(const json_t *fl, uint64_t *bytes, struct nsbox_err *err)
{
	size_t i, j;
	json_t *f;

	if (!json_is_array(fl))
		return err_set(err, EPROTO, "RESULT: files is not an array");
	if (json_array_size(fl) > NSBOX_PROTO_OUT_FILES_MAX)
		return err_set(err, EPROTO, "RESULT: %zu files, over the cap of %u", json_array_size(fl),
			       NSBOX_PROTO_OUT_FILES_MAX);
	json_array_foreach(fl, i, f)
	{
		json_t *name = json_object_get(f, "name"), *size = json_object_get(f, "size");
		json_t *data = json_object_get(f, "data");
		long long dlen;

		if (!json_is_object(f) || !json_is_string(name) || !json_is_integer(size) ||
		    json_integer_value(size) < 0 || (data && !json_is_string(data)))
			return err_set(err, EPROTO,
				       "RESULT: files[%zu] needs a string name, a size >= 0 and string data", i);
		if (!proto_out_name_valid(json_string_value(name), json_string_length(name)))
			return err_set(err, EPROTO, "RESULT: files[%zu] has an invalid name", i);
		for (j = 0; j < i; j++)
			if (json_equal(json_object_get(json_array_get(fl, j), "name"), name))
				return err_set(err, EPROTO, "RESULT: files[%zu] repeats the name of files[%zu]", i, j);
		if (!data)
			continue;
		dlen = proto_b64_check(json_string_value(data), json_string_length(data));
		if (dlen < 0)
			return err_set(err, EPROTO, "RESULT: files[%zu].data is not valid base64", i);
		if (dlen != json_integer_value(size))
			return err_set(err, EPROTO, "RESULT: files[%zu].data holds %lld bytes, its size says %lld", i,
				       dlen, (long long)json_integer_value(size));
		*bytes += json_string_length(data);
	}
	return 0;
}

int proto_rich_check(const json_t *m, struct nsbox_err *err)
{
	json_t *d = json_object_get(m, "displays"), *fl = json_object_get(m, "files");
	uint64_t bytes = 0;

	if (check_flag(m, "displays_truncated", err) < 0 || check_flag(m, "files_truncated", err) < 0)
		return -1;
	if (d && check_displays(d, &bytes, err) < 0)
		return -1;
	if (fl && check_files(fl, &bytes, err) < 0)
		return -1;
	if (bytes > NSBOX_PROTO_RICH_BYTES)
		return err_set(err, EPROTO, "RESULT: %llu bytes of displays and files, over the cap of %u",
			       (unsigned long long)bytes, NSBOX_PROTO_RICH_BYTES);
	return 0;
}
