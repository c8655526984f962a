"""Sandbox: one kernel-isolated CPython session driven through libnsbox.

Threading: a Sandbox may be shared between threads (calls are serialised by
a lock); different Sandboxes run in parallel, since ctypes releases the GIL
around every libnsbox call.  Tool functions run on the thread that called
execute().  cancel() may be called from any thread; close() from another
thread cancels the running code before taking the lock.  A forked child
gets fresh locks (_after_fork_in_child): the parent's sandboxes are not its
own, and a lock held by a parent thread at the fork would never be freed.

_SandboxBase holds what Sandbox and AsyncSandbox (_async.py) share: the
options, the policy, starting and dropping the session, tools, limits, and
turning a result into a value or an exception.  Only the way an exec is
driven differs (blocking nsbox_exec here, the event-loop API there).
"""

from __future__ import annotations

import atexit
import ctypes
import errno as _errno
import inspect
import json
import os
import threading
import traceback
import weakref
from ctypes import byref, c_double, c_size_t, c_uint, c_uint64, c_void_p, sizeof
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union, overload

from . import _files
from . import _lib
from . import _policy
from . import _rich
from . import _sigint
from . import _tools
from . import _values
from .errors import (Cancelled, MemoryLimitExceeded, ProtocolError, SandboxCrashed, SandboxedException,
                     SandboxedMemoryError, SandboxedToolError, SandboxError, TimeLimitExceeded,
                     UndecodableValue, UndefinedVariable)

__all__ = ["Sandbox", "ExecResult"]

_F = TypeVar("_F", bound=Callable[..., Any])
OutputFn = Callable[[str, str], Any]
WarningFn = Callable[[str], Any]
NetRequestFn = Callable[[Dict[str, Any]], Any]
PathLike = Union[str, "os.PathLike[str]"]
Size = Union[int, str]

_live: "weakref.WeakSet[_SandboxBase]" = weakref.WeakSet()


@atexit.register
def _close_all():
    # Sandboxes still open at exit are closed while ctypes and libnsbox are
    # still usable, rather than from __del__ during interpreter teardown.
    for sb in list(_live):
        try:
            sb.close()
        except Exception:
            pass


def _after_fork_in_child():
    # A child forked while another thread was inside a call on a Sandbox
    # inherits that Sandbox's locks held by a thread that does not exist
    # here: its first call, or its close at exit, waited for them forever.
    # The child owns none of the parent's sandboxes (libnsbox refuses them:
    # "belongs to the parent process"), so it gets fresh locks and no call
    # in progress.
    for sb in list(_live):
        sb._lock = threading.RLock()
        sb._hlock = threading.Lock()
        sb._in_exec = 0
        if hasattr(sb, "_loop_guard"):
            sb._loop_guard = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ExecResult:
    """Everything about one run: value, stdout, stderr (str), error (the
    exception execute() would raise, or None), resource use (wall and
    cpu seconds, peak_memory bytes, tool_calls), and whether stdout or
    stderr was cut to the output limit (stdout_truncated, stderr_truncated:
    the text then keeps the head and the tail with a "[... N bytes
    truncated ...]" line between; stdout_bytes, stderr_bytes: how much the
    code wrote), and its rich results: displays (MIME bundles), files (/out)
    and whether the caps left any out (displays_truncated, files_truncated)."""

    __slots__ = ("value", "stdout", "stderr", "error", "wall", "cpu", "peak_memory", "tool_calls",
                 "stdout_truncated", "stderr_truncated", "stdout_bytes", "stderr_bytes",
                 "displays", "files", "displays_truncated", "files_truncated")

    value: Any
    stdout: str
    stderr: str
    error: Optional[SandboxError]
    wall: float
    cpu: float
    peak_memory: int
    tool_calls: int
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_bytes: int
    stderr_bytes: int
    # Rich results (python/README.md): MIME bundles in order, each a dict of
    # MIME type -> str (text types) or bytes (binary types); /out files.
    displays: List[Dict[str, Union[str, bytes]]]
    files: List[_rich.OutFile]
    displays_truncated: bool
    files_truncated: bool

    def __init__(self, value: Any = None, stdout: str = "", stderr: str = "",
                 error: Optional[SandboxError] = None, wall: float = 0.0, cpu: float = 0.0,
                 peak_memory: int = 0, tool_calls: int = 0, stdout_truncated: bool = False,
                 stderr_truncated: bool = False, stdout_bytes: Optional[int] = None,
                 stderr_bytes: Optional[int] = None) -> None:
        self.value = value
        self.stdout = stdout
        self.stderr = stderr
        self.error = error
        self.wall = wall
        self.cpu = cpu
        self.peak_memory = peak_memory
        self.tool_calls = tool_calls
        self.stdout_truncated = stdout_truncated
        self.stderr_truncated = stderr_truncated
        self.stdout_bytes = len(stdout.encode("utf-8", "replace")) if stdout_bytes is None else stdout_bytes
        self.stderr_bytes = len(stderr.encode("utf-8", "replace")) if stderr_bytes is None else stderr_bytes
        self.displays = []
        self.files = []
        self.displays_truncated = False
        self.files_truncated = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def truncated(self) -> bool:
        """Whether either stream was cut to the output limit."""
        return self.stdout_truncated or self.stderr_truncated

    @property
    def lines(self) -> List[str]:
        return self.stdout.splitlines()

    def raise_for_error(self) -> "ExecResult":
        if self.error is not None:
            raise self.error
        return self

    def __repr__(self) -> str:
        return "ExecResult(value=%r, stdout=%r, stderr=%r, error=%r)" % (
            self.value, self.stdout, self.stderr, self.error)


_bytes = _policy.to_bytes


def _cstr(s):
    """A NUL-free malloc'ed copy of s for libnsbox to free()."""
    b = s.encode("utf-8", "backslashreplace").replace(b"\0", b"\\0")
    return _lib.libc.strdup(b)


