/* Minimal TAP for the C unit tests. */
#ifndef NSBOX_TAP_H
#define NSBOX_TAP_H
#include <stdio.h>
#include <stdlib.h>

static int tap_n, tap_failed;
#define ok(cond, ...)                                                          \
	do {                                                                   \
		int tap_ok_ = !!(cond);                                        \
		tap_n++;                                                       \
		if (tap_ok_) {                                                  \
			printf("ok %d - ", tap_n);                             \
		} else {                                                       \
			tap_failed++;                                          \
			printf("not ok %d - ", tap_n);                         \
		}                                                              \
		printf(__VA_ARGS__);                                           \
		printf("%s\n", tap_ok_ ? "" : "  (" __FILE__ ")");             \
	} while (0)
/* CI's must-work switch (NSBOX_MUST_WORK=1, as .ci/run and the Python
 * SDK's tests read it): a feature test that would skip fails instead. */
static inline int tap_must_work(void)
{
	const char *v = getenv("NSBOX_MUST_WORK");

	return v && v[0] == '1' && v[1] == '\0';
}
#define tap_done()                                                             \
	do {                                                                   \
		printf("1..%d\n", tap_n);                                      \
		if (tap_failed)                                                \
			printf("# %d of %d failed\n", tap_failed, tap_n);      \
		return tap_failed ? 1 : 0;                                     \
	} while (0)
#endif
