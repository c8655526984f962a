"""Values across the sandbox boundary: the JSON conventions of
nsbox-protocol(7), VALUES.

    Python              JSON
    None, bool, str     null, true/false, string
    int, |n| <= 2**53   number
    other int           {"$int": "digits"} (or "0x..." past the str digit limit)
    float               number; nan/inf/-inf as {"$float": ...}
    list                array
    tuple               {"$tuple": [...]}
    dict, str keys      object; {"$dict": {...}} if a key starts with "$"
    anything else       {"$repr": ..., "$type": ...[, "$why": ...]}  (only from inside)
"""

import json
import math

from .errors import UndecodableValue

__all__ = ["ReprValue", "encode", "decode", "dumps", "loads"]

INT_EXACT = 2 ** 53
MAX_DEPTH = 100


class ReprValue:
    """A value from inside that has no JSON form (a module, a class instance,
    a set...): its repr() and its type's qualified name.  repr() of a
    ReprValue is the original repr, so printing it reads naturally."""

    __slots__ = ("repr", "type_name", "why")

    repr: str
    type_name: str
    why: "str | None"

    def __init__(self, repr_text: str, type_name: str, why: "str | None" = None) -> None:
        self.repr = repr_text
        self.type_name = type_name
        self.why = why

    def __repr__(self) -> str:
        return self.repr

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReprValue):
            return NotImplemented
        return (self.repr, self.type_name, self.why) == (other.repr, other.type_name, other.why)

    def __hash__(self) -> int:
        return hash((self.repr, self.type_name, self.why))


def encode(v, depth=0):
    """A Python value -> a JSON-able value.  TypeError for what has no JSON
    form (sets, bytes, objects), ValueError for nesting past 100 levels."""
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if depth > MAX_DEPTH:
        raise ValueError("value nested more than %d levels deep" % MAX_DEPTH)
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        v = int(v)
        if -INT_EXACT <= v <= INT_EXACT:
            return v
        try:
            return {"$int": str(v)}
        except ValueError:  # past sys.get_int_max_str_digits()
            return {"$int": hex(v)}
    if isinstance(v, float):
        v = float(v)
        if math.isfinite(v):
            return v
        return {"$float": repr(v)}
    if isinstance(v, str):
        return str(v)
    if isinstance(v, list):
        return [encode(x, depth + 1) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [encode(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        d = {}
        dollar = False
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError("dict keys must be str to cross into the sandbox, not %s" % type(k).__name__)
            k = str(k)
            dollar = dollar or k.startswith("$")
            d[k] = encode(x, depth + 1)
        return {"$dict": d} if dollar else d
    raise TypeError("a %s.%s cannot cross into the sandbox (only None, bool, int, float, str, list, "
                    "tuple and dict with str keys can)" % (t.__module__, t.__qualname__))


def decode(v):
    """A JSON value from inside -> a Python value (ReprValue for $repr)."""
    t = type(v)
    if t is list:
        return [decode(x) if type(x) in NESTED else x for x in v]
    if t is dict:
        n = len(v)
        if n == 1:
            (k, x), = v.items()
            if k == "$int" and type(x) is str:
                return int(x, 0)
            if k == "$float" and type(x) is str:
                return float(x)
            if k == "$tuple" and type(x) is list:
                return tuple(decode(y) for y in x)
            if k == "$dict" and type(x) is dict:
                return {a: decode(b) for a, b in x.items()}
        elif n in (2, 3) and type(v.get("$repr")) is str and type(v.get("$type")) is str:
            if n == 2 or type(v.get("$why")) is str:
                return ReprValue(v["$repr"], v["$type"], v.get("$why"))
        for x in v.values():
            if type(x) in NESTED:
                return {a: decode(b) for a, b in v.items()}
        return v
    return v


NESTED = (list, dict)


def dumps(v):
    """A Python value -> JSON text in UTF-8 bytes."""
    t = type(v)
    if v is None:
        return b"null"
    if t is int and -INT_EXACT <= v <= INT_EXACT:
        return str(v).encode()
    s = _encoder(encode(v))
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a str with lone surrogates cannot cross into the sandbox") from None


_decoder = json.JSONDecoder().decode


_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def parse(b):
    """JSON text (bytes) from libnsbox, which has validated it -> plain
    JSON values, no $-tag decoding."""
    s = b.decode("utf-8")
    try:
        v, end = _scan(s, 0)
    except StopIteration:
        return _decoder(s)  # leading whitespace, or invalid: the full parser says why
    if end != len(s):
        return _decoder(s)
    return v



_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_scalar = {b"null": None, b"true": True, b"false": False}


def loads(b):
    """JSON text (bytes) from libnsbox -> a Python value.  The text is chosen
    by the sandboxed code: whatever decoding it makes fail is an
    UndecodableValue (a SandboxError), never a bare RecursionError."""
    try:
        return _loads(b)
    except (RecursionError, MemoryError, ValueError, UnicodeError, KeyError, TypeError) as e:
        raise UndecodableValue("the sandbox sent a value the host cannot decode (%s: %s)"
                               % (type(e).__name__, str(e)[:200])) from e


def _loads(b):
    if b in _scalar:
        return _scalar[b]
    if len(b) < 16 and b.isdigit():
        return int(b)
    v = parse(b)
    t = type(v)
    if t is dict or t is list:
        return decode(v)
    return v
