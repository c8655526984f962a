"""Values across the sandbox boundary: the JSON conventions of
nsbox-protocol(7), VALUES.

    Python              JSON
    None, bool, str     null, true/false, string
    int, |n| <= 2**53   number
    other int           {"$int": "digits"} (or "0x..." past the str digit limit)
    float               number; nan/inf/-inf as {"$float": ...}
    complex             {"$complex": [real, imag]} (each a float as above)
    bytes, bytearray    {"$bytes": base64}, {"$bytearray": base64}
    list                array
    tuple               {"$tuple": [...]}
    set, frozenset      {"$set": [...]}, {"$frozenset": [...]}
    dict, str keys      object; {"$dict": {...}} if a key starts with "$"
    dict, other keys    {"$dict": [[key, value], ...]}
    anything else       {"$repr": ..., "$type": ...[, "$why": ...]}  (only from inside)

Decoding what the sandbox sent never evaluates anything: each tag builds
its value with int(), float(), base64 and the container's constructor, and
a malformed tag, an unhashable set member or key, more than 32 set members
or $dict keys with one hash (a hash flood: int and tuple hashes have no
seed), or nesting deeper than the runner produces is an UndecodableValue.  The text itself is bounded by
libnsbox's frame limit before it gets here.
"""

import base64
import binascii
import json
import math

from .errors import UndecodableValue

__all__ = ["ReprValue", "encode", "decode", "dumps", "loads"]

INT_EXACT = 2 ** 53
MAX_DEPTH = 100
# The runner turns what lies deeper than MAX_DEPTH into $repr: a value from
# inside nests at most MAX_DEPTH + 1 levels (plus slack).
DECODE_DEPTH = MAX_DEPTH + 4


