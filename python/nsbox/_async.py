"""AsyncSandbox: a Sandbox for asyncio hosts, on libnsbox's event-loop exec
API (0.4.0): nsbox_exec_start, then nsbox_exec_advance whenever
nsbox_session_fd is readable (loop.add_reader), answering tool calls with
nsbox_exec_answer whenever they complete.  Many AsyncSandboxes progress
concurrently on one loop, on one thread.
"""

from __future__ import annotations

import asyncio
import codecs
import contextvars
import ctypes
import errno as _errno
import inspect
import os
import threading
from ctypes import byref, c_void_p, sizeof
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _files
from . import _lib
from . import _tools
from . import _values
from .errors import SandboxError
from .sandbox import (_DOC_OPTIONS, _MISSING, ExecResult, NetRequestFn, OutputFn, PathLike, Size, WarningFn,
                      _live, _SandboxBase)

__all__ = ["AsyncSandbox"]

# The AsyncSandbox whose tool is running in this context (a sync tool on the
# loop, or an async tool's task): its own execute/close/restart would wait
# for itself.
_tool_of: contextvars.ContextVar[Optional["AsyncSandbox"]] = contextvars.ContextVar("nsbox_tool_of",
                                                                                    default=None)


class _Exec:
    """One exec in progress: its session, the future DONE resolves, the
    tool calls not yet answered."""

    __slots__ = ("sb", "h", "fd", "loop", "done", "tools", "reading", "decoders", "result", "error")

    def __init__(self, sb, h, fd, loop):
        self.sb = sb
        self.h = h
        self.fd = fd
        self.loop = loop
        self.done = loop.create_future()
        self.tools: Dict[int, "asyncio.Future[Any]"] = {}
        self.reading = False
        self.decoders = {}
        self.result = None          # nsbox_result_t* after DONE
        self.error = None           # an exception ending the exec (advance failed, on_output raised...)

    def stop_reading(self):
        if self.reading:
            self.reading = False
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)

    def finish(self, error=None):
        """The exec is over (DONE, a failure, or the sandbox closed)."""
        self.stop_reading()
        if error is not None and self.error is None:
            self.error = error
        if self.loop.is_closed():
            # Closed with this exec pending (close() after the loop ended):
            # nothing can be scheduled on it, and nobody awaits it any more.
            self.tools.clear()
            return
        for t in self.tools.values():
            t.cancel()
        self.tools.clear()
        if not self.done.done():
            self.done.set_result(None)


def _loop_elsewhere(loop):
    """Whether loop is running on another thread than this one."""
    if not loop.is_running():
        return False
    try:
        return asyncio.get_running_loop() is not loop
    except RuntimeError:
        return True


class _LoopLock:
    """One call's hold on an AsyncSandbox's asyncio.Lock.  Calls from a
    second event loop (another thread's asyncio.run()) while calls of the
    first are running or waiting are refused: an asyncio.Lock wakes its
    waiters with no thread safety, so a waiter on the other loop slept
    forever."""

    __slots__ = ("sb", "what", "lock")

    def __init__(self, sb, what):
        self.sb = sb
        self.what = what
        self.lock = None

    async def __aenter__(self):
        sb = self.sb
        loop = asyncio.get_running_loop()
        with sb._loop_guard:
            if sb._alock_loop is not loop:
                if sb._alock_users and not sb._alock_loop.is_closed():
                    raise SandboxError("cannot %s the AsyncSandbox from this event loop: it is in use by "
                                       "another one (another thread's); use it from one loop at a time"
                                       % self.what, _errno.EBUSY)
                # (Calls of a closed loop never come back to leave.)
                sb._alock = asyncio.Lock()
                sb._alock_loop = loop
                sb._alock_users = 0
            sb._alock_users += 1
            self.lock = sb._alock
        try:
            await self.lock.acquire()
        except BaseException:
            self._leave()
            raise
        return self.lock

    async def __aexit__(self, *exc):
        self.lock.release()
        self._leave()

    def _leave(self):
        with self.sb._loop_guard:
            self.sb._alock_users -= 1


