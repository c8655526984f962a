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

struct item {
	struct item *next;
	int fd;
	uid_t uid;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool running;
	int efd;
	struct item *head, *tail;
	struct item *busy; /* taken from the queue, being closed */
} C = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .efd = -1 };

static void *closer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&C.lock);
	for (;;) {
		struct item *it = C.head;
		uint64_t one = 1;

		if (!it) {
			pthread_cond_wait(&C.cond, &C.lock);
			continue;
		}
		C.head = it->next;
		if (!C.head)
			C.tail = NULL;
		C.busy = it;
		pthread_mutex_unlock(&C.lock);
		close(it->fd);
		pthread_mutex_lock(&C.lock);
		C.busy = NULL;
		free(it);
		if (write(C.efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			continue;
	}
	return NULL;
}

int closer_start(void)
{
	sigset_t all, old;
	int r;

	C.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (C.efd < 0)
		return -errno;
	/* Signals are the loop's (its signalfd).  The thread is never joined:
	 * it may wait in a close for good, and nsboxd's exit ends it. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&C.thread, NULL, closer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		close(C.efd);
		C.efd = -1;
		return -r;
	}
	pthread_detach(C.thread);
	C.running = true;
	return 0;
}

void closer_close(int fd, uid_t uid)
{
	struct item *it;
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
	it->uid = uid;
	pthread_mutex_lock(&C.lock);
	if (C.tail)
		C.tail->next = it;
	else
		C.head = it;
	C.tail = it;
	pthread_cond_signal(&C.cond);
	pthread_mutex_unlock(&C.lock);
}

unsigned closer_pending(uid_t uid)
{
	unsigned n = 0;

	if (!C.running)
		return 0;
	pthread_mutex_lock(&C.lock);
	for (struct item *it = C.head; it; it = it->next)
		n += it->uid == uid;
	n += C.busy && C.busy->uid == uid;
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
