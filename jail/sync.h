/* Messages between the launcher and pid 1 over their SOCK_SEQPACKET pair. */
#ifndef NSBOX_SYNC_H
#define NSBOX_SYNC_H

#include "error.h"

enum sync_type { SYNC_GO = 1, SYNC_READY, SYNC_ERROR, SYNC_EXEC_ERROR, SYNC_STATUS, SYNC_ATTACHED };

struct sync_msg {
	int type;
	int code;	/* errno, or the payload's wait status for SYNC_STATUS */
	char step[48];
	char msg[NSBOX_ERR_MSG_MAX];
};

#endif