class ReprValue:
    """A value from inside that cannot cross as itself (a module, a class
    instance, a cycle, nesting past 100 levels, a value over the frame
    limit): its repr(), its type's qualified name and, when the runner says,
    why (.why: "cycle", "nested too deeply", "too large"...).  repr() of a
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


def _b64(b):
    return binascii.b2a_base64(b, newline=False).decode("ascii")


_SENDABLE = ("only None, bool, int, float, complex, str, bytes, bytearray, list, tuple, set, frozenset "
             "and dict can")


def encode(v, depth=0, seen=None):
    """A Python value -> a JSON-able value.  TypeError for what has no JSON
    form (objects, functions...), ValueError for a cycle or nesting past
    100 levels."""
    t = type(v)
    if v is None or t is bool or t is str:
        return v
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
    if depth > MAX_DEPTH:
        raise ValueError("value nested more than %d levels deep" % MAX_DEPTH)
    if t is bytes:
        return {"$bytes": _b64(v)}
    if t is bytearray:
        return {"$bytearray": _b64(v)}
    if t is complex:
        return {"$complex": [encode(v.real), encode(v.imag)]}
    if isinstance(v, (list, tuple, dict, set, frozenset)):
        if seen is None:
            seen = set()
        i = id(v)
        if i in seen:
            raise ValueError("a cyclic %s cannot cross into the sandbox" % t.__name__)
        seen.add(i)
        try:
            return _encode_container(v, depth + 1, seen)
        finally:
            seen.discard(i)
    raise TypeError("a %s.%s cannot cross into the sandbox (%s)" % (t.__module__, t.__qualname__, _SENDABLE))


def _encode_container(v, d1, seen):
    if isinstance(v, list):
        return [encode(x, d1, seen) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [encode(x, d1, seen) for x in v]}
    if isinstance(v, dict):
        # U+0000 in a key: pairs (libnsbox's parser refuses it in keys)
        if all(isinstance(k, str) and "\0" not in k for k in v):
            d = {}
            dollar = False
            for k, x in v.items():
                k = str(k)
                dollar = dollar or k.startswith("$")
                d[k] = encode(x, d1, seen)
            return {"$dict": d} if dollar else d
        return {"$dict": [[encode(k, d1, seen), encode(x, d1, seen)] for k, x in v.items()]}
    tag = "$frozenset" if isinstance(v, frozenset) else "$set"
    return {tag: [encode(x, d1, seen) for x in v]}


def _unb64(x):
    return base64.b64decode(x.encode("ascii"), validate=True)


def _part(x, depth):
    x = decode(x, depth) if type(x) is dict else x
    if type(x) not in (int, float):
        raise ValueError("$complex parts must be numbers, not %s" % type(x).__name__)
    return float(x)


def _pair(p, depth):
    if type(p) is not list or len(p) != 2:
        raise ValueError("$dict pairs must be [key, value] lists")
    k, x = p
    return (decode(k, depth) if type(k) in NESTED else k), (decode(x, depth) if type(x) in NESTED else x)


# Members of one set (or keys of one $dict) that may hash alike.  hash() of
# an int is n mod 2**61 - 1, of a tuple a fixed function of its members':
# no seed, unlike str's.  A $set of 40,000 multiples of 2**61 - 1 (1.5 MB,
# a tenth of a frame) took the host 6.4 s to build, each member probing
# every earlier one: quadratic, on the SDK's thread, under the GIL.  Real
# data rarely has a handful alike ({1, 1.0} is one member; -1 and -2 share
# one).
HASH_ALIKE_MAX = 32


def _hashed(items, what):
    """items (a list), checked before a set or dict is built of them: each
    hashable, and at most HASH_ALIKE_MAX with any one hash.  The counts are
    keyed by the hash values, which are ints below 2**61 - 1: each its own
    hash, so that table floods no more than any set of distinct hashes."""
    seen = {}
    for y in items:
        h = hash(y)
        n = seen.get(h, 0) + 1
        if n > HASH_ALIKE_MAX:
            raise ValueError("more than %d %s with one hash (a hash flood)" % (HASH_ALIKE_MAX, what))
        seen[h] = n
    return items


def _tag(k, x, depth):
    """The value of the tag {k: x}; _NOT_A_TAG when k is no tag of ours."""
    tx = type(x)
    if k == "$int":
        if tx is str:
            return int(x, 0)
    elif k == "$float":
        if tx is str:
            return float(x)
    elif k == "$tuple":
        if tx is list:
            return tuple(decode(y, depth) if type(y) in NESTED else y for y in x)
    elif k == "$dict":
        if tx is dict:
            return {a: decode(b, depth) if type(b) in NESTED else b for a, b in x.items()}
        if tx is list:
            pairs = [_pair(p, depth) for p in x]
            _hashed([p[0] for p in pairs], "$dict keys")
            return dict(pairs)
    elif k == "$set" or k == "$frozenset":
        if tx is list:
            items = _hashed([decode(y, depth) if type(y) in NESTED else y for y in x], k + " members")
            return set(items) if k == "$set" else frozenset(items)
    elif k == "$bytes" or k == "$bytearray":
        if tx is str:
            b = _unb64(x)
            return b if k == "$bytes" else bytearray(b)
    elif k == "$complex":
        if tx is list and len(x) == 2:
            return complex(_part(x[0], depth), _part(x[1], depth))
    else:
        return _NOT_A_TAG
    raise ValueError("malformed %s tag (a %s)" % (k, tx.__name__))


_NOT_A_TAG = object()


def decode(v, depth=0):
    """A JSON value from inside -> a Python value (ReprValue for $repr).
    ValueError or TypeError for a malformed tag, an unhashable member
    of a set or key of a dict, or nesting deeper than the runner sends."""
    t = type(v)
    if t is not list and t is not dict:
        return v
    depth += 1
    if depth > DECODE_DEPTH:
        raise ValueError("value nested more than %d levels deep" % DECODE_DEPTH)
    if t is list:
        # A long list of scalars (a tool's data) is taken as it is: one
        # pass in C over its types instead of one in Python over its items.
        if len(v) > 32 and not _NESTED_SET.intersection(map(type, v)):
            return v
        return [decode(x, depth) if type(x) in NESTED else x for x in v]
    n = len(v)
    if n == 1:
        (k, x), = v.items()
        r = _tag(k, x, depth)
        if r is not _NOT_A_TAG:
            return r
    elif n in (2, 3) and type(v.get("$repr")) is str and type(v.get("$type")) is str:
        if n == 2 or type(v.get("$why")) is str:
            return ReprValue(v["$repr"], v["$type"], v.get("$why"))
    for x in v.values():
        if type(x) in NESTED:
            return {a: decode(b, depth) for a, b in v.items()}
    return v


NESTED = (list, dict)
_NESTED_SET = frozenset(NESTED)


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


# What decoding a value from inside can raise: the text is the sandboxed
# code's choice.  ArithmeticError: a $complex part that is a $int past a
# float's range (float() raises OverflowError).
DECODE_ERRORS = (RecursionError, MemoryError, ValueError, UnicodeError, KeyError, TypeError, ArithmeticError)


def loads(b):
    """JSON text (bytes) from libnsbox -> a Python value.  The text is chosen
    by the sandboxed code: whatever decoding it makes fail is an
    UndecodableValue (a SandboxError), never a bare RecursionError."""
    try:
        return _loads(b)
    except DECODE_ERRORS as e:
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
