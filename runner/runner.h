/* Internal interface of nsbox-runner, the program that runs inside the
 * sandbox: main.c (arguments), py.c (CPython initialisation, the only
 * caller of Py_InitializeFromConfig), pymod.c (the builtin module _nsbox,
 * with io.c, capture.c and fastexec.c: pymod.h). */
#ifndef NSBOX_RUNNER_H
#define NSBOX_RUNNER_H

#include <stdbool.h>

#include "error.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The signal that interrupts the main thread on CANCEL (soft deadline).
 * A Python-level handler turns it into nsbox.TimeLimitExceeded or
 * nsbox.Cancelled; a signal (not Py_AddPendingCall) so that blocking
 * calls such as time.sleep() are interrupted too. */
#define RUNNER_CANCEL_SIGNAL SIGUSR1

/* pymod.c */
PyObject *runner_pymod_init(void);	/* PyInit__nsbox, registered with PyImport_AppendInittab */

/* pyjson.c: the frames' JSON.  dumps: json.dumps(o, ensure_ascii=False,
 * allow_nan=False, separators=(",", ":")) as UTF-8 bytes (errors
 * "replace"); loads: JSON text to Python (ValueError when invalid). */
PyObject *pyjson_dumps(PyObject *o);
PyObject *pyjson_loads(const char *s, size_t n);

/* io.c: per session: take over fd (the protocol socket), point fds
 * 0/1/2 at an empty pipe and two capture pipes.  Starts no thread (the io thread
 * starts with the first exec).
 * Called after Python is initialised, in the process that will serve the
 * session (a template forks first).  Returns 0 or -1 with err. */
int runner_io_start(int fd, struct nsbox_err *err);
/* Set before runner_io_start (nsbox-runner --stdin): fd 0 is the host
 * caller's own stdin, passed in by an in-process launch (a pipe or a
 * file, never a terminal): keep it instead of the empty pipe. */
extern bool runner_keep_stdin;

/* py.c */
/* Initialise CPython (isolated config, fixed sys.path) and load the
 * runner's Python half.  Holds nothing from the host environment, starts
 * no threads: a template may call it once and fork. */
int runner_py_init(bool dist_packages, struct nsbox_err *err);
/* Per-session setup after runner_py_init (and after a fork): stdio pipes
 * (the io thread starts with the first exec).  The str hash seed is fixed at initialisation and
 * cannot change afterwards; a forked session shares its template's. */
int runner_py_session(int fd, struct nsbox_err *err);
/* Serve the protocol until BYE or end of connection; returns the exit status. */
int runner_py_serve(void);
/* In a session forked from the template (helper/helper.c): take on this
 * sandbox's environment (env, the jail's) and, by policy, dist-packages,
 * which the template, initialised with neither, does not have. */
int runner_py_adopt(bool dist_packages, char **env, struct nsbox_err *err);

/* Under RLIMIT_AS (no memory cgroup), keep malloc from reserving address
 * space per thread.  Call before starting threads. */
void runner_rlimit_tune(void);

/* Import more modules (a template pays once, its sessions share them). */
int runner_py_preload(const char *const *mods, size_t n, struct nsbox_err *err);
/* The same for a space-separated list (the policy's Preload=). */
int runner_py_preload_list(const char *list, struct nsbox_err *err);
/* Collect, then gc.freeze(): a template's objects are never scanned (nor
 * their pages copied) by its sessions' collector.  Call last, before forking. */
/* In the helper's template: make the session's stdio wrappers once, over
 * pipes put on 0-2 meanwhile (runner.py, template_stdio). */
int runner_py_template_stdio(struct nsbox_err *err);
int runner_py_freeze(struct nsbox_err *err);

/* helper.c: `nsbox-runner --helper [--spare]` (helper/helper.h); returns the
 * exit status.  spare: keep a spare sandbox ready (helper.c). */
int runner_helper_main(bool spare);

#endif
