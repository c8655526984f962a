"""Fixtures for the SDK tests: the package from the tree, and a check that
libnsbox is there (a missing library skips with the reason, or fails when
NSBOX_MUST_WORK=1, as in CI)."""

import os
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
