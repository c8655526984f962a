/* What the files of lib/ share beyond include/nsbox.h. */
#ifndef NSBOX_API_PRIVATE_H
#define NSBOX_API_PRIVATE_H

#include "nsbox.h"

/* The error object behind nsbox_error_t: made by api.c and hostinfo.c,
 * freed by nsbox_error_free. */
struct nsbox_error {
	int code;	/* negative errno, one of libnsbox(3)'s ERRORS */
	char *msg;
	char step[48];	/* the setup step that failed, "" if none */
};

#endif
