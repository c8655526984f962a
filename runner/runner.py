"""nsbox runner, Python half: the serve loop, exec, values, tools.

Loaded by runner/py.c from a string as module _nsbox_runner, with the
filename "<nsbox-runner>"; frames with that filename are hidden from user
tracebacks.  The wire contract is proto/proto.h and nsbox-protocol(7).
Keep this file ASCII: it is embedded as a C string.

Imports are few and cheap on purpose (a cold `nsbox python` pays for each
one): the JSON codec is in C (runner/pyjson.c), signals come from _signal, and
ast, codeop, inspect, keyword, linecache and traceback are imported when
first needed (a template has them preloaded); types is not imported at all.
"""
import _signal
import posix as _posix
import io
import sys
import time

import _nsbox

# types.ModuleType, without importing types (half a millisecond of a cold
# start).
_ModuleType = type(sys)

(HELLO, EXEC, RESULT, OUTPUT, CALL, RETURN, RAISE, SET_VAR, GET_VAR, VALUE,
 RESET, CANCEL, PING, PONG, BYE, ERROR, TOOLS,
 FILE_WRITE, FILE_READ, FILE_LIST) = range(1, 21)

RUNNER_FILE = "<nsbox-runner>"
DIST_PACKAGES = "/usr/lib/python3/dist-packages"
MAX_DEPTH = 100
MAX_TEXT = 65536          # cap on an error message or traceback
INT_EXACT = 2 ** 53       # beyond this, ints travel as {"$int": "..."}
CAPABILITIES = ["exec", "value", "stream", "tools", "vars", "reset", "cancel", "repl", "tools-update", "files",
                "values2", "files-binary", "files-fd", "displays"]


class ToolError(Exception):
    """A host tool failed; the message is the host's."""


class TimeLimitExceeded(BaseException):
    """The exec ran past its wall-clock limit.  A BaseException so that
    `except Exception` does not swallow it; swallowing it anyway only
    delays the hard kill."""


class Cancelled(BaseException):
    """The host cancelled the running exec."""


for _c in (ToolError, TimeLimitExceeded, Cancelled):
    _c.__module__ = "nsbox"

nsbox = _ModuleType("nsbox", "Inside an nsbox sandbox: host tools and the exceptions "
                         "the sandbox raises.")
nsbox.__path__ = []       # a package, so that "import nsbox.tools" works
nsbox.ToolError = ToolError
nsbox.TimeLimitExceeded = TimeLimitExceeded
nsbox.Cancelled = Cancelled
tools = _ModuleType("nsbox.tools", "Host tools registered for this session.")
nsbox.tools = tools
sys.modules["nsbox"] = nsbox
sys.modules["nsbox.tools"] = tools

_limits = {"output": 1 << 20, "max_frame": _nsbox.MAX_FRAME}
# Set by cli_setup (nsbox-python(1)): a cancel is the user's Ctrl-C, and
# raises KeyboardInterrupt as in python.
_cancel_interrupts = False
_tool_funcs = {}
_main = None
_in_user = False


# ---- values ----

def _repr(v, why=None):
    try:
        r = repr(v)
    except BaseException as e:  # a hostile __repr__
        r = "<unrepresentable: %s>" % type(e).__name__
    if len(r) > MAX_TEXT:
        r = r[:MAX_TEXT] + "..."
    t = type(v)
    d = {"$repr": _clean(r), "$type": "%s.%s" % (t.__module__, t.__qualname__)}
    if why:
        d["$why"] = why
    return d


def _clean(s):
    """A str that encodes as UTF-8 (no lone surrogates)."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")


def _b64(b):
    import binascii
    return binascii.b2a_base64(b, newline=False).decode("ascii")


def encode(v, depth=0, seen=None):
    """Python value -> JSON-able value (nsbox-protocol(7), VALUES).  What
    cannot cross becomes $repr where it stands (a cycle, nesting past
    MAX_DEPTH, an object); its container still crosses."""
    if v is None or v is True or v is False:
        return v
    t = type(v)
    if t is str:
        try:
            v.encode("utf-8")
            return v
        except UnicodeEncodeError:
            return _repr(v, "not valid Unicode")
    if isinstance(v, int) and not isinstance(v, bool):
        v = int(v)
        if -INT_EXACT <= v <= INT_EXACT:
            return v
        try:
            return {"$int": str(v)}
        except ValueError:  # beyond sys.get_int_max_str_digits()
            return {"$int": hex(v)}
    if isinstance(v, float):
        v = float(v)
        if v != v or v in (float("inf"), float("-inf")):
            return {"$float": repr(v)}
        return v
    if depth > MAX_DEPTH:
        return _repr(v, "nested too deeply")
    if t is bytes:
        return {"$bytes": _b64(v)}
    if t is bytearray:
        return {"$bytearray": _b64(v)}
    if t is complex:
        return {"$complex": [encode(v.real), encode(v.imag)]}
    if t not in _CONTAINERS:
        return _repr(v)
    if seen is None:
        seen = set()
    i = id(v)
    if i in seen:
        return _repr(v, "cycle")
    seen.add(i)
    try:
        d1 = depth + 1
        if t is list:
            return [encode(x, d1, seen) for x in v]
        if t is tuple:
            return {"$tuple": [encode(x, d1, seen) for x in v]}
        if t is dict:
            if all(type(k) is str for k in v):
                d = {}
                dollar = False
                for k, x in v.items():
                    # A key the host can't take as an object key (a lone
                    # surrogate; U+0000, which jansson refuses in keys):
                    # pairs.
                    if "\0" in k or not isinstance(encode(k), str):
                        break
                    dollar = dollar or k.startswith("$")
                    d[k] = encode(x, d1, seen)
                else:
                    return {"$dict": d} if dollar else d
            # Keys that are not all str: a list of [key, value] pairs.
            return {"$dict": [[encode(k, d1, seen), encode(x, d1, seen)] for k, x in v.items()]}
        return {_SET_TAGS[t]: [encode(x, d1, seen) for x in v]}
    finally:
        seen.discard(i)


_CONTAINERS = frozenset((list, tuple, dict, set, frozenset))
_SET_TAGS = {set: "$set", frozenset: "$frozenset"}


def _unb64(x):
    import binascii
    return binascii.a2b_base64(x.encode("ascii"))


def _float(x):
    if type(x) is dict:
        x = decode(x)
    if type(x) not in (int, float):
        raise ValueError("$complex parts must be numbers")
    return float(x)


def _pair(p):
    if type(p) is not list or len(p) != 2:
        raise ValueError("$dict pairs must be [key, value]")
    return decode(p[0]), decode(p[1])


def decode(v):
    """JSON value -> Python value (inverse of encode; $repr stays a dict)."""
    if isinstance(v, list):
        return [decode(x) for x in v]
    if isinstance(v, dict):
        if len(v) == 1:
            (k, x), = v.items()
            tx = type(x)
            if k == "$int" and tx is str:
                return int(x, 0)
            if k == "$float" and tx is str:
                return float(x)
            if k == "$tuple" and tx is list:
                return tuple(decode(y) for y in x)
            if k == "$dict" and tx is dict:
                return {a: decode(b) for a, b in x.items()}
            if k == "$dict" and tx is list:
                return dict(_pair(p) for p in x)
            if k == "$set" and tx is list:
                return set(decode(y) for y in x)
            if k == "$frozenset" and tx is list:
                return frozenset(decode(y) for y in x)
            if k == "$bytes" and tx is str:
                return _unb64(x)
            if k == "$bytearray" and tx is str:
                return bytearray(_unb64(x))
            if k == "$complex" and tx is list and len(x) == 2:
                return complex(_float(x[0]), _float(x[1]))
        return {a: decode(b) for a, b in v.items()}
    return v


# json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# as UTF-8 (errors="replace"), and json.loads, in C (runner/pyjson.c):
# without importing json (re, enum) or even _json (lib-dynload, ~0.5 ms).
_loads = _nsbox.loads
_dumps = _nsbox.dumps


def _compile(code, filename, mode):
    """compile() without the builtin's AST check (runner/pymod.c)."""
    if "\0" in code:
        return compile(code, filename, mode, dont_inherit=True)
    return _nsbox.compile(code, filename, mode)


