/* nsboxd's sandbox workers: the threads that make and end sandboxes, so
 * the event loop never waits for one (service/daemon.c).  Making a sandbox
 * takes milliseconds of waiting on libnsbox's helper process, and so does
 * reaping one; a loop that did either itself would stall every other
 * client meanwhile.  Jobs go in with worker_submit and come back, done, in
 * submission order, from worker_done once worker_fd (an eventfd) is
 * readable.  Only the worker touches a job between the two. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "nsbox.h"

enum job_kind {
	JOB_CREATE,		/* pol -> s (and info, fd), or err */
	JOB_END,		/* end and free s; st says how it ended */
};

struct job {
	struct job *next;
	enum job_kind kind;
	void *owner;		/* the loop's: what the job is for */
	/* JOB_CREATE */
	nsbox_policy_t *pol;	/* freed by the worker */
	bool cold;
	uint64_t output_limit;
	int fds[16];		/* what the policy names by /proc/self/fd: closed by the worker */
	int n_fds;
	int net_log_fd;		/* one of fds: the client's network audit sink, -1 none */
	uid_t client_uid;	/* whose fds are (closer_close), and whose share of the workers it takes */
	bool for_client;	/* a client's (a cold OPEN, a session's end), not the pool's */
	unsigned free_uid;	/* JOB_END: a host uid the loop frees once it is back */
	/* JOB_CREATE's result, JOB_END's input */
	nsbox_session_t *s;
	struct nsbox_session_info info;
	int ready_fd;		/* nsbox_session_fd(s): readable once the sandbox died or spoke */
	/* JOB_END */
	bool kill;
	struct nsbox_run_status st;
	char warnings[1024];	/* what the end warned about (a workspace's write-back), one per line */
	/* either */
	int rc;			/* 0, or a negative errno */
	char err[512];
};

/* Start n threads (1 to WORKER_MAX), and let libnsbox run as many helpers.
 * Returns 0 or a negative errno. */
#define WORKER_MAX 4
int worker_start(unsigned n);
/* The eventfd the loop polls: readable when jobs are done. */
int worker_fd(void);
/* Hand a job over: the worker owns it until worker_done returns it.  Ends
 * go before creations, and a client's job starts only while its uid has
 * fewer than n - 1 running (n >= 2): one uid's long jobs (workspace
 * write-backs, cold makes) leave a worker for everyone else's. */
void worker_submit(struct job *j);
/* The jobs done since the last call, oldest first (and the eventfd
 * drained), or NULL. */
struct job *worker_done(void);
/* How many jobs the worker holds (queued or running). */
unsigned worker_pending(void);
/* Finish what was submitted, then stop the thread. */
void worker_stop(void);
