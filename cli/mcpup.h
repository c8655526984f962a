/* Code mode of nsbox mcp: the client side of another MCP server, started
 * on the host (--mcp-server NAME=COMMAND) and spoken to over its stdio.
 * Everything it sends is bounded (message size, tool count, schema and
 * description sizes) and every wait has a deadline: a silent or dying
 * server makes errors, never a hang. */
#ifndef NSBOX_CLI_MCPUP_H
#define NSBOX_CLI_MCPUP_H

#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

#define MCPUP_MAX_SERVERS 16
#define MCPUP_MAX_TOOLS 256	     /* per server; more are left out with a warning */
#define MCPUP_MAX_LINE (8u << 20)    /* one message from the server */
#define MCPUP_MAX_SCHEMA (64u << 10) /* an input schema, as JSON; larger: no signature */
#define MCPUP_MAX_DESC 2000	     /* bytes of a tool's description kept */
#define MCPUP_MAX_RESULT (8u << 20)  /* a call's result handed to the sandbox, as JSON */
#define MCPUP_MAX_QUEUED (64u << 20) /* lines not yet written to the server, beyond one */

struct mcpup_tool {
	char *py;	   /* the Python identifier inside (NAME.py) */
	char *orig;	   /* the server's own name */
	char *description; /* may be NULL */
	json_t *schema;	   /* an object, or NULL */
	/* Its annotations, with the spec's defaults for hints not given. */
	bool open_world, destructive;
};

struct mcpup {
	char *name;	     /* NAME: the namespace inside */
	const char *command; /* borrowed from argv */
	pid_t pid;	     /* 0 once reaped */
	int fd;		     /* our end of its stdin and stdout (a socketpair); -1 once dead */
	char *buf;	     /* a partial line */
	size_t len, cap;
	char *out; /* lines not yet written to it, from out_off */
	size_t out_off, out_len;
	long long next_id;
	struct mcpup_tool *tools;
	size_t n_tools;
	char why[256]; /* why it stopped, once fd is -1 */
};

/* Start u->command (sh -c) with stdin and stdout on a socketpair, its own
 * process group, our stderr and environment; initialize it and list its
 * tools, all within timeout seconds.  Returns 0, or -1 with msg. */
int mcpup_start(struct mcpup *u, double timeout, char *msg, size_t msz);

/* Send a tools/call of tool t with arguments args (an object, borrowed).
 * Returns the request id (> 0), or -1 with msg (the server is gone). */
long long mcpup_send_call(struct mcpup *u, const struct mcpup_tool *t, json_t *args, char *msg, size_t msz);

/* notifications/cancelled for request id (best effort). */
void mcpup_send_cancel(struct mcpup *u, long long id, const char *reason);

/* Calls and notifications are queued and written as the server reads:
 * whether lines wait (poll u->fd for POLLOUT), and write what it takes. */
bool mcpup_wants_write(const struct mcpup *u);
void mcpup_flush(struct mcpup *u);

/* Read what the server sent (u->fd polled readable), answer its requests
 * (ping; everything else: method not found), drop its notifications, and
 * append each response to responses (a JSON array).  Returns 0, or -1
 * when the server is gone (u->why says why; its fd is closed). */
int mcpup_pump(struct mcpup *u, json_t *responses);

/* Stop the server: close its stdin, give it a moment, then kill its
 * process group and reap it.  Frees everything but u->name. */
void mcpup_stop(struct mcpup *u);

/* Protocol values (nsbox-protocol(7), VALUES) of the sandbox's call to
 * plain JSON for the server.  Returns a new reference, or NULL with msg
 * ("where(): ...") saying what has no JSON form. */
json_t *mcpup_plain(const json_t *v, const char *where, char *msg, size_t msz, int depth);

/* A tools/call response to the Python value the sandbox gets (encoded as
 * nsbox-protocol(7) VALUES): structured content as a dict, one text block
 * as a str, several blocks as a list; NULL with msg for an error (a
 * JSON-RPC error or isError), which becomes nsbox.ToolError inside. */
json_t *mcpup_result_value(const json_t *response, char *msg, size_t msz);

/* The Python signature a schema gives inside ("(a, b=None)"), as the
 * runner makes it; malloc'd. */
char *mcpup_signature(const json_t *schema);

#endif
