/* Command-line parsing shared by `nsbox run` and `nsbox python`: jail
 * options become nsbox_policy_set() calls (libnsbox's public API), so a
 * flag and a policy file line mean the same.  Pure: no side effects beyond
 * the policy. */
#ifndef NSBOX_ARGS_H
#define NSBOX_ARGS_H

#include <limits.h>

#include "cli.h"
#include "nsbox.h"

/* Load the policy named by the first --policy NAME|FILE (or --policy=...)
 * before "--", or the built-in "default", into a new *p (the caller frees
 * it with nsbox_policy_free).  With own_values (the front end's long
 * options that take the next word, NULL-ended), the search ends where the
 * command or program begins; NULL: every word is searched (no command
 * follows the options).  Returns 0, or -1 with err set. */
int args_load_policy(nsbox_policy_t **p, int argc, char **argv, const char *const *own_values, struct cli_err *err);

/* If argv[*i] is a jail option, apply it to p, advance *i past its value
 * and return 1.  Return 0 if it is not a jail option (*i unchanged), -1 on
 * a bad value (err names the option). */
int args_parse_jail_option(nsbox_policy_t *p, int argc, char **argv, int *i, struct cli_err *err);

/* The option nearest to arg ("--memroy=1G": "memory"), among the jail
 * options and extra (NULL-terminated names without "--", may be NULL),
 * when it is close enough to be a typo; else NULL. */
const char *args_suggest(const char *arg, const char *const *extra);

/* Set err to one line about an unknown option of `nsbox CMD`: its name, a
 * "did you mean --X?" when args_suggest() has one, and a pointer to
 * --help.  Returns -1. */
int args_unknown_option(const char *cmd, const char *arg, const char *const *extra, struct cli_err *err);

/* Check up front that a --tool COMMAND can run: its first word, when it
 * is a plain word, must be a shell builtin or an executable file (searched
 * through PATH as execvp(3) and sh do when it has no '/').  Returns 0, or
 * -1 with err naming the word. */
int args_check_command(const char *command, struct cli_err *err);
/* -EPERM with *e when a place sh looks in for command's program, up to
 * where it finds it, lies where p's sandbox may write (or passes through
 * such a place: nsbox_policy_check_host_file): the sandbox could put its
 * own program there, to run on the host.  0 otherwise. */
int args_check_command_places(const char *command, const nsbox_policy_t *p, nsbox_error_t **e);

/* Whether nsbox_policy_check()'s failure (r, e) is one to leave to nsboxd
 * ($NSBOX_CONNECT set): resolving a RootFS=NAME in this host's caches (the
 * step "rootfs": not built here, or a cache refused as unsafe), which the
 * service does among its own builds instead.  Anything else, a missing
 * workspace or bind source included, is the caller's to report here, as
 * without the service. */
bool args_left_to_service(int r, const nsbox_error_t *e);

/* Help text for the jail options. */
extern const char args_jail_help[];

#endif
