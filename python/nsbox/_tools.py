"""Host tools: JSON Schema from type hints and docstrings, the Python
signature text an agent reads in its prompt, and the call dispatch.

Inside the sandbox each tool becomes a function whose parameters are the
schema's properties (required ones first, optional ones defaulting to None
and sent only when given, nsbox-protocol(7), TOOLS), so calls arrive as
keyword arguments and the host function's own defaults apply.
"""

import builtins
import collections.abc
import inspect
import keyword
import re
import typing

from . import _values
from .errors import ToolError

try:  # 3.10+: int | None
    from types import UnionType as _UnionType
except ImportError:  # pragma: no cover (3.9)
    _UnionType = None  # type: ignore[misc,assignment]

__all__ = ["Tool", "schema_from_function", "parse_docstring", "describe"]

_SIMPLE = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null",
           list: "array", tuple: "array", dict: "object"}
_PY_NAMES = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "null": "None",
             "array": "list", "object": "dict"}


def check_name(name, what="tool name"):
    if not isinstance(name, str):
        raise TypeError("%s must be a str (a Python identifier), not %r" % (what, name))
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError("%s must be a Python identifier, not %r" % (what, name))


def check_tool_name(name):
    """A tool becomes a global inside: refuse names that would replace a
    builtin (len, print, open...), a soft keyword (match, case, _: the
    REPL's last value), or a dunder of the module (__name__...)."""
    check_name(name)
    if hasattr(builtins, name):
        raise ValueError("tool name %r is a Python builtin: a tool by that name would replace it in the "
                         "sandbox (choose another name, e.g. %r)" % (name, name + "_tool"))
    if keyword.issoftkeyword(name) or (name.startswith("__") and name.endswith("__")):
        raise ValueError("tool name %r is reserved in Python; choose another name" % (name,))


