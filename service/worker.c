/* The sandbox workers (worker.h): n threads, and libnsbox runs a helper
 * process for each (nsbox_set_helpers), since a helper makes one sandbox
 * at a time.  A session's jobs never overlap: the loop submits its end only
 * after its creation came back. */
#include "worker.h"
#include "closer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t threads[WORKER_MAX];
	unsigned n_threads;
	bool stop;
	int efd;
	struct job *makes, *makes_tail;	/* submitted, not started: creations */
	struct job *ends, *ends_tail;	/* the same, ends: they go first */
	struct job *done, *done_tail;	/* finished, not collected */
	unsigned pending;
	struct job *running[WORKER_MAX];	/* each thread's, or NULL */
	unsigned share;			/* a uid's running jobs at most */
} W = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .efd = -1 };

/* A session's warnings after its start come on the thread that ends it
 * (run_end: a workspace's write-back), kept for the client's CLOSED. */
static __thread struct job *warn_job;

static void on_warn(void *ctx, const char *msg)
{
	struct job *j = warn_job;
	size_t have;

	(void)ctx;
	if (!j)
		return;
	have = strlen(j->warnings);
	if (have + 2 < sizeof(j->warnings))
		snprintf(j->warnings + have, sizeof(j->warnings) - have, "%s%s", have ? "\n" : "", msg);
}

static void run_create(struct job *j)
{
	struct nsbox_session_opts so = { .struct_size = sizeof(so), .no_spare = true, .cold = j->cold,
					 .output_limit = j->output_limit, .net_log_fd = j->net_log_fd,
					 .warn = on_warn };
	nsbox_error_t *e = NULL;

	j->ready_fd = -1;
	j->rc = nsbox_session_new(j->pol, &so, &j->s, &e);
	if (j->rc < 0) {
		snprintf(j->err, sizeof(j->err), "%s", nsbox_error_message(e));
		j->s = NULL;
	} else {
		j->info = (struct nsbox_session_info){ .struct_size = sizeof(j->info) };
		if (nsbox_session_info(j->s, &j->info, NULL) < 0)
			j->info.alive = false;
		/* Made now, on this thread, so that asking it later is a poll. */
		j->ready_fd = nsbox_session_fd(j->s);
	}
	nsbox_error_free(e);
	nsbox_policy_free(j->pol);
	j->pol = NULL;
	/* The client's: their last close may wait (closer.h). */
	for (int i = 0; i < j->n_fds; i++)
		closer_close(j->fds[i], j->client_uid);
	j->n_fds = 0;
}

static void run_end(struct job *j)
{
	j->st = (struct nsbox_run_status){ .struct_size = sizeof(j->st) };
	j->warnings[0] = '\0';
	if (j->s) {
		warn_job = j;
		j->rc = nsbox_session_end(j->s, j->kill, &j->st, NULL);
		nsbox_session_free(j->s);
		warn_job = NULL;
		j->s = NULL;
	}
}

/* Whether j may start now: the pool's always (it keeps a worker free
 * itself), a client's while its uid has fewer than n - 1 running.  Without
 * that share, one uid closing three sessions with big workspaces held every
 * worker through the write-backs, and another user's cold OPEN waited. */
static bool may_start(const struct job *j)
{
	unsigned n = 0;

	if (!j->for_client)
		return true;
	for (unsigned i = 0; i < WORKER_MAX; i++)
		n += W.running[i] && W.running[i]->for_client && W.running[i]->client_uid == j->client_uid;
	return n < W.share;
}

/* Take the first job of a queue that may start, or NULL. */
static struct job *take(struct job **head, struct job **tail)
{
	struct job *prev = NULL;

