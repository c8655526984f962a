"""Files inside a Sandbox: write_file, read_file, list_files, make_dir,
upload_dir and download_dir (a mixin of Sandbox).

The runner does the file work inside the sandbox, as its user and in its
mount namespace (nsbox-protocol(7), FILES): a symlink, fifo or swapped name
planted by sandboxed code only changes what the sandbox itself sees.
download_dir and upload_dir are libnsbox's (nsbox_download_dir(3)): on the
host, download_dir writes only beneath the directory it was given, every
name that came from the sandbox checked (one path component, no control
characters), each made beneath its parent's descriptor (mkdirat, openat2
RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, O_EXCL), so nothing on the host
follows a path the sandbox controls.
"""

import asyncio
import ctypes
import errno as _errno
import json
import os
import stat as _stat
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint64, c_void_p

from . import _lib
from .errors import SandboxError

__all__ = ["SandboxFileError", "FilesMixin", "AsyncFilesMixin", "FileList"]

_PROTOS = {
    "nsbox_write_file": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t, c_int, POINTER(c_void_p)]),
    "nsbox_read_file": (c_int, [c_void_p, c_char_p, POINTER(c_void_p), POINTER(c_size_t), c_uint64,
                                POINTER(c_void_p)]),
    "nsbox_list_files": (c_int, [c_void_p, c_char_p, POINTER(c_void_p), POINTER(c_void_p)]),
    "nsbox_make_dir": (c_int, [c_void_p, c_char_p, c_int, POINTER(c_void_p)]),
    "nsbox_download_dir": (c_int, [c_void_p, c_char_p, c_char_p, c_uint64, c_uint64, POINTER(c_void_p)]),
    "nsbox_upload_dir": (c_int, [c_void_p, c_char_p, c_char_p, POINTER(c_void_p)]),
}

# download_dir's defaults (nsbox.h's NSBOX_DIR_MAX_*): whole-tree caps,
# beside read_file's per-file one.
DOWNLOAD_MAX_BYTES = 1 << 30
DOWNLOAD_MAX_FILES = 100000