def type_schema(hint):
    """A JSON Schema for a type hint; {} (anything) for what has no JSON form."""
    if hint is inspect.Parameter.empty or hint is typing.Any or hint is object:
        return {}
    if hint is None:
        return {"type": "null"}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or (_UnionType is not None and origin is _UnionType):
        subs = [type_schema(a) for a in args]
        if any(s == {} for s in subs):
            return {}
        # A union of plain types is a "type" list, which the runner checks
        # before the call; anything richer is anyOf.
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in subs):
            return {"type": [s["type"] for s in subs]}
        if len(subs) == 2 and {"type": "null"} in subs:
            other = subs[0] if subs[1] == {"type": "null"} else subs[1]
            if isinstance(other.get("type"), str):
                out = dict(other)
                out["type"] = [other["type"], "null"]
                if "enum" in out:
                    out["enum"] = list(out["enum"]) + [None]
                return out
        return {"anyOf": subs}
    if origin is typing.Literal:
        vals = list(args)
        out = {"enum": vals}
        types_ = {_SIMPLE.get(type(v)) for v in vals}
        if len(types_) == 1 and None not in types_:
            out["type"] = types_.pop()
        return out
    if origin in (list, typing.List, set, frozenset) or origin is getattr(typing, "Sequence", None):
        out = {"type": "array"}
        if args and type_schema(args[0]):
            out["items"] = type_schema(args[0])
        if origin in (set, frozenset):
            out["uniqueItems"] = True
        return out
    if origin in (tuple, typing.Tuple):
        out = {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            if type_schema(args[0]):
                out["items"] = type_schema(args[0])
        elif args and args != ((),):
            out["prefixItems"] = [type_schema(a) for a in args]
            out["minItems"] = out["maxItems"] = len(args)
        return out
    if origin in (dict, typing.Dict) or origin is getattr(typing, "Mapping", None):
        out = {"type": "object"}
        if len(args) == 2 and type_schema(args[1]):
            out["additionalProperties"] = type_schema(args[1])
        return out
    if origin is not None and origin in _SIMPLE:
        return {"type": _SIMPLE[origin]}
    if hint in (set, frozenset):
        return {"type": "array", "uniqueItems": True}
    return {}


# ---- checking arguments against the type hints, on the host ----
#
# The runner checks a call against the schema before sending it, for a
# clear TypeError inside; but the sandbox is not trusted, so the host checks
# the decoded arguments again, against the hints themselves.

class _Mismatch(Exception):
    pass


def _tname(v):
    return type(v).__name__


def _hint_text(hint):
    if isinstance(hint, type):
        return hint.__qualname__
    return re.sub(r"\btyping\.", "", repr(hint)).replace("NoneType", "None")


_ABSTRACT = {collections.abc.Sequence: (list, tuple), collections.abc.MutableSequence: (list,),
             collections.abc.Set: (set, frozenset), collections.abc.MutableSet: (set,),
             collections.abc.Mapping: (dict,), collections.abc.MutableMapping: (dict,),
             collections.abc.Iterable: (list, tuple, set, frozenset, dict, str, bytes, bytearray),
             collections.abc.Collection: (list, tuple, set, frozenset, dict, str, bytes, bytearray)}


_VALUE_TYPES = frozenset((str, bytes, bytearray, bool, list, tuple, dict, set, frozenset))


def check_value(v, hint, where, depth=0):
    """Raise _Mismatch(message) unless v (a decoded argument) fits hint.
    Hints it does not understand (a TypeVar, a Protocol, a forward
    reference it could not resolve, a class other than the built-in value
    types) accept anything."""
    if hint is inspect.Parameter.empty or hint is typing.Any or hint is object or depth > 100:
        return
    if hint is None or hint is type(None):
        if v is not None:
            raise _Mismatch("%s must be None, not %s" % (where, _tname(v)))
        return
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return check_value(v, args[0], where, depth)
    if origin is typing.Union or (_UnionType is not None and origin is _UnionType):
        for a in args:
            try:
                check_value(v, a, where, depth)
                return
            except _Mismatch:
                pass
        raise _Mismatch("%s must be %s, not %s" % (where, _hint_text(hint), _tname(v)))
    if origin is typing.Literal:
        # Literal[1] accepts 1, not True (1 == True, but not the same type).
        if not any(type(v) is type(a) and v == a for a in args):
            raise _Mismatch("%s must be one of %s, not %r" % (where, ", ".join(repr(a) for a in args), v))
        return
    cls = origin if origin is not None else hint
    if not isinstance(cls, type):
        return
    if cls is float:
        ok = type(v) in (int, float)
    elif cls is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif cls is complex:
        ok = type(v) in (int, float, complex)
    elif cls in _ABSTRACT:
        ok = isinstance(v, _ABSTRACT[cls])
    elif cls in _VALUE_TYPES:
        ok = isinstance(v, cls)
    else:
        # Another class (a dataclass, a TypedDict, a model taking a dict):
        # no value from inside is one, and the function may build it from
        # what it gets.
        return
    if not ok:
        raise _Mismatch("%s must be %s, not %s" % (where, _hint_text(hint), _tname(v)))
    if not args:
        return
    if isinstance(v, dict) and len(args) == 2:
        for k, x in v.items():
            check_value(k, args[0], "a key of %s" % where, depth + 1)
            check_value(x, args[1], "%s[%r]" % (where, k), depth + 1)
    elif isinstance(v, tuple) and cls is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            for i, x in enumerate(v):
                check_value(x, args[0], "%s[%d]" % (where, i), depth + 1)
        elif args == ((),):
            if v:
                raise _Mismatch("%s must be an empty tuple" % where)
        else:
            if len(v) != len(args):
                raise _Mismatch("%s must be a tuple of %d items, not %d" % (where, len(args), len(v)))
            for i, (x, a) in enumerate(zip(v, args)):
                check_value(x, a, "%s[%d]" % (where, i), depth + 1)
    elif isinstance(v, (list, tuple, set, frozenset)) and len(args) == 1:
        for i, x in enumerate(v):
            check_value(x, args[0], "an item of %s" % where if isinstance(v, (set, frozenset))
                        else "%s[%d]" % (where, i), depth + 1)


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)\s*:\s*$")
_OTHER_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG = re.compile(r"^(\s*)\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^\s*:param\s+(?:[^:]*\s)?([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$")


