"""nsbox.run(): one command in a new sandbox, like `nsbox run`."""

from __future__ import annotations

import collections
import ctypes
import errno as _errno
import io
import json
import os
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Union
from ctypes import POINTER, byref, c_char_p, c_int, c_void_p, cast, sizeof

from . import _lib
from . import _policy
from .errors import SandboxError

__all__ = ["run", "RunResult"]


class RunResult(collections.namedtuple("RunResult", [
        "exit_code", "exited", "exit_status", "signal", "time_limit", "oom_killed", "exec_errno",
        "peak_memory", "cpu_user", "cpu_system", "wall", "cgroup_mode", "enforced"])):
    """How a command run by nsbox.run() ended.

    exit_code:   what `nsbox run` would exit with: the command's status,
                 128+N for signal N, 123 memory limit, 124 time limit, 126/127
                 when the command could not be executed.
    exited:      True when the command exited (exit_status is its status);
                 False when a signal ended it (signal is its number).
    exit_status, signal: one of them is None.
    time_limit:  the timeout (the policy's TimeLimit) killed it.
    oom_killed:  the memory limit killed something in the sandbox.
    exec_errno:  why the command could not be executed (errno.ENOENT...), or 0.
    peak_memory: bytes; cpu_user, cpu_system, wall: seconds.
    cgroup_mode: "v2", "hybrid", "v1" or "none".
    enforced:    {"memory": bool, "pids": bool, "cpu": bool}: whether a cgroup
                 enforced the limit (False: an rlimit fallback or none).
    """

    __slots__ = ()

    exit_code: int
    exited: bool
    exit_status: Optional[int]
    signal: Optional[int]
    time_limit: bool
    oom_killed: bool
    exec_errno: int
    peak_memory: int
    cpu_user: float
    cpu_system: float
    wall: float
    cgroup_mode: str
    enforced: Dict[str, bool]

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _fd(f, default, what):
    if f is None:
        return default
    if isinstance(f, bool):
        raise TypeError("%s must be None, a file descriptor or a file object, not %r" % (what, f))
    if isinstance(f, int):
        fd = f
    else:
        fileno = getattr(f, "fileno", None)
        if fileno is None:
            raise TypeError("%s must be None, a file descriptor or a file object with fileno(), not %r"
                            % (what, f))
        # What Python buffered goes out before the command writes.
        flush = getattr(f, "flush", None)
        if flush is not None and what != "stdin":
            flush()
        try:
            fd = fileno()
        except io.UnsupportedOperation:
            raise TypeError("%s: %r has no file descriptor (use an open file, a pipe or a socket)"
                            % (what, f)) from None
    # ctypes keeps the low bits: stdin=2**32 was fd 0, the host's own stdin.
    if not 0 <= fd < 1 << 31:
        raise ValueError("%s: bad file descriptor %d" % (what, fd))
    return fd


_Arg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
_Stream = Union[None, int, IO[Any]]


