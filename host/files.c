/* Session file operations over the runner protocol: see files.h. */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto.h"
#include "session.h"
#include "util.h"

static bool runner_has(const struct nsbox_session *s, const char *cap)
{
	const json_t *h = session_hello(s);
	json_t *c = json_object_get(h, "capabilities"), *e;
	size_t i;

	json_array_foreach(c, i, e)
		if (json_is_string(e) && !strcmp(json_string_value(e), cap))
			return true;
	return false;
}

static bool runner_has_files(const struct nsbox_session *s)
{
	return runner_has(s, "files");
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

/* One FILE_* request: data (NULL: none) sent raw after msg; the answer's
 * raw data (at most rcap bytes) to rbuf. */
static int request_data(struct nsbox_session *s, uint16_t type, json_t *msg, const void *data, size_t dlen,
			int pass_fd, void *rbuf, size_t rcap, size_t *rlen, const char *op, const char *path,
			json_t **value, struct nsbox_err *err)
{
	json_t *a = NULL;

	if (!msg)
		return err_set(err, ENOMEM, "%s %s", op, path);
	if (!runner_has_files(s)) {
		json_decref(msg);
		return err_set(err, ENOTSUP, "%s %s: the runner does not do file operations", op, path);
	}
	if ((pass_fd >= 0 ? session_request_fd(s, type, msg, pass_fd, &a, err)
			  : session_request_data(s, type, msg, data, dlen, &a, rbuf, rcap, rlen, err)) < 0)
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

static int request(struct nsbox_session *s, uint16_t type, json_t *msg, const char *op, const char *path,
		   json_t **value, struct nsbox_err *err)
{
	return request_data(s, type, msg, NULL, 0, -1, NULL, 0, NULL, op, path, value, err);
}

/* Raw bytes per data frame: the chunk, or less under a low frame cap. */
static size_t raw_chunk(const struct nsbox_session *s)
{
	uint32_t mf = session_max_frame(s);
	size_t room = mf > 8192 ? mf - 4096 : 4096;

	return room < SESSION_FILE_CHUNK_RAW ? room : SESSION_FILE_CHUNK_RAW;
}

static int write_raw(struct nsbox_session *s, const char *path, const void *data, size_t len, int mode,
		     struct nsbox_err *err)
{
	size_t chunk = raw_chunk(s), off = 0;

	do {
		size_t n = len - off < chunk ? len - off : chunk;
		json_t *v = NULL;

		if (request_data(s, PROTO_FILE_WRITE,
				 json_pack("{s:s,s:I,s:i,s:b}", "path", path, "offset", (json_int_t)off, "mode", mode,
					   "truncate", off == 0),
				 (const char *)data + off, n, -1, NULL, 0, NULL, "write", path, &v, err) < 0)
			return -1;
		json_decref(v);
		off += n;
	} while (off < len);
	return 0;
}

/* Files from this size on cross in a memfd (capability "files-fd"): one
 * request, the runner copying in the kernel (sendfile), no chunks through
 * the socket.  Below it data frames cost less than making a memfd. */
#define FILE_FD_MIN (256u << 10)

static int new_memfd(const char *op, const char *path, struct nsbox_err *err)
{
	int fd = memfd_create("nsbox-file", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		err_sys(err, "%s %s: memfd_create", op, path);
	return fd;
}

/* The host's own memfd, filled and sealed, goes to the runner, which
 * copies it into path: the sandbox gets nothing of the host's but those
 * bytes (the seals keep it from changing them under the copy). */
static int write_fd(struct nsbox_session *s, const char *path, const void *data, size_t len, int mode,
		    struct nsbox_err *err)
{
	_cleanup_close_ int fd = new_memfd("write", path, err);
	json_t *v = NULL, *size;
	int r;

	if (fd < 0)
		return -1;
	if (write_full(fd, data, len) != (ssize_t)len)
		return err_sys(err, "write %s: fill the memfd", path);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return err_sys(err, "write %s: seal the memfd", path);
	if (request_data(s, PROTO_FILE_WRITE,
			 json_pack("{s:s,s:i,s:b,s:b,s:I}", "path", path, "mode", mode, "truncate", 1, "fd", 1, "length",
				   (json_int_t)len),
			 NULL, 0, fd, NULL, 0, NULL, "write", path, &v, err) < 0)
		return -1;
	size = json_object_get(v, "size");
	r = json_is_integer(size) && json_integer_value(size) == (json_int_t)len
		    ? 0
		    : err_set(err, EIO, "write %s: the runner wrote %lld of %zu bytes", path,
			      (long long)json_integer_value(size), len);
	json_decref(v);
	return r;
}

/* The runner copies path into a memfd the host made: the host reads at
 * most max + 1 bytes of it, whatever the sandbox does to it meanwhile
 * (it has the descriptor too), and its pages were charged to whoever
 * wrote them: the sandbox. */
static int read_fd(struct nsbox_session *s, const char *path, uint64_t max, char **data, size_t *len,
		   struct nsbox_err *err)
{
	_cleanup_close_ int fd = new_memfd("read", path, err);
	_cleanup_free_ char *buf = NULL;
	json_t *v = NULL;
	json_int_t got;
	struct stat st;

	if (fd < 0)
		return -1;
	if (request_data(s, PROTO_FILE_READ,
			 json_pack("{s:s,s:I,s:I,s:b}", "path", path, "offset", (json_int_t)0, "length",
				   (json_int_t)(max + 1), "fd", 1),
			 NULL, 0, fd, NULL, 0, NULL, "read", path, &v, err) < 0)
		return -1;
	got = json_integer_value(json_object_get(v, "length"));
	json_decref(v);
	if (fstat(fd, &st) < 0)
		return err_sys(err, "read %s: stat the memfd", path);
	if ((uint64_t)st.st_size > max || got < 0 || (uint64_t)got > max)
		return err_set(err, EFBIG, "read %s: larger than the cap of %llu bytes", path,
			       (unsigned long long)max);
	if (got != st.st_size)
		return err_set(err, EPROTO, "read %s: the runner says %lld bytes, its memfd holds %lld", path,
			       (long long)got, (long long)st.st_size);
	buf = malloc((size_t)got + 1);
	if (!buf)
		return err_set(err, ENOMEM, "read %s", path);
	if (got && pread(fd, buf, (size_t)got, 0) != (ssize_t)got)
		return err_set(err, EPROTO, "read %s: the memfd changed under the read", path);
	buf[got] = '\0';
	*data = TAKE_PTR(buf);
	*len = (size_t)got;
	return 0;
}

/* Read with data frames into one buffer, sized from the file's size in the
 * first answer (never past max + 1): each chunk is copied once, from the
 * frame into place. */
static int read_raw(struct nsbox_session *s, const char *path, uint64_t max, char **data, size_t *len,
		    struct nsbox_err *err)
{
	size_t chunk = raw_chunk(s), have = 0, cap = 0;
	_cleanup_free_ char *buf = NULL;

	for (;;) {
		uint64_t want = max + 1 - have < chunk ? max + 1 - have : chunk;
		json_t *v = NULL;
		json_int_t size, got;
		size_t n = 0;
		bool eof;

		if (have + want + 1 > cap) {
			size_t ncap = have + want + 1;
			char *nb = realloc(buf, ncap);

			if (!nb)
				return err_set(err, ENOMEM, "read %s", path);
			buf = nb;
			cap = ncap;
		}
		if (request_data(s, PROTO_FILE_READ,
				 json_pack("{s:s,s:I,s:I,s:b}", "path", path, "offset", (json_int_t)have, "length",
					   (json_int_t)want, "binary", 1),
				 NULL, 0, -1, buf + have, (size_t)want, &n, "read", path, &v, err) < 0)
			return -1;
		eof = json_is_true(json_object_get(v, "eof"));
		size = json_integer_value(json_object_get(v, "size"));
		got = json_integer_value(json_object_get(v, "length"));
		json_decref(v);
		if (got < 0 || (uint64_t)got != n)
			return err_set(err, EPROTO, "read %s: the runner's length does not match its data", path);
		have += n;
		if (have > max)
			return err_set(err, EFBIG, "read %s: larger than the cap of %llu bytes", path,
				       (unsigned long long)max);
		if (eof || n == 0)
			break;
		/* The file's size, as the runner saw it, sizes the buffer
		 * once (within the cap: it is the sandbox's word). */
		if (size > 0 && (uint64_t)size > have && cap < (uint64_t)size + 1 && (uint64_t)size <= max) {
			char *nb = realloc(buf, (size_t)size + 1);

			if (nb) {
				buf = nb;
				cap = (size_t)size + 1;
			}
		}
	}
	if (!buf && !(buf = malloc(1)))
		return err_set(err, ENOMEM, "read %s", path);
	buf[have] = '\0';
	*data = TAKE_PTR(buf);
	*len = have;
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
	if (len >= FILE_FD_MIN && runner_has(s, "files-fd"))
		return write_fd(s, path, data, len, mode, err);
	if (runner_has(s, "files-binary"))
		return write_raw(s, path, data, len, mode, err);
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
	if (runner_has(s, "files-fd"))
		return read_fd(s, path, max, data, len, err);
	if (runner_has(s, "files-binary"))
		return read_raw(s, path, max, data, len, err);
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
