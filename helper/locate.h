/* Where the runner binary is, and a copy of it that cannot be written back
 * to: used by the helper's client (to start the helper, which is the
 * runner binary in its helper role) and by sessions started without the
 * helper. */
#ifndef NSBOX_LOCATE_H
#define NSBOX_LOCATE_H

#include <stddef.h>

#include "error.h"

/* The runner binary to use: $NSBOX_RUNNER, next to /proc/self/exe, next to
 * libnsbox.so, then NSBOX_LIBEXECDIR.  A path in buf; 0 or -1 with err. */
int runner_locate(char *buf, size_t size, struct nsbox_err *err);
/* A sealed, read-only memfd copy of the file at path (owned by the
 * caller): what runs from it can never write back to the binary the host
 * executes (runc CVE-2019-5736).  Returns the fd or -1 with err. */
int runner_sealed_copy(const char *path, struct nsbox_err *err);

#endif