def run_awaitable(aw: Any, timeout: Optional[float] = None) -> Any:
    """The result of an awaitable (an async tool's coroutine) for a caller
    with no event loop to await it on: asyncio.run() in this thread, or in
    a new thread when an event loop is already running in this one (a
    synchronous Sandbox used from inside a coroutine).  With a timeout, the
    awaitable is cancelled when it runs out (asyncio.TimeoutError)."""
    import asyncio

    async def main() -> Any:
        if timeout is None:
            return await aw
        return await asyncio.wait_for(aw, timeout)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    box: Dict[str, Any] = {}
    started = threading.Event()

    async def in_thread() -> Any:
        box["loop"] = asyncio.get_running_loop()
        box["task"] = asyncio.current_task()
        started.set()
        return await main()

    def target() -> None:
        try:
            box["value"] = asyncio.run(in_thread())
        except BaseException as e:  # noqa: B036 (re-raised on the calling thread)
            box["error"] = e
        finally:
            started.set()

    t = threading.Thread(target=target, name="nsbox-async-tool", daemon=True)
    t.start()
    try:
        t.join()
    except BaseException:
        # Ctrl-C (or another exception) while waiting: cancel the tool's
        # coroutine in its thread, which would otherwise run on unowned,
        # for good with no time limit.
        started.wait(1)
        loop, task = box.get("loop"), box.get("task")
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # its loop has ended already
        t.join(5)
        raise
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _exit_code(msg):
    """SystemExit's code from str() of it, text from inside: an int when it
    is one in ASCII digits within int()'s digit limit, else the text
    (None when empty).  str.isdigit() also takes "²", which int() refuses,
    and "--5" passed lstrip("-"): execute() raised a bare ValueError."""
    digits = msg[1:] if msg.startswith("-") else msg
    if digits and len(digits) <= 4000 and digits.isascii() and digits.isdigit():
        return int(msg)
    return msg or None


def _running(frame):
    """Whether frame is still running; if not, its locals are cleared."""
    try:
        frame.clear()
    except RuntimeError:
        return True
    return False


def _forget_locals(e):
    """Clear the local variables of the frames in e's traceback, and in
    those of the exceptions it was raised from or during.  The frames at
    its head still running are the dispatch's own (the handler that caught
    it, holding the call's JSON text) and are left out of it; printed, the
    rest of each traceback is unchanged."""
    seen = set()
    chain = [e]
    while chain:
        x = chain.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        tb = x.__traceback__
        while tb is not None and _running(tb.tb_frame):
            tb = tb.tb_next
        x.__traceback__ = tb
        traceback.clear_frames(tb)
        chain += [x.__cause__, x.__context__]


class _Dispatch:
    """The tool table and the callbacks' state.  The C callbacks reference
    this object, never the Sandbox, so that dropping the last reference to a
    Sandbox frees it at once (no cycle through ctypes)."""

    MAX_FAILURES = 64
    MAX_FAILURE_BYTES = 1 << 20

    def __init__(self):
        self.tools = {}
        self.pending = None      # a BaseException (KeyboardInterrupt...) to re-raise after exec
        self.failures = {}       # message sent inside -> the host exception, for __cause__
        self.failure_bytes = 0   # the length of failures' messages, together
        self.handle = None       # the live session, to cancel it on KeyboardInterrupt
        self.on_output = None
        self.on_net_request = None
        self.net_error = None    # what on_net_request raised first, raised after the call
        self.net_hold = None     # a list: records held while the session is freed off the loop

    # The steps of a tool call, shared with AsyncSandbox: invoke() decodes
    # the call and calls the function (whose result may be an awaitable);
    # failed() records a host exception and gives the message sent inside;
    # encode() gives (json bytes or None, error message or None).

    def invoke(self, t, args_json):
        call = _values.parse(args_json)
        try:
            args = _values.decode(call.get("args") or [])
            # kwargs' keys are names, never $-tags: decode the values only.
            kwargs = call.get("kwargs") or {}
            for k, x in kwargs.items():
                if type(x) in _values.NESTED:
                    kwargs[k] = _values.decode(x)
        except _values.DECODE_ERRORS as e:
            # Chosen by the sandbox: the call fails (a ToolError inside),
            # the function is not called.
            raise UndecodableValue("the sandbox sent tool %s arguments the host cannot decode (%s: %s)"
                                   % (t.name, type(e).__name__, str(e)[:200])) from e
        return t.call(args, kwargs)

    def failed(self, e):
        msg = _tools.error_message(e)
        # Kept past the call (until the next exec starts, for __cause__):
        # its traceback's frames hold the call's arguments, which the
        # sandbox chose, decoded (several times the frame's bytes).  60
        # failing calls of 4 MiB held 1.3 GB of the host's memory after
        # the exec.  The frames keep their file and line, not their
        # locals; and the messages kept are bounded in bytes too (a tool's
        # KeyError(name) quotes the sandbox's name).
        _forget_locals(e)
        if len(self.failures) >= self.MAX_FAILURES or self.failure_bytes + len(msg) > self.MAX_FAILURE_BYTES:
            self.failures.clear()
            self.failure_bytes = 0
        if len(msg) <= self.MAX_FAILURE_BYTES:
            self.failures[msg] = e
            self.failure_bytes += len(msg)
        return msg

    @staticmethod
    def encode(tname, value):
        try:
            return _values.dumps(value), None
        except (TypeError, ValueError, RecursionError) as e:
            return None, ("tool %s returned a value that cannot cross into the sandbox: %s" % (tname, e))

    def tool(self, userdata, name, args_json, result_out, error_out):
        try:
            tname = name.decode("utf-8", "replace")
            t = self.tools.get(tname)
            if t is None:
                error_out[0] = _cstr("no tool named %r on the host" % tname)
                return 1
            try:
                value = self.invoke(t, args_json)
                if inspect.isawaitable(value):
                    value = run_awaitable(value, self.time_left())
            except Exception as e:
                error_out[0] = _cstr(self.failed(e))
                return 1
            data, msg = self.encode(tname, value)
            if msg is not None:
                error_out[0] = _cstr(msg)
                return 1
            if data != b"null":
                p = _lib.libc.strdup(data)
                if not p:
                    error_out[0] = None
                    return 1
                result_out[0] = p
            return 0
        except BaseException as e:  # KeyboardInterrupt, SystemExit: end the exec, re-raise after it
            if self.pending is None:
                self.pending = e
            h = self.handle
            if h:
                _lib.lib.nsbox_cancel(h)
            try:
                error_out[0] = _cstr("the host was interrupted")
            except BaseException:
                pass
            return 1
        finally:
            # This frame outlives the call as the f_back of a failure's
            # traceback (failed()): not with the sandbox's JSON in it.
            args_json = value = None

    def time_left(self):
        """Seconds to the running exec's time limit (a little past it, so
        that an async tool cancelled at the deadline answers after it), or
        None when it has none."""
        h = self.handle
        if h is None or not _lib.has_0_5:
            return None
        left = _lib.lib.nsbox_exec_time_left(h)
        return None if left < 0 else left + 0.02

    def net(self, userdata, record, length):
        """nsbox_net_audit_fn: one egress record, on the thread driving the
        session (inside nsbox_exec, nsbox_exec_advance or
        nsbox_session_free).  Nothing propagates into C: the first
        exception is kept and raised when that call returns; later records
        still reach on_net_request.  A KeyboardInterrupt also cancels the
        running exec, as one in a tool does."""
        if self.net_hold is not None:
            self.net_hold.append(ctypes.string_at(record, length))
            return
        self.deliver(ctypes.string_at(record, length))

    def deliver(self, record):
        """One record (JSON bytes) to on_net_request, as net() does."""
        try:
            fn = self.on_net_request
            if fn is not None:
                fn(json.loads(record))
        except BaseException as e:  # noqa: B036 (KeyboardInterrupt too: re-raised after the C call)
            if self.net_error is None:
                self.net_error = e
            if not isinstance(e, Exception):
                h = self.handle
                if h:
                    _lib.lib.nsbox_cancel(h)

    def take_net_error(self):
        e, self.net_error = self.net_error, None
        return e

    def output(self, userdata, stream, data, length):
        try:
            fn = self.on_output
            if fn is not None:
                fn("stdout" if stream == 1 else "stderr",
                   ctypes.string_at(data, length).decode("utf-8", "replace"))
        except BaseException as e:
            if self.pending is None:
                self.pending = e


