/* The seccomp filters compiled at build time (scripts/gen-seccomp.c). */
#ifndef NSBOX_SECCOMP_PREBUILT_H
#define NSBOX_SECCOMP_PREBUILT_H

#include "policy.h"
#include "seccomp-rules.h"

/* Point *out at the precompiled program for this mode.  The instructions
 * are static: never pass *out to seccomp_prog_free(). */
void seccomp_prog_prebuilt(enum policy_seccomp mode, struct seccomp_prog *out);

#endif
