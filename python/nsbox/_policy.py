"""Policies and jail warnings shared by Sandbox and run(): one place turns
the keyword arguments (policy, memory, pids, cpus, workspace, share_net,
time limit) into a libnsbox policy, and one collects the warnings the jail
reports while a sandbox is made."""

import errno as _errno
import os
import stat
import sys
import warnings
from ctypes import byref, c_void_p

from . import _lib
from .errors import PolicyError, SandboxWarning

__all__ = ["to_bytes", "new_policy", "packages", "apply_limits", "apply_net", "check_policy", "check_timeout",
           "WarnSink"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def to_bytes(s, what):
    """s (str or bytes) as bytes for a C string; TypeError for another type
    (str() of it would be passed on as if it were text: execute(None) ran
    "None"), ValueError for an embedded NUL."""
    if isinstance(s, (bytes, bytearray, memoryview)):
        b = bytes(s)
    elif isinstance(s, str):
        b = s.encode("utf-8", "surrogateescape")
    else:
        raise TypeError("%s must be str or bytes, not %s" % (what, type(s).__name__))
    if b"\0" in b:
        raise ValueError("%s contains a NUL character" % what)
    return b


# libnsbox's bound on a timeout (POLICY_TIME_LIMIT_MAX, about 31 years):
# past it, nsbox_exec refuses it (an infinite one killed the code at once).
TIMEOUT_MAX = 1e9


def check_timeout(timeout):
    """None, or timeout as a positive float of at most TIMEOUT_MAX seconds."""
    if timeout is None:
        return None
    try:
        if isinstance(timeout, bool):
            raise TypeError
        t = float(timeout)
    except (TypeError, ValueError):
        raise TypeError("timeout must be a number of seconds, not %r" % (timeout,)) from None
    if not t > 0:
        raise ValueError("timeout must be a positive number of seconds, not %r" % (timeout,))
    if not t <= TIMEOUT_MAX:
        raise ValueError("timeout must be at most %g seconds (None for the policy's), not %r"
                         % (TIMEOUT_MAX, timeout))
    return t


_U64 = 1 << 64


def check_bool(value, what, none_ok=False):
    """value as a bool: True, False (or 1, 0), and None where it means
    "the default".  Truthiness would make "no" or "false" from a config
    file mean yes."""
    if value is None and none_ok:
        return None
    if value not in (True, False) or not isinstance(value, (bool, int)):
        raise TypeError("%s must be True or False%s, not %r" % (what, " or None" if none_ok else "", value))
    return bool(value)


def check_uint(value, what, limit=_U64):
    """value as an int in [0, limit) for a C unsigned parameter; ctypes
    would silently keep its low bits (pids=2**64 was 0: no limit)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        # A fraction was cut: memory=0.5 or pids=0.5 became 0, no limit.
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise PolicyError("%s must be a whole number, not %r" % (what, value), _errno.EINVAL) from None
    if n < 0:
        raise PolicyError("%s must not be negative, not %r" % (what, value), _errno.EINVAL)
    if n >= limit:
        raise PolicyError("%s is too large: %r (at most %d)" % (what, value, limit - 1), _errno.ERANGE)
    return n


OUTPUT_LIMIT_MIN = 16
# Both streams and the value share one RESULT frame (16 MiB), and each
# undecodable byte of output travels as U+FFFD (3 bytes).
OUTPUT_LIMIT_MAX = 2 << 20


_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def check_output_limit(limit):
    """0 (the library's default, 1 MiB) for None, else limit in bytes
    (an int or a size string such as "64K"), within 16 bytes to 2 MiB."""
    if limit is None:
        return 0
    if isinstance(limit, str):
        text = limit.strip().upper()
        mult = 1
        if text[-1:] in _UNITS:
            mult = _UNITS[text[-1]]
            text = text[:-1]
        if not text.isdigit():
            raise PolicyError("output_limit %r: expected a size (e.g. 4096, 64K, 2M)" % (limit,), _errno.EINVAL)
        limit = int(text) * mult
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise PolicyError("output_limit must be a number of bytes or a size such as '64K', not %r" % (limit,),
                          _errno.EINVAL)
    if not OUTPUT_LIMIT_MIN <= limit <= OUTPUT_LIMIT_MAX:
        raise PolicyError("output_limit must be between %d bytes and %d MiB, not %d"
                          % (OUTPUT_LIMIT_MIN, OUTPUT_LIMIT_MAX >> 20, limit), _errno.EINVAL)
    return limit


def apply_limits(lib, p, memory=None, pids=None, cpus=None):
    """Set the cgroup limits given (None leaves one as the policy has it)."""
    err = c_void_p()
    if memory is not None:
        if isinstance(memory, str):
            rc = lib.nsbox_policy_set(p, b"Limits", b"Memory", to_bytes(memory, "memory"), byref(err))
        else:
            if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not memory >= 0:
                raise PolicyError("memory must be a number of bytes or a size such as '256M', not %r"
                                  % (memory,), _errno.EINVAL)
            rc = lib.nsbox_policy_set_memory(p, check_uint(memory, "memory"), byref(err))
        _lib.check(rc, err, "policy memory", PolicyError)
    if pids is not None:
        if isinstance(pids, bool) or isinstance(pids, (int, float)) and not pids >= 0:
            raise PolicyError("pids must be a count, not %r" % (pids,), _errno.EINVAL)
        _lib.check(lib.nsbox_policy_set_pids(p, check_uint(pids, "pids"), byref(err)), err, "policy pids",
                   PolicyError)
    if cpus is not None:
        try:
            if isinstance(cpus, bool):
                raise TypeError
            c = float(cpus)
        except (TypeError, ValueError):
            raise PolicyError("cpus must be a number of CPUs (0.5 = half a CPU), not %r" % (cpus,),
                              _errno.EINVAL) from None
        _lib.check(lib.nsbox_policy_set_cpus(p, c, byref(err)), err, "policy cpus", PolicyError)


def check_policy(lib, p, remote=False):
    """What nsbox_session_new() and nsbox_run() would refuse about the policy
    as a whole, raised as PolicyError before anything starts.  remote: the
    sandbox comes from nsboxd, which resolves a tree's name among its own
    builds: this host's caches play no part, so what resolving the name
    here says (the step "rootfs": not built, an unsafe cache) is left to the
    service, and only that.  A missing workspace or bind source is refused
    here either way."""
    err = c_void_p()
    rc = lib.nsbox_policy_check(p, byref(err))
    if remote and rc < 0 and lib.nsbox_error_step(err) == b"rootfs":
        lib.nsbox_error_free(err)
        return
    _lib.check(rc, err, "policy", PolicyError)


def check_workspace(path):
    """Refuse, before anything starts, a workspace the sandbox could not
    mount: missing, not a directory, or one this process can't enter and
    list (the sandbox's ids map to ours).  Raises PolicyError naming it."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise PolicyError("workspace=%r: %s" % (path, e.strerror)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise PolicyError("workspace=%r: not a directory" % (path,))
    if not os.access(path, os.R_OK | os.X_OK):
        raise PolicyError("workspace=%r: not accessible to uid %d" % (path, os.getuid()))


def apply_net(lib, p, allow_net=None, net_log=None, max_bytes_out=None, max_bytes_in=None,
              max_connections=None):
    """The egress allowlist ([Network] in nsbox-policy(5)): each rule of
    allow_net as one Allow=, net_log as Log=, the limits as MaxBytesOut=,
    MaxBytesIn= and MaxConnections=.  PolicyError names a refused rule."""
    err = c_void_p()
    if allow_net is not None:
        if isinstance(allow_net, (str, bytes)) or not hasattr(allow_net, "__iter__"):
            raise TypeError("allow_net must be a list of rules such as 'pypi.org' or '*.example.com:8443', "
                            "not %r" % (allow_net,))
        for rule in allow_net:
            if not isinstance(rule, str):
                raise TypeError("allow_net: a rule must be a str, not %r" % (rule,))
            _lib.check(lib.nsbox_policy_set(p, b"Network", b"Allow", to_bytes(rule, "allow_net rule"),
                                            byref(err)), err, "allow_net rule %r" % rule, PolicyError)
    if net_log is not None:
        _lib.check(lib.nsbox_policy_set(p, b"Network", b"Log", to_bytes(os.fspath(net_log), "net_log"),
                                        byref(err)), err, "net_log", PolicyError)
    for key, v, what in ((b"MaxBytesOut", max_bytes_out, "net_max_bytes_out"),
                         (b"MaxBytesIn", max_bytes_in, "net_max_bytes_in"),
                         (b"MaxConnections", max_connections, "net_max_connections")):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise PolicyError("%s must be %s, not %r" % (what, "a count" if key == b"MaxConnections"
                                                         else "a number of bytes or a size such as '10M'", v),
                              _errno.EINVAL)
        _lib.check(lib.nsbox_policy_set(p, b"Network", key, to_bytes(str(v), what), byref(err)), err, what,
                   PolicyError)


def new_policy(lib, policy="default", memory=None, pids=None, cpus=None, workspace=None, share_net=False,
               time_limit=None, workspace_size=None, rootfs=None, net=None, remote=False):
    """A new nsbox_policy_t* (the caller frees it with nsbox_policy_free):
    the named or file policy with the given settings applied and checked
    (net: apply_net's keyword arguments).  Raises PolicyError for anything
    refused, with nothing leaked."""
    err = c_void_p()
    out = c_void_p()
    # share_net="no" (or "false" from a config file) would share the host's network.
    check_bool(share_net, "share_net")
    name = None if policy is None else to_bytes(os.fspath(policy), "policy")
    _lib.check(lib.nsbox_policy_new(name, byref(out), byref(err)), err, "policy %s" % (policy,), PolicyError)
    p = out.value
    try:
        apply_limits(lib, p, memory, pids, cpus)
        if time_limit is not None:
            _lib.check(lib.nsbox_policy_set_time_limit(p, float(time_limit), byref(err)), err,
                       "policy time limit", PolicyError)
        if workspace is not None:
            # Relative to this process's working directory, as nsbox
            # python --workspace DIR takes it (the policy wants it whole).
            workspace = os.path.abspath(os.fspath(workspace))
            check_workspace(workspace)
            _lib.check(lib.nsbox_policy_set_workspace(p, to_bytes(workspace, "workspace"),
                                                      byref(err)), err, "policy workspace", PolicyError)
        if workspace_size is not None:
            v = to_bytes(str(workspace_size), "workspace_size")
            _lib.check(lib.nsbox_policy_set(p, b"Limits", b"WorkspaceSize", v,
                                            byref(err)), err, "policy workspace_size", PolicyError)
        if share_net:
            _lib.check(lib.nsbox_policy_set_share_net(p, True, byref(err)), err, "policy share_net",
                       PolicyError)
        if rootfs is not None:
            _lib.check(lib.nsbox_policy_set(p, b"Filesystem", b"RootFS", to_bytes(os.fspath(rootfs), "rootfs"),
                                            byref(err)), err, "policy rootfs", PolicyError)
        if net:
            apply_net(lib, p, **net)
        check_policy(lib, p, remote)
    except BaseException:
        lib.nsbox_policy_free(p)
        raise
    return p


def packages(lib, p):
    """The Debian packages the policy's root tree provides, as a list of
    {"name": ..., "version": ...} dicts (nsbox_policy_packages)."""
    import json
    err = c_void_p()
    out = c_void_p()
    _lib.check(lib.nsbox_policy_packages(p, byref(out), byref(err)), err, "list_packages", PolicyError)
    return json.loads(_lib.take_string(out.value))


def _caller_stacklevel():
    """The stacklevel for a warnings.warn() in the calling function that
    points at the first frame outside the nsbox package: the user's
    Sandbox(...), execute() or run() line."""
    f = sys._getframe(2)
    level = 2
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _PKG_DIR:
        f = f.f_back
        level += 1
    return level


class WarnSink:
    """The state of a nsbox_warn_fn.  libnsbox calls it synchronously, on the
    thread inside nsbox_session_new()/nsbox_run(); nothing may propagate into
    C, so an exception of on_warning is kept and raised by flush() after the
    call returns.  With no on_warning the messages are queued and flush()
    issues them as SandboxWarning, pointing at the user's line.

    The owner keeps the WARN_FN made from this object alive as long as
    libnsbox may call it; the sink holds no reference back to its owner."""

    def __init__(self, on_warning=None, defer=False):
        if on_warning is not None and not callable(on_warning):
            raise TypeError("on_warning must be callable, not %r" % (on_warning,))
        self.on_warning = on_warning
        # defer: queue for on_warning too, called by flush() (AsyncSandbox
        # makes its sandboxes in a worker thread; on_warning runs on the
        # loop's thread).
        self.defer = defer
        self.queued = []
        self.pending = None

    def __call__(self, userdata, message):
        try:
            text = message.decode("utf-8", "replace") if message else ""
            if self.on_warning is None or self.defer:
                self.queued.append(text)
            else:
                self.on_warning(text)
        except BaseException as e:  # noqa: B036 (KeyboardInterrupt too: re-raised after the C call)
            if self.pending is None:
                self.pending = e

    def flush(self):
        """Issue the queued warnings, then raise what on_warning raised."""
        q, self.queued = self.queued, []
        e, self.pending = self.pending, None
        if q and self.on_warning is not None:
            for m in q:
                try:
                    self.on_warning(m)
                except BaseException as x:  # noqa: B036
                    if e is None:
                        e = x
        elif q:
            level = _caller_stacklevel()
            for m in q:
                warnings.warn(m, SandboxWarning, stacklevel=level)
        if e is not None:
            raise e
