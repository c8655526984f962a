/* A terminal among nsbox_run's stdio is never handed to the command
 * (host/ttyrelay.c). */
#ifndef NSBOX_TTYRELAY_H
#define NSBOX_TTYRELAY_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

struct ttyrelay {
	int stdio[3]; /* what the command gets: the caller's fd, or ours below */
	int slave;    /* the pseudo-terminal the output goes to (-1: none) */
	int in_rd;    /* the pipe the input comes through (-1: none) */
	int ctl;      /* written to when the command has ended (-1: none) */
	pid_t pid;    /* the relay process (0: none) */
};

/* Fill r->stdio from stdio (the caller's three fds): each that is a
 * terminal is replaced, output by the slave of a pseudo-terminal of our own
 * (the command still sees a terminal, with the caller's modes and size)
 * and input by a pipe, and a relay process copies between them and the
 * caller's terminal until the command's ends are closed.  Nothing to do
 * (no terminal): r->stdio is stdio and no process is started.  Returns 0,
 * or -1 with err (nothing is left open). */
int ttyrelay_start(struct ttyrelay *r, const int stdio[3], struct nsbox_err *err);

/* The command has ended (its sandbox is destroyed), or never started:
 * close our ends of what it got, then wait for the relay to copy what is
 * left of the output and exit.  late: the run ended at its time limit,
 * whose promise a terminal that takes nothing (^S, a paused pane) must not
 * break: the relay gets TTYRELAY_LATE_MS, then is killed, what it held
 * lost. */
#define TTYRELAY_LATE_MS 1000
void ttyrelay_stop(struct ttyrelay *r, bool late);

#endif