def parse_docstring(doc):
    """(summary, {param: description}) from a docstring: the summary is the
    first paragraph; parameters come from a Google-style "Args:" section
    ("name: text" or "name (type): text", continuation lines indented
    deeper) or from Sphinx ":param name: text" lines."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    lines = doc.splitlines()
    para = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or _SPHINX.match(line):
            break
        para.append(line.strip())
    summary = " ".join(para)
    params = {}
    i = 0
    while i < len(lines):
        m = _SPHINX.match(lines[i])
        if m:
            params[m.group(1)] = m.group(2).strip()
            i += 1
            continue
        if not _SECTION.match(lines[i]):
            i += 1
            continue
        sec_indent = len(lines[i]) - len(lines[i].lstrip())
        i += 1
        cur = None
        arg_indent = None
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= sec_indent:
                break
            m = _ARG.match(line)
            if m and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                cur = m.group(2)
                params[cur] = m.group(4).strip()
            elif cur is not None:
                params[cur] = (params[cur] + " " + line.strip()).strip()
            i += 1
    return summary, params


def schema_from_function(fn):
    """A JSON Schema of fn's arguments, or None when they can't be described
    (a *args parameter): the tool then takes *args, **kwargs inside."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    _, docs = parse_docstring(inspect.getdoc(fn))
    props = {}
    required = []
    extra = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind is p.VAR_KEYWORD:
            extra = True
            continue
        prop = type_schema(hints.get(p.name, p.annotation if not isinstance(p.annotation, str) else
                                     inspect.Parameter.empty))
        prop = dict(prop)
        if p.name in docs and docs[p.name]:
            prop["description"] = docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        else:
            try:
                prop["default"] = _values.encode(p.default)
            except (TypeError, ValueError):
                pass
        props[p.name] = prop
    schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = extra
    return schema


