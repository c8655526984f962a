"""Sandbox: one kernel-isolated CPython session driven through libnsbox.

Threading: a Sandbox may be shared between threads (calls are serialised by
a lock); different Sandboxes run in parallel, since ctypes releases the GIL
around every libnsbox call.  Tool functions run on the thread that called
execute().  cancel() may be called from any thread.
"""

import atexit
import ctypes
import errno as _errno
import os
import threading
import weakref
from ctypes import byref, c_double, c_size_t, c_uint, c_uint64, c_void_p, sizeof

from . import _files
from . import _lib
from . import _policy
from . import _tools
from . import _values
from .errors import (Cancelled, MemoryLimitExceeded, ProtocolError, SandboxCrashed, SandboxedException,
                     SandboxedMemoryError, SandboxedToolError, SandboxError, TimeLimitExceeded,
                     UndefinedVariable)

__all__ = ["Sandbox", "ExecResult"]

_live = weakref.WeakSet()


@atexit.register
def _close_all():
    # Sandboxes still open at exit are closed while ctypes and libnsbox are
    # still usable, rather than from __del__ during interpreter teardown.
    for sb in list(_live):
        try:
            sb.close()
        except Exception:
            pass


class ExecResult:
    """Everything about one run: value, stdout, stderr (str), error (the
    exception execute() would raise, or None) and resource use (wall and
    cpu seconds, peak_memory bytes, tool_calls)."""

    __slots__ = ("value", "stdout", "stderr", "error", "wall", "cpu", "peak_memory", "tool_calls")

    def __init__(self, value=None, stdout="", stderr="", error=None, wall=0.0, cpu=0.0, peak_memory=0,
                 tool_calls=0):
        self.value = value
        self.stdout = stdout
        self.stderr = stderr
        self.error = error
        self.wall = wall
        self.cpu = cpu
        self.peak_memory = peak_memory
        self.tool_calls = tool_calls

    @property
    def ok(self):
        return self.error is None

    @property
    def lines(self):
        return self.stdout.splitlines()

    def raise_for_error(self):
        if self.error is not None:
            raise self.error
        return self

    def __repr__(self):
        return "ExecResult(value=%r, stdout=%r, stderr=%r, error=%r)" % (
            self.value, self.stdout, self.stderr, self.error)


_bytes = _policy.to_bytes


def _cstr(s):
    """A NUL-free malloc'ed copy of s for libnsbox to free()."""
    b = s.encode("utf-8", "backslashreplace").replace(b"\0", b"\\0")
    return _lib.libc.strdup(b)


class _Dispatch:
    """The tool table and the callbacks' state.  The C callbacks reference
    this object, never the Sandbox, so that dropping the last reference to a
    Sandbox frees it at once (no cycle through ctypes)."""

    MAX_FAILURES = 64

    def __init__(self):
        self.tools = {}
        self.pending = None      # a BaseException (KeyboardInterrupt...) to re-raise after exec
        self.failures = {}       # message sent inside -> the host exception, for __cause__
        self.handle = None       # the live session, to cancel it on KeyboardInterrupt
        self.on_output = None

    def tool(self, userdata, name, args_json, result_out, error_out):
        try:
            tname = name.decode("utf-8", "replace")
            t = self.tools.get(tname)
            if t is None:
                error_out[0] = _cstr("no tool named %r on the host" % tname)
                return 1
            try:
                call = _values.parse(args_json)
                args = _values.decode(call.get("args") or [])
                # kwargs' keys are names, never $-tags: decode the values only.
                kwargs = call.get("kwargs") or {}
                for k, x in kwargs.items():
                    if type(x) in _values.NESTED:
                        kwargs[k] = _values.decode(x)
                value = t.call(args, kwargs)
            except Exception as e:
                msg = _tools.error_message(e)
                if len(self.failures) >= self.MAX_FAILURES:
                    self.failures.clear()
                self.failures[msg] = e
                error_out[0] = _cstr(msg)
                return 1
            try:
                data = _values.dumps(value)
            except (TypeError, ValueError, RecursionError) as e:
                error_out[0] = _cstr("tool %s returned a value that cannot cross into the sandbox: %s"
                                     % (tname, e))
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


