/* Session file operations over the runner protocol: see files.h. */
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostpath.h"
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
 * kernel's range becomes EIO.  Its message is the sandbox's text: quoted
 * inert (proto_text_inert), as it lands in the host's own error message. */
static int answer_error(const json_t *a, const char *op, const char *path, struct nsbox_err *err)
{
	json_t *e = json_object_get(a, "error");
	json_int_t no;
	const char *msg;
	char quoted[401];

	if (!json_is_object(e))
		return 0;
	no = json_integer_value(json_object_get(e, "errno"));
	if (no <= 0 || no > 4095)
		no = EIO;
	msg = json_string_value(json_object_get(e, "message"));
	if (!msg || !strcmp(msg, strerror((int)no)))
		return err_set(err, (int)no, "%s %s", op, path);
	return err_set(err, (int)no, "%s %s (%s)", op, path, proto_text_inert(msg, quoted, sizeof(quoted)));
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
 * bytes (the seals keep it from changing them under the copy).  Its pages
 * are the host's (charged to the host's memory cgroup, not the sandbox's),
 * and the sandbox's code can keep a copy of the descriptor: so it is not
 * sealed against shrinking, and emptied once the request is over,
 * whatever the outcome.  A sandbox that shrinks it under the copy only
 * makes its own file short (the runner's count says so); kept, the pages
 * stayed with the sandbox until it ended: 40 writes of 50 MiB held 2 GiB
 * of the host's memory beside a 128M sandbox. */
static void memfd_empty(int *fd)
{
	if (*fd >= 0) {
		(void)ftruncate(*fd, 0);
		close(*fd);
	}
}

static int write_fd(struct nsbox_session *s, const char *path, const void *data, size_t len, int mode,
		    struct nsbox_err *err)
{
	__attribute__((cleanup(memfd_empty))) int fd = new_memfd("write", path, err);
	json_t *v = NULL, *size;
	int r;

	if (fd < 0)
		return -1;
	if (write_full(fd, data, len) != (ssize_t)len)
		return err_sys(err, "write %s: fill the memfd", path);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
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
		json_t *name = json_object_get(e, "name"), *type = json_object_get(e, "type");

		/* name and type are used as C strings: no U+0000 in them. */
		if (!json_is_object(e) || !json_is_string(name) || !json_is_string(type) ||
		    strlen(json_string_value(name)) != json_string_length(name) ||
		    strlen(json_string_value(type)) != json_string_length(type) ||
		    !json_is_integer(json_object_get(e, "size"))) {
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

/* ---- directories ---- */


/* Open or create name beneath dirfd, never through a symlink (a host
 * directory shared with a sandbox may hold its links). */
static int open_beneath(int dirfd, const char *name, int flags, mode_t mode)
{
	struct open_how how = { .flags = (unsigned long long)(flags | O_NOFOLLOW | O_CLOEXEC),
				.mode = (flags & O_CREAT) ? mode : 0,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };

	return (int)syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
}

static int join(char *out, size_t size, const char *dir, const char *name, struct nsbox_err *err)
{
	size_t dl = strlen(dir);
	int n = snprintf(out, size, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", name);

	if (n < 0 || (size_t)n >= size)
		return err_set(err, ENAMETOOLONG, "%s/%s: path too long", dir, name);
	return 0;
}

struct dl_state {
	/* left: of max_bytes, which counts the host's disk (block_charge):
	 * 20,000 directories and 1-byte files under max_bytes 1 MiB took
	 * 146 MB of ext4 when only their bytes counted. */
	uint64_t max_bytes, left, block;
	/* listed: entries read from listings so far, each counted against
	 * max_files as its listing is read, not as it is copied: the entries
	 * of every directory on the way down wait, in the host's memory, for
	 * their subdirectories to be copied.  Counted as they were copied, a
	 * listing that names one subdirectory first and 50,000 entries after
	 * it held 64 listings (the depth cap) at once: 2.8 GiB of the host's
	 * memory for 64 entries copied. */
	uint64_t listed, max_files, files, file_max;
};

/* An entry of a listing to copy: a name checked, and whether a directory. */
struct dl_ent {
	char *name;
	bool dir;
};

static void dl_ents_free(struct dl_ent *ents, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
}

/* remote's listing, reduced to the entries to copy (names checked,
 * directories and regular files), at most what is left of max_files:
 * *over when it had more.  The parsed listing is freed here, before
 * anything below it is listed. */
static int dl_list(struct nsbox_session *s, const char *remote, struct dl_state *st, struct dl_ent **out, size_t *n,
		   bool *over, struct nsbox_err *err)
{
	json_t *v = NULL, *ents, *e;
	struct dl_ent *d;
	size_t i, k = 0;

	*over = false;
	if (session_file_list(s, remote, &v, err) < 0)
		return -1;
	if (json_is_true(json_object_get(v, "truncated"))) {
		json_decref(v);
		return err_set(err, EFBIG, "download %s: more than %d entries in one directory", remote,
			       SESSION_LIST_MAX);
	}
	ents = json_object_get(v, "entries");
	d = calloc(json_array_size(ents) + 1, sizeof(*d));
	if (!d) {
		json_decref(v);
		return err_set(err, ENOMEM, "download %s", remote);
	}
	json_array_foreach(ents, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *type = json_string_value(json_object_get(e, "type"));

		/* Every entry listed counts, copied or not: the host parsed it.
		 * (Counting only directories and files, listings of a few
		 * directories each and 49,990 fifos made the host parse 50,000
		 * entries per directory counted: five billion under the default
		 * max_files.) */
		if (st->listed >= st->max_files) {
			*over = true;
			break;
		}
		st->listed++;
		/* Names come from the sandbox: one component, nothing more. */
		if (!name || json_object_get(e, "name_hex") || !proto_out_name_valid(name, strlen(name)) || !type)
			continue;
		if (strcmp(type, "dir") && strcmp(type, "file"))
			continue;	/* symlinks, fifos, devices: not copied */
		d[k].dir = !strcmp(type, "dir");
		if (!(d[k].name = strdup(name))) {
			json_decref(v);
			dl_ents_free(d, k);
			return err_set(err, ENOMEM, "download %s", remote);
		}
		k++;
	}
	json_decref(v);
	*out = d;
	*n = k;
	return 0;
}

static int download(struct nsbox_session *s, const char *remote, int dirfd, int depth, struct dl_state *st,
		    struct nsbox_err *err)
{
	struct dl_ent *ents = NULL;
	size_t n = 0;
	bool over;
	int r = 0;

	if (depth > SESSION_DIR_MAX_DEPTH)
		return err_set(err, ELOOP, "download %s: deeper than %d levels", remote, SESSION_DIR_MAX_DEPTH);
	if (dl_list(s, remote, st, &ents, &n, &over, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const char *name = ents[i].name;
		char src[4096];

		if ((r = join(src, sizeof(src), remote, name, err)) < 0)
			break;
		if (ents[i].dir) {
			int sub;

			if (block_charge(&st->left, 0, st->block) < 0) {
				r = err_set(err, EFBIG, "download: more than %llu bytes in all (a directory counts as a "
					    "block of the host's file system)", (unsigned long long)st->max_bytes);
				break;
			}
			if (mkdirat(dirfd, name, 0700) < 0) {
				r = err_sys(err, "download %s: mkdir %s on the host", src, name);
				break;
			}
			sub = open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
			if (sub < 0) {
				r = err_sys(err, "download %s: open %s on the host", src, name);
				break;
			}
			r = download(s, src, sub, depth + 1, st, err);
			close(sub);
			if (r < 0)
				break;
		} else {
			uint64_t left = st->left;
			_cleanup_free_ char *data = NULL;
			_cleanup_close_ int fd = -1;
			size_t len = 0;

			if (!left) {
				r = err_set(err, EFBIG, "download: more than %llu bytes in all",
					    (unsigned long long)st->max_bytes);
				break;
			}
			if (session_file_read(s, src, left < st->file_max ? left : st->file_max, &data, &len, err) < 0) {
				/* swapped for something else meanwhile: not a file now */
				if (err->code == EINVAL || err->code == EISDIR || err->code == ENOENT || err->code == ELOOP)
					continue;
				r = -1;
				break;
			}
			if (len && block_charge(&st->left, len, st->block) < 0) {
				r = err_set(err, EFBIG, "download: more than %llu bytes in all (each file counts in whole "
					    "blocks of the host's file system)", (unsigned long long)st->max_bytes);
				break;
			}
			fd = open_beneath(dirfd, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
			if (fd < 0 || write_full(fd, data, len) != (ssize_t)len) {
				r = err_sys(err, "download %s: create %s on the host", src, name);
				break;
			}
			st->files++;
		}
	}
	/* The entries past max_files: after those that fit were copied, as
	 * when they were counted one by one. */
	if (r == 0 && over)
		r = err_set(err, EFBIG, "download %s: more than %llu entries", remote, (unsigned long long)st->max_files);
	dl_ents_free(ents, n);
	return r;
}

int session_download_dir(struct nsbox_session *s, const char *remote, const char *local, uint64_t max_bytes,
			 uint64_t max_files, uint64_t file_max, uint64_t *files, struct nsbox_err *err)
{
	struct dl_state st = { .left = max_bytes, .max_bytes = max_bytes, .max_files = max_files, .file_max = file_max };
	_cleanup_close_ int root = -1;
	int r;

	/* No link followed on the way to local either (hostpath.h): it may
	 * sit in a directory the sandbox wrote, and a link planted there
	 * would have the sandbox's files created wherever it points. */
	root = host_path_mkdir_open(local, 0755);
	if (root < 0 && errno == ELOOP)
		return err_set(err, ELOOP, "download %s: %s: " HOST_PATH_LINK_HINT, remote, local);
	if (root < 0)
		return err_sys(err, "download %s: make or open %s", remote, local);
	st.block = fs_block_size(root);
	session_op_deadline(s, session_control_timeout(s) * SESSION_TREE_TIMEOUTS, "download_dir");
	r = download(s, remote, root, 0, &st, err);
	session_op_deadline(s, 0, NULL);
	if (r < 0)
		return -1;
	*files = st.files;
	return 0;
}

static int upload(struct nsbox_session *s, int dirfd, const char *local, const char *remote, int depth,
		  uint64_t file_max, uint64_t *files, struct nsbox_err *err)
{
	_cleanup_close_ int dfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (depth > SESSION_DIR_MAX_DEPTH)
		return err_set(err, ELOOP, "upload %s: deeper than %d levels", local, SESSION_DIR_MAX_DEPTH);
	if (dfd < 0 || !(d = fdopendir(dfd)))
		return err_sys(err, "upload %s", local);
	dfd = -1;	/* d's now */
	while (r == 0 && (errno = 0, de = readdir(d))) {
		char dst[4096], src[4096];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			r = err_sys(err, "upload %s/%s", local, de->d_name);
			break;
		}
		if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
			continue;	/* symlinks, fifos, devices: not followed, not copied */
		if (!proto_utf8_valid(de->d_name, strlen(de->d_name))) {
			r = err_set(err, EINVAL, "upload %s: a name that is not UTF-8", local);
			break;
		}
		if ((r = join(dst, sizeof(dst), remote, de->d_name, err)) < 0 ||
		    (r = join(src, sizeof(src), local, de->d_name, err)) < 0)
			break;
		if (S_ISDIR(st.st_mode)) {
			_cleanup_close_ int sub = open_beneath(dirfd, de->d_name, O_RDONLY | O_DIRECTORY, 0);

			if (sub < 0) {
				r = err_sys(err, "upload %s", src);
				break;
			}
			if ((r = session_file_mkdir(s, dst, (int)(st.st_mode & 07777) | 0700, err)) < 0 ||
			    (r = upload(s, sub, src, dst, depth + 1, file_max, files, err)) < 0)
				break;
		} else {
			_cleanup_close_ int fd = open_beneath(dirfd, de->d_name, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
			_cleanup_free_ char *data = NULL;
			struct stat fst;

			if (fd < 0 || fstat(fd, &fst) < 0) {
				r = err_sys(err, "upload %s", src);
				break;
			}
			if (!S_ISREG(fst.st_mode))
				continue;	/* swapped meanwhile */
			if ((uint64_t)fst.st_size > file_max) {
				r = err_set(err, EFBIG, "upload %s: larger than the cap of %llu bytes", src,
					    (unsigned long long)file_max);
				break;
			}
			data = malloc((size_t)fst.st_size + 1);
			if (!data) {
				r = err_set(err, ENOMEM, "upload %s", src);
				break;
			}
			if (read_full(fd, data, (size_t)fst.st_size) != (ssize_t)fst.st_size) {
				r = err_set(err, errno ? errno : EIO, "upload %s: read (changed meanwhile?)", src);
				break;
			}
			if ((r = session_file_write(s, dst, data, (size_t)fst.st_size, (int)(fst.st_mode & 07777),
						    err)) < 0)
				break;
			++*files;
		}
	}
	if (r == 0 && errno)
		r = err_sys(err, "upload %s: read the directory", local);
	closedir(d);
	return r;
}

int session_upload_dir(struct nsbox_session *s, const char *local, const char *remote, uint64_t file_max,
		       uint64_t *files, struct nsbox_err *err)
{
	/* Nor here: a planted link would hand the sandbox the host tree it
	 * names. */
	_cleanup_close_ int root = host_path_open(local, O_RDONLY | O_DIRECTORY, 0);
	uint64_t n = 0;

	if (root < 0 && errno == ELOOP)
		return err_set(err, ELOOP, "upload %s: " HOST_PATH_LINK_HINT, local);
	if (root < 0)
		return err_sys(err, "upload %s", local);
	session_op_deadline(s, session_control_timeout(s) * SESSION_TREE_TIMEOUTS, "upload_dir");
	if (session_file_mkdir(s, remote, -1, err) < 0 || upload(s, root, local, remote, 0, file_max, &n, err) < 0) {
		session_op_deadline(s, 0, NULL);
		return -1;
	}
	session_op_deadline(s, 0, NULL);
	*files = n;
	return 0;
}