def run(argv: Sequence[_Arg], policy: Optional[Union[str, "os.PathLike[str]"]] = "default",
        memory: Optional[Union[int, str]] = None, timeout: Optional[float] = None, pids: Optional[int] = None,
        cpus: Optional[float] = None, workspace: Optional[Union[str, "os.PathLike[str]"]] = None,
        share_net: bool = False, stdin: _Stream = None, stdout: _Stream = None, stderr: _Stream = None,
        forward_signals: bool = False, on_warning: Optional[Callable[[str], Any]] = None,
        workspace_size: Optional[Union[int, str]] = None, allow_net: Optional[List[str]] = None,
        net_log: Optional[Union[str, "os.PathLike[str]"]] = None,
        on_net_request: Optional[Callable[[Dict[str, Any]], Any]] = None,
        net_max_bytes_out: Optional[Union[int, str]] = None, net_max_bytes_in: Optional[Union[int, str]] = None,
        net_max_connections: Optional[int] = None) -> RunResult:
    """Run a command in a new sandbox, wait for it and return a RunResult.

    argv:        the command, a list of str/bytes/paths; argv[0] is searched
                 in the sandbox's PATH.
    policy, memory, pids, cpus, workspace, share_net, workspace_size: as for
                 Sandbox (a bounded workspace is copied back when the command
                 has ended).
    timeout:     seconds for the whole command (the policy's TimeLimit):
                 then it is killed and exit_code is 124.
    stdin, stdout, stderr: None (this process's fd 0, 1, 2), a file
                 descriptor, or a file object with fileno() (a pipe, an open
                 file).  The output is not captured: pass a pipe or a file.
                 A terminal among them (this process's, by default, under
                 a shell) is never handed over, as its ioctls would
                 outlive the command (TIOCEXCL, TCXONC, its modes): output
                 bound for it goes to a pseudo-terminal of the command's
                 own, relayed, and input from it through a pipe; the
                 terminal keeps its modes and its Ctrl-C (see
                 forward_signals).
    forward_signals: pass SIGINT, SIGTERM, SIGHUP and SIGQUIT this process
                 receives on to the command while it runs (one such run at a
                 time per process).  Otherwise a Ctrl-C reaches Python only
                 when the command has ended.
    on_warning:  fn(message) for the jail's warnings; None issues them as
                 nsbox.SandboxWarning.
    allow_net, net_log, net_max_bytes_out, net_max_bytes_in,
    net_max_connections: the egress allowlist and its audit log and
                 limits, as for Sandbox.
    on_net_request: fn(record) called with each audit record as a dict (as
                 for Sandbox), on this thread while the command runs; every
                 record has been delivered when run() returns.  What it
                 raises first is raised when run() returns (the command has
                 ended by then); later records still reach it.

    Returns whenever the command was started, whatever became of it
    (limit kills and a command that could not be executed included).
    Raises PolicyError for a bad policy or limit, SandboxError when the
    host can't create the sandbox.
    """
    if isinstance(argv, (str, bytes, os.PathLike)):
        raise TypeError("argv must be a list of arguments, e.g. ['ls', '-l'], not %r" % (argv,))
    args = [_policy.to_bytes(os.fspath(a), "argv") for a in argv]
    if not args:
        raise ValueError("argv is empty")
    timeout = _policy.check_timeout(timeout)
    forward_signals = _policy.check_bool(forward_signals, "forward_signals")
    if on_net_request is not None and not callable(on_net_request):
        raise TypeError("on_net_request must be callable, not %r" % (on_net_request,))
    sink = _policy.WarnSink(on_warning)
    fds = None
    if stdin is not None or stdout is not None or stderr is not None:
        fds = (c_int * 3)(_fd(stdin, 0, "stdin"), _fd(stdout, 1, "stdout"), _fd(stderr, 2, "stderr"))
    lib = _lib.load()
    if on_net_request is not None and not _lib.has_net_audit:
        raise SandboxError("%s is too old for on_net_request (it lacks the network audit callback)"
                           % _lib.library_path, _errno.ENOSYS)
    net = dict(allow_net=allow_net, net_log=net_log, max_bytes_out=net_max_bytes_out,
               max_bytes_in=net_max_bytes_in, max_connections=net_max_connections)
    p = _policy.new_policy(lib, policy, memory=memory, pids=pids, cpus=cpus, workspace=workspace,
                           share_net=share_net, time_limit=timeout, workspace_size=workspace_size,
                           net={k: v for k, v in net.items() if v is not None})
    net_errors = []

    def on_record(userdata, record, length):
        # Nothing may propagate into C: kept, raised once nsbox_run returns.
        try:
            on_net_request(json.loads(ctypes.string_at(record, length)))
        except BaseException as e:  # noqa: B036 (KeyboardInterrupt too: re-raised after the call)
            net_errors.append(e)

    try:
        cargv = (c_char_p * (len(args) + 1))(*args)
        warn_cb = _lib.WARN_FN(sink)
        # The helper makes the sandbox: a Python process may have threads,
        # so in_process (a clone from this process) is never used.
        opts = _lib.RunOpts(struct_size=sizeof(_lib.RunOpts), warn=warn_cb,
                            forward_signals=forward_signals, in_process=False)
        if on_net_request is not None:
            net_cb = _lib.NET_AUDIT_FN(on_record)
            opts.net_audit = net_cb
        if fds is not None:
            opts.stdio = cast(fds, POINTER(c_int))
        st = _lib.RunStatus(struct_size=sizeof(_lib.RunStatus))
        err = c_void_p()
        rc = lib.nsbox_run(p, cargv, byref(opts), byref(st), byref(err))
    finally:
        lib.nsbox_policy_free(p)
    if rc < 0:
        e = _lib.error_from(rc, err.value, "run %s" % args[0].decode("utf-8", "replace"))
        try:
            sink.flush()
        except BaseException as w:
            e.__context__ = w
        raise e
    sink.flush()
    if net_errors:
        raise net_errors[0]
    exited = bool(st.exited)
    return RunResult(
        exit_code=st.exit_code, exited=exited,
        exit_status=st.exit_status if exited else None,
        signal=None if exited else st.term_signal,
        time_limit=bool(st.time_limit), oom_killed=bool(st.oom_killed), exec_errno=st.exec_errno,
        peak_memory=st.peak_memory, cpu_user=st.cpu_user, cpu_system=st.cpu_system, wall=st.wall,
        cgroup_mode=st.cgroup_mode.decode("ascii", "replace"),
        enforced={"memory": bool(st.memory_enforced), "pids": bool(st.pids_enforced),
                  "cpu": bool(st.cpu_enforced)})
