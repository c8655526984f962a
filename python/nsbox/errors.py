"""Exceptions raised by the nsbox SDK.

Every exception is a SandboxError.  The sandboxed code's own uncaught
exceptions arrive as SandboxedException (with the type name, message and
traceback from inside); limit kills and dead sandboxes have their own
classes so that an agent loop can tell "the model's code failed" from "the
sandbox went away".
"""

from typing import Optional, Union

__all__ = [
    "SandboxError", "PolicyError", "TimeLimitExceeded", "MemoryLimitExceeded", "Cancelled",
    "SandboxCrashed", "ProtocolError", "ToolError", "SandboxedException",
    "SandboxedToolError", "SandboxedMemoryError", "UndefinedVariable", "UndecodableValue", "SandboxWarning",
]


class SandboxError(Exception):
    """Base class of every nsbox error.

    errno is the positive errno of a failing libnsbox call (e.g. errno.EINVAL),
    or None when the error did not come from a failing call.
    """

    def __init__(self, message: str, errno: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno


class PolicyError(SandboxError, ValueError):
    """A policy, limit or option was refused (bad name, file or value)."""


class TimeLimitExceeded(SandboxError):
    """The code ran past its time limit.

    session_lost is True when the sandbox had to be killed (code that ignored
    the interruption, or was stuck in C): its variables are gone and the next
    call starts a fresh sandbox.
    """

    session_lost = False


class MemoryLimitExceeded(SandboxError):
    """The sandbox hit its memory limit.

    session_lost is True when the kernel's OOM killer ended the sandbox; the
    next call starts a fresh one.
    """

    session_lost = False


class Cancelled(SandboxError):
    """Sandbox.cancel() interrupted the code."""

    session_lost = False


class SandboxCrashed(SandboxError):
    """The sandbox died (killed, crashed, or its runner exited).

    The next call starts a fresh sandbox unless the Sandbox was created with
    auto_restart=False.
    """

    session_lost = True


class ProtocolError(SandboxCrashed):
    """The sandbox broke the wire protocol; the host killed it."""


class UndecodableValue(SandboxError, ValueError):
    """A value from inside that the host could not turn into Python objects
    (nested too deep for the host's stack, too big for its memory, or a
    malformed $-tag such as {"$int": "xyz"}).  The sandbox, which chose the
    value, is still alive; __cause__ is the decoder's exception."""


class ToolError(SandboxError):
    """A host tool failed.

    Raise it from a tool to send a plain message into the sandbox, where the
    code sees nsbox.ToolError(message).  Any other exception a tool raises is
    sent as "TypeName: message" (never the host traceback).
    """


class SandboxedException(SandboxError):
    """An exception the sandboxed code did not catch.

    type_name:  the exception's type as seen inside ("ZeroDivisionError",
                "json.decoder.JSONDecodeError", "nsbox.ToolError").
    message:    str() of the exception.
    traceback:  the formatted traceback, pointing at the code's own lines.
    stdout, stderr: what the code printed before failing.
    exit_code:  for SystemExit, its code; else None.
    """

    def __init__(self, type_name: str, message: str, traceback: str = "", stdout: str = "", stderr: str = "",
                 exit_code: Union[int, str, None] = None) -> None:
        text = "%s: %s" % (type_name, message) if message else type_name
        super().__init__(text)
        self.type_name = type_name
        self.message = message
        self.traceback = traceback
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code


class SandboxedToolError(SandboxedException, ToolError):
    """A tool's failure (nsbox.ToolError inside) that the sandboxed code did
    not catch.  When a host tool raised it, __cause__ is the host exception."""


class SandboxedMemoryError(SandboxedException, MemoryLimitExceeded):
    """MemoryError raised inside the sandbox (an allocation refused by a
    limit); the sandbox is still alive."""


class UndefinedVariable(SandboxError, KeyError):
    """get_variable() of a name the sandbox's globals do not hold."""

    def __str__(self) -> str:
        return self.message


class SandboxWarning(UserWarning):
    """A warning from the jail about a sandbox that was still made, e.g. a
    limit this host can't enforce with a cgroup and the fallback used
    instead.  Issued through the warnings module unless the Sandbox or run()
    was given on_warning."""
