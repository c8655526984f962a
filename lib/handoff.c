/* Handing a session's runner socket to another process (include/nsbox.h,
 * "handing a sandbox over"): what nsboxd(8) does for its clients.  The
 * session object keeps the sandbox's lifecycle (kill, end, info, free). */
#include "nsbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "api-internal.h"
#include "error.h"
#include "jail.h"
#include "session.h"

static int fail_h(nsbox_error_t **err, int code, const char *what, const char *msg)
{
	char buf[NSBOX_ERR_MSG_MAX];

	snprintf(buf, sizeof(buf), "%s: %s", what, msg);
	return api_fail(err, code, buf);
}

int nsbox_session_handoff(nsbox_session_t *s, int *runner_fd, int *pidfd, char **hello_json, nsbox_error_t **err)
{
	struct nsbox_session *c = api_core_session(s);
	struct nsbox_err e = { 0 };
	char *hello;
	int fd, pfd;

	if (!c || !runner_fd || !pidfd || !hello_json)
		return fail_h(err, -EINVAL, "nsbox_session_handoff", "NULL argument");
	if (api_session_owner(s) != getpid())
		return fail_h(err, -ENOTCONN, "nsbox_session_handoff", "the session belongs to the parent process");
	hello = json_dumps(session_hello(c), JSON_COMPACT);
	if (!hello)
		return fail_h(err, -ENOMEM, "nsbox_session_handoff", "out of memory");
	if (session_handoff(c, &fd, &pfd, &e) < 0) {
		free(hello);
		return fail_h(err, e.code == EPIPE ? -ENOTCONN : e.code ? -e.code : -EIO, "nsbox_session_handoff",
			      e.msg);
	}
	*runner_fd = fd;
	*pidfd = pfd;
	*hello_json = hello;
	return 0;
}

void nsbox_session_kill(nsbox_session_t *s)
{
	session_kill(api_core_session(s));
}

int nsbox_session_end(nsbox_session_t *s, bool kill, struct nsbox_run_status *st, nsbox_error_t **err)
{
	struct nsbox_session *c = api_core_session(s);
	struct nsbox_run_status out;
	struct jail_status js;
	size_t n;

	if (!c || !st || st->struct_size < sizeof(size_t))
		return fail_h(err, -EINVAL, "nsbox_session_end", "NULL session, or st->struct_size not set");
	if (api_session_owner(s) != getpid())
		return fail_h(err, -ENOTCONN, "nsbox_session_end", "the session belongs to the parent process");
	n = st->struct_size;
	session_finish(c, kill, &js);
	api_run_status(&out, n, &js);
	memcpy(st, &out, out.struct_size);
	return 0;
}
