/* Run a command in a new sandbox and wait for it (nsbox_run(), `nsbox
 * run`): either from this process (jail_start; single-threaded callers) or
 * through the helper process (helper/helper.h), with the policy's time limit
 * enforced either way and, on request, the caller's signals passed on. */
#ifndef NSBOX_RUN_H
#define NSBOX_RUN_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "jail.h"
#include "policy.h"

struct run_opts {
	const int *stdio;	/* stdin, stdout, stderr; NULL: the caller's 0, 1, 2 */
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	bool forward_signals;	/* SIGINT, SIGTERM, SIGHUP, SIGQUIT go to the sandbox */
	bool in_process;	/* jail_start here: the caller must be single-threaded */
	bool controlling_tty;	/* stdin becomes the command's controlling tty (in_process) */
	int net_log_fd;		/* the egress proxy's audit lines go here too (jail_spec.net_audit_fds); -1: none */
	/* Each audit record (netaudit.h), on the calling thread while it waits
	 * for the sandbox, all of them before run_command returns; NULL: none
	 * (or no Allow= rule: nothing to audit). */
	void (*net_audit)(void *ctx, const char *record, size_t len);
	void *net_audit_ctx;
};

struct run_result {
	struct jail_status st;	/* final; st.exec_errno set when argv could not be executed */
	int exit_code;		/* jail_exit_code(&st) */
	int cg_mode;		/* enum cgroup_mode */
	bool cg_enforced[3];	/* memory, pids, cpu */
};

/* Returns 0 with *res filled once the command was started (or could not be
 * executed inside); -1 with err when no sandbox could be made (err->step
 * names the setup step) or the request was refused (EBUSY: another run is
 * forwarding signals; EINVAL: in_process from a multithreaded process). */
int run_command(const struct nsbox_policy *p, char *const argv[], const struct run_opts *o,
		struct run_result *res, struct nsbox_err *err);

/* The number of threads of this process (from /proc/self/stat), or -1. */
int process_threads(void);

#endif
