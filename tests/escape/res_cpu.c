/* Busy-loop on as many threads as there are CPUs, and twice that, for
 * ever.  --cpus must throttle it and --time-limit must end it: reaching
 * the end of main means neither did. */
#include <pthread.h>
#include <time.h>
#include "escape.h"

static void *spin(void *arg)
{
	volatile unsigned long x = 0;

	(void)arg;
	for (;;)
		x++;
	return NULL;
}

int main(void)
{
	pthread_t t;
	long n = sysconf(_SC_NPROCESSORS_ONLN) * 2;

	for (long i = 0; i < n; i++)
		if (pthread_create(&t, NULL, spin, NULL) != 0)
			NOTE("pthread_create: %s", ename(errno));
	sleep(60);
	ESCAPED("still running after 60 s: no time limit");
}
