/* Loading the compiled seccomp filter in the sandbox's child.
 *
 * The build puts jail/ on the include path, so this file shadows
 * libseccomp's <seccomp.h>.  It therefore also pulls that header in: code
 * that includes <seccomp.h> gets libseccomp's API as it expects. */
#ifdef __clang__
/* Found through "seccomp.h" from jail/: the search restarting at the top
 * of the include path is what we want (it reaches this file once more and
 * then libseccomp's). */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winclude-next-absolute-path"
#endif
#include_next <seccomp.h>
#ifdef __clang__
#pragma clang diagnostic pop
#endif

#ifndef NSBOX_JAIL_SECCOMP_H
#define NSBOX_JAIL_SECCOMP_H

#include "error.h"
#include "seccomp-rules.h"

/* Set no_new_privs and install prog as this thread's seccomp filter.  The
 * last setup step before exec: afterwards only the allowlist is reachable.
 * Allocates nothing (safe after fork of a single-threaded parent).  prog is
 * borrowed.  Returns 0, or -1 with err set (step "seccomp"). */
int seccomp_apply(const struct seccomp_prog *prog, struct nsbox_err *err);

#endif