def send(typ, mid, obj):
    _nsbox.send(typ, mid, _dumps(obj))


# ---- errors ----

def _hide_runner(te, seen):
    import traceback
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list(
            [f for f in te.stack if f.filename != RUNNER_FILE])
        if te.__cause__ is not None:
            _hide_runner(te.__cause__, seen)
        te = te.__context__


def _cut(s):
    s = _clean(s)
    if len(s) > MAX_TEXT:
        half = MAX_TEXT // 2
        s = s[:half] + "\n[... %d characters omitted ...]\n" % (len(s) - 2 * half) + s[-half:]
    return s


_sources = {}   # filename -> linecache entry, until linecache is imported


def _source_lines(code):
    """code's lines as linecache keeps a file's: each ends with a newline
    (3.11's traceback puts its carets one column right on a last line
    without one, as code given without a final newline would be)."""
    lines = code.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


def _linecache():
    """linecache, with the sources of the execs so far (for tracebacks)."""
    import linecache
    if _sources:
        linecache.cache.update(_sources)
        _sources.clear()
    return linecache


class _LinecacheLoader:
    """Wraps linecache's loader: once the module has run, it gets the
    sources of the execs so far (user code that imports traceback shows
    its own lines, as if linecache had been there all along)."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.cache.update(_sources)
        _sources.clear()
        if _LinecacheFinder in sys.meta_path:
            sys.meta_path.remove(_LinecacheFinder)


class _LinecacheFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "linecache":
            return None
        for f in sys.meta_path:
            if f is _LinecacheFinder or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _LinecacheLoader(spec.loader)
                return spec
        return None


if "linecache" not in sys.modules:
    sys.meta_path.insert(0, _LinecacheFinder)


def format_error(e):
    t = type(e)
    name = t.__qualname__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__qualname__)
    try:
        # Imported here (a cold runner has not yet): this may fail too,
        # under a memory limit user code has used up.
        import traceback
        _linecache()
        te = traceback.TracebackException.from_exception(e)
        _hide_runner(te, set())
        tb = "".join(te.format())
    except BaseException as e2:  # a hostile __str__, no memory left, or similar
        tb = "%s (traceback unavailable: %s)\n" % (name, type(e2).__name__)
    try:
        msg = str(e)
    except BaseException:
        msg = "<unprintable %s>" % name
    return {"type": name, "message": _cut(msg), "traceback": _cut(tb)}


# ---- tools ----

_JSON_TYPES = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list, tuple, set, frozenset), "object": (dict,), "null": (type(None),),
}


def _type_ok(value, jtype):
    types_ = jtype if isinstance(jtype, list) else [jtype]
    for jt in types_:
        py = _JSON_TYPES.get(jt)
        if py is None:
            return True  # a type we do not know: let the host judge
        if isinstance(value, bool) and jt in ("integer", "number"):
            continue
        if isinstance(value, py):
            return True
    return False


def _jname(jt):
    return "|".join(jt) if isinstance(jt, list) else str(jt)


def _check(v, sch, where, depth=0):
    """None when v fits JSON Schema sch (the parts a tool's schema from type
    hints uses: type, enum, items, prefixItems, additionalProperties,
    anyOf), else what is wrong.  The host checks again: this is for a clear
    TypeError before the call."""
    if not isinstance(sch, dict) or depth > MAX_DEPTH:
        return None
    jt = sch.get("type")
    if jt is not None and not _type_ok(v, jt):
        return "%s must be %s, not %s" % (where, _jname(jt), type(v).__name__)
    enum = sch.get("enum")
    if isinstance(enum, list) and not any(type(v) is type(e) and v == e for e in enum):
        return "%s must be one of %s, not %r" % (where, ", ".join(repr(e) for e in enum), v)
    any_of = sch.get("anyOf")
    if isinstance(any_of, list) and any_of:
        if all(_check(v, a, where, depth + 1) for a in any_of):
            return "%s does not match any of its allowed types (got %s)" % (where, type(v).__name__)
    if isinstance(v, (list, tuple, set, frozenset)):
        pre = sch.get("prefixItems")
        if isinstance(pre, list):
            if len(v) != len(pre) and not isinstance(v, (set, frozenset)):
                return "%s must have %d items, not %d" % (where, len(pre), len(v))
            for i, (x, s) in enumerate(zip(v, pre)):
                e = _check(x, s, "%s[%d]" % (where, i), depth + 1)
                if e:
                    return e
        items = sch.get("items")
        if isinstance(items, dict):
            for i, x in enumerate(v):
                e = _check(x, items, "%s[%d]" % (where, i), depth + 1)
                if e:
                    return e
    elif isinstance(v, dict):
        add = sch.get("additionalProperties")
        if isinstance(add, dict):
            for k, x in v.items():
                e = _check(x, add, "%s[%r]" % (where, k), depth + 1)
                if e:
                    return e
    return None


def make_tool(spec):
    name = spec["name"]
    desc = spec.get("description") or ""
    schema = spec.get("schema")
    props = None
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        props = schema["properties"]
        import keyword
        if not all(isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k) for k in props):
            props = None
    import inspect
    P = inspect.Parameter
    if props is not None:
        required = [r for r in (schema.get("required") or []) if r in props]
        optional = [k for k in props if k not in required]
        params = [P(k, P.POSITIONAL_OR_KEYWORD) for k in required]
        params += [P(k, P.POSITIONAL_OR_KEYWORD, default=None) for k in optional]
        if schema.get("additionalProperties", False) is not False:
            params.append(P("kwargs", P.VAR_KEYWORD))
    else:
        required = []
        params = [P("args", P.VAR_POSITIONAL), P("kwargs", P.VAR_KEYWORD)]
    sig = inspect.Signature(params)

    def tool(*args, **kwargs):
        if props is not None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError("%s(): %s" % (name, e)) from None
            kw = {}
            for k, v in bound.arguments.items():
                if sig.parameters[k].kind is P.VAR_KEYWORD:
                    kw.update(v)
                else:
                    kw[k] = v
            for k, v in kw.items():
                e = _check(v, props.get(k), "argument %r" % k)
                if e:
                    raise TypeError("%s(): %s" % (name, e))
            call_args = []
        else:
            call_args, kw = list(args), kwargs
        payload = _dumps({"name": name, "args": [encode(a) for a in call_args],
                          "kwargs": {k: encode(v) for k, v in kw.items()}})
        if len(payload) > _limits["max_frame"]:
            raise ValueError("%s(): arguments too large (%d bytes, limit %d)"
                             % (name, len(payload), _limits["max_frame"]))
        typ, _, answer = _nsbox.call(payload)
        msg = _loads(answer)
        if typ == RETURN:
            return decode(msg.get("value"))
        raise ToolError(msg.get("message") or "tool %s failed" % name)

    async def aio(*args, **kwargs):
        import asyncio
        import functools
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(tool, *args, **kwargs))

    lines = [desc.strip()] if desc.strip() else []
    if props:
        lines.append("")
        lines.append("Arguments:")
        for k, p in props.items():
            p = p if isinstance(p, dict) else {}
            t = p.get("type", "any")
            line = "    %s (%s%s)" % (k, "|".join(t) if isinstance(t, list) else t,
                                     ", required" if k in required else "")
            if p.get("description"):
                line += ": " + str(p["description"])
            lines.append(line)
    tool.__name__ = name.rpartition(".")[2]
    tool.__qualname__ = name
    tool.__module__ = "nsbox.tools"
    tool.__doc__ = "\n".join(lines) or None
    tool.__signature__ = sig
    tool.aio = aio
    tool.schema = schema
    return tool


# ---- rich results (nsbox-protocol(7), RICH RESULTS) ----
#
# display(obj) and plt.show() add MIME bundles to _displays as they are
# called; at the end of an exec the figures still open, the last
# expression's own bundle (when it has rich representations) and the files
# written to /out are added, and RESULT carries them within the caps of
# proto.h: never silently cut (displays_truncated, files_truncated).

OUT_DIR = "/out"
DISPLAY_MAX = _nsbox.DISPLAY_MAX
DISPLAY_MIMES = _nsbox.DISPLAY_MIMES
OUT_FILES_MAX = _nsbox.OUT_FILES_MAX
RICH_BYTES = _nsbox.RICH_BYTES
MPL_BACKEND = "module://nsbox.mpl"

_displays = []            # [(bundle, bytes)] since the last RESULT, in order
_rich = {"dt": False, "files": None, "ft": False, "shown": set()}
_out_seen = {}            # /out name -> (ino, mtime_ns, size) already returned
_out_key = [None]         # /out's (ino, mtime_ns, size) at the last scan
_REPRS = (("_repr_png_", "image/png"), ("_repr_jpeg_", "image/jpeg"), ("_repr_svg_", "image/svg+xml"),
          ("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
          ("_repr_json_", "application/json"), ("_repr_latex_", "text/latex"))
_MIME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_MIME_MORE = frozenset("!#$&^_.+-")
_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def _mime_ok(m):
    """proto_mime_valid (proto/rich.c)."""
    if not isinstance(m, str) or len(m) > 127 or m.count("/") != 1:
        return False
    for part in m.split("/"):
        if not 1 <= len(part) <= 63 or part[0] not in _MIME_CHARS:
            return False
        for c in part:
            if c not in _MIME_CHARS and c not in _MIME_MORE:
                return False
    return True


def _mime_text(m):
    """proto_mime_text (proto/rich.c)."""
    return (m.startswith("text/") or m in ("image/svg+xml", "application/json", "application/javascript",
                                           "application/xml") or m.endswith("+json") or m.endswith("+xml"))


def _warn(what, e):
    try:
        sys.stderr.write("display: %s failed: %s: %s\n" % (what, type(e).__name__, _cut(str(e))[:500]))
    except BaseException:
        pass


def _put(b, mime, v):
    """Add mime -> v to bundle b, encoded for the wire; False if left out."""
    import binascii
    if v is None or mime in b or len(b) >= DISPLAY_MIMES:
        return v is None
    if not _mime_ok(mime):
        return False
    if _mime_text(mime):
        if mime == "application/json" and not isinstance(v, str):
            try:
                v = _dumps(encode(v)).decode("utf-8")
            except BaseException:
                return False
        if isinstance(v, (bytes, bytearray)):
            v = bytes(v).decode("utf-8", "replace")
        if not isinstance(v, str):
            return False
        b[mime] = _clean(v).replace("\0", "\ufffd")
        return True
    if isinstance(v, str):
        try:
            v = binascii.a2b_base64(v.encode("ascii"), strict_mode=True)
        except (ValueError, binascii.Error):
            try:
                v = binascii.a2b_base64(v.encode("ascii"))
            except (ValueError, binascii.Error):
                return False
    if not isinstance(v, (bytes, bytearray, memoryview)):
        return False
    b[mime] = binascii.b2a_base64(bytes(v), newline=False).decode("ascii")
    return True


def _is_figure(obj):
    t = type(obj)
    return t.__module__.startswith("matplotlib.") and t.__name__ == "Figure" and hasattr(obj, "savefig")


def _figure_png(fig):
    buf = io.BytesIO()
    # Not bbox_inches="tight": the image is the figure's own size at its dpi.
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _bundle(obj):
    """obj's MIME bundle (IPython's formatters, in short), and whether
    anything was left out; text/plain is always there."""
    b = {}
    lost = False
    if isinstance(obj, type):
        return {"text/plain": _repr(obj)["$repr"]}, False
    if _is_figure(obj):
        try:
            _put(b, "image/png", _figure_png(obj))
            _rich["shown"].add(id(obj))
        except Exception as e:
            _warn("rendering the figure", e)
    try:
        mb = getattr(obj, "_repr_mimebundle_", None)
    except Exception:
        mb = None
    if callable(mb):
        try:
            r = mb(include=None, exclude=None)
            if isinstance(r, tuple) and len(r) == 2:
                r = r[0]
            if isinstance(r, dict):
                for k, v in r.items():
                    lost |= not _put(b, k, v)
        except Exception as e:
            _warn("%s._repr_mimebundle_" % type(obj).__name__, e)
    for meth, mime in _REPRS:
        if mime in b:
            continue
        try:
            f = getattr(obj, meth, None)
        except Exception:
            continue
        if not callable(f):
            continue
        try:
            v = f()
        except Exception as e:
            _warn("%s.%s" % (type(obj).__name__, meth), e)
            continue
        if isinstance(v, tuple) and len(v) == 2:
            v = v[0]
        lost |= not _put(b, mime, v)
    if "text/plain" not in b:
        b["text/plain"] = _repr(obj)["$repr"]
    return b, lost


def _bundle_bytes(b):
    return sum(len(v) if not _mime_text(k) else len(v.encode("utf-8")) for k, v in b.items())


def _add(b, lost=False):
    """One bundle more for this exec, within the caps."""
    if lost:
        _rich["dt"] = True
    if len(_displays) >= DISPLAY_MAX:
        _rich["dt"] = True
        return
    _displays.append((b, _bundle_bytes(b)))


def display(*objs, raw=False, **kwargs):
    """Show objects as the exec's rich results (IPython's display()): each
    becomes a MIME bundle in result.displays, in order.  raw=True: each
    object is already a bundle, a dict of MIME type -> data."""
    for obj in objs:
        try:
            if raw:
                b = {}
                lost = not isinstance(obj, dict)
                if isinstance(obj, dict):
                    for k, v in obj.items():
                        lost |= not _put(b, k, v)
                if not b:
                    _rich["dt"] = True
                    continue
                _add(b, lost)
            else:
                _add(*_bundle(obj))
        except Exception as e:
            _warn("display()", e)
            _rich["dt"] = True


def _show_figures(skip=(), render=True):
    """Each open matplotlib figure as a bundle (those in skip, or all
    unless render, only closed), then closed: Jupyter's inline backend."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        from matplotlib._pylab_helpers import Gcf
        managers = Gcf.get_all_fig_managers()
    except Exception as e:
        _warn("listing the figures", e)
        return
    for m in managers:
        fig = m.canvas.figure
        try:
            if render and id(fig) not in skip:
                b = {}
                _put(b, "image/png", _figure_png(fig))
                b["text/plain"] = _repr(fig)["$repr"]
                _add(b)
        except Exception as e:
            _warn("rendering figure %s" % getattr(m, "num", "?"), e)
            _rich["dt"] = True
        finally:
            try:
                pyplot.close(fig)
            except Exception:
                pass


