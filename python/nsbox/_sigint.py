"""Ctrl-C during a blocking Sandbox.execute().

While the main thread is inside nsbox_exec() (ctypes, GIL released), Python
only notes a SIGINT: its handler runs when the call returns, which for
`while True: pass` is never.  So the first execute() on the main thread
installs a wakeup fd (signal.set_wakeup_fd): CPython's C-level handler
writes the signal's number there at once, and a daemon thread reading it
cancels the exec running on the main thread (nsbox_cancel, through
Sandbox.cancel).  The exec ends (Cancelled inside), the call returns, and
CPython's pending handler raises KeyboardInterrupt as usual.

Only when SIGINT has Python's default handler (a custom handler decides
for itself; SIG_IGN means no signal at all), and only when no other wakeup
fd was set (asyncio's add_signal_handler sets one: then nothing changes).
The cost on the exec path is a thread-id compare and a global store.
"""

import os
import signal
import threading

__all__ = ["arm", "target"]

_get_ident = threading.get_ident
MAIN = threading.main_thread().ident
target = None       # the Sandbox whose exec runs on the main thread now
_state = 0          # 0 not tried, 1 installed, -1 not possible here


def arm(sb):
    """Before a blocking exec: True (and sb is the target) on the main thread."""
    global target
    if _get_ident() != MAIN:
        return False
    if _state == 0:
        _install()
    target = sb
    return True


def _install():
    global _state
    _state = -1
    try:
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        return
    if old != -1:
        # Someone else's (asyncio's): put it back and stay out of the way.
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return
    os.set_blocking(r, True)
    t = threading.Thread(target=_watch, args=(r,), name="nsbox-sigint", daemon=True)
    t.start()
    _state = 1


def _watch(fd):
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            sb = target
            if sb is not None:
                try:
                    sb.cancel()
                except Exception:
                    pass


def _after_fork_in_child():
    # The watcher thread did not survive the fork: take the wakeup fd down
    # (if still ours) so that the next execute() installs afresh.
    global _state, target, MAIN
    target = None
    MAIN = threading.main_thread().ident
    if _state == 1:
        _state = 0
        try:
            if _get_ident() == MAIN:
                signal.set_wakeup_fd(-1)
        except (ValueError, OSError):
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