_MISSING = object()


_DOC_OPTIONS = """
    policy:      "default", "strict", "permissive", a policy file path, or None
                 (the default policy); see nsbox-policy(5).
    memory:      memory limit of the whole sandbox: bytes (int) or a size string
                 ("256M", "1G"); 0 for none.  None keeps the policy's.
    timeout:     seconds per execute() call (None: the policy's TimeLimit): a
                 wall-clock limit of the whole call, time in host tools
                 included.  Past it the call raises TimeLimitExceeded; an
                 async tool still running then is cancelled, a sync one
                 can't be interrupted, so the call fails when it returns.
    pids, cpus:  process/thread cap and CPU share (0.5 = half a CPU).
    workspace:   a host directory mounted writable at /workspace.
    workspace_size: what the sandbox may write there: bytes or a size string
                 ("64M"); "infinity" binds the directory as it is (live writes,
                 unbounded).  None keeps the policy's (256M by default).  A
                 bounded workspace is an overlay: the host directory sees the
                 sandbox's changes when the session is freed (close(),
                 restart(); after a kill, with auto_restart, the next call,
                 which starts a fresh one), not while it runs (nsbox(1),
                 --workspace-size).
    share_net:   share the host's network namespace.
    cold:        start CPython afresh instead of forking the helper's template.
    spare:       have the helper keep one idle sandbox with this policy ready, so
                 that the next Sandbox with the same settings (or a restart)
                 starts in about a millisecond.  Costs one idle sandbox (the
                 last policy's).  None (the default): a spare unless the
                 policy names host paths (workspace, binds, a rootfs directory;
                 not a built tree's name); True:
                 always; False: never.  NSBOX_SPARE=0 in the environment
                 turns it off for every Sandbox.
    auto_restart: after the sandbox dies (time or memory limit kill, crash) the
                 next call starts a fresh one (True), or raises SandboxCrashed
                 until restart() is called (False).
    max_tool_calls: tool calls allowed per execute() (None: 1000).
    output_limit: bytes of stdout and of stderr kept per execute(): bytes or a
                 size string, 16 bytes to 2 MiB (None: 1 MiB).  Past it the
                 head and the tail are kept with a "[... N bytes truncated
                 ...]" line between, and run()'s ExecResult says so
                 (stdout_truncated, stderr_truncated).
    on_output:   fn(stream, text) called as the code prints ("stdout"/"stderr").
    on_warning:  fn(message) called with the jail's warnings when a sandbox is
                 made (e.g. a limit this host can't enforce with a cgroup, and
                 the fallback used); None issues them as nsbox.SandboxWarning.
    allow_net:   the egress allowlist: a list of rules, each HOST[:PORT]
                 ("pypi.org", "*.example.com:8443", "10.99.0.0/24"; the port
                 defaults to 443 and 80), as --allow-net and [Network] Allow=
                 (nsbox-policy(5)).  The sandbox keeps its own network with
                 only lo, and reaches those destinations through a proxy on
                 the host side (HTTP_PROXY & co. are set inside).  Added to
                 the policy's own rules.  A bad rule raises PolicyError.
    net_log:     a host file the proxy appends one JSON line to per
                 connection or DNS query ([Network] Log=); no symlink in
                 its path is followed (but /dev/fd/N and the like).
    on_net_request: fn(record) called with each audit record as a dict
                 (time, kind, host, port, addr, sni, decision, reason,
                 bytes_out, bytes_in), when its connection or query ends:
                 during the execute() that drives the session then, else
                 during a later one or close().  On the thread calling
                 execute() (AsyncSandbox: the loop's).  What it raises is
                 raised when that call returns; the session lives on.  While
                 nothing drives the session (between calls) up to 256 KiB
                 of records wait, and then the sandbox's network waits:
                 records are never dropped.  A sandbox with it never uses a
                 warm spare.
    net_max_bytes_out, net_max_bytes_in, net_max_connections: the egress
                 limits for the sandbox's life ([Network] MaxBytesOut= etc.):
                 bytes or a size string ("10M"), and a count.
    connect:     the path of an nsboxd socket (nsboxd(8)): the sandbox comes
                 from the service instead of this process's helper; None
                 uses $NSBOX_CONNECT when set.
    rootfs:      a built root tree's name ("datascience"; `nsbox rootfs
                 build NAME`) or a root directory, instead of the host's
                 /usr.  A tree's Preload= modules are imported before the
                 session starts (by the warm spare, off the critical path).
"""