class _MplBackendLoader:
    """matplotlib's backend "module://nsbox.mpl": Agg, whose show()
    returns the figures as displays instead of warning that Agg can't."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "nsbox.mpl":
            return None
        import importlib.machinery
        return importlib.machinery.ModuleSpec(name, _MplBackendLoader)

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        from matplotlib.backends import backend_agg
        from matplotlib.backend_bases import FigureManagerBase
        module.FigureCanvas = backend_agg.FigureCanvasAgg
        module.FigureManager = FigureManagerBase
        module.backend_version = "nsbox (agg %s)" % backend_agg.backend_version

        def show(*args, **kwargs):
            _show_figures()
        module.show = show


sys.meta_path.append(_MplBackendLoader)
nsbox.display = display
display.__module__ = "nsbox"
__import__("builtins").display = display


def _mpl_env(environ):
    """MPLBACKEND, unless the sandbox's environment sets one.  (Debian's
    matplotlib reads its defaults from /etc/matplotlibrc, which the jail
    shows from the root tree.)"""
    if b"MPLBACKEND" not in environ:
        environ[b"MPLBACKEND"] = MPL_BACKEND.encode()


if "os" in sys.modules:
    sys.modules["os"].environ.setdefault("MPLBACKEND", MPL_BACKEND)
else:
    _mpl_env(_posix.environ)


_HOST_NAME_BAD = frozenset([0xad, 0x61c, 0x2028, 0x2029, 0xfeff]) | frozenset(range(0x200b, 0x2010)) | \
    frozenset(range(0x202a, 0x202f)) | frozenset(range(0x2060, 0x2065)) | frozenset(range(0x2066, 0x206a))


def _host_name_ok(name):
    """Whether the host takes name for a file of its own (proto.h,
    proto_out_name_valid, the same rule): 1..255 bytes of UTF-8, no
    leading '-', no control or invisible characters.  ("/", "." and ".."
    never come from a directory listing.)"""
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 0 < n <= 255 and name[0] != "-" and all(
        ord(c) >= 0x20 and not 0x7f <= ord(c) <= 0x9f and ord(c) not in _HOST_NAME_BAD for c in name)


def _scan_out(room):
    """The regular files in /out that are new or changed since the last
    scan (by inode, mtime and size): [{name, size, data?}], and whether
    any was left out or without its data.  Read here, inside the sandbox:
    the host never opens these paths."""
    import os
    import binascii
    try:
        st = os.stat(OUT_DIR)
    except OSError:
        return None, False, 0
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    if not _out_seen and _out_key[0] == key:
        return None, False, 0
    _out_key[0] = key
    files, trunc, seen, used = [], False, {}, 0
    try:
        with os.scandir(OUT_DIR) as it:
            ents = []
            for e in it:
                ents.append(e)
                if len(ents) > 4 * OUT_FILES_MAX + 16:
                    trunc = True
                    break
    except OSError:
        return None, True, 0
    ents.sort(key=lambda e: e.name)
    for e in ents:
        try:
            s = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if (s.st_mode & 0o170000) != 0o100000:
            continue
        sig = (s.st_ino, s.st_mtime_ns, s.st_size)
        seen[e.name] = sig
        if _out_seen.get(e.name) == sig:
            continue
        name = e.name
        if not _host_name_ok(name) or len(files) >= OUT_FILES_MAX:
            trunc = True
            continue
        ent = {"name": name, "size": s.st_size}
        if (s.st_size + 2) // 3 * 4 <= room - used:
            try:
                fd, _ = _open_regular(os.path.join(OUT_DIR, name), os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    data = os.read(fd, s.st_size + 1) if s.st_size else b""
                finally:
                    os.close(fd)
                if len(data) > s.st_size:
                    raise OSError(27, "grew while read")
                enc = binascii.b2a_base64(data, newline=False).decode("ascii")
                ent["size"] = len(data)
                ent["data"] = enc
                used += len(enc)
            except OSError:
                trunc = True
        else:
            trunc = True
        files.append(ent)
    _out_seen.clear()
    _out_seen.update(seen)
    return files, trunc, used


def _rich_collect(value, has_value, rich=True):
    """After the code ran, before its output is collected (what this
    prints is the exec's): its open figures, its value's bundle, /out.
    Returns (anything to send, what /out holds: (name, ino, mtime_ns, size)
    of each regular file, for the fast path to tell it unchanged).  Not
    rich (EXEC rich=false): what display() gathered is dropped, figures
    are closed unrendered, the value and /out are not looked at."""
    global _in_user
    if not rich:
        del _displays[:]
        _rich["shown"] = set()
        _rich["dt"] = _rich["ft"] = False  # nothing of this exec is carried to the next
        _in_user = True
        try:
            _show_figures(render=False)
        except BaseException as e:
            _warn("closing the figures", e)
        finally:
            _in_user = False
        return False, None
    try:
        vb = None
        # _repr_*_ methods and figures' savefig are the user's code: the
        # time limit and a cancel interrupt them as they do the exec's own
        # (and what they leave is lost, flagged as truncated), not the
        # session.
        _in_user = True
        try:
            if has_value and type(value) not in _PLAIN:
                b, lost = _bundle(value)
                if len(b) > 1:
                    vb = (b, lost)
            _show_figures(_rich["shown"])
        finally:
            _in_user = False
        if vb is not None:
            _add(*vb)
        room = RICH_BYTES - sum(n for _, n in _displays)
        files, ft, _ = _scan_out(room)
        _rich["files"] = files
        _rich["ft"] = ft
    except BaseException as e:
        _warn("collecting rich results", e)
        _rich["dt"] = True
    finally:
        _rich["shown"] = set()
    try:
        seen = tuple((k.encode("utf-8", "surrogateescape"), v[0], v[1], v[2]) for k, v in _out_seen.items())
    except BaseException:
        seen = None
    return bool(_displays or _rich["files"] or _rich["dt"] or _rich["ft"]), seen


def _rich_fields(room):
    """The RESULT fields of what _rich_collect gathered, within room bytes
    of data (the frame's), and reset for the next exec."""
    room = min(room, RICH_BYTES)
    ds, files = _displays[:], _rich["files"] or []
    dt, ft = _rich["dt"], _rich["ft"]
    del _displays[:]
    _rich["files"] = None
    _rich["dt"] = _rich["ft"] = False
    used = sum(n for _, n in ds) + sum(len(f.get("data", "")) for f in files)
    for f in reversed(files):
        if used <= room:
            break
        if "data" in f:
            used -= len(f.pop("data"))
            ft = True
    while used > room and ds:
        used -= ds.pop()[1]
        dt = True
    res = {}
    if ds:
        res["displays"] = [b for b, _ in ds]
    if dt:
        res["displays_truncated"] = True
    if files:
        res["files"] = files
    if ft:
        res["files_truncated"] = True
    return res


def _fast_rich(room):
    """_rich_fields as the fast path appends them: the JSON members
    without the braces, or b"" when there are none."""
    try:
        return _dumps(_rich_fields(room))[1:-1]
    except BaseException:
        return b'"displays_truncated":true'


# ---- session state ----

def new_globals():
    global _main
    _main = _ModuleType("__main__")
    sys.modules["__main__"] = _main
    g = _main.__dict__
    g["__builtins__"] = __builtins__
    g.update(_tool_funcs)
    return g


G = {}


def _on_cancel_signal(signum, frame):
    reason = _nsbox.take_cancel()
    if not _in_user or not reason:
        return
    if reason == 1:
        raise TimeLimitExceeded("time limit exceeded")
    if _cancel_interrupts:
        raise KeyboardInterrupt
    raise Cancelled("cancelled by the host")


# ---- exec ----

def _text(head, tail, total, limit):
    if not total:
        return "", False, None
    h = head.decode("utf-8", "replace")
    if total <= limit:
        return h + tail.decode("utf-8", "replace"), False, None
    t = tail.decode("utf-8", "replace")
    omitted = total - len(head) - len(tail)
    return h + "\n[... %d bytes truncated ...]\n" % omitted + t, True, t


def _split_repl(code, filename):
    """(body, last): code compiled for a REPL, the last statement apart
    when it is an expression (its value is the exec's value).  Either
    may be None."""
    if "\n" not in code.rstrip():
        # One line: most often a lone expression, compiled without a
        # trip through the AST.
        try:
            return None, _compile(code, filename, "eval")
        except (SyntaxError, ValueError):
            pass
    return _split_ast(code, filename)


def _split_ast(code, filename):
    lastc = None
    import _ast
    tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        lastc = compile(_ast.Expression(tree.body.pop().value), filename, "eval")
    return compile(tree, filename, "exec"), lastc


def _exec_error(e):
    """What an exec that raised e reports: (error, exit code or None).
    SystemExit is an exit status, as from a script."""
    error = format_error(e)
    exit_code = None
    if isinstance(e, SystemExit):
        if e.code is None:
            exit_code = 0
        elif isinstance(e.code, int):
            exit_code = e.code & 0xff
        else:
            exit_code = 1
            try:
                print(e.code, file=sys.stderr)
            except BaseException:
                pass
    return error, exit_code


# The C fast path of EXEC (runner/pymod.c, fast_exec) runs ordinary execs
# itself and calls these for the rest; do_exec below is the reference it
# follows, and what runs an EXEC it declines (REPL display, completeness
# checks, anything unusual).

def _fast_error(e):
    error, exit_code = _exec_error(e)
    return _dumps(error), exit_code


def _fast_value(v):
    return _dumps(encode(v))


def _fast_failed(mid, e):
    """The fast path itself failed (no memory, a hostile value): what the
    serve loop does when do_exec raises."""
    send_result(mid, {"error": format_error(e), "stdout": "", "stderr": ""})


def do_exec(mid, msg):
    global _in_user
    code = msg.get("code")
    if not isinstance(code, str):
        raise ValueError("EXEC without code")
    filename = msg.get("filename") or "<exec>"
    want = bool(msg.get("want_value"))
    display = bool(msg.get("display"))
    single = None
    if msg.get("check_complete"):
        # code.InteractiveConsole's rule: the lines so far joined without
        # the newline that ends the last one, so that a block stays open
        # until an empty line ("if 1:\n    a\n" compiles; "if 1:\n    a"
        # does not, yet).
        source = code[:-1] if code.endswith("\n") else code
        try:
            import codeop
            single = codeop.compile_command(source, filename, "single")
            complete = single is not None
        except (SyntaxError, OverflowError, ValueError):
            complete = True  # let the exec report the error
        if not complete:
            return {"error": None, "stdout": "", "stderr": "", "incomplete": True}
    limit = _limits["output"]
    _nsbox.exec_begin(mid, bool(msg.get("stream")), limit, msg.get("stream_all") is True)
    t0 = time.perf_counter()
    c0 = _nsbox.usage()[0]
    value, has_value, error, exit_code = None, False, None, None
    rich = False
    entry = (len(code), None, _source_lines(code), filename)
    lc = sys.modules.get("linecache")
    if lc is not None:
        if _sources:
            lc.cache.update(_sources)
            _sources.clear()
        lc.cache[filename] = entry
    else:
        _sources[filename] = entry
    so = sys.stdout
    if display:
        # An interactive line: python's stdout is a terminal then, line
        # buffered.
        try:
            so.reconfigure(line_buffering=True)
        except BaseException:
            so = None
    try:
        try:
            if single is not None and not want:
                # As python's REPL: compiled in "single" mode, every
                # expression statement's value goes to sys.displayhook.
                body, lastc, display = single, None, False
            elif want or display:
                body, lastc = _split_repl(code, filename)
            else:
                body, lastc = _compile(code, filename, "exec"), None
            _in_user = True
            try:
                if body is not None:
                    exec(body, G)
                if lastc is not None:
                    value = eval(lastc, G)
                    has_value = True
            finally:
                _in_user = False
        except BaseException as e:
            error, exit_code = _exec_error(e)
        if display and has_value and value is not None:
            try:
                G["_"] = value
                print(repr(value))
            except BaseException as e:
                error = format_error(e)
        rich = _rich_collect(value, has_value, msg.get("rich") is not False)[0]
    finally:
        _in_user = False
        if display or single is not None:
            try:
                so.reconfigure(line_buffering=False)
            except BaseException:
                pass
        for name in ("stdout", "stderr"):
            try:
                getattr(sys, name).flush()
            except BaseException:  # user code replaced or removed it
                pass
        (oh, ot, on), (eh, et, en) = _nsbox.exec_end()
    res = {"error": error}
    out, out_trunc, out_tail = _text(oh, ot, on, limit)
    err, err_trunc, err_tail = _text(eh, et, en, limit)
    res.update(stdout=out, stderr=err, stdout_truncated=out_trunc, stderr_truncated=err_trunc,
               stdout_bytes=on, stderr_bytes=en)
    if out_tail is not None:
        res["stdout_tail"] = out_tail
    if err_tail is not None:
        res["stderr_tail"] = err_tail
    if exit_code is not None:
        res["exit_code"] = exit_code
    res["duration"] = time.perf_counter() - t0
    cpu, max_rss = _nsbox.usage()
    res["usage"] = {"cpu": cpu - c0, "max_rss": max_rss}
    if want and has_value:
        res["value"] = encode(value)
    if rich:
        # The RESULT without its rich fields is dumped once: its size
        # bounds theirs, and they are appended to it as it is.
        data = _result_bytes(res)
        fields = _fast_rich(_limits["max_frame"] - len(data) - 4096)
        whole = data[:-1] + b"," + fields + b"}" if fields else data
        if len(whole) > _limits["max_frame"]:
            # No room left beside the rest (files listed without data
            # still take some): flagged, not sent.
            whole = data[:-1] + b',"displays_truncated":true,"files_truncated":true}'
        return whole
    return res


def do_var(typ, msg):
    name = msg.get("name")
    try:
        if not isinstance(name, str):
            raise TypeError("variable name must be a string")
        if typ == SET_VAR:
            G[name] = decode(msg.get("value"))
            return {"value": None}
        if name not in G:
            raise NameError("name %r is not defined" % (name,))
        return {"value": encode(G[name])}
    except Exception as e:
        err = format_error(e)
        err["traceback"] = None
        return {"error": err}


# ---- session files (nsbox-protocol(7), FILES) ----
#
# Done here, inside the sandbox, as its user and in its mount namespace, so
# that whatever the sandbox planted (symlinks, fifos, swapped names) only
# changes its own view: the host never opens these paths.

FILE_CHUNK_MAX = 8 << 20
_FTYPES = ((0o100000, "file"), (0o040000, "dir"), (0o120000, "symlink"), (0o010000, "fifo"),
           (0o140000, "socket"), (0o020000, "char"), (0o060000, "block"))


def _ftype(mode):
    fmt = mode & 0o170000
    for m, name in _FTYPES:
        if fmt == m:
            return name
    return "other"


def _open_regular(path, flags, mode=0o644):
    """Open path without blocking on a fifo or device (O_NONBLOCK) and
    insist on a regular file."""
    import os
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, mode)
    except OSError as e:
        if e.errno == 6:  # ENXIO: a fifo with no reader, a device with no driver
            raise OSError(22, "not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) == 0o040000:
            raise IsADirectoryError(21, "is a directory")
        if (st.st_mode & 0o170000) != 0o100000:
            raise OSError(22, "not a regular file (%s)" % _ftype(st.st_mode))
        os.set_blocking(fd, True)
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def _passed_fd(msg):
    """The host's memfd that came with this request ("fd": true), checked
    to be a regular file; the caller closes it."""
    import os
    fd = _nsbox.take_fd()
    if fd < 0:
        raise OSError(9, "no descriptor came with the request")
    try:
        if (os.fstat(fd).st_mode & 0o170000) != 0o100000:
            raise OSError(22, "the descriptor that came is not a regular file")
        length = msg.get("length")
        if not isinstance(length, int) or length < 0:
            raise OSError(22, "bad length")
    except BaseException:
        os.close(fd)
        raise
    return fd, length


def _copy_fd(out, src, off, length):
    """Copy length bytes of src from offset off to out's position, in the
    kernel (sendfile); fewer at the end of src."""
    import os
    got = 0
    while got < length:
        n = os.sendfile(out, src, off + got, min(length - got, 1 << 30))
        if not n:
            break
        got += n
    return got


def _file_write(msg, raw=None):
    import os
    import binascii
    path = msg["path"]
    mode = msg.get("mode", 0o644) & 0o7777
    if msg.get("kind") == "dir":
        if msg.get("parents"):
            os.makedirs(path, mode, exist_ok=True)
        else:
            os.mkdir(path, mode)
        return None
    if msg.get("fd"):
        src, length = _passed_fd(msg)
        try:
            fd, st = _open_regular(path, os.O_WRONLY | os.O_CREAT, mode)
            try:
                os.ftruncate(fd, 0)
                os.fchmod(fd, mode)
                got = _copy_fd(fd, src, 0, length)
            finally:
                os.close(fd)
        finally:
            os.close(src)
        if got != length:
            raise OSError(5, "the host's data ended after %d of %d bytes" % (got, length))
        return {"size": got}
    data = raw if raw is not None else binascii.a2b_base64(msg.get("data") or "")
    off = msg.get("offset", 0)
    if not isinstance(off, int) or off < 0:
        raise OSError(22, "bad offset")
    if msg.get("truncate"):
        fd, st = _open_regular(path, os.O_WRONLY | os.O_CREAT, mode)
    else:
        fd, st = _open_regular(path, os.O_WRONLY)
    try:
        if msg.get("truncate"):
            os.ftruncate(fd, 0)
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, off)
            view = view[n:]
            off += n
    finally:
        os.close(fd)
    return {"size": off}


def _file_read(msg):
    import os
    import binascii
    off = msg.get("offset", 0)
    length = msg.get("length", FILE_CHUNK_MAX)
    if not isinstance(off, int) or off < 0 or not isinstance(length, int) or length < 0:
        raise OSError(22, "bad offset or length")
    if msg.get("fd"):
        dst, length = _passed_fd(msg)
        try:
            fd, st = _open_regular(msg["path"], os.O_RDONLY)
            try:
                got = _copy_fd(dst, fd, off, length)
            finally:
                os.close(fd)
        finally:
            os.close(dst)
        return {"length": got, "size": st.st_size, "eof": got < length}
    length = min(length, FILE_CHUNK_MAX)
    fd, st = _open_regular(msg["path"], os.O_RDONLY)
    try:
        parts = []
        got = 0
        while got < length:
            b = os.pread(fd, length - got, off + got)
            if not b:
                break
            parts.append(b)
            got += len(b)
    finally:
        os.close(fd)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if msg.get("binary"):
        # sent raw after the JSON (a data frame); "$data" never crosses
        return {"$data": data, "length": got, "size": st.st_size, "eof": got < length}
    return {"data": binascii.b2a_base64(data, newline=False).decode("ascii"), "size": st.st_size,
            "eof": got < length}


def _file_list(msg):
    import os
    limit = msg.get("max", 100000)
    out = []
    truncated = False
    with os.scandir(os.fsencode(msg["path"])) as it:
        for e in it:
            if len(out) >= limit:
                truncated = True
                break
            try:
                st = e.stat(follow_symlinks=False)
                ent = {"type": _ftype(st.st_mode), "size": st.st_size}
            except OSError:
                ent = {"type": "other", "size": 0}
            raw = e.name
            try:
                ent["name"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                ent["name"] = raw.decode("utf-8", "replace")
                ent["name_hex"] = raw.hex()
            out.append(ent)
    out.sort(key=lambda x: x["name"])
    return {"entries": out, "truncated": truncated}


def do_file(typ, msg, data=None):
    try:
        if not isinstance(msg.get("path"), str) or not msg["path"]:
            raise OSError(22, "path must be a non-empty string")
        if "\0" in msg["path"]:
            raise OSError(22, "path contains NUL")
        if typ == FILE_WRITE:
            return {"value": _file_write(msg, data)}
        if typ == FILE_READ:
            return {"value": _file_read(msg)}
        return {"value": _file_list(msg)}
    except Exception as e:
        err = format_error(e)
        err["traceback"] = None
        no = getattr(e, "errno", None)
        if isinstance(e, ValueError) and not isinstance(no, int):
            no = 22
        err["errno"] = no if isinstance(no, int) and no > 0 else 5
        if isinstance(e, OSError) and e.strerror:
            err["message"] = e.strerror
        return {"error": err}


def _result_bytes(res):
    """A RESULT's JSON; a value too large for a frame is sent as a
    ReprValue saying so."""
    data = _dumps(res)
    if len(data) > _limits["max_frame"] and "value" in res:
        res["value"] = {"$repr": "<value too large to send: %d bytes>" % len(data),
                        "$type": "builtins.object", "$why": "too large"}
        data = _dumps(res)
    return data


def send_result(mid, res):
    """res: a RESULT dict, or do_exec's bytes (already made whole)."""
    _nsbox.send(RESULT, mid, res if isinstance(res, bytes) else _result_bytes(res))


# ---- what site.py would add, and nsbox-python(1)'s launcher ----

class _Quitter:
    """exit() and quit(), as site.py makes them: SystemExit(code)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Use %s() or Ctrl-D (i.e. EOF) to exit" % self.name

    def __call__(self, code=None):
        raise SystemExit(code)


class _Helper:
    """help(), as site.py makes it: pydoc, imported when first called."""

    def __repr__(self):
        return ("Type help() for interactive help, or help(object) for help about object.")

    def __call__(self, *args, **kwds):
        import pydoc
        if not args and not kwds and not sys.stdin.isatty():
            # pydoc's interactive mode reads sys.stdin, which is not the
            # terminal of nsbox python's REPL.
            print("help(): the interactive help utility needs a terminal on stdin, and the sandbox "
                  "has none; use help(object) or help('topic'), e.g. help('modules') or help(len)")
            return None
        return pydoc.help(*args, **kwds)


def _add_site_builtins():
    import builtins
    for name in ("exit", "quit"):
        if not hasattr(builtins, name):
            setattr(builtins, name, _Quitter(name))
    if not hasattr(builtins, "help"):
        builtins.help = _Helper()


_add_site_builtins()


class _SourceLoader:
    """__loader__ of a script run by nsbox python FILE whose file is not
    visible inside: linecache gets its lines from here (decoded by PEP 263)
    for tracebacks."""

    def __init__(self, data):
        self._data = data

    def get_source(self, name):
        import importlib.util
        return importlib.util.decode_source(self._data)


def _cli_flags(o):
    """python's flags that the initialised interpreter can still take
    (nsbox python checked them): -u, -W and some -X."""
    import io
    if o.get("unbuffered"):
        # As python -u: stdout's binary layer unbuffered, the text layer
        # writing through (stderr is already).
        sys.stdout.flush()
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
            write_through=True)
    w = o.get("warnoptions")
    if w:
        import warnings
        sys.warnoptions[:] = w
        warnings._processoptions(w)
    for x in o.get("xoptions") or ():
        name, eq, val = x.partition("=")
        sys._xoptions[name] = val if eq else True
        if name == "int_max_str_digits":
            try:
                sys.set_int_max_str_digits(int(val))
            except ValueError:
                raise SystemExit("-X int_max_str_digits: invalid limit; must be >= 640 or 0 for "
                                 "unlimited.") from None
        elif name == "faulthandler":
            __import__("faulthandler").enable()
        elif name == "tracemalloc":
            try:
                n = int(val) if eq else 1
                if n < 1:
                    raise ValueError
            except ValueError:
                raise SystemExit("-X tracemalloc=NFRAME: invalid number of frames") from None
            __import__("tracemalloc").start(n)


def cli_run(settings):
    """nsbox-python(1)'s launcher, run as an exec with the filename
    RUNNER_FILE (hidden from tracebacks).  settings is a JSON text:
    {"mode": "repl"|"c"|"m"|"file", "path": sandbox path of the
    file or null, "name": the file as given / the module, "source": the
    file's bytes as latin-1 text}.  Sets sys.path as python does: the
    script's directory for FILE, the working directory ('' for -c and the
    REPL, its full path for -m) otherwise, then PYTHONPATH's entries."""
    global _cancel_interrupts, _path_added
    o = _loads(settings)
    _cancel_interrupts = True
    _cli_flags(o)
    mode = o.get("mode")
    path = o.get("path")
    if mode == "file":
        # os.path.dirname, without importing os (_environ).
        first = path[:path.rfind("/") + 1].rstrip("/") or path[:path.rfind("/") + 1] if path else None
    elif mode == "m":
        first = _posix.getcwd()
    else:
        first = ""
    extra = _pythonpath()
    # In place of the session's default ('' and PYTHONPATH, hello()).
    del sys.path[:_path_added]
    _path_added = 0
    sys.path[0:0] = ([first] if first is not None else []) + extra
    if mode == "m":
        import runpy

        class NoModule(Exception):
            pass
        # As python -m (runpy._run_module_as_main): a module that can't be
        # found is "python3.11: No module named x" and status 1, not a
        # traceback through runpy; its own ImportErrors stay tracebacks.
        try:
            mod_name, spec, code = runpy._get_module_details(o["name"], NoModule)
        except NoModule as e:
            raise SystemExit("%s: %s" % (sys.executable, e)) from None
        runpy._run_module_code(code, None, "__main__", spec)
    elif mode == "file":
        data = o["source"].encode("latin-1")
        # Outside the workspace the host sends the file's name alone: a
        # path under a directory no one can make (the root is read-only),
        # so that no file of the session's own stands in for it in a
        # traceback (linecache reads a file found at __file__ before it
        # asks the loader below).
        fname = path or "/nsbox-script/" + o["name"].rpartition("/")[2]
        G["__file__"] = fname
        G["__cached__"] = None
        if not path:
            G["__loader__"] = _SourceLoader(data)
        # bytes, so that CPython decodes them by PEP 263 (a coding
        # cookie, a BOM, else UTF-8) and names the file and line of
        # what does not decode.
        code = compile(data, fname, "exec", dont_inherit=True)
        exec(code, G)


def complete(text):
    """nsbox python's Tab: rlcompleter's matches for text in the
    session's globals."""
    import rlcompleter
    c = rlcompleter.Completer(G)
    out = []
    for i in range(1000):
        m = c.complete(text, i)
        if m is None:
            break
        out.append(m)
    return out


# ---- serve ----

def adopt(env, dist_packages):
    """A session forked from the helper's template: os.environ is the
    template's (empty) and sys.path has no dist-packages; take this
    sandbox's.  The str hash seed stays the template's: it is fixed when
    the interpreter starts (nsbox-protocol(7), THE INTERPRETER)."""
    import os
    data = os.environ._data
    data.clear()
    for kv in env:
        k, sep, v = kv.partition("=")
        if sep and k:
            data[os.environ.encodekey(k)] = os.environ.encodevalue(v)
    if dist_packages and DIST_PACKAGES not in sys.path:
        sys.path.append(DIST_PACKAGES)
    _mpl_env(data)


def install_tools(specs):
    """Make (or remake) the tools of specs; a tool announced before keeps
    existing.  New ones also appear in the current globals."""
    for spec in specs:
        f = make_tool(spec)
        ns, dot, short = spec["name"].partition(".")
        if dot:
            # NS.NAME: function NAME of a namespace object NS (the tools
            # of one of the host's MCP servers, say).
            space = _tool_funcs.get(ns)
            if not isinstance(space, _ModuleType):
                space = _ModuleType(ns, "Host tools in the namespace %s: %s(...) and so on; %s.NAME.__doc__ "
                                        "describes one." % (ns, spec["name"], ns))
                space.__all__ = []
                _tool_funcs[ns] = space
            setattr(space, short, f)
            space.__all__ = sorted(set(space.__all__) | {short})
            f = space
        else:
            _tool_funcs[ns] = f
        setattr(tools, ns, f)
        G[ns] = f
    tools.__all__ = sorted(_tool_funcs)


_path_added = 0  # entries _default_path() put in front of sys.path


def _environ(name):
    """os.environ.get(name), without importing os when nothing has (a
    third of `nsbox python -c`'s interpreter time went to importing os
    and _collections_abc for this): posix.environ holds the same bytes
    that os.environ decodes, with the filesystem encoding and
    surrogateescape."""
    os = sys.modules.get("os")
    if os is not None:
        return os.environ.get(name)
    v = _posix.environ.get(name.encode(sys.getfilesystemencoding(), "surrogateescape"))
    return None if v is None else v.decode(sys.getfilesystemencoding(), "surrogateescape")


def _pythonpath():
    """PYTHONPATH's entries, as site-less python puts them on sys.path."""
    return [p for p in (_environ("PYTHONPATH") or "").split(":") if p]


def _default_path():
    """sys.path as python -c and the interactive interpreter set it: ''
    (the working directory: /workspace when there is one, so a session's
    code imports the workspace's modules), then PYTHONPATH's entries.  The
    interpreter itself starts with safe_path (runner/py.c): nothing of the
    sandbox's files is on the path while the runner sets itself up."""
    global _path_added
    entries = [""] + _pythonpath()
    sys.path[0:0] = entries
    _path_added = len(entries)


def hello():
    m = _nsbox.recv()
    if m is None:
        return False
    typ, mid, payload = m
    msg = _loads(payload)
    if typ != HELLO or not isinstance(msg, dict) or msg.get("version") != _nsbox.PROTO_VERSION:
        send(ERROR, mid, {"message": "expected HELLO version %d" % _nsbox.PROTO_VERSION})
        return False
    lim = msg.get("limits") or {}
    if isinstance(lim.get("output"), int) and lim["output"] > 0:
        _limits["output"] = lim["output"]
    if isinstance(lim.get("max_frame"), int) and 0 < lim["max_frame"] <= _nsbox.MAX_FRAME:
        _limits["max_frame"] = lim["max_frame"]
    install_tools(msg.get("tools") or [])
    argv = msg.get("argv")
    if isinstance(argv, list) and argv:
        # Strings, or {"$bytes": hex} for arguments that are not UTF-8:
        # decoded as CPython decodes its own argv.
        sys.argv = [a if isinstance(a, str) else
                    bytes.fromhex(a["$bytes"]).decode("utf-8", "surrogateescape")
                    if isinstance(a, dict) and isinstance(a.get("$bytes"), str) else str(a)
                    for a in argv]
    _default_path()
    G.clear()
    G.update(new_globals())
    send(HELLO, mid, {"version": _nsbox.PROTO_VERSION, "capabilities": CAPABILITIES,
                      "python": sys.version, "pid": _posix.getpid()})
    return True


def _make_stdio():
    """stdout, stderr and stdin over fds 1, 2 and 0."""
    return (io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 65536), encoding="utf-8",
                             errors="backslashreplace"),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                             write_through=True),
            io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8"))


