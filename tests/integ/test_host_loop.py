"""A hostile sandbox must not hold an event-loop host that serves other
sessions (README, threat model): frames the library answers itself (a call
to a name with no tool) raised no event, and nsbox_exec_advance read them
for as long as the sandbox sent them, so a flood froze a shared asyncio
loop (20 s in the red team's run) and every other sandbox on it."""
import os
import subprocess
import sys

from conftest import BUILD, sdk_env
from forge import PRELUDE

PYDIR = os.path.join(os.path.dirname(__file__), "..", "..", "python")

FLOOD = PRELUDE + r'''
import threading
p = b'{"name":"nope","args":[],"kwargs":{}}'
one = struct.pack("<IIHHI", 0x4e534258, len(p), 5, 0, 7) + p
blob = one * 2000
t0 = time.monotonic()
while time.monotonic() - t0 < 2:
    os.write(fd, blob)
'''

# What the host programs below share: a 20 ms ticker on their loop.
TICKER = r'''
import asyncio, sys, time
import nsbox
ticks, done = [], []

async def ticker():
    while not done:
        await asyncio.sleep(0.02)
        ticks.append(time.monotonic())

def stall(t0, t1):
    """The longest the ticker went without a tick between t0 and t1."""
    marks = [t0] + [x for x in ticks if t0 < x < t1] + [t1]
    return round(max(y - x for x, y in zip(marks, marks[1:])), 2)
'''