class _SandboxBase:
    """What Sandbox and AsyncSandbox share: options, policy, the session's
    life cycle, tools, limits and the reading of results."""

    _kind = "Sandbox"

    def __init__(self, policy: Optional[PathLike] = "default", memory: Optional[Size] = None,
                 timeout: Optional[float] = None, pids: Optional[int] = None, cpus: Optional[float] = None,
                 workspace: Optional[PathLike] = None, share_net: bool = False, cold: bool = False,
                 auto_restart: bool = True, max_tool_calls: Optional[int] = None,
                 on_output: Optional[OutputFn] = None, spare: Optional[bool] = None,
                 on_warning: Optional[WarningFn] = None, connect: Optional[PathLike] = None,
                 output_limit: Optional[Size] = None, workspace_size: Optional[Size] = None,
                 rootfs: Optional[PathLike] = None, allow_net: Optional[List[str]] = None,
                 net_log: Optional[PathLike] = None, on_net_request: Optional[NetRequestFn] = None,
                 net_max_bytes_out: Optional[Size] = None, net_max_bytes_in: Optional[Size] = None,
                 net_max_connections: Optional[int] = None) -> None:
        # Attributes close() relies on come first: __init__ may fail half way.
        self._closed = False
        self._owner_pid = os.getpid()
        self._lock = threading.RLock()
        self._hlock = threading.Lock()
        self._sess = None
        self._corpse = None
        self._policy = None
        self._in_exec = 0
        self._restart_pending = False
        self._dead = None
        self._auto_restart = _policy.check_bool(auto_restart, "auto_restart")
        cold = _policy.check_bool(cold, "cold")
        spare = _policy.check_bool(spare, "spare", none_ok=True)
        self._dispatch = d = _Dispatch()
        self._lib = lib = _lib.load()
        self._check_library()
        # Kept for the life of the object: libnsbox holds these pointers.
        self._tool_cb = self._make_tool_cb()
        self._output_cb = self._make_output_cb(on_output)
        if on_output is not None and not callable(on_output):
            raise TypeError("on_output must be callable, not %r" % (on_output,))
        d.on_output = on_output
        # The sink holds no reference to the Sandbox (see _Dispatch).
        self._warn = _policy.WarnSink(on_warning, defer=self._defer_warnings)
        self._warn_cb = _lib.WARN_FN(self._warn)
        self._sess_opts = _lib.SessionOpts(struct_size=sizeof(_lib.SessionOpts), cold=bool(cold),
                                           output_limit=_policy.check_output_limit(output_limit),
                                           max_tool_calls=_policy.check_uint(max_tool_calls or 0, "max_tool_calls",
                                                                             1 << 32),
                                           output=self._output_cb,
                                           warn=self._warn_cb, spare=spare is True, no_spare=spare is False,
                                           # ctypes may run Python threads: always the helper
                                           in_process=False)
        # nsboxd(8): kept alive with the options, which point at it.
        self._connect = _policy.to_bytes(os.fsencode(connect), "connect") if connect is not None else None
        self._sess_opts.connect = self._connect
        if on_net_request is not None:
            if not callable(on_net_request):
                raise TypeError("on_net_request must be callable, not %r" % (on_net_request,))
            if not _lib.has_net_audit:
                raise SandboxError("%s is too old for on_net_request (it lacks the network audit callback)"
                                   % _lib.library_path, _errno.ENOSYS)
            d.on_net_request = on_net_request
            self._net_cb = _lib.NET_AUDIT_FN(d.net)
            self._sess_opts.net_audit = self._net_cb
        self._timeout = None
        # execute() and execute_with_output() drop rich results: they ask
        # for none (plain), run() for them.
        self._exec_opts = _lib.ExecOpts(struct_size=sizeof(_lib.ExecOpts), timeout=0.0, repl=True)
        self._plain_opts = _lib.ExecOpts(struct_size=sizeof(_lib.ExecOpts), timeout=0.0, repl=True,
                                         flags=_lib.EXEC_PLAIN)
        self._set_timeout(timeout)
        net = dict(allow_net=allow_net, net_log=net_log, max_bytes_out=net_max_bytes_out,
                   max_bytes_in=net_max_bytes_in, max_connections=net_max_connections)
        self._policy = _policy.new_policy(lib, policy, memory=memory, pids=pids, cpus=cpus,
                                          workspace=workspace, share_net=share_net,
                                          workspace_size=workspace_size, rootfs=rootfs,
                                          net={k: v for k, v in net.items() if v is not None},
                                          remote=bool(connect is not None or os.environ.get("NSBOX_CONNECT")))

    # Hooks for the subclasses.
    _defer_warnings = False

    def _check_library(self):
        pass

    def _make_tool_cb(self):
        return _lib.TOOL_FN(self._dispatch.tool)

    def _make_output_cb(self, on_output):
        return _lib.OUTPUT_FN(self._dispatch.output) if on_output is not None else _lib.OUTPUT_FN()

    def list_packages(self) -> List[Dict[str, str]]:
        """The Debian packages this sandbox's root tree provides: a list of
        {"name": ..., "version": ...}, read on the host from the tree's dpkg
        status file."""
        with self._lock:
            if self._closed or not self._policy:
                raise SandboxError("the sandbox is closed", _errno.EBADF)
            return _policy.packages(self._lib, self._policy)

    def _busy_in_tool(self):
        """True when called from a tool of this sandbox's running exec."""
        return self._in_exec > 0

    # ---- life cycle ----

    def _set_timeout(self, timeout):
        timeout = _policy.check_timeout(timeout)
        self._timeout = timeout
        self._exec_opts.timeout = self._plain_opts.timeout = timeout or 0.0

    def _exec_opts_for(self, timeout, mode):
        """The options of an exec whose result is used as mode says
        (_exec's)."""
        plain = mode != 2
        if timeout is None:
            return self._plain_opts if plain else self._exec_opts
        timeout = _policy.check_timeout(timeout)
        return _lib.ExecOpts(struct_size=sizeof(_lib.ExecOpts), timeout=timeout, repl=True,
                             flags=_lib.EXEC_PLAIN if plain else 0)

    @staticmethod
    def _code_bytes(code):
        b = code.encode("utf-8") if type(code) is str else _bytes(code, "code")
        if b"\0" in b:
            raise ValueError("code contains a NUL character")
        return b

    def _new_session(self, out=None):
        """nsbox_session_new: the blocking part of a start (1-20 ms); may run
        in a worker thread.  Returns the handle, or raises with the queued
        warnings flushed first.  out: a c_void_p the handle is also left
        in, for a caller that must free it should an exception (a Ctrl-C
        handled as the call returns) come before it is adopted."""
        lib = self._lib
        err = c_void_p()
        if out is None:
            out = c_void_p()
        policy = self._policy
        if policy is None:
            raise SandboxError("the sandbox is closed", _errno.EBADF)
        rc = lib.nsbox_session_new(policy, byref(self._sess_opts), byref(out), byref(err))
        if rc < 0:
            raise _lib.error_from(rc, err.value, "starting the sandbox")
        return out.value

    def _install(self, h, out=None):
        """Adopt a new session handle: warnings, tools.  Frees h on failure
        (and then clears out, the c_void_p _start keeps it in)."""
        lib = self._lib
        try:
            self._warn.flush()
            for t in self._dispatch.tools.values():
                self._add_tool(h, t)
        except BaseException:
            if out is not None:
                out.value = None
            lib.nsbox_session_free(h)
            raise
        with self._hlock:
            self._sess = h
            self._dispatch.handle = h
        self._restart_pending = False
        self._dead = None

    def _start(self):
        # A SIGINT during nsbox_session_new is handled as it returns: the
        # KeyboardInterrupt came before the new handle was kept anywhere,
        # and its sandbox ran on, owned by nobody, until the process ended.
        out = c_void_p()
        try:
            try:
                h = self._new_session(out)
            except SandboxError as e:
                try:
                    # The warnings may say why (a fallback that failed).
                    self._warn.flush()
                except BaseException as w:
                    e.__context__ = w
                raise
            self._install(h, out)
        except BaseException:
            h, out.value = out.value, None
            if h and self._sess != h:
                self._lib.nsbox_session_free(h)
            raise

    def _add_tool(self, h, t):
        err = c_void_p()
        desc = t.description.encode("utf-8", "backslashreplace").replace(b"\0", b"") or None
        _lib.check(self._lib.nsbox_session_add_tool(h, t.name.encode(), t.schema_json, desc, self._tool_cb,
                                                    None, byref(err)), err, "tool %s" % t.name)

    def _drop(self, why=None):
        with self._hlock:
            h = self._sess
            self._sess = None
            self._dispatch.handle = None
            if why is not None and h:
                # The sandbox is dead: its handle is kept, freed by the
                # next start, restart() or close() (under the lock, where
                # close() from another thread takes it).  Freeing copies a
                # bounded workspace back, which is not this call's to wait
                # for (nor an event loop's, for an AsyncSandbox).
                old, self._corpse = self._corpse, h
                h = old
        if why is not None:
            self._dead = why
            if h:
                self._lib.nsbox_session_free(h)
            return
        h2 = self._take_corpse()
        for x in (h, h2):
            if x:
                self._lib.nsbox_session_free(x)

    def _take_corpse(self):
        """The dead session _drop(why) kept (None: none), now the caller's."""
        with self._hlock:
            h, self._corpse = self._corpse, None
        return h

    def _needs_start(self):
        """Whether the next call must start a sandbox (raising when it may
        not); a pending restart drops the old one first."""
        h = self._sess
        if h is not None and not self._restart_pending:
            return False
        if self._closed:
            raise SandboxError("the sandbox is closed", _errno.EBADF)
        if self._busy_in_tool():
            raise SandboxError("a tool cannot restart the sandbox that is calling it", _errno.EBUSY)
        if h is None and self._dead is not None and not self._auto_restart:
            raise SandboxCrashed("the sandbox died (%s); call restart() for a fresh one" % self._dead,
                                 _errno.ENOTCONN)
        self._drop()
        return True

    def _session(self):
        """The live session, started afresh when a restart is due."""
        h = self._sess
        if h is not None and not self._restart_pending:
            return h
        if self._needs_start():
            self._start()
        return self._sess

    def _check_restart(self):
        if self._closed:
            raise SandboxError("the sandbox is closed", _errno.EBADF)
        if self._busy_in_tool():
            raise SandboxError("a tool cannot restart the sandbox that is calling it", _errno.EBUSY)

    def close(self) -> None:
        """Kill the sandbox and free everything.  Idempotent.  From another
        thread while a call runs, the running code is cancelled first
        (that call raises Cancelled), instead of waiting for it to end."""
        if self._closed:
            return
        lock = self._lock
        if not lock.acquire(blocking=False):
            # Another thread is in a call: an execute() may run for its whole
            # time limit, or forever without one.
            with self._hlock:
                if self._sess:
                    self._lib.nsbox_cancel(self._sess)
            lock.acquire()
        try:
            if self._closed:
                return
            h = self._close_begin()
            try:
                if h:
                    self._lib.nsbox_session_free(h)
            finally:
                self._close_end()
        finally:
            lock.release()

    def _close_begin(self):
        """close() up to freeing the session: marks it closed and returns
        the handle to free (None: nothing to free); _close_end() after,
        always: it raises what _before_close raised, once the handle is
        freed (AsyncSandbox's loop closed must not leave the sandbox
        running)."""
        if self._busy_in_tool():
            raise SandboxError("a tool cannot close the sandbox that is calling it", _errno.EBUSY)
        self._closed = True
        _live.discard(self)
        self._close_error = None
        if os.getpid() != self._owner_pid:
            # A forked child inherited the object, not the sandbox: the
            # parent still owns the session and the helper.  Freeing the
            # handle here only closes the child's copies of its fds
            # (nsbox_session_free abandons a parent's session).
            self._policy = None
        else:
            try:
                self._before_close()
            except BaseException as e:
                self._close_error = e
            self._policy_to_free = True
        with self._hlock:
            h = self._sess or self._corpse
            self._sess = self._corpse = None
            self._dispatch.handle = None
        return h

    def _close_end(self):
        e, self._close_error = getattr(self, "_close_error", None), None
        if getattr(self, "_policy_to_free", False):
            self._policy_to_free = False
            p, self._policy = self._policy, None
            if p:
                self._lib.nsbox_policy_free(p)
            if e is None:
                # The last records come while the session is freed.
                e = self._dispatch.take_net_error()
            # And its last warnings: a workspace's write-back that failed
            # (the sandbox's changes, not all of them on the host).
            try:
                self._warn.flush()
            except BaseException as w:  # noqa: B036 (on_warning's, raised as close() returns)
                if e is None:
                    e = w
        if e is not None:
            raise e

    def _before_close(self):
        pass

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    # A copy would share the session handle: closing one freed it under the
    # other (use after free, then a double free: a segfault).
    def __copy__(self) -> Any:
        raise TypeError("a %s cannot be copied: it owns a running sandbox (make a new one)" % self._kind)

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError("a %s cannot be copied: it owns a running sandbox (make a new one)" % self._kind)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a %s cannot be pickled: it owns a running sandbox" % self._kind)

    # ---- results ----

    def _text(self, fn, r):
        n = c_size_t()
        p = fn(r, byref(n))
        if not p or not n.value:
            return ""
        return ctypes.string_at(p, n.value).decode("utf-8", "replace")

    def _outcome(self, r, status, mode):
        """A result as the value (mode 0), (value, stdout) (mode 1), both
        raising its error, or an ExecResult (mode 2)."""
        lib = self._lib
        d = self._dispatch
        if d.pending is not None:
            e, d.pending = d.pending, None
            raise e
        e = d.take_net_error()
        if e is not None:
            raise e
        out = self._text(lib.nsbox_result_stdout, r)
        errtext = self._text(lib.nsbox_result_stderr, r)
        value = None
        error = None
        if status == _lib.OK:
            try:
                value = _values.loads(lib.nsbox_result_value(r))
            except UndecodableValue as e:
                if mode != 2:
                    raise
                error = e  # run() raises for misuse only
        else:
            error = self._error(r, status, out, errtext)
        if mode != 2:
            if error is not None:
                raise error
            return value if mode == 0 else (value, out)
        wall, cpu, peak, calls = c_double(), c_double(), c_uint64(), c_uint()
        lib.nsbox_result_usage(r, byref(wall), byref(cpu), byref(peak), byref(calls))
        (otrunc, obytes), (etrunc, ebytes) = self._truncation(r)
        res = ExecResult(value, out, errtext, error, wall.value, cpu.value, peak.value, calls.value,
                         otrunc, etrunc, obytes, ebytes)
        res.displays, res.files, res.displays_truncated, res.files_truncated = _rich.collect(lib, r)
        return res

    def _truncation(self, r):
        """((stdout truncated, bytes written), (stderr ...)) of a result."""
        lib = self._lib
        if _lib.has_0_5:
            out = []
            for stream in (1, 2):
                n = c_uint64()
                t = lib.nsbox_result_truncated(r, stream, byref(n))
                out.append((bool(t), n.value))
            return tuple(out)
        # An older library: the RESULT message has the flags.
        msg = _values.parse(lib.nsbox_result_json(r) or b"{}")
        return tuple((msg.get(s + "_truncated") is True, msg.get(s + "_bytes") or 0) for s in ("stdout", "stderr"))

    def _alive(self):
        info = _lib.SessionInfo(struct_size=sizeof(_lib.SessionInfo))
        err = c_void_p()
        h = self._sess
        if not h:
            return False
        rc = self._lib.nsbox_session_info(h, byref(info), byref(err))
        if rc < 0:
            if err.value:
                self._lib.nsbox_error_free(err.value)
            return False
        return bool(info.alive)

    def _error(self, r, status, out, errtext):
        lib = self._lib

        def s(p):
            return p.decode("utf-8", "replace") if p else ""

        etype = s(lib.nsbox_result_error_type(r))
        msg = s(lib.nsbox_result_error_message(r))
        tb = s(lib.nsbox_result_traceback(r))
        if status == _lib.EXCEPTION:
            if etype in ("nsbox.TimeLimitExceeded", "TimeLimitExceeded"):
                e = TimeLimitExceeded(msg or "time limit exceeded")
            elif etype in ("nsbox.Cancelled", "Cancelled"):
                e = Cancelled(msg or "cancelled")
            else:
                cls = SandboxedException
                if etype in ("nsbox.ToolError", "ToolError"):
                    cls = SandboxedToolError
                elif etype == "MemoryError":
                    cls = SandboxedMemoryError
                code = None
                if etype == "SystemExit":
                    code = _exit_code(msg)
                e = cls(etype, msg, tb, out, errtext, code)
                if cls is SandboxedToolError and msg in self._dispatch.failures:
                    e.__cause__ = self._dispatch.failures[msg]
                return e
        elif status == _lib.TIME_LIMIT:
            e = TimeLimitExceeded(msg or "time limit exceeded")
        elif status == _lib.CANCELLED:
            e = Cancelled(msg or "cancelled")
        elif status == _lib.MEMORY_LIMIT:
            e = MemoryLimitExceeded(msg or "memory limit exceeded")
        elif status == _lib.PROTOCOL_ERROR:
            e = ProtocolError(msg or "protocol error")
        elif status == _lib.CRASHED:
            e = SandboxCrashed(msg or "the sandbox died")
        else:
            e = SandboxCrashed("unknown result status %d: %s" % (status, msg))
        e.stdout = out
        e.stderr = errtext
        e.traceback = tb
        if status in (_lib.MEMORY_LIMIT, _lib.PROTOCOL_ERROR, _lib.CRASHED) or not self._alive():
            self._drop(e.message)
            e.session_lost = True
            e.message = e.message + ("; the sandbox was lost: the next call starts a fresh one"
                                     if self._auto_restart else "; the sandbox was lost: call restart()")
            e.args = (e.message,)
        else:
            e.session_lost = False
        return e

    def _exec_failed(self, rc, err):
        """The exception for a failed nsbox_exec/nsbox_exec_start (nothing ran)."""
        e = _lib.error_from(rc, err, "execute")
        if e.errno == _errno.ENOTCONN:
            self._drop(str(e))
            e.session_lost = True
        return e

    # ---- state (on a live handle; the callers lock) ----

    def _set_var(self, h, name, data):
        err = c_void_p()
        rc = self._lib.nsbox_set_var(h, name.encode(), data, byref(err))
        self._check_state(rc, err, "set_variable %s" % name)

    def _get_var(self, h, name, default):
        err = c_void_p()
        out = c_void_p()
        # One try from the call on: a KeyboardInterrupt handled as it
        # returns must not leak the value's buffer.
        try:
            rc = self._lib.nsbox_get_var(h, name.encode(), byref(out), byref(err))
            if rc == -_errno.ENOENT:
                if err.value:
                    self._lib.nsbox_error_free(err.value)
                if default is not _MISSING:
                    return default
                raise UndefinedVariable("the sandbox has no global named %r" % name, _errno.ENOENT)
            self._check_state(rc, err, "get_variable %s" % name)
            p = out.value
            return _values.loads(ctypes.string_at(p)) if p else None
        finally:
            p, out.value = out.value, None
            if p:
                self._lib.nsbox_free(p)

    def _reset(self, h):
        err = c_void_p()
        self._check_state(self._lib.nsbox_reset(h, byref(err)), err, "reset")

    def _info(self, h):
        info = _lib.SessionInfo(struct_size=sizeof(_lib.SessionInfo))
        err = c_void_p()
        _lib.check(self._lib.nsbox_session_info(h, byref(info), byref(err)), err, "info")
        return {
            "pid": info.pid, "alive": bool(info.alive),
            "cgroup": info.cgroup.decode("utf-8", "replace"),
            "memory_limit": info.memory_limit, "pids_limit": info.pids_limit,
            "cpus_limit": info.cpus_limit, "memory_current": info.memory_current,
            "memory_peak": info.memory_peak,
            # The version number only ("3.11.2"), should the runner
            # report the whole of sys.version.
            "python": (info.python.decode("utf-8", "replace").split() or [""])[0],
        }

    def _check_state(self, rc, err, what):
        if rc < 0:
            e = _lib.error_from(rc, err.value, what)
            if e.errno == _errno.ENOTCONN:
                self._drop(str(e))
                e.session_lost = True
            raise e

    # ---- limits ----

    def set_limits(self, memory: Optional[Size] = None, timeout: Optional[float] = None,
                   pids: Optional[int] = None, cpus: Optional[float] = None) -> None:
        """Change limits; None leaves one as it is, 0 removes it where the
        policy allows.  timeout applies from the next execute().  memory,
        pids and cpus are the sandbox's cgroup limits and take effect when
        the next sandbox starts: the sandbox restarts lazily, on its next
        call, so its variables are lost then (tools carry over)."""
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed", _errno.EBADF)
            if timeout is not None:
                self._set_timeout(timeout)
            if memory is not None or pids is not None or cpus is not None:
                _policy.apply_limits(self._lib, self._policy, memory, pids, cpus)
                self._restart_pending = True

    @property
    def timeout(self) -> Optional[float]:
        return self._timeout

    def policy_text(self) -> str:
        """The effective policy in the nsbox-policy(5) file format."""
        with self._lock:
            if self._policy is None:
                raise SandboxError("the sandbox is closed", _errno.EBADF)
            p = self._lib.nsbox_policy_to_string(self._policy)
            if not p:
                raise MemoryError("nsbox_policy_to_string")
            return _lib.take_string(p)

    # ---- tools ----

    def register_function(self, name: str, fn: _F, schema: Optional[Dict[str, Any]] = None,
                          description: Optional[str] = None) -> _F:
        """Make fn callable inside as name(...).  schema (a JSON Schema of the
        arguments) and description default to what fn's type hints and
        docstring say.  fn may be an async def function (see the class's
        documentation for where it runs).  Returns fn."""
        t = _tools.Tool(name, fn, schema, description)
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed", _errno.EBADF)
            if name in self._dispatch.tools:
                raise ValueError("a tool named %r is already registered" % name)
            if self._sess is not None and not self._restart_pending:
                self._add_tool(self._sess, t)
            self._dispatch.tools[name] = t
        return fn

    @overload
    def tool(self, fn: _F) -> _F: ...

    @overload
    def tool(self, fn: None = None, *, name: Optional[str] = None, description: Optional[str] = None,
             schema: Optional[Dict[str, Any]] = None) -> Callable[[_F], _F]: ...

    def tool(self, fn=None, *, name=None, description=None, schema=None):
        """Decorator registering a tool: @sandbox.tool or
        @sandbox.tool(name="search", description="...")."""
        def deco(f):
            self.register_function(name or f.__name__, f, schema=schema, description=description)
            return f
        if fn is not None:
            return deco(fn)
        return deco

    def describe_tools(self) -> str:
        """The tools as Python stubs (signature and docstring), for a prompt."""
        return _tools.describe(list(self._dispatch.tools.values()))

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._sess else "stopped")
        return "<nsbox.%s %s>" % (self._kind, state)