async def to_the_end(fut, on_cancel=None):
    """fut's result (an executor's job).  Cancelled meanwhile, it still
    waits for the job to end (it holds the session or frees it) and then
    raises CancelledError; on_cancel() (if given) is called once first, to
    make the job end sooner."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        if on_cancel is not None and not fut.done():
            on_cancel()
        while not fut.done():
            try:
                await asyncio.wait([fut])
            except asyncio.CancelledError:
                pass
        raise

class FileList(list):
    """list_files' entries; truncated is True when the directory held more
    than one listing gives (50000)."""

    truncated = False


class SandboxFileError(SandboxError, OSError):  # type: ignore[misc]  # both define errno (an int in each)
    """A file operation inside the sandbox failed; errno is what the sandbox
    saw (ENOENT, EISDIR, EINVAL for a fifo or device, EFBIG, ENOSPC, ...).
    Also an OSError, so `except FileNotFoundError` does not match but
    `except OSError as e: e.errno` works."""

    def __init__(self, message, errno=None):
        OSError.__init__(self, errno, message)
        self.message = message
        self.errno = errno

    def __str__(self):
        return self.message


def _fns(lib):
    if getattr(lib, "_nsbox_files_ready", False):
        return lib
    for name, (restype, argtypes) in _PROTOS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise SandboxError("%s is too old for file operations (it lacks %s): libnsbox 0.5.0 or newer "
                               "is needed" % (_lib.library_path, name), _errno.ENOSYS) from None
        fn.restype = restype
        fn.argtypes = argtypes
    lib._nsbox_files_ready = True
    return lib


def _path(p):
    p = os.fspath(p)
    if isinstance(p, bytes):
        p = p.decode("utf-8")
    if not p or "\0" in p:
        raise ValueError("a sandbox path must be a non-empty string without NUL")
    return p.encode("utf-8")


# Each file operation is written once, as a generator: it yields the one
# libnsbox call it makes, (what, function, arguments), is sent that call's
# return value (or thrown its SandboxFileError) and returns the method's
# result.  Sandbox drives it on the calling thread, AsyncSandbox in the
# loop's executor (a copy of 1 GiB must not hold the loop).

def _finish(step, x):
    try:
        step(x)
    except StopIteration as s:
        return s.value
    raise RuntimeError("a file operation made more than one call")


def _int(value, what, lo, hi):
    """value as an int in [lo, hi] for a C integer: ctypes would keep its
    low bits (mode=2**40 made the file with mode 0, max_bytes=2**64+1 was a
    cap of 1 byte), and int() would take "644" as decimal."""
    if isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError("%s must be an int, not %r" % (what, value))
    else:
        n = value.__index__()
    if not lo <= n <= hi:
        raise ValueError("%s must be between %d and %d, not %r" % (what, lo, hi, value))
    return n


def _mode(mode, what):
    return _int(mode, what + ": mode", 0, 0o7777)


_U64_MAX = (1 << 64) - 1


def _op_write_file(lib, path, data, mode):
    if isinstance(data, str):
        data = data.encode("utf-8")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data)
    else:
        # bytes(5) is five NUL bytes, bytes([1, 2]) a list's: never what was meant.
        raise TypeError("write_file: data must be str or bytes, not %s" % type(data).__name__)
    mode = _mode(mode, "write_file")
    yield "write_file", lib.nsbox_write_file, (_path(path), data, len(data), mode)


def _op_read_file(lib, path, max_bytes):
    if max_bytes is not None:
        max_bytes = _int(max_bytes, "read_file: max_bytes", 1, _U64_MAX)
    out = c_void_p()
    n = c_size_t()
    # The yield is inside the try: a KeyboardInterrupt handled as the C call
    # returns never resumes this generator, and its close (at garbage
    # collection) frees the buffer here, up to 64 MiB that leaked before.
    try:
        yield "read_file", lib.nsbox_read_file, (_path(path), byref(out), byref(n), max_bytes or 0)
        return ctypes.string_at(out.value, n.value) if n.value else b""
    finally:
        if out.value:
            lib.nsbox_free(out.value)


def _op_list_files(lib, path):
    out = c_void_p()
    try:
        yield "list_files", lib.nsbox_list_files, (_path(path), byref(out))
    except GeneratorExit:
        if out.value:
            lib.nsbox_free(out.value)
        raise
    v = json.loads(_lib.take_string(out.value))
    ents = FileList(v["entries"])
    ents.truncated = v.get("truncated") is True
    return ents


def _op_make_dir(lib, path, mode):
    yield "make_dir", lib.nsbox_make_dir, (_path(path), _mode(mode, "make_dir"))


def _op_upload_dir(lib, local, remote):
    return (yield "upload_dir", lib.nsbox_upload_dir, (os.fsencode(local), _path(remote)))


def _make_parents(local):
    """os.makedirs(local's parent, exist_ok=True), with no symbolic link in
    the path followed (libnsbox makes local itself by the same rule,
    base/hostpath.h): the path may sit in a workspace an earlier session
    wrote back, links included."""
    path = os.fsencode(local)
    parts = [p for p in path.split(b"/") if p][:-1]
    fd = os.open(b"/" if path.startswith(b"/") else b".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for p in parts:
            try:
                os.mkdir(p, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except NotADirectoryError:
                if not _stat.S_ISLNK(os.lstat(p, dir_fd=fd).st_mode):
                    raise
                sub = -1
            if sub < 0 or _stat.S_ISLNK(os.fstat(sub).st_mode):
                if sub >= 0:
                    os.close(sub)
                raise SandboxFileError("download_dir: %s: a symbolic link in the path (not followed: give the path "
                                       "without links, as realpath(1) prints it)" % os.fsdecode(local), _errno.ELOOP)
            os.close(fd)
            fd = sub
    finally:
        os.close(fd)


def _op_download_dir(lib, remote, local, max_bytes, max_files):
    max_bytes = _int(max_bytes, "download_dir: max_bytes", 1, _U64_MAX)
    max_files = _int(max_files, "download_dir: max_files", 1, _U64_MAX)
    _make_parents(local)
    try:
        return (yield "download_dir", lib.nsbox_download_dir,
                (_path(remote), os.fsencode(local), max_bytes, max_files))
    except SandboxFileError as e:
        if e.errno == _errno.EEXIST:  # on the host, where nothing is overwritten
            raise FileExistsError(e.errno, e.message) from None
        raise


def _outcome(sb, gen, what, rc, err):
    """Send the call's return value into the operation (or throw its
    SandboxFileError in) and return what the operation returns."""
    try:
        if rc < 0:
            sb._check_state(rc, err, what)
    except SandboxError as e:
        if e.errno == _errno.ENOTCONN:
            raise
        fe = SandboxFileError(e.message, e.errno)
        fe.__suppress_context__ = True
        return _finish(gen.throw, fe)
    return _finish(gen.send, rc)


class FilesMixin:
    """Methods of Sandbox; see the module's docstring."""

    def _file_op(self, gen):
        what, fn, args = next(gen)
        with self._lock:
            h = self._session()
            err = c_void_p()
            return _outcome(self, gen, what, fn(h, *args, byref(err)), err)

    def write_file(self, path, data, mode=0o644):
        """Write data (bytes, or str as UTF-8) to path inside the sandbox,
        creating or truncating it.  At most 64 MiB (EFBIG)."""
        self._file_op(_op_write_file(_fns(self._lib), path, data, mode))

    def read_file(self, path, max_bytes=None):
        """The bytes of path inside the sandbox.  A file larger than
        max_bytes (default 64 MiB) raises SandboxFileError(EFBIG)."""
        return self._file_op(_op_read_file(_fns(self._lib), path, max_bytes))

    def list_files(self, path="."):
        """Entries of directory path inside: a list of dicts {"name", "type",
        "size"}, sorted by name; type is "file", "dir", "symlink", "fifo",
        "socket", "char", "block" or "other" (the entry itself: symlinks are
        not followed).  At most 50000: the list's truncated attribute says
        when there were more."""
        return self._file_op(_op_list_files(_fns(self._lib), path))

    def make_dir(self, path, mode=0o755):
        """Make directory path inside, with its parents (like mkdir -p)."""
        self._file_op(_op_make_dir(_fns(self._lib), path, mode))

    def upload_dir(self, local, remote):
        """Copy the host directory local to remote inside (made with its
        parents), recursively.  Regular files and directories only:
        symlinks and special files on the host are skipped (not followed).
        Returns the number of files (nsbox_upload_dir)."""
        return self._file_op(_op_upload_dir(_fns(self._lib), local, remote))

    def download_dir(self, remote, local, max_bytes=DOWNLOAD_MAX_BYTES, max_files=DOWNLOAD_MAX_FILES):
        """Copy directory remote inside to local on the host (made with its
        parents if missing; files already there are not overwritten:
        FileExistsError).  Regular files and directories only; symlinks, fifos,
        devices and names that are not UTF-8 inside are skipped, and a name
        that is not one plain path component (a "/", ".", "..", a control
        character) too.  Caps: max_bytes in all, max_files entries
        (directories and skipped entries count, each as its directory is
        listed: the host holds at most max_files names), 50000 in one
        directory, depth 64: else
        SandboxFileError(EFBIG or ELOOP), keeping what was copied.  The
        whole call takes at most 20 control timeouts (10 minutes by
        default), else the session ends (libnsbox(3)).  Returns the number
        of files (nsbox_download_dir)."""
        return self._file_op(_op_download_dir(_fns(self._lib), remote, local, max_bytes, max_files))