_stdio_made = None


def template_stdio():
    """Called in the helper's template (runner_py_template_stdio), with
    pipes on 0-2 as a session has them (capture.c): the wrappers a forked
    session installs as they are, where making them cost each session
    ~0.25 ms, nearly all of it copy-on-write faults.  A wrapper caches what
    it learnt of its file at creation (seekable): serve() takes these only
    where 0-2 are pipes again."""
    global _stdio_made
    _stdio_made = _make_stdio()


def serve():
    _signal.signal(_nsbox.CANCEL_SIGNAL, _on_cancel_signal)
    # Block buffered, as python's stdout when it is not a terminal (it is
    # a pipe to the io thread): a write, and an OUTPUT frame, per 64 KiB
    # rather than per print.  Interactive lines switch to line buffering
    # (do_exec); every exec ends with a flush.
    global _stdio_made
    std, _stdio_made = _stdio_made, None
    if std is None or not all(_posix.fstat(fd).st_mode & 0o170000 == 0o010000 for fd in (0, 1, 2)):
        std = _make_stdio()
    sys.stdout = sys.__stdout__ = std[0]
    sys.stderr = sys.__stderr__ = std[1]
    sys.stdin = sys.__stdin__ = std[2]
    if not hello():
        return 2
    _nsbox.fast_setup(globals(), G, _limits, _sources, _split_ast, _fast_error, _fast_value,
                      _fast_failed)
    _nsbox.rich_setup(_displays, _rich, _rich_collect, _fast_rich)
    while True:
        m = _nsbox.recv()
        if m is None:
            return 0
        typ, mid, payload = m
        data = None
        if typ == FILE_WRITE:
            # A data frame (PROTO_FLAG_DATA): JSON, NUL, the file's bytes.
            # JSON text never holds a raw NUL, so the first one splits.
            cut = payload.find(b"\0")
            if cut >= 0:
                data = memoryview(payload)[cut + 1:]
                payload = payload[:cut]
        try:
            msg = _loads(payload)
            if not isinstance(msg, dict):
                raise ValueError("payload is not an object")
        except ValueError as e:
            send(ERROR, mid, {"message": "bad %d message: %s" % (typ, e)})
            return 2
        try:
            if typ == EXEC:
                try:
                    res = do_exec(mid, msg)
                except BaseException as e:  # a late cancel signal, or a runner bug
                    res = {"error": format_error(e), "stdout": "", "stderr": ""}
                send_result(mid, res)
            elif typ in (SET_VAR, GET_VAR):
                send(VALUE, mid, do_var(typ, msg))
            elif typ == RESET:
                G.clear()
                G.update(new_globals())
                send(VALUE, mid, {"value": None})
            elif typ == TOOLS:
                tl = msg.get("tools")
                if not isinstance(tl, list):
                    raise ValueError("TOOLS without a tools list")
                install_tools(tl)
                send(VALUE, mid, {"value": None})
            elif typ in (FILE_WRITE, FILE_READ, FILE_LIST):
                res = do_file(typ, msg, data)
                if msg.get("fd"):
                    left = _nsbox.take_fd()  # not taken when the request failed early
                    if left >= 0:
                        import os
                        os.close(left)
                raw = res.get("value", {}).pop("$data", None) if isinstance(res.get("value"), dict) else None
                if raw is not None:
                    _nsbox.send(VALUE, mid, _dumps(res), raw)
                else:
                    send(VALUE, mid, res)
            elif typ == BYE:
                send(BYE, mid, {})
                return 0
            else:
                send(ERROR, mid, {"message": "unexpected message type %d" % typ})
                return 2
        except (TimeLimitExceeded, Cancelled):
            continue
        except OSError:
            return 2
