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

