/* The nsbox subcommands; each returns the process exit status. */
#ifndef NSBOX_COMMANDS_H
#define NSBOX_COMMANDS_H

#include <stdio.h>

#include "cli.h"
#include "nsbox.h" /* NSBOX_EXIT_*: the exit statuses of nsbox(1) */

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_policy(int argc, char **argv);
int cmd_python(int argc, char **argv);

/* Shared by the front ends: print "nsbox: warning: MSG". */
void cli_warn(void *ctx, const char *msg);
/* Write how a run ended as JSON to path ("-" = stdout).  Returns 0 or -1. */
int cli_write_status(const char *path, const struct nsbox_run_status *st);

#endif