	for (struct job *j = *head; j; prev = j, j = j->next) {
		if (!may_start(j))
			continue;
		if (prev)
			prev->next = j->next;
		else
			*head = j->next;
		if (*tail == j)
			*tail = prev;
		j->next = NULL;
		return j;
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	unsigned me = (unsigned)(uintptr_t)arg;

	pthread_mutex_lock(&W.lock);
	for (;;) {
		/* An end frees what a client waits for (CLOSED) and what others
		 * may need (memory, a host uid): it goes before creations. */
		struct job *j = take(&W.ends, &W.ends_tail);
		uint64_t one = 1;

		if (!j)
			j = take(&W.makes, &W.makes_tail);
		if (!j) {
			/* Stop once nothing is queued: a job held back by its
			 * uid's share starts when one of that uid's ends. */
			if (W.stop && !W.ends && !W.makes)
				break;
			pthread_cond_wait(&W.cond, &W.lock);
			continue;
		}
		W.running[me] = j;
		pthread_mutex_unlock(&W.lock);
		if (j->kind == JOB_CREATE)
			run_create(j);
		else
			run_end(j);
		pthread_mutex_lock(&W.lock);
		W.running[me] = NULL;
		/* A job its uid's share held back may start now, on any thread. */
		if (W.ends || W.makes)
			pthread_cond_broadcast(&W.cond);
		if (W.done_tail)
			W.done_tail->next = j;
		else
			W.done = j;
		W.done_tail = j;
		if (write(W.efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			fprintf(stderr, "nsboxd: worker: eventfd: %s\n", strerror(errno));
	}
	pthread_mutex_unlock(&W.lock);
	return NULL;
}

int worker_start(unsigned n)
{
	sigset_t all, old;
	int r = 0;

	if (n < 1 || n > WORKER_MAX || nsbox_set_helpers(n) < 0)
		return -EINVAL;
	W.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (W.efd < 0)
		return -errno;
	W.share = n > 1 ? n - 1 : 1;
	/* Signals are the loop's (its signalfd): the threads block them all. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (W.n_threads < n && !(r = pthread_create(&W.threads[W.n_threads], NULL, worker_main,
								 (void *)(uintptr_t)W.n_threads)))
		W.n_threads++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (W.n_threads < n) {
		/* All or none: the loop counts on n (one kept for misses). */
		worker_stop();
		if (W.efd >= 0)
			close(W.efd);
		W.efd = -1;
		return -r;
	}
	return 0;
}

int worker_fd(void)
{
	return W.efd;
}

void worker_submit(struct job *j)
{
	struct job **head = j->kind == JOB_END ? &W.ends : &W.makes;
	struct job **tail = j->kind == JOB_END ? &W.ends_tail : &W.makes_tail;

	j->next = NULL;
	pthread_mutex_lock(&W.lock);
	if (*tail)
		(*tail)->next = j;
	else
		*head = j;
	*tail = j;
	W.pending++;
	pthread_cond_signal(&W.cond);
	pthread_mutex_unlock(&W.lock);
}

struct job *worker_done(void)
{
	struct job *j;
	uint64_t n;

	pthread_mutex_lock(&W.lock);
	j = W.done;
	W.done = W.done_tail = NULL;
	for (struct job *k = j; k; k = k->next)
		W.pending--;
	if (W.efd >= 0 && read(W.efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		fprintf(stderr, "nsboxd: worker: eventfd: %s\n", strerror(errno));
	pthread_mutex_unlock(&W.lock);
	return j;
}

unsigned worker_pending(void)
{
	unsigned n;

	pthread_mutex_lock(&W.lock);
	n = W.pending;
	pthread_mutex_unlock(&W.lock);
	return n;
}

void worker_stop(void)
{
	if (!W.n_threads)
		return;
	pthread_mutex_lock(&W.lock);
	W.stop = true;
	pthread_cond_broadcast(&W.cond);
	pthread_mutex_unlock(&W.lock);
	for (unsigned i = 0; i < W.n_threads; i++)
		pthread_join(W.threads[i], NULL);
	W.n_threads = 0;
	close(W.efd);
	W.efd = -1;
}