def run_host(program, stdin=None):
    """program's output words, run with the SDK from the tree."""
    env = sdk_env(NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"), PYTHONPATH=os.path.abspath(PYDIR))
    p = subprocess.run([sys.executable, "-c", program], input=stdin, capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


HOST = TICKER + r'''
FLOOD = sys.stdin.read()

async def main():
    async with nsbox.AsyncSandbox(timeout=4) as a, nsbox.AsyncSandbox(timeout=30) as b:
        await b.execute("1")
        t = asyncio.ensure_future(ticker())
        async def bwork():
            n = 0
            while not done:
                await b.execute("1")
                n += 1
            return n
        bt = asyncio.ensure_future(bwork())
        t0 = time.monotonic()
        try:
            await a.run(FLOOD)
        except nsbox.SandboxError:
            pass
        t1 = time.monotonic()
        done.append(1)
        n = await bt
        await t
    # Ticks and B's execs while A flooded.
    print(sum(1 for x in ticks if t0 + 0.5 < x < t1 - 0.5), n, round(t1 - t0, 1))

asyncio.run(main())
'''


def test_flood_of_unanswered_frames_does_not_hold_the_loop():
    ticks, execs, span = run_host(HOST, FLOOD)
    # A 20 ms ticker over the ~1-3 s in the middle of the flood: frozen, it
    # got none; served, it gets dozens (10 is far below).  B's execs went
    # on too.
    assert int(ticks) >= 10 and int(execs) >= 10, (ticks, execs, span)


HOLD = TICKER + r'''
async def main():
    async with nsbox.AsyncSandbox(timeout=60) as a:
        await a.execute("x = 1")
        # A thread of the sandbox's own holds the runner's interpreter lock
        # for a few seconds (a C loop never releases it).
        await a.execute("import threading, time\ndef hog():\n    time.sleep(0.2)\n    sum(range(2 * 10**8))\n"
                        "threading.Thread(target=hog, daemon=True).start()")
        await asyncio.sleep(0.6)            # the hog is running
        t = asyncio.ensure_future(ticker())
        t0 = time.monotonic()
        v = await a.get_variable("x")
        t1 = time.monotonic()
        done.append(1)
        await t
    print(v, sum(1 for x in ticks if t0 < x < t1), round(t1 - t0, 1))

asyncio.run(main())
'''


def test_a_held_runner_does_not_hold_the_loop():
    """get_variable, set_variable, reset and info waited for the runner on
    the loop's thread: a sandbox holding its interpreter lock froze the
    loop for as long as the call took (up to 30 s).  They run in the
    executor now."""
    value, ticks, waited = run_host(HOLD)
    # The wait is the hog's (seconds); a 20 ms ticker ticks through it.
    assert value == "1" and float(waited) >= 0.5 and int(ticks) >= 10, (value, ticks, waited)


CLOSE = r'''
import asyncio
import nsbox

async def main():
    a = nsbox.AsyncSandbox(timeout=60)
    await a.execute("x = 1")
    await a.execute("import threading, time\ndef hog():\n    time.sleep(0.2)\n    sum(range(2 * 10**8))\n"
                    "threading.Thread(target=hog, daemon=True).start()")
    await asyncio.sleep(0.6)                # the hog holds the runner
    task = asyncio.ensure_future(a.get_variable("x"))
    await asyncio.sleep(0.2)                # its call is in the executor
    a.close()                               # a plain method: frees the session
    try:
        print(await task)
    except nsbox.SandboxError as e:
        print("closed", e.errno)

asyncio.run(main())
'''


def test_close_waits_for_a_call_in_the_executor():
    """close() while get_variable's call runs in the executor must not free
    the session under it (the call holds the sandbox's thread lock, as file
    operations do); a sanitizer build sees any use after free.  close()
    cancels it (nsbox_cancel ends a request waiting on the runner, and the
    session with it: ENOTCONN) instead of waiting out the hog; a call not
    yet begun finds the sandbox closed (EBADF)."""
    out = run_host(CLOSE)
    assert out in (["1"], ["closed", "9"], ["closed", "107"]), out


# The runner stops reading its socket (a pipe dup'd over the descriptor its
# reader thread reads), and the code sends CALLs to a name with no tool on a
# copy of it: the library's RAISE answers fill the socket's buffers.
DEAF = PRELUDE + r'''
s = os.dup(fd)
r, w = os.pipe()
os.dup2(r, fd)
os.set_blocking(s, True)
p = b'{"name":"nope","args":[],"kwargs":{}}'
one = struct.pack("<IIHHI", 0x4e534258, len(p), 5, 0, 7) + p
t0 = time.monotonic()
while time.monotonic() - t0 < 60:
    os.write(s, one * 100)
'''

DEAF_HOST = TICKER + r'''
DEAF = sys.stdin.read()

async def main():
    async with nsbox.AsyncSandbox(timeout=4) as a:
        await a.execute("1")
        t = asyncio.ensure_future(ticker())
        t0 = time.monotonic()
        r = await a.run(DEAF)
        t1 = time.monotonic()
        done.append(1)
        await t
    print(stall(t0, t1), round(t1 - t0, 1), type(r.error).__name__)

asyncio.run(main())
'''


def test_a_runner_that_stops_reading_does_not_hold_the_loop():
    """The library's answers waited in send() for room on the socket, until
    the exec's deadline (time limit + 1 s; 30 s without one), on the
    thread driving the exec: a sandbox whose runner stopped reading froze
    an asyncio loop for its whole time limit.  They are queued now, and
    the session fd waits for room."""
    stall, span, err = run_host(DEAF_HOST, DEAF)
    # The exec ends at its deadline (the runner never takes the answers);
    # the 20 ms ticker is never held for long meanwhile.
    assert float(span) >= 3 and err in ("ProtocolError", "TimeLimitExceeded"), (stall, span, err)
    assert float(stall) < 1.0, (stall, span, err)


DEAF_CANCEL = r'''
import sys, threading, time
import nsbox
DEAF = sys.stdin.read()
with nsbox.Sandbox(timeout=60) as sb:
    sb.execute("1")
    threading.Timer(1.5, sb.cancel).start()
    t0 = time.monotonic()
    r = sb.run(DEAF)
    print(round(time.monotonic() - t0, 1), type(r.error).__name__)
'''


def test_cancel_reaches_a_runner_that_stops_reading():
    """Blocked in send(), the library watched neither the cancel request
    nor the sandbox: Sandbox.cancel() waited for the exec's deadline."""
    span, err = run_host(DEAF_CANCEL, DEAF)
    assert float(span) < 10 and err == "Cancelled", (span, err)


SHUT = PRELUDE + r'''
import socket
s = socket.socket(fileno=os.dup(fd))
s.shutdown(socket.SHUT_RDWR)
time.sleep(30)
'''


def test_a_runner_that_closes_its_socket_does_not_hold_the_loop():
    """At the socket's end the library waited up to 2 s for the sandbox to
    end by itself (its status, an OOM kill's, must be read), on the thread
    driving the exec: code that shut its socket down and lived on froze
    an asyncio loop 2 s per exec.  The step comes back when the sandbox
    has ended, or when the wait is over."""
    stall, span, err = run_host(DEAF_HOST, SHUT)
    assert err == "SandboxCrashed" and float(span) >= 1.5, (stall, span, err)
    assert float(stall) < 1.0, (stall, span, err)


ACLOSE = TICKER + r'''
async def main():
    a = nsbox.AsyncSandbox(timeout=60)
    await a.execute("import threading, time\ndef hog():\n    time.sleep(0.2)\n    sum(range(3 * 10**9))\n"
                    "threading.Thread(target=hog, daemon=True).start()")
    await asyncio.sleep(0.6)                # the hog holds the runner
    t = asyncio.ensure_future(ticker())
    t0 = time.monotonic()
    await a.aclose()
    t1 = time.monotonic()
    done.append(1)
    await t
    print(stall(t0, t1), round(t1 - t0, 1), a.closed)

asyncio.run(main())
'''


def test_aclose_of_a_held_runner_does_not_hold_the_loop():
    """aclose() freed the session on the loop's thread: the BYE a held
    runner never answers (1 s) and its exit (2 s) froze the loop 3 s.  The
    free runs in the executor now."""
    stall, span, closed = run_host(ACLOSE)
    assert closed == "True" and float(span) >= 1.0 and float(stall) < 1.0, (stall, span, closed)
