"""ctypes declarations of libnsbox (include/nsbox.h).

Only this module knows the C ABI.  Handles are opaque c_void_p; every
`char *` the library returns is read with string_at and released with
nsbox_free; `const char *` results are borrowed and copied at once.
"""

import ctypes
import ctypes.util
import errno as _errno
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_bool, c_char, c_char_p, c_double, c_int,
                    c_size_t, c_uint, c_uint64, c_void_p)

from .errors import PolicyError, SandboxCrashed, SandboxError

__all__ = ["lib", "libc", "load", "check", "TOOL_FN", "OUTPUT_FN", "WARN_FN", "NET_AUDIT_FN", "SessionOpts",
           "ExecOpts",
           "SessionInfo", "RunOpts", "RunStatus", "Event", "take_string", "library_path", "has_event_api"]

# enum nsbox_status
OK, EXCEPTION, TIME_LIMIT, CANCELLED, MEMORY_LIMIT, CRASHED, PROTOCOL_ERROR, INCOMPLETE = range(8)
EXEC_PLAIN = 0x1  # nsbox_exec_opts.flags (0.5.0)

# typedef void (*nsbox_output_fn)(void *userdata, int stream, const char *data, size_t len);
OUTPUT_FN = CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_size_t)
# typedef int (*nsbox_tool_fn)(void *userdata, const char *name, const char *args_json,
#                              char **result_json, char **error_message);
TOOL_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, c_char_p, POINTER(c_void_p), POINTER(c_void_p))
# typedef void (*nsbox_warn_fn)(void *userdata, const char *message);   (0.2.0)
WARN_FN = CFUNCTYPE(None, c_void_p, c_char_p)
# typedef void (*nsbox_net_audit_fn)(void *userdata, const char *record, size_t len);   (0.5.0)
NET_AUDIT_FN = CFUNCTYPE(None, c_void_p, c_void_p, c_size_t)


class SessionOpts(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("output_limit", c_uint64),
        ("max_tool_calls", c_uint),
        ("max_bytes", c_uint64),
        ("output", OUTPUT_FN),
        ("output_userdata", c_void_p),
        ("cold", c_bool),
        # since 0.2.0
        ("warn", WARN_FN),
        ("warn_userdata", c_void_p),
        ("spare", c_bool),
        ("in_process", c_bool),
        # since 0.3.0
        ("no_spare", c_bool),
        ("argv", POINTER(c_char_p)),
        # since 0.4.0: nsboxd's socket (NULL: $NSBOX_CONNECT)
        ("connect", c_char_p),
        # since 0.5.0: nsbox(1) python's (all output streamed; the caller's stdin)
        ("stream_all", c_bool),
        ("pass_stdin", c_bool),
        # since 0.5.0: the egress allowlist's audit
        ("net_audit", NET_AUDIT_FN),
        ("net_audit_userdata", c_void_p),
        ("net_log_fd", c_int),
    ]


class ExecOpts(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("timeout", c_double),
        ("repl", c_bool),
        ("filename", c_char_p),
        ("interactive", c_bool),    # since 0.2.0
        ("flags", c_uint64),        # since 0.5.0 (an older library ignores it): EXEC_PLAIN
    ]


class SessionInfo(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("pid", c_int),
        ("alive", c_bool),
        ("cgroup", c_char * 256),
        ("memory_limit", c_uint64),
        ("pids_limit", c_uint64),
        ("cpus_limit", c_double),
        ("memory_current", c_uint64),
        ("memory_peak", c_uint64),
        ("python", c_char * 32),    # since 0.2.0
    ]


class RunOpts(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("stdio", POINTER(c_int)),  # 3 fds or NULL
        ("warn", WARN_FN),
        ("warn_userdata", c_void_p),
        ("forward_signals", c_bool),
        ("in_process", c_bool),
        ("controlling_tty", c_bool),  # 0.5.0
        ("net_log_fd", POINTER(c_int)),  # 0.5.0: NULL, or the egress audit's descriptor
        ("net_audit", NET_AUDIT_FN),     # 0.5.0
        ("net_audit_userdata", c_void_p),
    ]


class RunStatus(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("exit_code", c_int),
        ("exited", c_bool),
        ("exit_status", c_int),
        ("term_signal", c_int),
        ("time_limit", c_bool),
        ("oom_killed", c_bool),
        ("exec_errno", c_int),
        ("peak_memory", c_uint64),
        ("cpu_user", c_double),
        ("cpu_system", c_double),
        ("wall", c_double),
        ("cgroup_mode", c_char * 16),
        ("memory_enforced", c_bool),
        ("pids_enforced", c_bool),
        ("cpu_enforced", c_bool),
    ]


# enum nsbox_event_kind (0.4.0)
EVENT_OUTPUT, EVENT_TOOL_CALL, EVENT_DONE = 1, 2, 3


