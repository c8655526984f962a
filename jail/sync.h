/* Messages between the launcher and pid 1 over their SOCK_SEQPACKET pair. */
#ifndef NSBOX_SYNC_H
#define NSBOX_SYNC_H

#include "error.h"

/* In order: the launcher sends GO (id maps written), then ATTACHED (pid 1
 * is in every cgroup; code = SYNC_CG_* bits of
 * the limits a cgroup enforces); pid 1 answers READY, ERROR or EXEC_ERROR,
 * and STATUS when the payload ends. */
enum sync_type { SYNC_GO = 1, SYNC_READY, SYNC_ERROR, SYNC_EXEC_ERROR, SYNC_STATUS, SYNC_ATTACHED };

#define SYNC_CG_MEMORY 1
#define SYNC_CG_PIDS 2

struct sync_msg {
	int type;
	int code;	/* errno, or the payload's wait status for SYNC_STATUS */
	char step[48];
	char msg[NSBOX_ERR_MSG_MAX];
};

#endif
