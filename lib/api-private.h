/* What the files of lib/ share beyond include/nsbox.h. */
#ifndef NSBOX_API_PRIVATE_H
#define NSBOX_API_PRIVATE_H

#include "nsbox.h"

/* The error object behind nsbox_error_t: api.c defines it with this very
 * layout and frees it (nsbox_error_free); hostinfo.c makes them too.
 * api.c should include this header instead of repeating the definition. */
struct nsbox_error {
	int code;	/* negative errno */
	char *msg;
};

#endif