def _param_hints(fn, sig):
    """{parameter: hint} of fn; a *args or **kwargs parameter's hint is its
    elements'."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    return {p.name: hints.get(p.name, p.annotation if not isinstance(p.annotation, str) else inspect.Parameter.empty)
            for p in sig.parameters.values()}


def _py_type(s):
    """A Python annotation string for a JSON Schema."""
    if not isinstance(s, dict) or not s:
        return None
    if "enum" in s and isinstance(s["enum"], list):
        vals = [v for v in s["enum"] if v is not None]
        lit = "Literal[%s]" % ", ".join(repr(v) for v in vals)
        return "Optional[%s]" % lit if None in s["enum"] else lit
    if "anyOf" in s and isinstance(s["anyOf"], list):
        subs = [_py_type(x) or "Any" for x in s["anyOf"]]
        if "None" in subs and len(subs) == 2:
            return "Optional[%s]" % [x for x in subs if x != "None"][0]
        return "Union[%s]" % ", ".join(subs)
    t = s.get("type")
    if isinstance(t, list):
        subs = [_py_type(dict(s, type=x)) or "Any" for x in t]
        if "None" in subs and len(subs) == 2:
            return "Optional[%s]" % [x for x in subs if x != "None"][0]
        return "Union[%s]" % ", ".join(subs)
    if t == "array":
        if "prefixItems" in s and isinstance(s["prefixItems"], list):
            return "tuple[%s]" % ", ".join(_py_type(x) or "Any" for x in s["prefixItems"])
        item = _py_type(s.get("items"))
        return "list[%s]" % item if item else "list"
    if t == "object":
        val = s.get("additionalProperties")
        item = _py_type(val) if isinstance(val, dict) else None
        return "dict[str, %s]" % item if item else "dict"
    return _PY_NAMES.get(t) if isinstance(t, str) else None


def _annotation_text(hint):
    if hint is inspect.Parameter.empty:
        return None
    if isinstance(hint, str):
        return hint
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return "None" if hint is type(None) else hint.__qualname__
    return re.sub(r"\btyping\.", "", repr(hint)).replace("NoneType", "None")


class Tool:
    """One registered host tool."""

    __slots__ = ("name", "fn", "schema", "schema_json", "description", "positional", "returns", "hints",
                 "sig")

    def __init__(self, name, fn, schema=None, description=None):
        check_tool_name(name)
        if not callable(fn):
            raise TypeError("tool %s: %r is not callable" % (name, fn))
        self.name = name
        self.fn = fn
        self.positional = ()
        self.returns = None
        self.hints = {}
        self.sig = None
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            # Calls arrive by keyword; positional-only parameters are passed
            # by position.
            self.positional = tuple(p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_ONLY)
            try:
                ret = typing.get_type_hints(fn).get("return", sig.return_annotation)
            except Exception:
                ret = sig.return_annotation
            self.returns = _annotation_text(ret)
        if schema is None and sig is not None:
            schema = schema_from_function(fn)
            # The host checks every argument, however it is passed, against
            # the function's hints (an explicit schema is the caller's to
            # check).
            self.sig = sig
            self.hints = _param_hints(fn, sig)
        if schema is not None and not isinstance(schema, dict):
            raise TypeError("tool %s: schema must be a dict (a JSON Schema), not %s" % (name, type(schema).__name__))
        self.schema = schema
        self.schema_json = _values.json.dumps(schema).encode() if schema is not None else None
        if description is None:
            description = parse_docstring(inspect.getdoc(fn))[0]
        elif not isinstance(description, str):
            raise TypeError("tool %s: description must be a str, not %s" % (name, type(description).__name__))
        self.description = description or ""

    def check(self, args, kwargs):
        """TypeError unless the arguments bind to the function's parameters
        and fit their type hints: positional ones, *args' elements and
        **kwargs' values included."""
        if self.sig is None:
            return
        try:
            bound = self.sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError("%s(): %s" % (self.name, e)) from None
        params = self.sig.parameters
        for k, v in bound.arguments.items():
            h = self.hints.get(k, inspect.Parameter.empty)
            if h is inspect.Parameter.empty:
                continue
            kind = params[k].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                items = [("argument %d of *%s" % (i, k), x) for i, x in enumerate(v)]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                items = [("argument %r" % n, x) for n, x in v.items()]
            else:
                items = [("argument %r" % k, v)]
            for where, x in items:
                try:
                    check_value(x, h, where)
                except _Mismatch as e:
                    raise TypeError("%s(): %s" % (self.name, e)) from None

    def call(self, args, kwargs):
        if self.positional:
            args = list(args) + [kwargs.pop(n) for n in self.positional if n in kwargs]
        self.check(args, kwargs)
        return self.fn(*args, **kwargs)

    def signature_text(self):
        schema = self.schema
        props = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(props, dict):
            params = ["*args", "**kwargs"]
        else:
            req = [r for r in (schema.get("required") or []) if r in props]
            params = []
            for k in req + [k for k in props if k not in req]:
                p = props[k] if isinstance(props[k], dict) else {}
                ann = _py_type(p)
                text = "%s: %s" % (k, ann) if ann else k
                if k not in req:
                    default = _values.decode(p["default"]) if "default" in p else None
                    text += " = %r" % (default,)
                params.append(text)
            if schema.get("additionalProperties", False) is not False:
                params.append("**kwargs")
        ret = " -> %s" % self.returns if self.returns else ""
        return "def %s(%s)%s:" % (self.name, ", ".join(params), ret)

    def describe(self):
        lines = [self.signature_text()]
        doc = []
        if self.description:
            doc.append(self.description.strip())
        props = self.schema.get("properties") if isinstance(self.schema, dict) else None
        if isinstance(props, dict):
            arg_lines = ["    %s: %s" % (k, p["description"]) for k, p in props.items()
                         if isinstance(p, dict) and p.get("description")]
            if arg_lines:
                if doc:
                    doc.append("")
                doc.append("Args:")
                doc.extend(arg_lines)
        if doc:
            body = "\n".join(doc).replace('"""', '\\"\\"\\"')
            if len(doc) == 1 and "\n" not in body:
                lines.append('    """%s"""' % body)
            else:
                text = "\n".join(("    " + x) if x else "" for x in body.splitlines())
                lines.append('    """' + text.lstrip() + '\n    """')
        else:
            lines.append("    ...")
        return "\n".join(lines)


def describe(tools):
    """Text for an agent's prompt: each tool as a Python signature with its docstring."""
    if not tools:
        return ""
    head = ("The following functions are available in the sandbox's globals (and in the module "
            "nsbox.tools). They run on the host; call them like ordinary Python functions. A failing "
            "call raises nsbox.ToolError.\n\n")
    return head + "\n\n".join(t.describe() for t in tools) + "\n"


def error_message(exc):
    """The message sent into the sandbox for a host tool's exception: the
    type and str(), never the host traceback (host paths and code are not
    the sandbox's business)."""
    if isinstance(exc, ToolError):
        return exc.message if isinstance(exc.message, str) else str(exc)
    t = type(exc)
    name = t.__qualname__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__qualname__)
    try:
        msg = str(exc)
    except Exception:
        msg = ""
    return "%s: %s" % (name, msg) if msg else name
