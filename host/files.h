/* Session file operations: the host's half of FILE_WRITE, FILE_READ and
 * FILE_LIST (nsbox-protocol(7), FILES).
 *
 * The work is done by the runner inside the sandbox, as the sandbox's user
 * and in its mount namespace; the host never opens a path the sandbox
 * controls, so symlinks, fifos or renamed entries planted inside can only
 * change what the sandbox itself sees.  Everything the runner answers is
 * checked like any frame from inside: sizes against the caller's cap,
 * base64 strictly, errno values to a known range. */
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
/* Entries per FILE_LIST answer. */
#define SESSION_LIST_MAX 100000

/* One control request answered by VALUE (session.c).  msg is consumed. */
int session_request(struct nsbox_session *s, uint16_t type, json_t *msg, json_t **answer, struct nsbox_err *err);
uint32_t session_max_frame(const struct nsbox_session *s);

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

#endif
