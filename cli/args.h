/* Command-line parsing shared by `nsbox run` and `nsbox python`: jail
 * options become policy_set() calls, so a flag and a policy file line mean
 * the same.  Pure: no side effects beyond the policy. */
#ifndef NSBOX_ARGS_H
#define NSBOX_ARGS_H

#include "error.h"
#include "policy.h"

/* Load the policy named by the first --policy NAME|FILE (or --policy=...)
 * before "--", or the built-in "default".  Returns 0 or -1. */
int args_load_policy(struct nsbox_policy *p, int argc, char **argv, struct nsbox_err *err);

/* If argv[*i] is a jail option, apply it to p, advance *i past its value
 * and return 1.  Return 0 if it is not a jail option (*i unchanged), -1 on
 * a bad value (err names the option). */
int args_parse_jail_option(struct nsbox_policy *p, int argc, char **argv, int *i, struct nsbox_err *err);

/* Help text for the jail options. */
extern const char args_jail_help[];

#endif