class Event(Structure):
    """struct nsbox_event (0.4.0)."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int),
        ("stream", c_int),
        ("data", c_void_p),         # not NUL-terminated: read with string_at(data, len)
        ("len", c_size_t),
        ("call_id", c_uint64),
        ("tool", c_char_p),
        ("args_json", c_char_p),
    ]


_ERR = POINTER(c_void_p)   # nsbox_error_t **

# name: (restype, argtypes)
_PROTOS = {
    "nsbox_error_code": (c_int, [c_void_p]),
    "nsbox_error_message": (c_char_p, [c_void_p]),
    "nsbox_error_step": (c_char_p, [c_void_p]),
    "nsbox_error_free": (None, [c_void_p]),
    "nsbox_free": (None, [c_void_p]),
    "nsbox_version": (c_char_p, []),

    "nsbox_policy_new": (c_int, [c_char_p, POINTER(c_void_p), _ERR]),
    "nsbox_policy_free": (None, [c_void_p]),
    "nsbox_policy_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, _ERR]),
    "nsbox_policy_set_memory": (c_int, [c_void_p, c_uint64, _ERR]),
    "nsbox_policy_set_pids": (c_int, [c_void_p, c_uint64, _ERR]),
    "nsbox_policy_set_cpus": (c_int, [c_void_p, c_double, _ERR]),
    "nsbox_policy_set_time_limit": (c_int, [c_void_p, c_double, _ERR]),
    "nsbox_policy_set_tmp_size": (c_int, [c_void_p, c_uint64, _ERR]),
    "nsbox_policy_set_file_size": (c_int, [c_void_p, c_uint64, _ERR]),
    "nsbox_policy_set_open_files": (c_int, [c_void_p, c_uint64, _ERR]),
    "nsbox_policy_set_share_net": (c_int, [c_void_p, c_bool, _ERR]),
    "nsbox_policy_add_bind": (c_int, [c_void_p, c_char_p, c_char_p, c_bool, _ERR]),
    "nsbox_policy_set_workspace": (c_int, [c_void_p, c_char_p, _ERR]),
    "nsbox_policy_setenv": (c_int, [c_void_p, c_char_p, c_char_p, _ERR]),
    "nsbox_policy_check": (c_int, [c_void_p, _ERR]),
    "nsbox_policy_packages": (c_int, [c_void_p, POINTER(c_void_p), _ERR]),
    "nsbox_policy_to_string": (c_void_p, [c_void_p]),

    "nsbox_session_new": (c_int, [c_void_p, POINTER(SessionOpts), POINTER(c_void_p), _ERR]),
    "nsbox_session_free": (None, [c_void_p]),
    "nsbox_session_add_tool": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, TOOL_FN, c_void_p, _ERR]),
    "nsbox_exec": (c_int, [c_void_p, c_char_p, POINTER(ExecOpts), POINTER(c_void_p), _ERR]),
    "nsbox_cancel": (None, [c_void_p]),
    "nsbox_result_status": (c_int, [c_void_p]),
    "nsbox_result_value": (c_char_p, [c_void_p]),
    "nsbox_result_stdout": (c_void_p, [c_void_p, POINTER(c_size_t)]),
    "nsbox_result_stderr": (c_void_p, [c_void_p, POINTER(c_size_t)]),
    "nsbox_result_error_type": (c_char_p, [c_void_p]),
    "nsbox_result_error_message": (c_char_p, [c_void_p]),
    "nsbox_result_traceback": (c_char_p, [c_void_p]),
    "nsbox_result_usage": (None, [c_void_p, POINTER(c_double), POINTER(c_double), POINTER(c_uint64),
                                  POINTER(c_uint)]),
    "nsbox_result_exit_code": (c_int, [c_void_p]),
    "nsbox_result_json": (c_char_p, [c_void_p]),
    "nsbox_result_free": (None, [c_void_p]),
    "nsbox_set_var": (c_int, [c_void_p, c_char_p, c_char_p, _ERR]),
    "nsbox_get_var": (c_int, [c_void_p, c_char_p, POINTER(c_void_p), _ERR]),
    "nsbox_reset": (c_int, [c_void_p, _ERR]),
    "nsbox_session_info": (c_int, [c_void_p, POINTER(SessionInfo), _ERR]),
    "nsbox_run": (c_int, [c_void_p, POINTER(c_char_p), POINTER(RunOpts), POINTER(RunStatus), _ERR]),
}

# The event-loop exec API (0.4.0): optional, so that the rest of the SDK
# still works with an older library; AsyncSandbox checks has_event_api().
_PROTOS_0_4 = {
    "nsbox_session_fd": (c_int, [c_void_p]),
    "nsbox_exec_start": (c_int, [c_void_p, c_char_p, POINTER(ExecOpts), _ERR]),
    "nsbox_exec_advance": (c_int, [c_void_p, POINTER(Event), _ERR]),
    "nsbox_exec_answer": (c_int, [c_void_p, c_uint64, c_char_p, c_char_p, _ERR]),
    "nsbox_exec_result": (c_int, [c_void_p, POINTER(c_void_p), _ERR]),
}

# 0.5.0: optional as well (the SDK falls back when they are missing).
_PROTOS_0_5 = {
    "nsbox_exec_time_left": (c_double, [c_void_p]),
    "nsbox_result_truncated": (c_bool, [c_void_p, c_int, POINTER(c_uint64)]),
}

lib = None
library_path = None
_event_api = False
has_0_5 = False
# The network audit (nsbox_session_opts.net_audit and net_log_fd, 0.5.0):
# a library that exports nsbox_net_audit_drain reads those fields.
has_net_audit = False

# strdup gives the malloc'ed strings a tool callback hands to libnsbox,
# which releases them with free().
libc = ctypes.CDLL(None, use_errno=True)
libc.strdup.restype = c_void_p
libc.strdup.argtypes = [c_char_p]


def _candidates():
    env = os.environ.get("NSBOX_LIB")
    if env:
        # An explicit choice is not second-guessed: a wrong path fails loudly.
        return [env]
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libnsbox.so.0")
    if os.path.exists(tree):
        out.append(tree)
    found = ctypes.util.find_library("nsbox")
    if found:
        out.append(found)
    out.append("libnsbox.so.0")
    return out


def load():
    """Load libnsbox once and declare its functions.  Raises SandboxError
    naming every place tried when it is nowhere to be found."""
    global lib, library_path
    if lib is not None:
        return lib
    tried = []
    handle = None
    for cand in _candidates():
        try:
            # use_errno: the functions documented as "-1 with errno set"
            # (nsbox_session_fd) report why through ctypes.get_errno().
            handle = ctypes.CDLL(cand, use_errno=True)
            library_path = cand
            break
        except OSError as e:
            tried.append("%s (%s)" % (cand, e))
    if handle is None:
        raise SandboxError("libnsbox not found; set NSBOX_LIB to the path of libnsbox.so.0 or build it "
                           "with `make`.  Tried: " + "; ".join(tried), _errno.ENOENT)
    # libnsbox looks for nsbox-runner next to the program (/proc/self/exe),
    # which is the Python interpreter here, then in its libexec dir.  A
    # library loaded from a build tree has its runner beside it.
    d = os.path.dirname(library_path)
    runner = os.path.join(d, "nsbox-runner") if d else ""
    if not os.environ.get("NSBOX_RUNNER") and runner and os.path.isfile(runner):
        os.environ["NSBOX_RUNNER"] = os.path.abspath(runner)
    for name, (restype, argtypes) in _PROTOS.items():
        try:
            fn = getattr(handle, name)
        except AttributeError:
            raise SandboxError("%s is too old for this SDK (it lacks %s): libnsbox 0.2.0 or newer is needed"
                               % (library_path, name), _errno.ENOSYS) from None
        fn.restype = restype
        fn.argtypes = argtypes
    global _event_api
    _event_api = True
    for name, (restype, argtypes) in _PROTOS_0_4.items():
        fn = getattr(handle, name, None)
        if fn is None:
            _event_api = False
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    global has_net_audit
    fn = getattr(handle, "nsbox_net_audit_drain", None)
    if fn is not None:
        fn.restype = c_int
        fn.argtypes = [c_void_p, _ERR]
        has_net_audit = True
    global has_0_5
    has_0_5 = True
    for name, (restype, argtypes) in _PROTOS_0_5.items():
        fn = getattr(handle, name, None)
        if fn is None:
            has_0_5 = False
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    lib = handle
    return lib


def has_event_api():
    """Whether the loaded library has the event-loop exec API (0.4.0)."""
    load()
    return _event_api


def error_from(rc, err, what=None, cls=None):
    """The exception for a failed call: rc is its negative return, err the
    nsbox_error_t* it filled (or None).  Frees err."""
    code = -rc if rc < 0 else _errno.EIO
    msg = None
    if err:
        try:
            c = lib.nsbox_error_code(err)
            if c < 0:
                code = -c
            m = lib.nsbox_error_message(err)
            if m:
                msg = m.decode("utf-8", "replace")
        finally:
            lib.nsbox_error_free(err)
    if not msg:
        msg = os.strerror(code)
    elif cls is PolicyError:
        # libnsbox's policy messages name what they refuse ("policy 'x':",
        # "[Limits] Memory=12Q:", "file:3:"): a prefix would repeat it.
        what = None
    if what:
        msg = "%s: %s" % (what, msg)
    if cls is None:
        if code == _errno.ENOTCONN:
            cls = SandboxCrashed
        elif code in (_errno.EINVAL, _errno.ENOENT) and what and what.startswith("policy"):
            cls = PolicyError
        else:
            cls = SandboxError
    return cls(msg, code)


def check(rc, err, what=None, cls=None):
    if rc < 0:
        raise error_from(rc, err.value if err is not None else None, what, cls)


def take_string(p):
    """Copy and free a `char *` returned by libnsbox."""
    if not p:
        return None
    try:
        return ctypes.string_at(p).decode("utf-8", "replace")
    finally:
        lib.nsbox_free(p)


def new_err():
    return c_void_p()


def ref(x):
    return byref(x)
