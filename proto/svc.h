/* The nsboxd control protocol: the one wire contract between nsboxd
 * (service/) and libnsbox's service client (host/session-service.c).
 * Compiled into both; documented in nsbox-protocol(7), section "THE
 * SERVICE PROTOCOL"; keep the two in step.
 *
 * Transport: AF_UNIX SOCK_SEQPACKET, one message per packet, so a message
 * and the descriptors it carries (SCM_RIGHTS) arrive together.  A message
 * is a 16-byte little-endian header laid out as the runner protocol's
 *	uint32 magic 'NSBD' (0x4442534e), uint32 len, uint16 type, uint16 flags, uint32 id
 * followed by len bytes of payload: one JSON object (UTF-8, no duplicate
 * keys).  A packet is at most SVC_MAX_MSG bytes; a bigger one is truncated
 * by the kernel (MSG_TRUNC) and is a protocol error.
 *
 * The service only decides lifecycle (which sandbox, its limits, its end);
 * what runs inside is spoken straight between the client and its sandbox
 * over the runner socket that OPENED hands over (nsbox-protocol(7)).
 *
 * Pure code: no I/O, no global state. */
#ifndef NSBOX_SVC_H
#define NSBOX_SVC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

#define SVC_MAGIC 0x4442534eu	/* "NSBD" read as a little-endian uint32 */
#define SVC_VERSION 1
#define SVC_HDR_SIZE 16
#define SVC_MAX_MSG (64u << 10)	/* header + payload, one packet */
#define SVC_MAX_FDS 16		/* descriptors with one message (workspace + binds) */
#define SVC_HANDLE_LEN 32	/* hex digits of a session handle (128 random bits) */

enum svc_type {
	SVC_HELLO = 1,	/* both ways, first: version; server adds limits */
	SVC_OPEN,	/* client -> server: a session (policy options, fds) */
	SVC_OPENED,	/* server -> client: handle, hello, limits; fds: runner socket, pidfd */
	SVC_KILL,	/* client -> server: SIGKILL a session's sandbox (answered by OK) */
	SVC_CLOSE,	/* client -> server: end a session (answered by CLOSED) */
	SVC_CLOSED,	/* server -> client: a session's final status */
	SVC_INFO,	/* client -> server: memory use now (answered by INFO) */
	SVC_EXITED,	/* server -> client, unsolicited: a sandbox ended by itself (id 0) */
	SVC_OK,		/* server -> client: done */
	SVC_ERROR,	/* server -> client: a request failed: errno, message */
	SVC_TYPE_MAX = SVC_ERROR,
};

/* Name of a type ("OPEN"), "?" for an unknown one.  Never NULL. */
const char *svc_type_name(unsigned type);

/* A whole message (header + compact JSON of msg, an object) in a malloc'd
 * *out of *out_len bytes; EMSGSIZE past SVC_MAX_MSG. */
int svc_encode(uint16_t type, uint32_t id, const json_t *msg, char **out, size_t *out_len, struct nsbox_err *err);

/* Check one received packet (buf[0..len)) and parse it: magic, flags 0,
 * known type, len matching the packet, a JSON object without duplicate
 * keys.  Returns 0 with *type, *id and *msg (a new reference), or -1 with
 * err (EPROTO). */
int svc_decode(const void *buf, size_t len, uint16_t *type, uint32_t *id, json_t **msg, struct nsbox_err *err);

/* The final status of a session as JSON, and back. */
struct svc_status {
	bool exited;		/* else killed by term_signal */
	int exit_code;
	int term_signal;
	bool oom_killed;
	bool killed;		/* by a KILL or CLOSE request, or the service */
	uint64_t peak_memory;	/* bytes, 0 if unknown */
};
json_t *svc_status_json(const struct svc_status *st);
void svc_status_from_json(const json_t *j, struct svc_status *st);

/* An OPEN request, parsed and checked (pure).  Strings point into the
 * JSON message it came from (keep it alive).  Host paths never travel: a
 * workspace or bind is an index into the descriptors that came with the
 * message (SCM_RIGHTS), opened by the client with its own rights. */
#define SVC_MAX_BINDS 8
#define SVC_MAX_ENV 64
#define SVC_MAX_NET_RULES 64	/* POLICY_MAX_NET_RULES (host/session-service.c asserts it) */
#define SVC_NET_RULE_MAX 300	/* bytes of one rule as written: a 253-byte name, "*.", ":PORT" */
struct svc_open {
	const char *profile;	/* "default", "strict", "permissive" (server-side policies) */
	uint64_t memory, pids, tmp_size, file_size, open_files;	/* 0: the profile's */
	double cpus;
	bool share_net;
	bool share_net_given;	/* share_net was sent (false: the profile's is not wanted) */
	bool dist_packages;
	int workspace_fd;	/* index into the message's fds, -1 none */
	struct {
		int fd;		/* index */
		const char *dst;
		bool writable;
	} binds[SVC_MAX_BINDS];
	size_t n_binds;
	const char *env[SVC_MAX_ENV];	/* "NAME=VALUE" */
	size_t n_env;
	uint64_t output_limit;	/* the runner's per-stream cap, 0: default */
	bool cold;		/* CPython started afresh, not from a template or the pool */
	/* "net": the egress allowlist ([Network], nsbox-policy(5)).  Rules
	 * travel as written and are only shape-checked here: the service
	 * parses each again with the policy code (nsbox_policy_set). */
	const char *net_allow[SVC_MAX_NET_RULES];
	size_t n_net_allow;
	int64_t net_max_out, net_max_in, net_max_conns;	/* -1: the profile's; 0: no limit */
	int net_log_fd;		/* index of the audit log the client opened for writing, -1 none */
	const char *rootfs;	/* a built tree's name, resolved in the service's own cache; NULL none */
};
/* Parse OPEN's payload; n_fds descriptors came with it.  Returns 0 or -1
 * with err (EINVAL) naming the field. */
int svc_open_parse(const json_t *m, size_t n_fds, struct svc_open *o, struct nsbox_err *err);

/* A session handle: SVC_HANDLE_LEN lowercase hex digits. */
bool svc_handle_valid(const char *h);

#endif
