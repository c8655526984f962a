"""nsbox: run Python in kernel-isolated sandboxes, from Python.

    import nsbox

    with nsbox.Sandbox(memory="256M", timeout=10) as sb:
        @sb.tool
        def add(a: int, b: int) -> int:
            "Add two numbers."
            return a + b

        sb.execute("x = add(2, 3)")
        print(sb.execute("x * 10"))   # 50

One command in a new sandbox, like `nsbox run`:

    r = nsbox.run(["make", "test"], memory="1G", timeout=600, workspace="/src")
    print(r.exit_code, r.peak_memory, r.wall)   # an nsbox.RunResult

The jail's warnings (a limit this host can't enforce with a cgroup, and the
fallback used) are issued as nsbox.SandboxWarning, or passed to the
on_warning=fn(message) argument of Sandbox and run().

A pure-Python binding of libnsbox (ctypes): no compiler needed.  The
library is found through $NSBOX_LIB, then build/libnsbox.so.0 of a source
checkout, then the system's library path.
"""

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ._values import ReprValue
from .errors import (Cancelled, MemoryLimitExceeded, PolicyError, ProtocolError, SandboxCrashed,
                     SandboxedException, SandboxedMemoryError, SandboxedToolError, SandboxError,
                     SandboxWarning, TimeLimitExceeded, ToolError, UndecodableValue, UndefinedVariable)
from ._run import RunResult, run
from .sandbox import ExecResult, Sandbox
from ._files import SandboxFileError

if TYPE_CHECKING:
    from ._async import AsyncSandbox

from ._version import __version__  # noqa: F401  (one place: make sync-version)

__all__ = [
    "Sandbox", "AsyncSandbox", "ExecResult", "run", "RunResult", "SandboxWarning", "ReprValue", "SandboxError",
    "PolicyError", "TimeLimitExceeded", "MemoryLimitExceeded", "Cancelled", "SandboxCrashed",
    "ProtocolError", "ToolError",
    "SandboxedException", "SandboxedToolError", "SandboxedMemoryError", "UndefinedVariable",
    "UndecodableValue", "library_version", "SandboxFileError", "list_packages",
]


def __getattr__(name: str) -> Any:
    # AsyncSandbox on first use: asyncio takes longer to import than the rest.
    if name == "AsyncSandbox":
        from ._async import AsyncSandbox
        return AsyncSandbox
    raise AttributeError("module 'nsbox' has no attribute %r" % (name,))


def list_packages(rootfs: Optional[Any] = None, policy: Optional[Any] = "default") -> List[Dict[str, str]]:
    """The Debian packages a root tree provides (rootfs: a built tree's name
    or a root directory; None: the host's), as a list of {"name": ...,
    "version": ...}, read on the host from the tree's dpkg status file.
    Raises PolicyError when the tree is not built."""
    from . import _lib, _policy
    lib = _lib.load()
    p = _policy.new_policy(lib, policy, rootfs=rootfs)
    try:
        pkgs: List[Dict[str, str]] = _policy.packages(lib, p)
        return pkgs
    finally:
        lib.nsbox_policy_free(p)


def library_version() -> str:
    """The version of the loaded libnsbox ("0.3.0")."""
    from . import _lib
    return _lib.load().nsbox_version().decode()
