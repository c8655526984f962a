#include "closer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>

struct item {
	struct item *next;
	int fd;
};

/* One uid's queue, and the thread that closes it (while it has any): a
 * close that waits for good holds that uid's lane only, and the uid is
 * throttled at CLOSER_UID_MAX; every other uid's closes go on. */
struct lane {
	struct lane *next;
	uid_t uid;
	struct item *head, *tail;
	unsigned pending; /* queued, and being closed */
	bool served;	  /* a thread is on it */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* something was queued (CLOCK_MONOTONIC) */
	bool running;
	int efd;
	struct lane *lanes;
	unsigned total;
	pthread_attr_t attr;
} C = { .lock = PTHREAD_MUTEX_INITIALIZER, .efd = -1 };

/* Close l's descriptors as they come; once none came for LANE_IDLE_S,
 * free l and end. */
#define LANE_IDLE_S 2
static void *lane_main(void *arg)
{
	struct lane *l = arg;

	pthread_mutex_lock(&C.lock);
	for (;;) {
		struct item *it = l->head;
		uint64_t one = 1;

		if (!it) {
			struct timespec until;

			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_sec += LANE_IDLE_S;
			while (!l->head && pthread_cond_timedwait(&C.cond, &C.lock, &until) == 0)
				;
			if (!l->head)
				break;
			continue;
		}
		l->head = it->next;
		if (!l->head)
			l->tail = NULL;
		pthread_mutex_unlock(&C.lock);
		close(it->fd);
		free(it);
		pthread_mutex_lock(&C.lock);
		l->pending--;
		C.total--;
		if (write(C.efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			continue;
	}
	for (struct lane **pp = &C.lanes; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	pthread_mutex_unlock(&C.lock);
	free(l);
	return NULL;
}

int closer_start(void)
{
	int r;

	pthread_condattr_t ca;

	if ((r = pthread_condattr_init(&ca)) || (r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)) ||
	    (r = pthread_cond_init(&C.cond, &ca)))
		return -r;
	pthread_condattr_destroy(&ca);
	C.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (C.efd < 0)
		return -errno;
	/* Lane threads are never joined (one may wait in a close for good:
	 * nsboxd's exit ends it), and a close needs little stack. */
	if ((r = pthread_attr_init(&C.attr)) || (r = pthread_attr_setdetachstate(&C.attr, PTHREAD_CREATE_DETACHED)) ||
	    (r = pthread_attr_setstacksize(&C.attr, 256 * 1024))) {
		close(C.efd);
		C.efd = -1;
		return -r;
	}
	C.running = true;
	return 0;
}

static struct lane *lane_of(uid_t uid)
{
	struct lane *l;

	for (l = C.lanes; l; l = l->next)
		if (l->uid == uid)
			return l;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->uid = uid;
	l->next = C.lanes;
	C.lanes = l;
	return l;
}

void closer_close(int fd, uid_t uid)
{
	struct item *it;
	struct lane *l;
	int type;
	socklen_t len = sizeof(type);

	if (fd < 0)
		return;
	/* A socket's close resets rather than lingers: nothing waits for
	 * its unsent data, on this thread or the closer's. */
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &(struct linger){ .l_onoff = 1, .l_linger = 0 },
				 sizeof(struct linger));
	it = C.running ? malloc(sizeof(*it)) : NULL;
	if (!it) {
		close(fd);
		return;
	}
	it->next = NULL;
	it->fd = fd;
	pthread_mutex_lock(&C.lock);
	l = lane_of(uid);
	if (l && !l->served) {
		sigset_t all, old;
		pthread_t t;

		/* Signals are the loop's (its signalfd). */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		l->served = pthread_create(&t, &C.attr, lane_main, l) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (!l || !l->served) {
		/* No thread to take it (out of memory or threads): here. */
		if (l && !l->pending) {
			for (struct lane **pp = &C.lanes; *pp; pp = &(*pp)->next)
				if (*pp == l) {
					*pp = l->next;
					break;
				}
			free(l);
		}
		pthread_mutex_unlock(&C.lock);
		free(it);
		close(fd);
		return;
	}
	if (l->tail)
		l->tail->next = it;
	else
		l->head = it;
	l->tail = it;
	l->pending++;
	C.total++;
	pthread_cond_broadcast(&C.cond);
	pthread_mutex_unlock(&C.lock);
}

unsigned closer_pending(uid_t uid)
{
	unsigned n = 0;

	if (!C.running)
		return 0;
	pthread_mutex_lock(&C.lock);
	for (struct lane *l = C.lanes; l; l = l->next)
		if (l->uid == uid)
			n = l->pending;
	pthread_mutex_unlock(&C.lock);
	return n;
}

unsigned closer_total(void)
{
	unsigned n;

	pthread_mutex_lock(&C.lock);
	n = C.total;
	pthread_mutex_unlock(&C.lock);
	return n;
}

int closer_fd(void)
{
	return C.efd;
}

void closer_drain(void)
{
	uint64_t n;

	if (C.efd >= 0 && read(C.efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		return;
}