class Sandbox(_files.FilesMixin):
    """A Python session in a kernel-isolated sandbox.

    policy:      "default", "strict", "permissive", a policy file path, or None
                 (the default policy); see nsbox-policy(5).
    memory:      memory limit of the whole sandbox: bytes (int) or a size string
                 ("256M", "1G"); 0 for none.  None keeps the policy's.
    timeout:     seconds per execute() call (None: the policy's TimeLimit).
    pids, cpus:  process/thread cap and CPU share (0.5 = half a CPU).
    workspace:   a host directory mounted writable at /workspace.
    share_net:   share the host's network namespace.
    cold:        start CPython afresh instead of forking the helper's template.
    spare:       have the helper keep one idle sandbox with this policy ready, so
                 that the next Sandbox with the same settings (or a restart)
                 starts in about a millisecond.  Costs one idle sandbox (the
                 last policy's).  None (the default): a spare unless the
                 policy names host paths (workspace, binds, rootfs); True:
                 always; False: never.  NSBOX_SPARE=0 in the environment
                 turns it off for every Sandbox.
    auto_restart: after the sandbox dies (time or memory limit kill, crash) the
                 next call starts a fresh one (True), or raises SandboxCrashed
                 until restart() is called (False).
    max_tool_calls: tool calls allowed per execute() (None: 1000).
    on_output:   fn(stream, text) called as the code prints ("stdout"/"stderr").
    on_warning:  fn(message) called with the jail's warnings when a sandbox is
                 made (e.g. a limit this host can't enforce with a cgroup, and
                 the fallback used); None issues them as nsbox.SandboxWarning.

    The sandbox starts at once; close() it or use it as a context manager.
    """

    def __init__(self, policy="default", memory=None, timeout=None, pids=None, cpus=None, workspace=None,
                 share_net=False, cold=False, auto_restart=True, max_tool_calls=None, on_output=None,
                 spare=None, on_warning=None):
        # Attributes close() relies on come first: __init__ may fail half way.
        self._closed = False
        self._owner_pid = os.getpid()
        self._lock = threading.RLock()
        self._hlock = threading.Lock()
        self._sess = None
        self._policy = None
        self._in_exec = 0
        self._restart_pending = False
        self._dead = None
        self._auto_restart = bool(auto_restart)
        self._dispatch = d = _Dispatch()
        self._lib = lib = _lib.load()
        # Kept for the life of the Sandbox: libnsbox holds these pointers.
        self._tool_cb = _lib.TOOL_FN(d.tool)
        self._output_cb = _lib.OUTPUT_FN(d.output) if on_output is not None else _lib.OUTPUT_FN()
        d.on_output = on_output
        # The sink holds no reference to the Sandbox (see _Dispatch).
        self._warn = _policy.WarnSink(on_warning)
        self._warn_cb = _lib.WARN_FN(self._warn)
        self._sess_opts = _lib.SessionOpts(struct_size=sizeof(_lib.SessionOpts), cold=bool(cold),
                                           max_tool_calls=int(max_tool_calls or 0), output=self._output_cb,
                                           warn=self._warn_cb, spare=spare is True, no_spare=spare is False,
                                           # ctypes may run Python threads: always the helper
                                           in_process=False)
        self._timeout = None
        self._exec_opts = _lib.ExecOpts(struct_size=sizeof(_lib.ExecOpts), timeout=0.0, repl=True)
        self._set_timeout(timeout)
        self._res = c_void_p()
        self._err = c_void_p()
        self._res_ref = byref(self._res)
        self._err_ref = byref(self._err)

        self._policy = _policy.new_policy(lib, policy, memory=memory, pids=pids, cpus=cpus,
                                          workspace=workspace, share_net=share_net)
        self._start()
        _live.add(self)

    # ---- life cycle ----

    def _set_timeout(self, timeout):
        timeout = _policy.check_timeout(timeout)
        self._timeout = timeout
        self._exec_opts.timeout = timeout or 0.0

    def _start(self):
        lib = self._lib
        err = c_void_p()
        out = c_void_p()
        rc = lib.nsbox_session_new(self._policy, byref(self._sess_opts), byref(out), byref(err))
        if rc < 0:
            e = _lib.error_from(rc, err.value, "starting the sandbox")
            try:
                # The warnings may say why (a fallback that failed).
                self._warn.flush()
            except BaseException as w:
                e.__context__ = w
            raise e
        h = out.value
        try:
            self._warn.flush()
            for t in self._dispatch.tools.values():
                self._add_tool(h, t)
        except BaseException:
            lib.nsbox_session_free(h)
            raise
        with self._hlock:
            self._sess = h
            self._dispatch.handle = h
        self._restart_pending = False
        self._dead = None

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
        if h:
            self._lib.nsbox_session_free(h)
        if why is not None:
            self._dead = why

    def _session(self):
        """The live session, started afresh when a restart is due."""
        h = self._sess
        if h is not None and not self._restart_pending:
            return h
        if self._closed:
            raise SandboxError("the sandbox is closed", _errno.EBADF)
        if self._in_exec:
            raise SandboxError("a tool cannot restart the sandbox that is calling it", _errno.EBUSY)
        if h is None and self._dead is not None and not self._auto_restart:
            raise SandboxCrashed("the sandbox died (%s); call restart() for a fresh one" % self._dead,
                                 _errno.ENOTCONN)
        self._drop()
        self._start()
        return self._sess

    def restart(self):
        """Start a fresh sandbox now (variables are lost; tools and limits
        carry over)."""
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed", _errno.EBADF)
            if self._in_exec:
                raise SandboxError("a tool cannot restart the sandbox that is calling it", _errno.EBUSY)
            self._drop()
            self._start()

    def close(self):
        """Kill the sandbox and free everything.  Idempotent."""
        if self._closed:
            return
        with self._lock:
            if self._closed:
                return
            if self._in_exec:
                raise SandboxError("a tool cannot close the sandbox that is calling it", _errno.EBUSY)
            self._closed = True
            _live.discard(self)
            if os.getpid() != self._owner_pid:
                # A forked child inherited the object, not the sandbox: the
                # parent still owns the session and the helper.
                self._sess = self._policy = None
                return
            self._drop()
            p, self._policy = self._policy, None
            if p:
                self._lib.nsbox_policy_free(p)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def closed(self):
        return self._closed

    # ---- running code ----

    def _exec(self, code, timeout, mode):
        """Run code; returns the value (mode 0), (value, stdout) (mode 1),
        both raising on failure, or an ExecResult with the error in .error
        (mode 2)."""
        lib = self._lib
        b = code.encode("utf-8") if type(code) is str else _bytes(code, "code")
        if b"\0" in b:
            raise ValueError("code contains a NUL character")
        if timeout is None:
            opts = self._exec_opts
        else:
            timeout = float(timeout)
            if not timeout > 0:
                raise ValueError("timeout must be a positive number of seconds, not %r" % (timeout,))
            opts = _lib.ExecOpts(struct_size=sizeof(_lib.ExecOpts), timeout=timeout, repl=True)
        with self._lock:
            h = self._session()
            d = self._dispatch
            d.pending = None
            if d.failures:
                d.failures.clear()
            # Preallocated out-params: this path is the per-exec overhead.
            res = self._res
            self._in_exec += 1
            try:
                rc = lib.nsbox_exec(h, b, opts, self._res_ref, self._err_ref)
            finally:
                self._in_exec -= 1
            if rc < 0:
                err, self._err.value = self._err.value, None
                e = _lib.error_from(rc, err, "execute")
                if e.errno == _errno.ENOTCONN:
                    self._drop(str(e))
                    e.session_lost = True
                raise e
            r = res.value
            try:
                status = lib.nsbox_result_status(r)
                if status == _lib.OK and mode == 0 and d.pending is None:
                    return _values.loads(lib.nsbox_result_value(r))
                return self._outcome(r, status, mode)
            finally:
                lib.nsbox_result_free(r)

    def _text(self, fn, r):
        n = c_size_t()
        p = fn(r, byref(n))
        if not p or not n.value:
            return ""
        return ctypes.string_at(p, n.value).decode("utf-8", "replace")

    def _outcome(self, r, status, mode):
        lib = self._lib
        d = self._dispatch
        if d.pending is not None:
            e, d.pending = d.pending, None
            raise e
        out = self._text(lib.nsbox_result_stdout, r)
        errtext = self._text(lib.nsbox_result_stderr, r)
        value = None
        error = None
        if status == _lib.OK:
            value = _values.loads(lib.nsbox_result_value(r))
        else:
            error = self._error(r, status, out, errtext)
        if mode != 2:
            if error is not None:
                raise error
            return value if mode == 0 else (value, out)
        wall, cpu, peak, calls = c_double(), c_double(), c_uint64(), c_uint()
        lib.nsbox_result_usage(r, byref(wall), byref(cpu), byref(peak), byref(calls))
        return ExecResult(value, out, errtext, error, wall.value, cpu.value, peak.value, calls.value)

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
                    code = int(msg) if msg.lstrip("-").isdigit() else (msg or None)
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

    def execute(self, code, timeout=None):
        """Run code in the session's globals and return the value of its last
        expression (None when it ends with a statement).  Raises
        SandboxedException for the code's own uncaught exception, or
        TimeLimitExceeded, MemoryLimitExceeded, SandboxCrashed..."""
        return self._exec(code, timeout, 0)

    def execute_with_output(self, code, timeout=None):
        """Like execute(), and also what the code printed: (value, lines)."""
        value, out = self._exec(code, timeout, 1)
        return value, out.splitlines()

    def run(self, code, timeout=None):
        """Like execute() but returns an ExecResult and does not raise for
        what the code did (its exception or a limit is in .error), only for
        misuse (a closed sandbox...)."""
        return self._exec(code, timeout, 2)

    def cancel(self):
        """Interrupt the code running now (Cancelled is raised in the thread
        that called execute()).  Any thread."""
        with self._hlock:
            if self._sess:
                self._lib.nsbox_cancel(self._sess)

    # ---- state ----

    def set_variable(self, name, value):
        """Bind a global inside to value (None, bool, int, float, str, and
        lists, tuples and str-keyed dicts of them)."""
        _tools.check_name(name)
        data = _values.dumps(value)
        with self._lock:
            h = self._session()
            err = c_void_p()
            rc = self._lib.nsbox_set_var(h, name.encode(), data, byref(err))
            self._check_state(rc, err, "set_variable %s" % name)

    def get_variable(self, name, default=_MISSING):
        """A global's value (a ReprValue when it has no JSON form).  Raises
        UndefinedVariable (a KeyError) unless default is given."""
        _tools.check_name(name)
        with self._lock:
            h = self._session()
            err = c_void_p()
            out = c_void_p()
            rc = self._lib.nsbox_get_var(h, name.encode(), byref(out), byref(err))
            if rc == -_errno.ENOENT:
                if err.value:
                    self._lib.nsbox_error_free(err.value)
                if default is not _MISSING:
                    return default
                raise UndefinedVariable("the sandbox has no global named %r" % name, _errno.ENOENT)
            self._check_state(rc, err, "get_variable %s" % name)
            p = out.value
            try:
                return _values.loads(ctypes.string_at(p)) if p else None
            finally:
                if p:
                    self._lib.nsbox_free(p)

    def reset(self):
        """Clear the session's globals (tools stay)."""
        with self._lock:
            h = self._session()
            err = c_void_p()
            self._check_state(self._lib.nsbox_reset(h, byref(err)), err, "reset")

    def _check_state(self, rc, err, what):
        if rc < 0:
            e = _lib.error_from(rc, err.value, what)
            if e.errno == _errno.ENOTCONN:
                self._drop(str(e))
                e.session_lost = True
            raise e

    # ---- limits ----

    def set_limits(self, memory=None, timeout=None, pids=None, cpus=None):
        """Change limits; None leaves one as it is, 0 removes it where the
        policy allows.  timeout applies from the next execute().  memory,
        pids and cpus are the sandbox's cgroup limits and take effect when
        the next sandbox starts: the Sandbox restarts lazily, on its next
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
    def timeout(self):
        return self._timeout

    def policy_text(self):
        """The effective policy in the nsbox-policy(5) file format."""
        with self._lock:
            if self._policy is None:
                raise SandboxError("the sandbox is closed", _errno.EBADF)
            p = self._lib.nsbox_policy_to_string(self._policy)
            if not p:
                raise MemoryError("nsbox_policy_to_string")
            return _lib.take_string(p)

    def info(self):
        """The sandbox's pid, cgroup, limits, memory use and Python version
        ("3.11.2"), as a dict."""
        with self._lock:
            h = self._session()
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

    @property
    def pid(self):
        """Host pid of the sandbox's init, or None when no sandbox runs."""
        if self._sess is None:
            return None
        return self.info()["pid"]

    # ---- tools ----

    def register_function(self, name, fn, schema=None, description=None):
        """Make fn callable inside as name(...).  schema (a JSON Schema of the
        arguments) and description default to what fn's type hints and
        docstring say.  Returns fn."""
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

    def tool(self, fn=None, *, name=None, description=None, schema=None):
        """Decorator registering a tool: @sandbox.tool or
        @sandbox.tool(name="search", description="...")."""
        def deco(f):
            self.register_function(name or f.__name__, f, schema=schema, description=description)
            return f
        if fn is not None:
            return deco(fn)
        return deco

    def describe_tools(self):
        """The tools as Python stubs (signature and docstring), for a prompt."""
        return _tools.describe(list(self._dispatch.tools.values()))

    def __repr__(self):
        state = "closed" if self._closed else ("running" if self._sess else "stopped")
        return "<nsbox.Sandbox %s>" % state
