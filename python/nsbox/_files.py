"""Files inside a Sandbox: write_file, read_file, list_files, make_dir,
upload_dir and download_dir (a mixin of Sandbox).

The runner does the file work inside the sandbox, as its user and in its
mount namespace (nsbox-protocol(7), FILES): a symlink, fifo or swapped name
planted by sandboxed code only changes what the sandbox itself sees.
download_dir writes on the host only beneath the directory it was given:
every name that came from the sandbox is checked (no "/", ".", "..", NUL,
nothing empty), and each file and directory is made with openat/mkdirat
relative to its parent's fd with O_NOFOLLOW|O_EXCL, so nothing on the host
follows a path the sandbox controls.
"""

import ctypes
import errno as _errno
import json
import os
import stat as _stat
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint64, c_void_p

from . import _lib
from .errors import SandboxError

__all__ = ["SandboxFileError", "FilesMixin"]

_PROTOS = {
    "nsbox_write_file": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t, c_int, POINTER(c_void_p)]),
    "nsbox_read_file": (c_int, [c_void_p, c_char_p, POINTER(c_void_p), POINTER(c_size_t), c_uint64,
                                POINTER(c_void_p)]),
    "nsbox_list_files": (c_int, [c_void_p, c_char_p, POINTER(c_void_p), POINTER(c_void_p)]),
    "nsbox_make_dir": (c_int, [c_void_p, c_char_p, c_int, POINTER(c_void_p)]),
}

# download_dir's defaults: whole-tree caps, beside read_file's per-file one.
DOWNLOAD_MAX_BYTES = 1 << 30
DOWNLOAD_MAX_FILES = 100000
DOWNLOAD_MAX_DEPTH = 64


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


def _valid_name(name):
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


class FilesMixin:
    """Methods of Sandbox; see the module's docstring."""

    def _file_call(self, what, fn, *args):
        with self._lock:
            h = self._session()
            err = c_void_p()
            rc = fn(h, *args, byref(err))
            if rc < 0:
                try:
                    self._check_state(rc, err, what)
                except SandboxError as e:
                    if e.errno == _errno.ENOTCONN:
                        raise
                    raise SandboxFileError(e.message, e.errno) from None
            return rc

    def write_file(self, path, data, mode=0o644):
        """Write data (bytes, or str as UTF-8) to path inside the sandbox,
        creating or truncating it.  At most 64 MiB (EFBIG)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        data = bytes(data)
        lib = _fns(self._lib)
        self._file_call("write_file", lib.nsbox_write_file, _path(path), data, len(data),
                        int(mode))

    def read_file(self, path, max_bytes=None):
        """The bytes of path inside the sandbox.  A file larger than
        max_bytes (default 64 MiB) raises SandboxFileError(EFBIG)."""
        lib = _fns(self._lib)
        out = c_void_p()
        n = c_size_t()
        self._file_call("read_file", lib.nsbox_read_file, _path(path), byref(out),
                        byref(n), int(max_bytes or 0))
        try:
            return ctypes.string_at(out.value, n.value) if n.value else b""
        finally:
            lib.nsbox_free(out.value)

    def list_files(self, path="."):
        """Entries of directory path inside: a list of dicts {"name", "type",
        "size"}, sorted by name; type is "file", "dir", "symlink", "fifo",
        "socket", "char", "block" or "other" (the entry itself: symlinks are
        not followed)."""
        lib = _fns(self._lib)
        out = c_void_p()
        self._file_call("list_files", lib.nsbox_list_files, _path(path), byref(out))
        return json.loads(_lib.take_string(out.value))["entries"]

    def make_dir(self, path, mode=0o755):
        """Make directory path inside, with its parents (like mkdir -p)."""
        lib = _fns(self._lib)
        self._file_call("make_dir", lib.nsbox_make_dir, _path(path), int(mode))

    def upload_dir(self, local, remote):
        """Copy the host directory local to remote inside, recursively.
        Regular files and directories only: symlinks and special files on
        the host are skipped (not followed).  Returns the number of files."""
        local = os.fspath(local)
        remote = os.fspath(remote).rstrip("/") or "/"
        count = 0
        self.make_dir(remote)
        for top, dirs, files, top_fd in os.fwalk(local, follow_symlinks=False):
            rel = os.path.relpath(top, local)
            base = remote if rel == "." else remote + "/" + rel
            for d in dirs:
                st = os.stat(d, dir_fd=top_fd, follow_symlinks=False)
                if _stat.S_ISDIR(st.st_mode):
                    self.make_dir(base + "/" + d, _stat.S_IMODE(st.st_mode) | 0o700)
            for f in files:
                try:
                    fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=top_fd)
                except OSError as e:
                    if e.errno == _errno.ELOOP:
                        continue  # a symlink
                    raise
                with os.fdopen(fd, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    if not _stat.S_ISREG(st.st_mode):
                        continue
                    self.write_file(base + "/" + f, fh.read(), _stat.S_IMODE(st.st_mode))
                count += 1
        return count

    def download_dir(self, remote, local, max_bytes=DOWNLOAD_MAX_BYTES, max_files=DOWNLOAD_MAX_FILES):
        """Copy directory remote inside to local on the host (made if
        missing; files already there are not overwritten: FileExistsError).
        Regular files and directories only; symlinks, fifos, devices and
        names that are not UTF-8 inside are skipped.  Caps: max_bytes in
        all, max_files entries, depth 64.  Returns the number of files."""
        remote = os.fspath(remote).rstrip("/") or "/"
        os.makedirs(local, exist_ok=True)
        root = os.open(local, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        state = {"bytes": 0, "files": 0}
        try:
            self._download(remote, root, 0, state, max_bytes, max_files)
        finally:
            os.close(root)
        return state["files"]

    def _download(self, remote, dir_fd, depth, state, max_bytes, max_files):
        if depth > DOWNLOAD_MAX_DEPTH:
            raise SandboxFileError("download_dir %s: deeper than %d levels" % (remote, DOWNLOAD_MAX_DEPTH),
                                   _errno.ELOOP)
        for ent in self.list_files(remote):
            name = ent.get("name")
            # Names come from the sandbox: one path component, nothing more.
            if "name_hex" in ent or not isinstance(name, str) or not _valid_name(name):
                continue
            state["files"] += 1
            if state["files"] > max_files:
                raise SandboxFileError("download_dir: more than %d entries" % max_files, _errno.EFBIG)
            src = remote + "/" + name if remote != "/" else "/" + name
            if ent["type"] == "dir":
                os.mkdir(name, 0o700, dir_fd=dir_fd)
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    self._download(src, sub, depth + 1, state, max_bytes, max_files)
                finally:
                    os.close(sub)
                state["files"] -= 1
            elif ent["type"] == "file":
                left = max_bytes - state["bytes"]
                if left <= 0:
                    raise SandboxFileError("download_dir: more than %d bytes" % max_bytes, _errno.EFBIG)
                try:
                    data = self.read_file(src, max_bytes=min(left, 64 << 20) if left < (64 << 20) else None)
                except SandboxFileError as e:
                    if e.errno in (_errno.EINVAL, _errno.EISDIR, _errno.ENOENT, _errno.ELOOP):
                        state["files"] -= 1
                        continue  # swapped for something else meanwhile
                    raise
                state["bytes"] += len(data)
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=dir_fd)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            else:
                state["files"] -= 1
