/* The nsbox subcommands; each returns the process exit status. */
#ifndef NSBOX_COMMANDS_H
#define NSBOX_COMMANDS_H

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <sys/types.h>
#include <termios.h>

#include "cli.h"
#include "nsbox.h" /* NSBOX_EXIT_*: the exit statuses of nsbox(1) */

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_policy(int argc, char **argv);
int cmd_python(int argc, char **argv);
int cmd_mcp(int argc, char **argv);
int cmd_rootfs(int argc, char **argv);

/* A host tool given as --tool NAME=COMMAND (cli/python.c). */
struct cli_tool {
	char *name;
	const char *command;
};
/* Run t on the host for one call from s's running exec (s may be NULL):
 * the call's JSON on the command's stdin, a JSON value expected on its
 * stdout.  At the exec's time limit, or once cli_tool_stop is set (by a
 * handler of SIGINT, SIGTERM or SIGHUP, which are taken only while it
 * waits), the command's process group is killed and the call fails.
 * 0 with *result_json, or -1 with *error (NULL: out of memory); both
 * malloc'ed, the caller's to free. */
int cli_tool_call(const struct cli_tool *t, nsbox_session_t *s, const char *name, const char *args_json,
		  char **result_json, char **error);
/* An nsbox_tool_fn running a cli_tool (ud) for nsbox python's session. */
/* The effective policy's TimeLimit= in seconds, 0 for none ("infinity"):
 * libnsbox has no getter for it. */
double cli_policy_time_limit(const nsbox_policy_t *p);
int cli_tool_run(void *ud, const char *name, const char *args_json, char **result_json, char **error);
/* Set from a signal handler: the host tool command running now is stopped. */
extern volatile sig_atomic_t cli_tool_stop;

/* nsbox python --display-dir (cli/display.c): make and open DIR (-1, with
 * the reason in eb, on failure); save a result's displays and /out files in it
 * (seq numbers the displays across execs).  -1 when any could not be
 * written (each printed). */
int cli_display_open(const char *dir, char *eb, size_t el);
int cli_display_save(int dirfd, const char *dir, const nsbox_result_t *r, unsigned *seq);
/* Whether a file name that came from the sandbox may be used on the host:
 * 1..255 bytes, no '/', no control characters, not "." or "..". */
bool cli_out_name_ok(const char *name);
/* Whether text from the sandbox may reach the user's terminal outside the
 * code's own output (completions, names): no C0 or C1 control, DEL or
 * bidirectional override, and valid UTF-8. */
bool cli_text_inert(const char *s);
/* nsbox run's terminal (cli/tty.c): a pty whose slave is the command's
 * stdin and controlling terminal, with a relay process to the caller's
 * terminal (stdin), which is raw until cli_tty_stop. */
struct cli_tty {
	int slave;	      /* for the command's stdio; closed by cli_tty_stop */
	pid_t relay;	      /* the relay process */
	bool raw;	      /* the caller's terminal was set raw */
	struct termios saved; /* and is restored to this */
};
/* Returns 0, or -1 with err set (nothing left behind). */
int cli_tty_start(struct cli_tty *t, struct cli_err *err);
/* After the run: close the slave, wait for the relay, restore the
 * terminal.  Safe to call more than once. */
void cli_tty_stop(struct cli_tty *t);

/* Shared by the front ends: print "nsbox: warning: MSG". */
void cli_warn(void *ctx, const char *msg);
/* Create (or empty) path, to find before running that it cannot be
 * written, with no symbolic link in it followed (base/hostpath.h).
 * Returns the descriptor cli_write_status writes to, or -1 with err
 * naming path. */
int cli_open_status(const char *path, struct cli_err *err);
/* Print v compactly as JSON, each real as the shortest text that reads
 * back the same (jansson prints 17 digits).  Returns 0 or -1. */
int cli_json_dump(const json_t *v, FILE *f);
/* --json: a flag or setup error as the one JSON object on stdout:
 * {"outcome": outcome, "exit_code": status, "error": {"type": "NsboxError",
 * "message": msg}}. */
void cli_json_error(const char *outcome, int status, const char *msg);
/* Write how a run ended as JSON to fd, which cli_open_status opened for
 * path (fd -1: stdout).  Closes fd.  Returns 0 or -1. */
int cli_write_status(const char *path, int fd, const struct nsbox_run_status *st);

#endif
