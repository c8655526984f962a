/* base/error: the one error record, its copy across processes and the
 * wrapping helpers. */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "tap.h"

int main(void)
{
	struct nsbox_err e = { 0 }, d = { 0 }, raw;

	err_set(&e, ENOENT, "open %s", "/x");
	ok(e.code == ENOENT && !strcmp(e.msg, "open /x: No such file or directory"), "err_set appends strerror");
	err_step(&e, "mount");
	err_wrap(&e, "--bind %s", "/a:/b");
	ok(!strcmp(e.msg, "--bind /a:/b: open /x: No such file or directory") && !strcmp(e.step, "mount"),
	   "err_wrap prefixes, the step stays");
	err_fail(&e, "policy", EINVAL, "bad value %d", 3);
	ok(e.code == EINVAL && !strcmp(e.msg, "bad value 3") && !strcmp(e.step, "policy"),
	   "err_fail: code, no strerror suffix, step");
	err_prefix(&e, "f:3: ");
	ok(!strcmp(e.msg, "f:3: bad value 3"), "err_prefix puts the text in front as it is");
	ok(err_fail(NULL, "x", 1, "y") == -1 && err_prefix(NULL, "x") == -1, "NULL err is fine");

	/* A record from another process: nothing terminated. */
	memset(&raw, 'A', sizeof(raw));
	raw.code = EPERM;
	err_copy(&d, &raw);
	ok(d.code == EPERM && strlen(d.step) == sizeof(d.step) - 1 && strlen(d.msg) == sizeof(d.msg) - 1,
	   "err_copy bounds unterminated step and message");
	err_copy(&raw, &raw);
	ok(raw.step[sizeof(raw.step) - 1] == '\0' && raw.msg[sizeof(raw.msg) - 1] == '\0', "err_copy in place");
	err_copy(&d, &e);
	ok(d.code == EINVAL && !strcmp(d.step, "policy") && !strcmp(d.msg, e.msg), "err_copy keeps code, step, message");
	err_copy(&d, NULL);
	ok(d.code == 0 && !d.step[0] && !d.msg[0], "err_copy(NULL) clears");

	/* A long prefix keeps the front of the message. */
	char longp[2000];
	memset(longp, 'p', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	err_fail(&e, NULL, 0, "tail");
	err_prefix(&e, longp);
	ok(strlen(e.msg) == sizeof(e.msg) - 1 && e.msg[0] == 'p', "err_prefix truncates to fit");
	tap_done();
}
