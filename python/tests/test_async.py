"""AsyncSandbox (the event-loop exec API), async tools in the sync Sandbox,
and Ctrl-C during a blocking execute().  asyncio tests are plain functions
driving asyncio.run (no pytest-asyncio)."""

import asyncio
import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import nsbox
from nsbox import _lib

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def aio(libnsbox):
    if not _lib.has_event_api():
        pytest.skip("%s lacks the event-loop exec API (libnsbox 0.4.0)" % _lib.library_path)


def arun(coro, limit=120):
    """asyncio.run with an overall time limit, so a hang fails the test."""
    async def main():
        return await asyncio.wait_for(coro, limit)
    return asyncio.run(main())


# ---- AsyncSandbox --------------------------------------------------------

def test_async_execute_run_and_state(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            assert await sb.execute("x = 20\nx + 1") == 21
            assert await sb.execute("x * 2") == 40
            assert await sb.execute("(1, [2.5, None], {'a': 'b'})") == (1, [2.5, None], {"a": "b"})
            value, lines = await sb.execute_with_output("for i in range(3): print(i)\n'done'")
            assert (value, lines) == ("done", ["0", "1", "2"])
            r = await sb.run("print('out'); 1 / 0")
            assert isinstance(r, nsbox.ExecResult) and not r.ok
            assert isinstance(r.error, nsbox.SandboxedException) and r.stdout == "out\n"
            assert r.error.type_name == "ZeroDivisionError"
            with pytest.raises(nsbox.SandboxedException) as ei:
                await sb.execute("raise KeyError('k')")
            assert ei.value.type_name == "KeyError" and "raise KeyError" in ei.value.traceback
            await sb.set_variable("data", {"xs": [1, 2, 3]})
            assert await sb.execute("sum(data['xs'])") == 6
            assert await sb.get_variable("data") == {"xs": [1, 2, 3]}
            with pytest.raises(nsbox.UndefinedVariable):
                await sb.get_variable("nope")
            assert await sb.get_variable("nope", 5) == 5
            await sb.reset()
            assert await sb.execute("'x' in globals()") is False
            info = await sb.info()
            assert info["alive"] and info["pid"] > 0
            assert "running" in repr(sb)
        assert sb.closed and "closed" in repr(sb)
    arun(main())


def test_a_killed_sandboxs_write_back_never_holds_the_loop(aio, tmp_path):
    """An AsyncSandbox's sandbox killed during an execute (its time limit)
    kept its bounded workspace's write-back on the loop's thread, inside
    that execute (red team 13: the loop froze 32 s).  The exception now
    comes at once; the next call frees the dead session in the default
    executor, where the copy (held stopped here) runs while the loop goes
    on."""
    from conftest import descendants, signal_all
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    copy = []

    async def main():
        async with nsbox.AsyncSandbox(workspace=str(work), spare=False, timeout=60) as sb:
            await sb.execute("for i in range(20000): open('/workspace/f%d' % i, 'w').close()")
            with pytest.raises(nsbox.TimeLimitExceeded):
                await sb.execute("sum(range(10 ** 13))", timeout=1)
            assert os.listdir(work) == [], "copied back inside the execute that was killed"
            before = set(descendants())
            nxt = asyncio.ensure_future(sb.execute("6 * 7"))
            for _ in range(1500):
                copy[:] = sorted(set(descendants()) - before)
                if copy:
                    break
                await asyncio.sleep(0.02)
            assert copy, "no copying process seen"
            signal_all(copy, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                for _ in range(10):
                    await asyncio.sleep(0.01)
                ticks = time.monotonic() - t0
                assert not nxt.done()
            finally:
                signal_all(copy, signal.SIGCONT)
            assert ticks < 5, "the loop waited %.1f s for the stopped copy" % ticks
            assert await nxt == 42
            assert len(os.listdir(work)) == 20000
    try:
        arun(main())
    finally:
        signal_all(copy, signal.SIGCONT)


def test_async_start_runs_in_the_executor(aio):
    """nsbox_session_new runs off the loop's thread; the constructor starts
    nothing."""
    async def main():
        sb = nsbox.AsyncSandbox()
        assert sb._sess is None
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        try:
            # A cold start takes long enough for the ticker to run meanwhile.
            sb2 = nsbox.AsyncSandbox(cold=True, spare=False)
            await sb2.start()
            assert ticks > 1
            assert await sb2.execute("1 + 1") == 2
            await sb2.aclose()
        finally:
            t.cancel()
        assert await sb.execute("3") == 3                    # the first call starts it
        await sb.aclose()
    arun(main())


def test_many_sandboxes_with_tools_on_one_loop(aio):
    """Six sandboxes whose code calls an async tool (which sleeps on the
    loop) and a sync tool progress concurrently on one thread."""
    N, DELAY = 6, 0.4
    loop_thread = []

    async def main():
        sbs = [nsbox.AsyncSandbox(timeout=60) for _ in range(N)]
        await asyncio.gather(*(sb.start() for sb in sbs))
        try:
            for i, sb in enumerate(sbs):
                def make(i):
                    async def slow_double(x: int) -> int:
                        "Double x, slowly."
                        loop_thread.append(threading.get_ident())
                        await asyncio.sleep(DELAY)
                        return 2 * x

                    def tag(s: str) -> str:
                        loop_thread.append(threading.get_ident())
                        return "%s-%d" % (s, i)
                    return slow_double, tag
                a, b = make(i)
                sb.register_function("slow_double", a)
                sb.register_function("tag", b)
            code = "[slow_double(k) for k in range(2)] + [tag('sb')]"
            t0 = time.monotonic()
            results = await asyncio.gather(*(sb.execute(code) for sb in sbs))
            wall = time.monotonic() - t0
            assert results == [[0, 2, "sb-%d" % i] for i in range(N)]
            # Sequentially it would take N * 2 * DELAY = 4.8 s.
            assert wall < N * 2 * DELAY / 2, wall
            r = await sbs[0].run("slow_double(21)")
            assert r.value == 42 and r.tool_calls == 1
        finally:
            for sb in sbs:
                await sb.aclose()
        return threading.get_ident()

    me = arun(main())
    assert loop_thread and set(loop_thread) == {me}


def test_tool_calls_in_flight_hold_at_most_one_frame_of_arguments(aio):
    """Each async tool call in flight keeps its decoded arguments on the
    host: from threads inside, 18 calls of 14 MB each held 2.7 GiB of the
    host's memory at once (the sandbox's limit does not apply there).  The
    calls in flight now hold at most the frame limit (16 MiB) of arguments
    together; one more is a ToolError, and a single call always fits."""
    most = 0

    async def main():
        nonlocal most
        held = 0
        async with nsbox.AsyncSandbox(timeout=60) as sb:
            @sb.tool
            async def hold(x: str) -> int:
                nonlocal held, most
                held += 1
                most = max(most, held)
                await asyncio.sleep(1.5)
                held -= 1
                return len(x)

            code = textwrap.dedent("""
                import threading
                out = []
                def go():
                    try:
                        out.append(hold("x" * 5_000_000))
                    except Exception as e:
                        out.append("%s: %s" % (type(e).__name__, e))
                ts = [threading.Thread(target=go) for _ in range(6)]
                for t in ts: t.start()
                for t in ts: t.join()
                out
            """)
            out = await sb.execute(code)
            assert await sb.execute("hold('y' * 10_000_000)") == 10_000_000
            return out

    out = arun(main())
    refused = [o for o in out if isinstance(o, str)]
    assert most <= 3, most
    assert len(refused) >= 3 and all("in flight hold more than 16777216 bytes" in o for o in refused), out
    assert 5_000_000 in out


def test_failed_tool_calls_keep_none_of_their_arguments_async(aio):
    """As test_sdk's: a failed call's kept exception (the __cause__ to be)
    held the call's arguments through its frames, sync and async tools."""
    import gc
    import tracemalloc

    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            @sb.tool
            def total(items: list) -> int:
                raise ValueError("no total for %d items" % len(items))

            @sb.tool
            async def atotal(items: list) -> int:
                await asyncio.sleep(0)
                raise ValueError("no async total for %d items" % len(items))

            code = ("import nsbox\nn = 0\nfor i in range(8):\n    for f in (total, atotal):\n        try:\n"
                    "            f(list(range(100000 + i)))\n        except nsbox.ToolError:\n            n += 1\nn")
            await sb.execute("1")
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                assert await sb.execute(code) == 16
                gc.collect()
                return tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
    held = arun(main())
    assert held < 2 << 20, "%d bytes held after the exec" % held


def test_tools_that_raise_and_tool_errors(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            @sb.tool
            def bad_sync(x: int) -> int:
                raise ValueError("sync %d" % x)

            @sb.tool
            async def bad_async(x: int) -> int:
                await asyncio.sleep(0.01)
                raise nsbox.ToolError("exact text %d" % x)

            @sb.tool
            async def unsendable() -> object:
                return object()

            assert await sb.execute(textwrap.dedent("""\
                import nsbox
                out = []
                for f in (bad_sync, bad_async):
                    try:
                        f(3)
                    except nsbox.ToolError as e:
                        out.append(str(e))
                out""")) == ["ValueError: sync 3", "exact text 3"]
            with pytest.raises(nsbox.SandboxedToolError) as ei:
                await sb.execute("bad_sync(1)")
            assert isinstance(ei.value.__cause__, ValueError)
            with pytest.raises(nsbox.SandboxedToolError) as ei:
                await sb.execute("bad_async(2)")
            assert ei.value.message == "exact text 2"
            with pytest.raises(nsbox.SandboxedToolError) as ei:
                await sb.execute("unsendable()")
            assert "cannot cross" in ei.value.message
            with pytest.raises(nsbox.SandboxedException) as ei:      # argument checking inside
                await sb.execute("bad_sync('x')")
            assert await sb.execute("1 + 1") == 2
    arun(main())


def test_tool_cannot_reenter_its_own_sandbox(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            @sb.tool
            async def again() -> int:
                return await sb.execute("1")

            @sb.tool
            def close_it() -> None:
                sb.close()

            for name in ("again", "close_it"):
                with pytest.raises(nsbox.SandboxedToolError) as ei:
                    await sb.execute("%s()" % name)
                assert "SandboxError" in ei.value.message, ei.value.message
            assert await sb.execute("2") == 2 and not sb.closed
    arun(main())


_ABANDONED_START = r"""
import asyncio, sys, threading, time
import nsbox

async def one():
    async with nsbox.AsyncSandbox(timeout=30, spare=False) as s:
        await s.execute("1")
asyncio.run(one())                      # the helper is up
print("counted", flush=True)
sys.stdin.readline()
sb = nsbox.AsyncSandbox(timeout=30, spare=False)
making = threading.Event()
real = sb._new_session
def slow(*a):
    making.set()
    time.sleep(0.3)                     # the start is given up meanwhile
    return real(*a)
sb._new_session = slow
loop = asyncio.new_event_loop()
task = loop.create_task(sb.start())
while not making.is_set():
    loop.run_until_complete(asyncio.sleep(0.01))
task.cancel()
loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
loop.close()                            # not asyncio.run(): nothing waits for the worker
time.sleep(1.5)
print(task.cancelled(), flush=True)
sys.stdin.readline()
"""


def test_an_abandoned_start_frees_its_sandbox(libnsbox, tmp_path):
    """A start cancelled while its sandbox was being made freed it from a
    done callback on the loop: a loop closed before the worker returned
    (one not run by asyncio.run(), which waits for the executor) never ran
    it, and the sandbox lived as long as the process."""
    from conftest import descendants
    script = tmp_path / "abandoned.py"
    script.write_text(_ABANDONED_START)
    p = subprocess.Popen([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=PYDIR),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "counted\n"
        base = [x for x in descendants(p.pid) if x > 0]          # the helper
        p.stdin.write("\n")
        p.stdin.flush()
        cancelled = p.stdout.readline()
        after = [x for x in descendants(p.pid) if x > 0]
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert cancelled == "True\n" and after == base, (cancelled, base, after)


def test_cancellation_leaves_the_session_usable(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=60) as sb:
            await sb.execute("x = 'kept'")
            task = asyncio.ensure_future(sb.execute("while True: pass"))
            await asyncio.sleep(0.3)
            assert not task.done()
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - t0 < 10
            assert await sb.execute("x") == "kept"            # same sandbox, variables kept
            # asyncio.wait_for cancels the same way.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sb.execute("import time\nwhile True: time.sleep(0.01)"), 0.3)
            assert await sb.execute("x + '!'") == "kept!"

            # Cancelled while an async tool is pending: the tool's task is
            # cancelled too.
            state = []

            @sb.tool
            async def wait_forever() -> None:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    state.append("tool cancelled")
                    raise
            task = asyncio.ensure_future(sb.execute("wait_forever()"))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0)
            assert state == ["tool cancelled"]
            assert await sb.execute("x") == "kept"
            # sb.cancel() gives Cancelled, like Sandbox.cancel().
            asyncio.get_running_loop().call_later(0.3, sb.cancel)
            with pytest.raises(nsbox.Cancelled):
                await sb.execute("while True: pass")
            assert await sb.execute("x") == "kept"
    arun(main())


def test_async_time_limit(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=0.5) as sb:
            await sb.execute("x = 1")
            t0 = time.monotonic()
            with pytest.raises(nsbox.TimeLimitExceeded) as ei:
                await sb.execute("while True: pass")
            assert time.monotonic() - t0 < 15
            assert not ei.value.session_lost
            assert await sb.execute("x") == 1
            with pytest.raises(nsbox.TimeLimitExceeded):
                await sb.execute("import time; time.sleep(5)", timeout=0.3)
            r = await sb.run("while True: pass")
            assert isinstance(r.error, nsbox.TimeLimitExceeded)
            # Code that ignores the interruption is killed; the next call
            # starts a fresh sandbox.
            with pytest.raises(nsbox.TimeLimitExceeded) as ei:
                await sb.execute(textwrap.dedent("""\
                    import time
                    while True:
                        try:
                            time.sleep(0.01)
                        except BaseException:
                            pass"""))
            assert ei.value.session_lost
            assert await sb.execute("'x' in globals()") is False
    arun(main())


def test_async_errors_on_closed_sandbox(aio):
    async def main():
        sb = nsbox.AsyncSandbox()
        await sb.start()
        await sb.aclose()
        await sb.aclose()                                     # idempotent
        with pytest.raises(nsbox.SandboxError) as ei:
            await sb.execute("1")
        assert ei.value.errno == 9                            # EBADF
        with pytest.raises(nsbox.SandboxError):
            await sb.set_variable("x", 1)
        with pytest.raises(nsbox.SandboxError):
            sb.register_function("f", len)
        # close() from another task while an exec runs ends that exec.
        sb = nsbox.AsyncSandbox()
        task = asyncio.ensure_future(sb.execute("while True: pass"))
        await asyncio.sleep(0.5)
        sb.close()
        with pytest.raises(nsbox.SandboxError) as ei:
            await task
        assert ei.value.errno == 9
        with pytest.raises(nsbox.PolicyError):
            nsbox.AsyncSandbox(policy="no-such-policy")
    arun(main())


def test_async_output_streaming(aio):
    async def main():
        got = []
        threads = set()

        def on_output(stream, text):
            got.append((stream, text, time.monotonic()))
            threads.add(threading.get_ident())

        async with nsbox.AsyncSandbox(timeout=30, on_output=on_output) as sb:
            code = textwrap.dedent("""\
                import sys, time
                print('first', flush=True)
                print('err', file=sys.stderr, flush=True)
                time.sleep(0.5)
                print('\u00e9t\u00e9' * 1000)
                'end'""")
            t_end = None
            value = await sb.execute(code)
            t_end = time.monotonic()
        assert value == "end"
        out = "".join(t for s, t, _ in got if s == "stdout")
        err = "".join(t for s, t, _ in got if s == "stderr")
        assert out == "first\n" + "\u00e9t\u00e9" * 1000 + "\n"
        assert err == "err\n"
        first = [ts for s, t, ts in got if t.startswith("first")][0]
        assert t_end - first > 0.3                            # streamed, not at the end
        return threads

    threads = arun(main())
    assert len(threads) == 1


def test_async_serialises_calls_on_one_sandbox(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            await sb.execute("n = 0")
            code = "import time\nm = n\ntime.sleep(0.05)\nn = m + 1\nn"
            await asyncio.gather(*(sb.execute(code) for _ in range(5)))
            assert await sb.get_variable("n") == 5
    arun(main())


def test_async_restart_and_limits(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            @sb.tool
            def one() -> int:
                return 1
            await sb.execute("x = 1")
            pid = (await sb.info())["pid"]
            await sb.restart()
            assert (await sb.info())["pid"] != pid
            assert await sb.execute("'x' in globals(), one()") == (False, 1)
            sb.set_limits(timeout=0.3)
            with pytest.raises(nsbox.TimeLimitExceeded):
                await sb.execute("while True: pass")
            sb.set_limits(memory="300M", timeout=30)
            assert await sb.execute("one() + 1") == 2          # restarted lazily, tools kept
    arun(main())


def test_tool_registered_while_an_exec_runs(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            task = asyncio.ensure_future(sb.execute("import time; time.sleep(0.5); 1"))
            await asyncio.sleep(0.2)
            sb.register_function("late", lambda: "here")
            assert await task == 1
            assert await sb.execute("late()") == "here"
    arun(main())


def test_async_keyboard_interrupt_in_a_tool(aio):
    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            @sb.tool
            def interrupt() -> None:
                raise KeyboardInterrupt
            with pytest.raises(KeyboardInterrupt):
                await sb.execute("interrupt()")
            assert await sb.execute("1") == 1
    arun(main())


def test_async_on_warning_runs_on_the_loop(aio, tmp_path):
    pol = tmp_path / "fallback.policy"
    pol.write_text("[Limits]\nPids=50\nMemory=infinity\n")
    if nsbox.run(["true"], policy=str(pol), on_warning=lambda m: None, timeout=30).enforced["pids"]:
        pytest.skip("this host enforces Pids by a cgroup: no fallback warning to relay")
    seen = []

    async def main():
        async with nsbox.AsyncSandbox(policy=str(pol), on_warning=lambda m: seen.append(
                (m, threading.get_ident()))) as sb:
            assert await sb.execute("1") == 1
        return threading.get_ident()
    me = arun(main())
    assert seen and all(t == me for _, t in seen)


def test_sigint_cancels_an_async_exec(aio, tmp_path):
    """Ctrl-C under asyncio.run cancels the main task, hence the exec."""
    script = tmp_path / "aint.py"
    script.write_text(textwrap.dedent("""\
        import asyncio, os, signal, sys, time
        import nsbox

        async def main():
            async with nsbox.AsyncSandbox(timeout=60) as sb:
                await sb.execute("x = 1")
                asyncio.get_running_loop().call_later(0.5, os.kill, os.getpid(), signal.SIGINT)
                await sb.execute("while True: pass")

        t = time.monotonic()
        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            print("KeyboardInterrupt", round(time.monotonic() - t) < 20)
        """))
    out = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=PYDIR),
                         capture_output=True, text=True, timeout=60, preexec_fn=_sigint_default)
    assert out.stdout == "KeyboardInterrupt True\n", out.stderr


# ---- the sync Sandbox: async tools, Ctrl-C -------------------------------

def test_sync_sandbox_runs_async_tools(sb):
    calls = []

    @sb.tool
    async def add(a: int, b: int) -> int:
        "Add, asynchronously."
        await asyncio.sleep(0.01)
        calls.append(threading.get_ident())
        return a + b

    @sb.tool
    async def fail() -> None:
        raise ValueError("nope")

    assert "def add(a: int, b: int) -> int:" in sb.describe_tools()
    assert sb.execute("add(2, 3)") == 5
    assert calls == [threading.get_ident()]                   # asyncio.run on this thread
    with pytest.raises(nsbox.SandboxedToolError) as ei:
        sb.execute("fail()")
    assert ei.value.message == "ValueError: nope"

    # From inside a running event loop: asyncio.run in a worker thread.
    async def inside():
        return sb.execute("add(4, 5)")
    assert asyncio.run(inside()) == 9
    assert len(calls) == 2 and calls[1] != threading.get_ident()


_SIGINT_SCRIPT = """\
import os, signal, sys, threading, time
import nsbox

with nsbox.Sandbox(timeout=60) as sb:
    sb.execute("x = 41")
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    t = time.monotonic()
    try:
        print("value", sb.execute(%r), flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", time.monotonic() - t < 20, flush=True)
    print("after", sb.execute("x + 1"), flush=True)
"""


def _sigint_default():
    """A child that gets Ctrl-C as a terminal's foreground job would: the
    suite itself may run with SIGINT ignored (started in the background by
    a non-interactive shell), and python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_script(tmp_path, code, **kw):
    script = tmp_path / "sigint.py"
    script.write_text(_SIGINT_SCRIPT % code)
    kw.setdefault("preexec_fn", _sigint_default)
    return subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=PYDIR),
                          capture_output=True, text=True, timeout=60, **kw)


def test_ctrl_c_interrupts_a_blocking_execute(libnsbox, tmp_path):
    out = _run_script(tmp_path, "while True: pass")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "KeyboardInterrupt True\nafter 42\n", out.stderr


def test_ctrl_c_ignored_does_not_hang(libnsbox, tmp_path):
    """Started with SIGINT ignored: the exec runs to its end, undisturbed."""
    out = _run_script(tmp_path, "import time\ntime.sleep(1.5)\n'slept'",
                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "value slept\nafter 42\n", out.stderr


def test_close_after_its_loop_closed_with_an_exec_pending(libnsbox):
    """close() of an AsyncSandbox whose loop ended while an execute() was
    pending raised RuntimeError('Event loop is closed') and left the sandbox
    running for the rest of the process (close() then returned early)."""
    async def start():
        s = nsbox.AsyncSandbox(timeout=30)
        await s.start()
        pid = (await s.info())["pid"]
        task = asyncio.ensure_future(s.execute("import time; time.sleep(10)"))
        await asyncio.sleep(0.3)
        return s, pid, task

    loop = asyncio.new_event_loop()
    s, pid, task = loop.run_until_complete(start())
    loop.close()
    s.close()
    assert s.closed
    for _ in range(100):
        if not os.path.exists("/proc/%d" % pid):
            break
        time.sleep(0.05)
    assert not os.path.exists("/proc/%d" % pid), "the sandbox outlived close()"
    task._log_destroy_pending = False


def test_calls_from_two_event_loops_at_once_are_refused_not_hung(libnsbox):
    """Two threads each running asyncio.run(sb.execute(...)) on one
    AsyncSandbox: the second waited on an asyncio.Lock of the first loop,
    whose release never woke it (not thread-safe): a hang for good."""
    s = nsbox.AsyncSandbox(timeout=30)
    out = []

    def worker(i):
        try:
            out.append(asyncio.run(s.execute("import time; time.sleep(0.5); %d" % i)))
        except nsbox.SandboxError as e:
            out.append(e)

    try:
        ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        assert not any(t.is_alive() for t in ts), "a call from a second event loop hung"
        errors = [e for e in out if isinstance(e, nsbox.SandboxError)]
        assert len(out) == 3 and len(errors) >= 1
        assert all("in use by another one" in str(e) and e.errno == errno.EBUSY for e in errors)
        assert asyncio.run(s.execute("6 * 7")) == 42          # one loop after another is fine
    finally:
        s.close()


def test_close_from_another_thread_ends_the_exec_on_its_loop(libnsbox):
    """close() from a thread other than the loop's while an execute() ran:
    the exec's future was resolved from the wrong thread, so the awaiting
    task never woke (a hang for good), and the handle was freed while the
    loop's thread could still be driving it."""
    s = nsbox.AsyncSandbox()            # no time limit
    box = {}
    started = threading.Event()

    def worker():
        async def main():
            await s.start()
            started.set()
            try:
                await s.execute("while True: pass")
            except BaseException as e:  # noqa: B036
                box["e"] = e
        asyncio.run(main())

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    assert started.wait(20)
    time.sleep(0.5)
    s.close()
    t.join(15)
    assert not t.is_alive(), "the execute() awaiting on the loop never woke after close()"
    assert isinstance(box.get("e"), nsbox.SandboxError) and "closed during execute" in str(box["e"])


def test_session_fd_failure_says_why(libnsbox):
    """With no fd free, the first execute() of an AsyncSandbox failed with
    'nsbox_session_fd failed' and errno EIO: libnsbox was loaded without
    use_errno, so its errno never reached ctypes.get_errno()."""
    import resource

    async def main():
        s = nsbox.AsyncSandbox(timeout=30)
        await s.start()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        keep = []
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
            try:
                while True:
                    keep.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
            except OSError:
                pass
            with pytest.raises(nsbox.SandboxError) as ei:
                await s.execute("1")
        finally:
            for k in keep:
                os.close(k)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert ei.value.errno == errno.EMFILE and "nsbox_session_fd: Too many open files" in str(ei.value)
        assert await s.execute("6 * 7") == 42
        await s.aclose()

    asyncio.run(main())
