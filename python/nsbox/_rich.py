"""Rich results of an exec: display bundles and /out files (ExecResult's
displays and files), read through libnsbox's accessors (libnsbox(3), RICH
RESULTS).  The host has checked them on receipt: MIME type names, base64,
file names and the caps (nsbox-protocol(7), RICH RESULTS)."""

import collections
import ctypes
from ctypes import POINTER, byref, c_bool, c_char_p, c_size_t, c_uint64, c_void_p
from typing import Dict, List, Optional, Tuple, Union

__all__ = ["OutFile", "collect", "mime_is_text"]

_PROTOS = {
    "nsbox_result_display_count": (c_size_t, [c_void_p]),
    "nsbox_result_display_mime_count": (c_size_t, [c_void_p, c_size_t]),
    "nsbox_result_display_mime": (c_char_p, [c_void_p, c_size_t, c_size_t]),
    "nsbox_result_display_data": (c_void_p, [c_void_p, c_size_t, c_char_p, POINTER(c_size_t)]),
    "nsbox_result_displays_truncated": (c_bool, [c_void_p]),
    "nsbox_result_file_count": (c_size_t, [c_void_p]),
    "nsbox_result_file_name": (c_char_p, [c_void_p, c_size_t]),
    "nsbox_result_file_data": (c_void_p, [c_void_p, c_size_t, POINTER(c_size_t), POINTER(c_uint64)]),
    "nsbox_result_files_truncated": (c_bool, [c_void_p]),
}


class OutFile(collections.namedtuple("OutFile", ["name", "size", "data"])):
    """A file the exec wrote to /out: its name, its size in bytes, and its
    contents (bytes), or None when it was too large to come with the result
    (read it with Sandbox.read_file("/out/" + name))."""

    __slots__ = ()


Bundle = Dict[str, Union[str, bytes]]


def mime_is_text(mime: str) -> bool:
    """Whether a MIME type's data is text (str) rather than bytes: as
    proto_mime_text in the library."""
    return (mime.startswith("text/") or mime in ("image/svg+xml", "application/json", "application/javascript",
                                                 "application/xml")
            or mime.endswith("+json") or mime.endswith("+xml"))


def _fns(lib):
    """The accessors, declared once; None with a library before 0.5.0."""
    ready = getattr(lib, "_nsbox_rich_ready", None)
    if ready is not None:
        return lib if ready else None
    for name, (restype, argtypes) in _PROTOS.items():
        fn = getattr(lib, name, None)
        if fn is None:
            lib._nsbox_rich_ready = False
            return None
        fn.restype = restype
        fn.argtypes = argtypes
    lib._nsbox_rich_ready = True
    return lib


def collect(lib, r) -> Tuple[List[Bundle], List[OutFile], bool, bool]:
    """(displays, files, displays_truncated, files_truncated) of result r."""
    f = _fns(lib)
    if f is None or not r:
        return [], [], False, False
    n = c_size_t()
    displays: List[Bundle] = []
    for i in range(f.nsbox_result_display_count(r)):
        b: Bundle = {}
        for j in range(f.nsbox_result_display_mime_count(r, i)):
            mime_b = f.nsbox_result_display_mime(r, i, j)
            p = f.nsbox_result_display_data(r, i, mime_b, byref(n))
            data = ctypes.string_at(p, n.value) if p else b""
            mime = mime_b.decode("utf-8")
            b[mime] = data.decode("utf-8", "replace") if mime_is_text(mime) else data
        displays.append(b)
    files: List[OutFile] = []
    size = c_uint64()
    for i in range(f.nsbox_result_file_count(r)):
        name = f.nsbox_result_file_name(r, i).decode("utf-8", "replace")
        p = f.nsbox_result_file_data(r, i, byref(n), byref(size))
        contents: Optional[bytes] = ctypes.string_at(p, n.value) if p else None
        files.append(OutFile(name, size.value, contents))
    return displays, files, bool(f.nsbox_result_displays_truncated(r)), bool(f.nsbox_result_files_truncated(r))
