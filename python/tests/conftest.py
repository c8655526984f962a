"""Fixtures for the SDK tests: the package from the tree, and a check that
libnsbox is there (a missing library skips with the reason, or fails when
NSBOX_MUST_WORK=1, as in CI)."""

import contextlib
import os
import signal
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
ROOT = os.path.dirname(PYDIR)
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)
# The integration tests' helpers shared with these (forge.py: hand-written frames).
sys.path.insert(1, os.path.join(ROOT, "tests", "integ"))

import nsbox  # noqa: E402
from nsbox import _lib  # noqa: E402


def _library_problem():
    try:
        _lib.load()
    except nsbox.SandboxError as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def libnsbox():
    problem = _library_problem()
    if problem:
        if os.environ.get("NSBOX_MUST_WORK") == "1":
            pytest.fail("NSBOX_MUST_WORK=1 and " + problem)
        pytest.skip(problem)
    return _lib.lib


@pytest.fixture
def sb(libnsbox):
    s = nsbox.Sandbox(timeout=30)
    yield s
    s.close()


@contextlib.contextmanager
def ctrl_c_after(lib, name):
    """lib.NAME raises SIGINT (Python's handler on) as it returns, and
    nsbox_free is counted: yields the list of the pointers freed meanwhile.
    For "a KeyboardInterrupt right after the C call leaks its buffer"."""
    real, real_free = getattr(lib, name), lib.nsbox_free
    freed = []

    def call(*a):
        rc = real(*a)
        os.kill(os.getpid(), signal.SIGINT)
        return rc

    def free(p):
        freed.append(p)
        return real_free(p)

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    setattr(lib, name, call)
    lib.nsbox_free = free
    try:
        yield freed
    finally:
        setattr(lib, name, real)
        lib.nsbox_free = real_free
        signal.signal(signal.SIGINT, old)


def signal_all(pids, sig):
    """Send sig to each of pids (negative: zombies, as descendants() gives
    them), those gone since skipped."""
    for pid in pids:
        try:
            os.kill(abs(pid), sig)
        except ProcessLookupError:
            pass


def descendants(root=None):
    """Every process below root (default: this one), zombies as negative pids."""
    root = os.getpid() if root is None else root
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            children.setdefault(int(fields[1]), []).append(-int(pid))  # zombies count too
        else:
            children.setdefault(int(fields[1]), []).append(int(pid))
    out = []
    queue = [root]
    while queue:
        for c in children.get(abs(queue.pop()), []):
            out.append(c)
            queue.append(c)
    return sorted(out)