class Sandbox(_files.FilesMixin, _SandboxBase):
    __doc__ = """A Python session in a kernel-isolated sandbox.
""" + _DOC_OPTIONS + """
    The sandbox starts at once; close() it or use it as a context manager.

    Tools run on the thread that called execute().  An async def tool is run
    to completion there with asyncio.run(), or, when an event loop is
    already running in that thread, with asyncio.run() in a new thread (use
    AsyncSandbox to await tools on your own loop).

    Ctrl-C: a SIGINT while execute() runs in the main thread (with Python's
    default SIGINT handler) cancels the code and raises KeyboardInterrupt
    once the sandbox has stopped it; the sandbox stays usable.
    """

    def __init__(self, policy: Optional[PathLike] = "default", memory: Optional[Size] = None,
                 timeout: Optional[float] = None, pids: Optional[int] = None, cpus: Optional[float] = None,
                 workspace: Optional[PathLike] = None, share_net: bool = False, cold: bool = False,
                 auto_restart: bool = True, max_tool_calls: Optional[int] = None,
                 on_output: Optional[OutputFn] = None, spare: Optional[bool] = None,
                 on_warning: Optional[WarningFn] = None, connect: Optional[PathLike] = None,
                 output_limit: Optional[Size] = None, workspace_size: Optional[Size] = None,
                 rootfs: Optional[PathLike] = None, allow_net: Optional[List[str]] = None,
                 net_log: Optional[PathLike] = None, on_net_request: Optional[NetRequestFn] = None,
                 net_max_bytes_out: Optional[Size] = None, net_max_bytes_in: Optional[Size] = None,
                 net_max_connections: Optional[int] = None) -> None:
        super().__init__(policy, memory, timeout, pids, cpus, workspace, share_net, cold, auto_restart,
                         max_tool_calls, on_output, spare, on_warning, connect, output_limit, workspace_size,
                         rootfs, allow_net=allow_net, net_log=net_log, on_net_request=on_net_request,
                         net_max_bytes_out=net_max_bytes_out, net_max_bytes_in=net_max_bytes_in,
                         net_max_connections=net_max_connections)
        self._res = c_void_p()
        self._err = c_void_p()
        self._res_ref = byref(self._res)
        self._err_ref = byref(self._err)
        self._start()
        _live.add(self)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def restart(self) -> None:
        """Start a fresh sandbox now (variables are lost; tools and limits
        carry over)."""
        with self._lock:
            self._check_restart()
            self._drop()
            self._start()

    # ---- running code ----

    def _exec(self, code, timeout, mode):
        """Run code; returns the value (mode 0), (value, stdout) (mode 1),
        both raising on failure, or an ExecResult with the error in .error
        (mode 2)."""
        lib = self._lib
        b = self._code_bytes(code)
        opts = self._exec_opts_for(timeout, mode)
        with self._lock:
            h = self._session()
            d = self._dispatch
            d.pending = None
            if d.failures:
                d.failures.clear()
                d.failure_bytes = 0
            # Preallocated out-params: this path is the per-exec overhead.
            res = self._res
            # In the main thread a Ctrl-C cancels the exec (_sigint); the
            # KeyboardInterrupt is raised as the call returns, and the
            # finally below frees the result wherever it lands.
            main = _sigint.arm(self)
            self._in_exec += 1
            try:
                try:
                    rc = lib.nsbox_exec(h, b, opts, self._res_ref, self._err_ref)
                finally:
                    self._in_exec -= 1
                    if main:
                        _sigint.target = None
                if rc < 0:
                    err, self._err.value = self._err.value, None
                    raise self._exec_failed(rc, err)
                r = res.value
                status = lib.nsbox_result_status(r)
                if status == _lib.OK and mode == 0 and d.pending is None and d.net_error is None:
                    return _values.loads(lib.nsbox_result_value(r))
                return self._outcome(r, status, mode)
            finally:
                r = res.value
                if r:
                    res.value = None
                    lib.nsbox_result_free(r)

    def execute(self, code: Union[str, bytes], timeout: Optional[float] = None) -> Any:
        """Run code in the session's globals and return the value of its last
        expression (None when it ends with a statement).  Raises
        SandboxedException for the code's own uncaught exception, or
        TimeLimitExceeded, MemoryLimitExceeded, SandboxCrashed..."""
        return self._exec(code, timeout, 0)

    def execute_with_output(self, code: Union[str, bytes],
                            timeout: Optional[float] = None) -> Tuple[Any, List[str]]:
        """Like execute(), and also what the code printed: (value, lines)."""
        value, out = self._exec(code, timeout, 1)
        return value, out.splitlines()

    def run(self, code: Union[str, bytes], timeout: Optional[float] = None) -> ExecResult:
        """Like execute() but returns an ExecResult and does not raise for
        what the code did (its exception or a limit is in .error), only for
        misuse (a closed sandbox...)."""
        return self._exec(code, timeout, 2)

    def cancel(self) -> None:
        """Interrupt the code running now (Cancelled is raised in the thread
        that called execute()).  Any thread."""
        with self._hlock:
            if self._sess:
                self._lib.nsbox_cancel(self._sess)

    # ---- state ----

    def set_variable(self, name: str, value: Any) -> None:
        """Bind a global inside to value: Python's built-in types (None,
        bool, int, float, complex, str, bytes, bytearray, list, tuple, set,
        frozenset, dict) nested in any way up to 100 levels.  TypeError for
        another type, ValueError for a cycle or deeper nesting."""
        _tools.check_name(name, "variable name")
        data = _values.dumps(value)
        with self._lock:
            self._set_var(self._session(), name, data)

    def get_variable(self, name: str, default: Any = _MISSING) -> Any:
        """A global's value (a ReprValue when it has no JSON form).  Raises
        UndefinedVariable (a KeyError) unless default is given."""
        _tools.check_name(name, "variable name")
        with self._lock:
            return self._get_var(self._session(), name, default)

    def reset(self) -> None:
        """Clear the session's globals (tools stay)."""
        with self._lock:
            self._reset(self._session())

    def info(self) -> Dict[str, Any]:
        """The sandbox's pid, cgroup, limits, memory use and Python version
        ("3.11.2"), as a dict."""
        with self._lock:
            return self._info(self._session())

    @property
    def pid(self) -> Optional[int]:
        """Host pid of the sandbox's init, or None when no sandbox runs."""
        if self._sess is None:
            return None
        return self.info()["pid"]