_CLOSED = object()   # _off_loop's call found the session gone


class AsyncFilesMixin:
    """The same methods of AsyncSandbox, as coroutines: the library call runs
    in the loop's default executor; calls on one AsyncSandbox are
    serialised with its other calls."""

    async def _off_loop(self, h, call):
        """call() in the default executor, for a library call on session h
        that may wait on the sandbox (its runner can take up to 30 s to
        answer, and on the loop's thread that froze the loop).  It runs
        under the thread lock too: close() (which frees the session) waits
        for it instead of freeing it under it; closed or replaced meanwhile,
        EBADF.  Cancelled (asyncio.timeout, task.cancel()), the call is
        ended with nsbox_cancel, which ends the session (the runner answers
        only when done: libnsbox(3)), and the caller's loop lock is kept
        until it has, so that aclose() waits for it.  A sandbox holding its
        answers back so holds an executor worker only as long as the caller
        lets it."""
        gave_up = []
        loop = asyncio.get_running_loop()
        d = self._dispatch

        def locked():
            with self._lock:
                if self._closed or self._sess is not h:
                    return _CLOSED
                if gave_up:   # cancelled before it began: not begun
                    return None
                # Network records the call hands over (a session it
                # ends, as a cancel or a timeout does, gives the rest)
                # go to on_net_request on the loop's thread, as
                # documented, not on this one.
                d.net_hold = []
                try:
                    return call()
                finally:
                    held, d.net_hold = d.net_hold, None
                    if held:
                        try:
                            loop.call_soon_threadsafe(lambda: [d.deliver(r) for r in held])
                        except RuntimeError:
                            pass    # the loop closed meanwhile

        def cancel():
            gave_up.append(True)
            with self._hlock:
                if self._sess is h:
                    self._lib.nsbox_cancel(h)
        r = await to_the_end(loop.run_in_executor(None, locked), cancel)
        if r is _CLOSED:
            raise SandboxError("the sandbox is closed", _errno.EBADF)
        return r

    async def _file_op(self, gen):
        what, fn, args = next(gen)
        async with self._lock_for_loop("call %s on" % what):
            h = await self._asession()
            err = c_void_p()

            def job():
                rc = fn(h, *args, byref(err))
                # The call ended the session (a cancel: the task may be
                # gone and _outcome never run): dropped here, so that the
                # next call starts a fresh one.
                if rc == -_errno.ENOTCONN:
                    self._drop("the session ended during %s" % what)
                return rc
            rc = await self._off_loop(h, job)
            return _outcome(self, gen, what, rc, err)

    async def write_file(self, path, data, mode=0o644):
        """Sandbox.write_file."""
        await self._file_op(_op_write_file(_fns(self._lib), path, data, mode))

    async def read_file(self, path, max_bytes=None):
        """Sandbox.read_file."""
        return await self._file_op(_op_read_file(_fns(self._lib), path, max_bytes))

    async def list_files(self, path="."):
        """Sandbox.list_files."""
        return await self._file_op(_op_list_files(_fns(self._lib), path))

    async def make_dir(self, path, mode=0o755):
        """Sandbox.make_dir."""
        await self._file_op(_op_make_dir(_fns(self._lib), path, mode))

    async def upload_dir(self, local, remote):
        """Sandbox.upload_dir."""
        return await self._file_op(_op_upload_dir(_fns(self._lib), local, remote))

    async def download_dir(self, remote, local, max_bytes=DOWNLOAD_MAX_BYTES, max_files=DOWNLOAD_MAX_FILES):
        """Sandbox.download_dir."""
        return await self._file_op(_op_download_dir(_fns(self._lib), remote, local, max_bytes, max_files))
