/* The nsbox subcommands; each returns the process exit status. */
#ifndef NSBOX_COMMANDS_H
#define NSBOX_COMMANDS_H

#include <stdio.h>

#include "jail.h"

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_policy(int argc, char **argv);
int cmd_python(int argc, char **argv);

/* Shared by the front ends: print "nsbox: warning: MSG". */
void cli_warn(void *ctx, const char *msg);
/* Print a setup error the way every subcommand does. */
void cli_print_error(const char *what, const struct nsbox_err *err);
/* Write a jail status as JSON to path ("-" = stdout).  Returns 0 or -1. */
int cli_write_status(const char *path, const struct jail_status *st, const struct jail *j);
/* Forward SIGINT, SIGTERM, SIGHUP, SIGQUIT to pid (0 = stop forwarding). */
void cli_forward_signals(pid_t pid);

#endif