class AsyncSandbox(_files.AsyncFilesMixin, _SandboxBase):
    __doc__ = """A Python session in a kernel-isolated sandbox, for asyncio.

        async with nsbox.AsyncSandbox(memory="256M", timeout=10) as sb:
            @sb.tool
            async def fetch(url: str) -> str: ...
            print(await sb.execute("len(fetch('https://example.org'))"))
""" + _DOC_OPTIONS + """
    The constructor only checks the options; the sandbox starts in `async
    with`, await start(), or the first call, with nsbox_session_new() run in
    the loop's default executor so that the loop is not held.

    Everything else runs on the loop's thread: on_output, on_warning and
    on_net_request,
    sync tools (called directly, like the Sandbox's: a tool that blocks
    holds the loop, so make slow ones async def, e.g. with asyncio.to_thread),
    and async def tools, each awaited as its own task and answered whenever
    it completes.  set_variable, get_variable, reset and info are one short
    blocking round trip to the sandbox each, made directly on the loop's
    thread (libnsbox has no asynchronous form of them); a restart they
    trigger runs in the executor.  Calls on one AsyncSandbox are serialised,
    on one event loop at a time: a call from another loop (another thread's
    asyncio.run()) while calls of the first run or wait raises SandboxError
    (EBUSY).

    Cancelling the task awaiting execute() (task.cancel(), asyncio.wait_for,
    asyncio.timeout) cancels the code (nsbox_cancel), waits for the sandbox to
    acknowledge, and raises CancelledError; the session stays usable.
    """

    _kind = "AsyncSandbox"
    _defer_warnings = True

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
        self._alock: Optional[asyncio.Lock] = None
        self._alock_loop: Optional[asyncio.AbstractEventLoop] = None
        self._alock_users = 0       # calls holding or awaiting _alock
        self._loop_guard = threading.Lock()
        self._cur: Optional[_Exec] = None
        self._ev = _lib.Event(struct_size=sizeof(_lib.Event))
        self._aerr = c_void_p()
        self._fd = -1
        self._late_tools: List[Any] = []
        super().__init__(policy, memory, timeout, pids, cpus, workspace, share_net, cold, auto_restart,
                         max_tool_calls, on_output, spare, on_warning, connect, output_limit, workspace_size,
                         rootfs, allow_net=allow_net, net_log=net_log, on_net_request=on_net_request,
                         net_max_bytes_out=net_max_bytes_out, net_max_bytes_in=net_max_bytes_in,
                         net_max_connections=net_max_connections)
        _live.add(self)

    # ---- hooks of _SandboxBase ----

    def _check_library(self):
        if not _lib.has_event_api():
            raise SandboxError("%s is too old for AsyncSandbox (it lacks the event-loop exec API): "
                               "libnsbox 0.4.0 or newer is needed" % _lib.library_path, _errno.ENOSYS)

    def _make_tool_cb(self):
        # Tool calls arrive as events: the tools are registered without a
        # callback (NULL).
        return _lib.TOOL_FN()

    def _make_output_cb(self, on_output):
        return _lib.OUTPUT_FN()       # output arrives as events

    def _busy_in_tool(self):
        return self._in_exec > 0 or _tool_of.get() is self

    def _before_close(self):
        cur = self._cur
        if cur is not None:
            # close() while an exec runs (from another task, or a finaliser):
            # the exec ends with an error; the handle is freed next.
            self._lib.nsbox_cancel(cur.h)
            error = SandboxError("the sandbox was closed during execute()", _errno.EBADF)
            if _loop_elsewhere(cur.loop):
                # From another thread than the loop's: the exec's future and
                # reader belong to that loop (a result set from here never
                # woke the awaiting task), and its thread may be inside
                # nsbox_exec_advance on the handle about to be freed.  Finish
                # there, and wait for it.
                done = threading.Event()

                def finish():
                    try:
                        cur.finish(error)
                        if self._cur is cur:
                            self._cur = None
                    finally:
                        done.set()

                try:
                    cur.loop.call_soon_threadsafe(finish)
                except RuntimeError:
                    pass  # closed meanwhile: nothing runs there any more
                else:
                    while not done.wait(0.1):
                        if not cur.loop.is_running():
                            break
            cur.finish(error)
            self._cur = None
        self._fd = -1

    def _drop(self, why=None):
        self._fd = -1
        super()._drop(why)

    def _add_tool(self, h, t):
        # libnsbox refuses new tools while an exec runs (-EBUSY): one
        # registered from another task meanwhile is added when it ends.
        if self._cur is not None:
            self._late_tools.append(t)
            return
        super()._add_tool(h, t)

    def _add_late_tools(self):
        late, self._late_tools = self._late_tools, []
        h = self._sess
        for t in late:
            if h is not None and t.name in self._dispatch.tools:
                super()._add_tool(h, t)

    # ---- life cycle ----

    def _lock_for_loop(self, what="call"):
        """An async context manager serialising this sandbox's calls on the
        running loop (a new loop, e.g. a second asyncio.run(), gets a new
        lock once the last one's calls are over)."""
        if _tool_of.get() is self:
            raise SandboxError("a tool cannot %s the sandbox that is calling it" % what, _errno.EBUSY)
        return _LoopLock(self, what)

    async def _asession(self):
        """The live session; a (re)start runs nsbox_session_new in the
        default executor."""
        h = self._sess
        if h is not None and not self._restart_pending:
            return h
        if h is not None:
            # A pending restart (set_limits): the old one freed off the
            # loop first, then _needs_start's checks as for no session.
            self._check_restart()
            await self._adrop()
        corpse = self._take_corpse()
        if corpse:
            # A dead one (its workspace copied back): off the loop too.
            await self._afree(corpse)
        if self._needs_start():
            await self._astart()
        return self._sess

    async def _astart(self):
        loop = asyncio.get_running_loop()
        # A start given up while its sandbox is being made (its task
        # cancelled or thrown into, the loop then closed at once) frees that
        # sandbox: on the worker thread once it is made, or here if it is
        # made already.  A done callback on the loop, as before, never ran
        # on a loop closed before the worker returned.
        lock = threading.Lock()
        made = {}

        def make():
            h = self._new_session()
            with lock:
                if "gone" not in made:
                    made["h"] = h
                    return h
            self._lib.nsbox_session_free(h)
            return None

        fut = loop.run_in_executor(None, make)
        try:
            h = await asyncio.shield(fut)
        except BaseException as e:
            with lock:
                made["gone"] = True
                h = made.pop("h", None)
            if h is not None:
                self._lib.nsbox_session_free(h)
            if not isinstance(e, SandboxError):
                raise
            try:
                self._warn.flush()
            except BaseException as w:  # noqa: B036
                e.__context__ = w
            raise
        if self._closed:
            # Closed while it was being made.
            self._lib.nsbox_session_free(h)
            raise SandboxError("the sandbox is closed", _errno.EBADF)
        if self._sess is not None:
            # Another start won the race (only possible without the lock).
            self._lib.nsbox_session_free(h)
            return
        self._install(h)

    async def start(self) -> "AsyncSandbox":
        """Start the sandbox now (else the first call does).  Returns self."""
        async with self._lock_for_loop():
            await self._asession()
        return self

    async def __aenter__(self) -> "AsyncSandbox":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close after the exec in progress (if any) has ended: it is
        cancelled first.  close() closes at once (and waits, on the calling
        thread, for what aclose() waits for in the executor)."""
        if self._closed:
            return
        cur = self._cur
        if cur is not None:
            self._lib.nsbox_cancel(cur.h)
        async with self._lock_for_loop("close"):
            if self._closed:
                return
            with self._lock:
                h = self._close_begin()
            try:
                if h:
                    await self._afree(h)
            finally:
                self._close_end()

    async def _afree(self, h):
        """nsbox_session_free(h) in the default executor.  Freeing waits for
        the sandbox: its BYE (up to 1 s), its exit (up to 2 s), a bounded
        workspace's write-back; a sandbox whose own thread held its
        interpreter froze the loop 3 s in aclose() (red team 4).  The
        network records handed over meanwhile reach on_net_request here,
        on the loop, once it is done.  Cancelled, the free runs on and is
        waited for."""
        d = self._dispatch
        d.net_hold = []
        try:
            await _files.to_the_end(asyncio.get_running_loop().run_in_executor(None, self._lib.nsbox_session_free, h))
        finally:
            held, d.net_hold = d.net_hold, None
            for rec in held:
                d.deliver(rec)

    async def restart(self) -> None:
        """Start a fresh sandbox now (variables are lost; tools and limits
        carry over)."""
        self._check_restart()
        async with self._lock_for_loop("restart"):
            self._check_restart()
            await self._adrop()
            await self._astart()

    async def _adrop(self):
        """_drop(), the session freed off the loop (_afree)."""
        self._fd = -1
        with self._hlock:
            h = self._sess or self._corpse
            self._sess = self._corpse = None
            self._dispatch.handle = None
        if h:
            await self._afree(h)
            e = self._dispatch.take_net_error()
            if e is not None:
                raise e

    def cancel(self) -> None:
        """Interrupt the code running now (the awaiting execute() raises
        Cancelled).  From the loop's thread, or any thread."""
        with self._hlock:
            if self._sess:
                self._lib.nsbox_cancel(self._sess)

    # ---- running code ----

    async def _exec(self, code, timeout, mode):
        b = self._code_bytes(code)
        opts = self._exec_opts_for(timeout, mode)
        async with self._lock_for_loop("execute code in"):
            h = await self._asession()
            lib = self._lib
            loop = asyncio.get_running_loop()
            d = self._dispatch
            d.pending = None
            if d.failures:
                d.failures.clear()
                d.failure_bytes = 0
            if self._fd < 0:
                fd = lib.nsbox_session_fd(h)
                if fd < 0:
                    err = ctypes.get_errno() or _errno.EIO
                    raise SandboxError("execute: nsbox_session_fd: %s" % os.strerror(err), err)
                self._fd = fd
            err = self._aerr
            rc = lib.nsbox_exec_start(h, b, opts, byref(err))
            if rc < 0:
                e, err.value = err.value, None
                raise self._exec_failed(rc, e)
            x = _Exec(self, h, self._fd, loop)
            self._cur = x
            try:
                self._pump(x)
                if not x.done.done():
                    loop.add_reader(x.fd, self._pump, x)
                    x.reading = True
                cancelled = None
                while not x.done.done():
                    try:
                        await asyncio.shield(x.done)
                    except asyncio.CancelledError as e:
                        # Cancel the code and wait for the sandbox to
                        # acknowledge (DONE), then raise CancelledError.
                        if cancelled is None and not x.done.done():
                            lib.nsbox_cancel(h)
                        cancelled = e
            finally:
                x.stop_reading()
                if self._cur is x:
                    self._cur = None
            if self._late_tools and self._sess is not None:
                self._add_late_tools()
            r = x.result
            try:
                if cancelled is not None:
                    d.pending = None
                    if r is not None:
                        status = lib.nsbox_result_status(r)
                        if status != _lib.OK:
                            self._error(r, status, "", "")      # drops a session that was killed
                    raise cancelled
                if x.error is not None:
                    raise x.error
                status = lib.nsbox_result_status(r)
                if status == _lib.OK and mode == 0 and d.pending is None and d.net_error is None:
                    return _values.loads(lib.nsbox_result_value(r))
                return self._outcome(r, status, mode)
            finally:
                if r is not None:
                    lib.nsbox_result_free(r)

    def _pump(self, x: _Exec) -> None:
        """Advance the exec while there is work (the fd's reader callback)."""
        if x.done.done() or self._cur is not x:
            x.stop_reading()
            return
        lib = self._lib
        ev = self._ev
        ev_ref = byref(ev)
        err = self._aerr
        try:
            while True:
                k = lib.nsbox_exec_advance(x.h, ev_ref, byref(err))
                if k == 0:
                    return
                if k < 0:
                    e, err.value = err.value, None
                    x.finish(self._exec_failed(k, e))
                    return
                kind = ev.kind
                if kind == _lib.EVENT_OUTPUT:
                    self._output(x, ev.stream, ctypes.string_at(ev.data, ev.len) if ev.len else b"")
                elif kind == _lib.EVENT_TOOL_CALL:
                    self._tool_call(x, ev.call_id, ev.tool or b"", ev.args_json or b"{}")
                elif kind == _lib.EVENT_DONE:
                    out = c_void_p()
                    rc = lib.nsbox_exec_result(x.h, byref(out), byref(err))
                    if rc < 0:
                        e, err.value = err.value, None
                        x.finish(_lib.error_from(rc, e, "execute"))
                    else:
                        x.result = out.value
                        x.finish()
                    return
                if x.done.done():
                    return
        except BaseException as e:  # noqa: B036 (never into the loop's reader machinery)
            lib.nsbox_cancel(x.h)
            if self._dispatch.pending is None:
                self._dispatch.pending = e
            # Keep reading: DONE comes after the cancel.

    def _output(self, x, stream, data):
        fn = self._dispatch.on_output
        if fn is None:
            return
        dec = x.decoders.get(stream)
        if dec is None:
            dec = x.decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
        text = dec.decode(data)
        if text:
            try:
                fn("stdout" if stream == 1 else "stderr", text)
            except BaseException as e:  # noqa: B036 (raised from execute() after the exec)
                if self._dispatch.pending is None:
                    self._dispatch.pending = e
                self._lib.nsbox_cancel(x.h)

    def _answer(self, x, call_id, data, message):
        if x.done.done() or self._cur is not x:
            return
        err = c_void_p()
        if message is not None:
            m = message.encode("utf-8", "backslashreplace").replace(b"\0", b"\\0")
            rc = self._lib.nsbox_exec_answer(x.h, call_id, None, m, byref(err))
        else:
            rc = self._lib.nsbox_exec_answer(x.h, call_id, None if data == b"null" else data, None,
                                             byref(err))
        if rc < 0 and err.value:
            # -EINVAL (the call is no longer pending: the exec was cancelled)
            # or -ENOTCONN (the sandbox died): DONE says what happened.
            self._lib.nsbox_error_free(err.value)

    def _tool_call(self, x, call_id, name, args_json):
        d = self._dispatch
        tname = name.decode("utf-8", "replace")
        t = d.tools.get(tname)
        if t is None:
            self._answer(x, call_id, None, "no tool named %r on the host" % tname)
            return
        token = _tool_of.set(self)
        self._in_exec += 1
        try:
            value = d.invoke(t, args_json)
        except Exception as e:
            # This frame outlives the call as the f_back of the failure's
            # traceback (_Dispatch.failed): not with the sandbox's JSON in it.
            args_json = None
            self._answer(x, call_id, None, d.failed(e))
            return
        except BaseException as e:  # noqa: B036 (KeyboardInterrupt...: end the exec, re-raise after it)
            if d.pending is None:
                d.pending = e
            self._answer(x, call_id, None, "the host was interrupted")
            self._lib.nsbox_cancel(x.h)
            return
        finally:
            self._in_exec -= 1
            _tool_of.reset(token)
        if inspect.isawaitable(value):
            task = asyncio.ensure_future(self._run_tool(value), loop=x.loop)
            x.tools[call_id] = task
            task.add_done_callback(lambda f: self._tool_done(x, call_id, tname, f))
            return
        data, msg = d.encode(tname, value)
        self._answer(x, call_id, data, msg)

    async def _run_tool(self, aw):
        _tool_of.set(self)          # in the task's own context
        return await aw

    def _tool_done(self, x, call_id, tname, f):
        x.tools.pop(call_id, None)
        if f.cancelled():
            if not x.done.done():
                self._answer(x, call_id, None, "the host cancelled the tool call")
            return
        e = f.exception()
        if e is not None:
            if isinstance(e, Exception):
                self._answer(x, call_id, None, self._dispatch.failed(e))
            else:
                if self._dispatch.pending is None:
                    self._dispatch.pending = e
                self._answer(x, call_id, None, "the host was interrupted")
                self._lib.nsbox_cancel(x.h)
            return
        data, msg = self._dispatch.encode(tname, f.result())
        self._answer(x, call_id, data, msg)

    async def execute(self, code: Union[str, bytes], timeout: Optional[float] = None) -> Any:
        """Run code in the session's globals and return the value of its last
        expression (None when it ends with a statement).  Raises what
        Sandbox.execute() raises, and CancelledError when the awaiting task
        is cancelled (the code is cancelled first)."""
        return await self._exec(code, timeout, 0)

    async def execute_with_output(self, code: Union[str, bytes],
                                  timeout: Optional[float] = None) -> Tuple[Any, List[str]]:
        """Like execute(), and also what the code printed: (value, lines)."""
        value, out = await self._exec(code, timeout, 1)
        return value, out.splitlines()

    async def run(self, code: Union[str, bytes], timeout: Optional[float] = None) -> ExecResult:
        """Like execute() but returns an ExecResult holding the code's error
        instead of raising it."""
        return await self._exec(code, timeout, 2)

    # ---- state: round trips in the default executor (_files.AsyncFilesMixin._off_loop) ----

    async def set_variable(self, name: str, value: Any) -> None:
        """Bind a global inside to value (the built-in types, as for Sandbox)."""
        _tools.check_name(name, "variable name")
        data = _values.dumps(value)
        async with self._lock_for_loop():
            h = await self._asession()
            await self._off_loop(h, lambda: self._set_var(h, name, data))

    async def get_variable(self, name: str, default: Any = _MISSING) -> Any:
        """A global's value; UndefinedVariable (a KeyError) unless default."""
        _tools.check_name(name, "variable name")
        async with self._lock_for_loop():
            h = await self._asession()
            return await self._off_loop(h, lambda: self._get_var(h, name, default))

    async def reset(self) -> None:
        """Clear the session's globals (tools stay)."""
        async with self._lock_for_loop():
            h = await self._asession()
            await self._off_loop(h, lambda: self._reset(h))

    async def info(self) -> Dict[str, Any]:
        """The sandbox's pid, cgroup, limits, memory use and Python version."""
        async with self._lock_for_loop():
            h = await self._asession()
            return await self._off_loop(h, lambda: self._info(h))
