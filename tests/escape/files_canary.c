/* Read, overwrite and delete a host file in the host's /tmp by its path.
 * argv[1]: the canary's host path. */
#include "escape.h"

int main(int argc, char **argv)
{
	char p[4096];

	if (argc < 2)
		ESCAPED("usage: files_canary PATH (test bug)");
	must_not_open(argv[1], O_RDONLY);
	must_not_open(argv[1], O_WRONLY | O_TRUNC);
	must_fail("unlink canary", unlink(argv[1]));
	must_fail("truncate canary", truncate(argv[1], 0));
	snprintf(p, sizeof(p), "/proc/self/root%s", argv[1]);
	must_not_open(p, O_RDONLY);
	snprintf(p, sizeof(p), "/dev/fd/../../..%s", argv[1]);
	must_not_open(p, O_RDONLY);
	BLOCKED("the host canary is out of reach by path");
}
