/* Session file operations: the host's half of FILE_WRITE, FILE_READ and
 * FILE_LIST (nsbox-protocol(7), FILES).
 *
 * The work is done by the runner inside the sandbox, as the sandbox's user
 * and in its mount namespace; the host never opens a path the sandbox
 * controls, so symlinks, fifos or renamed entries planted inside can only
 * change what the sandbox itself sees.  Everything the runner answers is
 * checked like any frame from inside: sizes against the caller's cap (raw
 * data never past what was asked for, base64 strictly), errno values to a
 * known range. */
#ifndef NSBOX_FILES_H
#define NSBOX_FILES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

struct nsbox_session;

/* Default cap on one file per call (read or write): 64 MiB. */
#define SESSION_FILE_MAX_DEFAULT (64ull << 20)
/* Bytes of file data per FILE_WRITE / FILE_READ frame (before base64). */
#define SESSION_FILE_CHUNK (4u << 20)
/* The same as raw data (PROTO_FLAG_DATA, capability "files-binary"): the
 * runner reads at most 8 MiB per FILE_READ. */
#define SESSION_FILE_CHUNK_RAW (8u << 20)
/* Entries per FILE_LIST answer. */
/* Entries one FILE_LIST asks for: what the host's parse budget
 * (NSBOX_PROTO_COST_*) takes at the shortest names (about 840 bytes of
 * parse per 37 bytes of text: ~67000), with room. */
#define SESSION_LIST_MAX 50000

/* One control request answered by VALUE (session.c).  msg is consumed. */
int session_request(struct nsbox_session *s, uint16_t type, json_t *msg, json_t **answer, struct nsbox_err *err);
/* The same with raw data: data[0..dlen) sent after msg (NULL: none), and
 * the answer's raw data copied to rbuf (NULL: none may come; at most rcap
 * bytes, else a protocol error), its size in *rlen. */
/* The same with fd passed to the runner along with the request
 * (SCM_RIGHTS, capability "files-fd"): a memfd the host made. */
int session_request_fd(struct nsbox_session *s, uint16_t type, json_t *msg, int fd, json_t **answer,
		       struct nsbox_err *err);
int session_request_data(struct nsbox_session *s, uint16_t type, json_t *msg, const void *data, size_t dlen,
			 json_t **answer, void *rbuf, size_t rcap, size_t *rlen, struct nsbox_err *err);
uint32_t session_max_frame(const struct nsbox_session *s);
/* A deadline over the requests that follow, for an operation of many
 * (download_dir, upload_dir): seconds from now, 0 to clear.  A request
 * past it ends the session as one the runner did not answer in time. */
void session_op_deadline(struct nsbox_session *s, double seconds, const char *what);
/* An API call of one or more requests (a file call, a chunked read, a
 * tree, set_var...): a cancel asked for before it is dropped now, and one
 * during it ends the request under way (nsbox_cancel), whichever it is. */
void session_call_begin(struct nsbox_session *s);
void session_call_end(struct nsbox_session *s);
/* The session's control timeout, in seconds. */
double session_control_timeout(const struct nsbox_session *s);
/* A tree operation's deadline in all: this many control timeouts (30 s
 * each by default: 10 minutes).  A runner that answered every request just
 * inside the control timeout held the host ~29 s per entry, days at the
 * 100000 entries max_files allows. */
#define SESSION_TREE_TIMEOUTS 20

/* Write data[0..len) to path inside (created with mode, or truncated;
 * mode < 0: 0644), in chunks.  Errors carry the runner's errno (ENOENT,
 * EISDIR, EINVAL not a regular file, EFBIG, ENOSPC, EDQUOT, EACCES, ...). */
int session_file_write(struct nsbox_session *s, const char *path, const void *data, size_t len, int mode,
		       struct nsbox_err *err);
/* Read path inside: at most max bytes (0: SESSION_FILE_MAX_DEFAULT), else
 * EFBIG.  On success *data (malloc'd, NUL-terminated past *len) and *len. */
int session_file_read(struct nsbox_session *s, const char *path, uint64_t max, char **data, size_t *len,
		      struct nsbox_err *err);
/* List directory path inside: *out a new reference to the answer's value,
 * {"entries": [{"name", "type", "size"}...], "truncated": bool}. */
int session_file_list(struct nsbox_session *s, const char *path, json_t **out, struct nsbox_err *err);
/* Make directory path inside (and its parents). */
int session_file_mkdir(struct nsbox_session *s, const char *path, int mode, struct nsbox_err *err);

/* Directories, the host's end (libnsbox(3) nsbox_download_dir,
 * nsbox_upload_dir).  At most SESSION_DIR_MAX_DEPTH levels (ELOOP). */
#define SESSION_DIR_MAX_DEPTH 64

/* Copy directory remote inside into the host directory local (made if
 * missing, its parents not).  Every name the sandbox listed is checked
 * (one component, no "." or "..", no control characters, UTF-8); host
 * entries are made beneath local with mkdirat and openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) O_CREAT | O_EXCL |
 * O_NOFOLLOW: nothing is overwritten (EEXIST) or followed.  Regular files
 * and directories only; an entry swapped for something else meanwhile is
 * skipped.  Caps: max_bytes in all, max_files entries (every entry
 * listed, copied or not, counted as each listing is read: the host parses
 * at most that many and one listing past them, holds at most that many
 * names and one parsed listing at a time), file_max per file (EFBIG).  *files: the files
 * copied. */
int session_download_dir(struct nsbox_session *s, const char *remote, const char *local, uint64_t max_bytes,
			 uint64_t max_files, uint64_t file_max, uint64_t *files, struct nsbox_err *err);
/* Copy the host directory local to remote inside (made, with parents):
 * regular files (at most file_max bytes each, EFBIG) and directories, each
 * opened with O_NOFOLLOW beneath its parent; symlinks and special files
 * are skipped, never followed.  *files: the files copied. */
int session_upload_dir(struct nsbox_session *s, const char *local, const char *remote, uint64_t file_max,
		       uint64_t *files, struct nsbox_err *err);

#endif
