"""Tests of the Python SDK: the pure parts (values, schemas, docstrings) with
no sandbox, then every Sandbox method against real sandboxes through
libnsbox."""

import ctypes
import errno
import gc
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Dict, List, Literal, Optional, Tuple, Union

import pytest

import nsbox
from nsbox import _tools, _values
from nsbox._tools import Tool, parse_docstring, schema_from_function, type_schema

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)

# A host without cgroup delegation (the uid 65534 pass) warns about its
# rlimit fallbacks on every sandbox; the tests of warnings record their own.
pytestmark = pytest.mark.filterwarnings("ignore::nsbox.SandboxWarning")


# ---- values (no sandbox) -------------------------------------------------

@pytest.mark.parametrize("v", [
    None, True, False, 0, -1, 2 ** 53, -(2 ** 53), 2 ** 53 + 1, -(10 ** 40), 1.5, "é\n\u2028", "",
    [1, [2, (3, 4)]], (), (1,), {"a": 1}, {"$int": "5"}, {"$repr": "x", "$type": "y"}, {"k": {"$x": [1]}},
    {"nested": ({"t": (1, 2.5, None)},)},
])
def test_value_round_trip(v):
    assert _values.loads(_values.dumps(v)) == v


def test_value_encoding_matches_protocol():
    assert _values.encode(2 ** 60) == {"$int": str(2 ** 60)}
    assert _values.encode(2 ** 53) == 2 ** 53
    assert _values.encode((1, 2)) == {"$tuple": [1, 2]}
    assert _values.encode(float("-inf")) == {"$float": "-inf"}
    assert _values.encode({"$a": 1}) == {"$dict": {"$a": 1}}
    nan = _values.loads(b'{"$float":"nan"}')
    assert math.isnan(nan)
    assert _values.loads(b'{"$int":"0x10"}') == 16
    r = _values.loads(b'{"$repr":"<module \'os\'>","$type":"builtins.module"}')
    assert isinstance(r, nsbox.ReprValue) and repr(r) == "<module 'os'>" and r.type_name == "builtins.module"
    r = _values.loads(b'{"$repr":"[...]","$type":"builtins.list","$why":"nested too deeply"}')
    assert r.why == "nested too deeply"
    # A user's dict that only looks like $repr keeps being a dict.
    assert _values.loads(b'{"$repr":1,"$type":"x"}') == {"$repr": 1, "$type": "x"}


# Python's built-in types, each alone and nested in the others.
BUILTIN_VALUES = [
    {1: 2}, {None: True, 1.5: (1,), (1, "t"): "tuple key", frozenset({1}): 0}, b"", b"\x00\xffbytes",
    bytearray(b"ba"), bytearray(), set(), {1, 2, -3}, frozenset(), frozenset({(1, b"x")}), 1 + 2j, -0.5j,
    complex(1e300, -1e-300), 2 ** 200, -(2 ** 64), None, True, False, "",
    {"$bytes": "not a tag"}, {"$dict": [[1, 2]]}, {"$set": [1]},
    [{1: {b"k": {frozenset({2}): [bytearray(b"v"), {3 + 0j}]}}}], ({"a": ({1: (b"",)},)},),
]


@pytest.mark.parametrize("v", BUILTIN_VALUES)
def test_builtin_values_round_trip(v):
    back = _values.loads(_values.dumps(v))
    assert back == v and type(back) is type(v)


def test_new_value_tags():
    assert _values.encode(b"\x00\xff") == {"$bytes": "AP8="}
    assert _values.encode(bytearray(b"x")) == {"$bytearray": "eA=="}
    assert _values.encode({1, 2}) == {"$set": [1, 2]}
    assert _values.encode(frozenset()) == {"$frozenset": []}
    assert _values.encode(1 + 2j) == {"$complex": [1.0, 2.0]}
    assert _values.encode(complex(float("nan"), float("-inf"))) == {"$complex": [{"$float": "nan"}, {"$float": "-inf"}]}
    assert _values.encode({1: "a", "b": 2}) == {"$dict": [[1, "a"], ["b", 2]]}
    c = _values.loads(b'{"$complex":[{"$float":"nan"},1]}')
    assert math.isnan(c.real) and c.imag == 1.0


@pytest.mark.parametrize("bad", [object(), [lambda: 0], {1: object()}, {frozenset([object()])}])
def test_unsendable_values_raise_type_error(bad):
    with pytest.raises(TypeError):
        _values.dumps(bad)


def test_deep_and_cyclic_values_raise():
    deep = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(ValueError):
        _values.dumps(deep)
    cyc = []
    cyc.append(cyc)
    with pytest.raises(ValueError):
        _values.dumps(cyc)
    with pytest.raises(ValueError):
        _values.dumps("\ud800")


# ---- schemas and docstrings (no sandbox) ---------------------------------

def test_type_schema():
    assert type_schema(int) == {"type": "integer"}
    assert type_schema(float) == {"type": "number"}
    assert type_schema(bool) == {"type": "boolean"}
    assert type_schema(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert type_schema(List[str]) == {"type": "array", "items": {"type": "string"}}
    assert type_schema(dict[str, float]) == {"type": "object", "additionalProperties": {"type": "number"}}
    assert type_schema(Dict[str, list]) == {"type": "object", "additionalProperties": {"type": "array"}}
    assert type_schema(Optional[int]) == {"type": ["integer", "null"]}
    assert type_schema(Optional[List[int]]) == {"type": ["array", "null"], "items": {"type": "integer"}}
    assert type_schema(Union[int, str]) == {"type": ["integer", "string"]}
    assert type_schema(Literal["a", "b"]) == {"enum": ["a", "b"], "type": "string"}
    assert type_schema(Literal[1, "x"]) == {"enum": [1, "x"]}
    assert type_schema(Tuple[int, str]) == {"type": "array", "prefixItems": [{"type": "integer"},
                                                                            {"type": "string"}],
                                            "minItems": 2, "maxItems": 2}
    assert type_schema(object) == {}
    if sys.version_info >= (3, 10):
        assert type_schema(eval("int | None")) == {"type": ["integer", "null"]}


def _search(query: str, limit: int = 10, mode: Literal["web", "news"] = "web",
            tags: Optional[List[str]] = None, **extra) -> List[dict]:
    """Search the web for pages.

    Returns the best matches first.

    Args:
        query: what to look for,
            in plain words.
        limit (int): at most this many results.
        mode: where to search.

    Returns:
        a list of {"title", "url"} dicts.
    """
    return [{"query": query, "limit": limit, "mode": mode, "tags": tags, "extra": extra}]


def test_schema_from_function():
    s = schema_from_function(_search)
    assert s["type"] == "object"
    assert s["required"] == ["query"]
    assert s["additionalProperties"] is True
    p = s["properties"]
    assert p["query"] == {"type": "string", "description": "what to look for, in plain words."}
    assert p["limit"] == {"type": "integer", "description": "at most this many results.", "default": 10}
    assert p["mode"] == {"enum": ["web", "news"], "type": "string", "description": "where to search.",
                         "default": "web"}
    assert p["tags"]["type"] == ["array", "null"]
    assert schema_from_function(lambda *a: 0) is None


def test_parse_docstring_forms():
    assert parse_docstring(_search.__doc__)[0] == "Search the web for pages."
    summary, params = parse_docstring("""Add.

        :param a: first
        :param int b: second
        """)
    assert summary == "Add." and params == {"a": "first", "b": "second"}
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("One line\ncontinued.\n\nMore.") == ("One line continued.", {})


def test_describe_tools_text():
    t = Tool("search", _search)
    text = _tools.describe([t, Tool("anything", lambda *a, **k: 0, description="Takes anything.")])
    assert ("def search(query: str, limit: int = 10, mode: Literal['web', 'news'] = 'web', "
            "tags: Optional[list[str]] = None, **kwargs) -> List[dict]:") in text
    assert '    """Search the web for pages.' in text
    assert "        query: what to look for, in plain words." in text
    assert 'def anything(*args, **kwargs):\n    """Takes anything."""' in text
    # The stubs are valid Python (an agent may paste them).
    compile(text.split("\n\n", 1)[1], "<tools>", "exec")


def test_tool_name_and_schema_validation():
    with pytest.raises(ValueError):
        Tool("not valid", len)
    with pytest.raises(ValueError):
        Tool("class", len)
    with pytest.raises(TypeError):
        Tool("x", 42)
    with pytest.raises(TypeError):
        Tool("x", len, schema="{}")


def test_tool_error_messages():
    assert _tools.error_message(ValueError("bad city")) == "ValueError: bad city"
    assert _tools.error_message(nsbox.ToolError("exactly this")) == "exactly this"
    assert _tools.error_message(KeyError()) == "KeyError"
    assert _tools.error_message(subprocess.TimeoutExpired("x", 1)).startswith("subprocess.TimeoutExpired: ")


def test_exception_classes():
    e = nsbox.SandboxedException("ZeroDivisionError", "division by zero", "Traceback...")
    assert str(e) == "ZeroDivisionError: division by zero"
    assert isinstance(e, nsbox.SandboxError)
    for cls in (nsbox.TimeLimitExceeded, nsbox.MemoryLimitExceeded, nsbox.ToolError, nsbox.SandboxCrashed,
                nsbox.ProtocolError, nsbox.Cancelled, nsbox.PolicyError, nsbox.UndefinedVariable):
        assert issubclass(cls, nsbox.SandboxError)
    assert issubclass(nsbox.SandboxedToolError, nsbox.ToolError)
    assert issubclass(nsbox.SandboxedMemoryError, nsbox.MemoryLimitExceeded)
    assert issubclass(nsbox.ProtocolError, nsbox.SandboxCrashed)
    assert str(nsbox.UndefinedVariable("no x")) == "no x"


def test_missing_library_is_reported(tmp_path):
    code = "import nsbox\ntry:\n    nsbox.Sandbox()\nexcept nsbox.SandboxError as e:\n    print('ERR', e)\n"
    env = dict(os.environ, NSBOX_LIB=str(tmp_path / "nope.so"), PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("ERR libnsbox not found") and "nope.so" in out.stdout, out


# ---- helpers for live tests ----------------------------------------------

from conftest import descendants, signal_all  # noqa: E402 (shared with test_async.py)


def open_fds():
    return sorted(int(x) for x in os.listdir("/proc/self/fd"))


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---- execute -------------------------------------------------------------

def test_execute_values(sb):
    assert sb.execute("1 + 1") == 2
    assert sb.execute("x = 41") is None
    assert sb.execute("x + 1") == 42                         # globals persist
    assert sb.execute("2 ** 100") == 2 ** 100
    assert sb.execute("(1, 'a', None)") == (1, "a", None)
    assert math.isnan(sb.execute("float('nan')"))
    assert sb.execute("float('inf')") == float("inf")
    assert sb.execute("{'$k': [1.5, True]}") == {"$k": [1.5, True]}
    assert sb.execute("'h\u00e9\\u2603'") == "h\u00e9\u2603"
    r = sb.execute("import os\nos")
    assert isinstance(r, nsbox.ReprValue) and r.type_name == "builtins.module" and "os" in r.repr
    assert sb.execute("{1, 2}") == {1, 2}
    assert sb.execute("{1: 2}")[1] == 2
    with pytest.raises(ValueError):
        sb.execute("1\0")


def test_execute_with_output(sb):
    value, lines = sb.execute_with_output("for i in range(3): print('line', i)\n'done'")
    assert value == "done"
    assert lines == ["line 0", "line 1", "line 2"]
    assert sb.execute_with_output("x = 1") == (None, [])


def test_run_returns_result(sb):
    r = sb.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n7 * 6")
    assert r.ok and r.value == 42 and r.stdout == "out\n" and r.stderr == "err\n" and r.lines == ["out"]
    assert r.wall > 0
    r = sb.run("print('before')\n[][1]")
    assert not r.ok and isinstance(r.error, nsbox.SandboxedException) and r.error.type_name == "IndexError"
    assert r.stdout == "before\n"
    with pytest.raises(nsbox.SandboxedException):
        r.raise_for_error()


def test_sandboxed_exception(sb):
    with pytest.raises(nsbox.SandboxedException) as ei:
        sb.execute("def f():\n    return 1 / 0\nprint('partial')\nf()")
    e = ei.value
    assert str(e) == "ZeroDivisionError: division by zero"
    assert e.type_name == "ZeroDivisionError" and e.message == "division by zero"
    assert "line 2, in f" in e.traceback and "ZeroDivisionError" in e.traceback
    assert "runner" not in e.traceback
    assert e.stdout == "partial\n"
    with pytest.raises(nsbox.SandboxedException) as ei:
        sb.execute("import json\njson.loads('{')")
    assert ei.value.type_name == "json.decoder.JSONDecodeError"
    # SystemExit ends the code, not the session.  libnsbox currently reports
    # it as NSBOX_OK (the session layer treats it as a clean exit for
    # `nsbox python`); when it reports an exception, exit_code is kept.
    try:
        v = sb.execute("before_exit = 1\nraise SystemExit(3)\nafter_exit = 1")
        assert v is None
    except nsbox.SandboxedException as e:
        assert e.type_name == "SystemExit" and e.exit_code == 3
    assert sb.execute("'before_exit' in globals(), 'after_exit' in globals()") == (True, False)
    with pytest.raises(nsbox.SandboxedException) as ei:
        sb.execute("def broken(:\n  pass")
    assert ei.value.type_name == "SyntaxError"
    assert sb.execute("'still alive'") == "still alive"


@pytest.mark.parametrize("text,code", [("\u00b2", "\u00b2"), ("--5", "--5"), ("1" * 5000, "1" * 5000), ("-7", -7),
                                       ("\u0663", "\u0663")], ids=["sup2", "dashdash", "5000", "minus7", "arabic3"])
def test_system_exit_with_any_text_is_a_sandboxed_exception(sb, text, code):
    """str.isdigit() took "\u00b2" and lstrip("-") took "--5", which int()
    refuses, as it does 5000 digits: execute() and run() raised a bare
    ValueError for the code's own SystemExit(text)."""
    src = "raise SystemExit(%r)" % text
    try:
        sb.execute(src)
    except nsbox.SandboxedException as e:
        assert e.type_name == "SystemExit" and e.exit_code == code
    r = sb.run(src)
    assert r.error is None or (isinstance(r.error, nsbox.SandboxedException) and r.error.exit_code == code)


# ---- variables, reset ----------------------------------------------------

def test_variables(sb):
    data = {"xs": [1, 2, 3], "t": (1, "two"), "big": 10 ** 30, "f": -0.5, "$odd": None, "nested": {"a": [{}]}}
    sb.set_variable("data", data)
    assert sb.execute("type(data['t']).__name__, data['big'] + 1") == ("tuple", 10 ** 30 + 1)
    assert sb.get_variable("data") == data
    sb.execute("made = [i * i for i in range(5)]")
    assert sb.get_variable("made") == [0, 1, 4, 9, 16]
    sb.execute("import collections\nobj = collections.OrderedDict(a=1)")
    assert sb.get_variable("obj").type_name == "collections.OrderedDict"
    with pytest.raises(nsbox.UndefinedVariable):
        sb.get_variable("nothing_here")
    with pytest.raises(KeyError):
        sb.get_variable("nothing_here")
    assert sb.get_variable("nothing_here", default=5) == 5
    with pytest.raises(ValueError):
        sb.set_variable("not a name", 1)
    with pytest.raises(TypeError):
        sb.set_variable("s", object())


def test_reset(sb):
    @sb.tool
    def ping() -> str:
        return "pong"
    sb.execute("a = 1")
    sb.reset()
    with pytest.raises(nsbox.SandboxedException) as ei:
        sb.execute("a")
    assert ei.value.type_name == "NameError"
    assert sb.execute("ping()") == "pong"                    # tools survive a reset


# ---- tools ---------------------------------------------------------------

def test_register_function_and_decorators(sb):
    sb.register_function("add", lambda a, b: a + b)
    assert sb.execute("add(2, 3)") == 5
    assert sb.execute("add('a', b='b')") == "ab"

    @sb.tool
    def scale(x: float, factor: float = 2.0) -> float:
        """Multiply x by factor."""
        return x * factor
    assert scale(1.5) == 3.0                                 # the decorator returns the function
    assert sb.execute("scale(1.5)") == 3.0                   # the host's default applies
    assert sb.execute("scale(1, factor=10)") == 10
    assert "Multiply x by factor." in sb.execute("scale.__doc__")
    with pytest.raises(nsbox.SandboxedException) as ei:
        sb.execute("scale('x')")                             # type-checked inside, before the call
    assert ei.value.type_name == "TypeError"

    @sb.tool(name="lookup", description="Find a key.")
    def _lookup(key: str, table: Dict[str, int]) -> Optional[int]:
        return table.get(key)
    assert sb.execute("lookup('b', {'a': 1, 'b': 2})") == 2
    assert sb.execute("lookup('z', {})") is None

    sb.register_function("echo", lambda *args, **kwargs: [list(args), kwargs])
    assert sb.execute("echo(1, (2,), k={'x': 2 ** 70})") == [[1, (2,)], {"k": {"x": 2 ** 70}}]

    sb.register_function("raw", lambda **kw: kw, schema={"type": "object", "properties": {
        "n": {"type": "integer"}}, "required": ["n"]}, description="Raw schema.")
    assert sb.execute("raw(n=4)") == {"n": 4}

    def posonly(a, /, b):
        return a - b
    sb.register_function("posonly", posonly)
    assert sb.execute("posonly(10, 3)") == 7

    with pytest.raises(ValueError):
        sb.register_function("add", len)
    with pytest.raises(ValueError):
        sb.register_function("bad-name", len)


def test_tool_registered_before_restart_and_describe(sb):
    @sb.tool
    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
        """Current weather of a city.

        Args:
            city: the city's name.
            unit: temperature unit.
        """
        return {"city": city, "unit": unit}
    text = sb.describe_tools()
    assert "def get_weather(city: str, unit: Literal['C', 'F'] = 'C') -> dict:" in text
    assert "Current weather of a city." in text and "city: the city's name." in text
    assert sb.execute("get_weather('Oslo', unit='F')") == {"city": "Oslo", "unit": "F"}
    with pytest.raises(nsbox.SandboxedException):
        sb.execute("get_weather(1)")
    sb.restart()
    assert sb.execute("get_weather('Rome')") == {"city": "Rome", "unit": "C"}


def test_tools_that_raise(sb):
    calls = []

    @sb.tool
    def fail(kind: str) -> int:
        calls.append(kind)
        if kind == "value":
            raise ValueError("bad input " + kind)
        if kind == "tool":
            raise nsbox.ToolError("exactly this message")
        if kind == "return":
            return object()
        return 1
    assert sb.execute("import nsbox\ntry:\n    fail('value')\nexcept nsbox.ToolError as e:\n    r = str(e)\nr") == \
        "ValueError: bad input value"
    assert sb.execute("import nsbox\ntry:\n    fail('tool')\nexcept nsbox.ToolError as e:\n    r = str(e)\nr") == \
        "exactly this message"
    assert "cannot cross" in sb.execute("import nsbox\ntry:\n    fail('return')\nexcept nsbox.ToolError as e:\n"
                                        "    r = str(e)\nr")
    with pytest.raises(nsbox.ToolError) as ei:
        sb.execute("fail('value')")
    e = ei.value
    assert isinstance(e, nsbox.SandboxedToolError) and e.type_name == "nsbox.ToolError"
    assert isinstance(e.__cause__, ValueError) and str(e.__cause__) == "bad input value"
    # No host traceback or path crosses into the sandbox.
    assert __file__ not in e.traceback and __file__ not in e.message
    assert sb.execute("fail('ok')") == 1
    assert calls == ["value", "tool", "return", "value", "ok"]


def test_failed_tool_calls_keep_none_of_their_arguments(sb):
    """A failed call's host exception is kept after the exec (it becomes
    the SandboxedToolError's __cause__), and with it its traceback's
    frames, and through f_back the dispatch's frame: each held the call's
    arguments, which the sandbox chose, as JSON text and decoded.  60
    failing calls of 4 MiB each held 1.3 GB of the host's memory after the
    exec.  Now the frames keep their file and line, not their locals."""
    import tracemalloc
    import traceback

    @sb.tool
    def total(items: list) -> int:
        """Sum items."""
        raise ValueError("no total for %d items" % len(items))

    code = ("import nsbox\nn = 0\nfor i in range(8):\n    try:\n        total(list(range(100000 + i)))\n"
            "    except nsbox.ToolError:\n        n += 1\nn")
    sb.execute("1")
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert sb.execute(code) == 8
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held < 2 << 20, "%d bytes held after the exec" % held
    # The cause is still there, and its traceback still names the tool.
    with pytest.raises(nsbox.ToolError) as ei:
        sb.execute("total([1, 2])")
    cause = ei.value.__cause__
    assert isinstance(cause, ValueError) and str(cause) == "no total for 2 items"
    assert "in total" in "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))


def test_tool_keyboard_interrupt_reaches_host(sb):
    @sb.tool
    def interrupt() -> None:
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        sb.execute("interrupt()")
    assert sb.execute("1") == 1


def test_tool_calls_in_loops(sb):
    seen = []

    @sb.tool
    def inc(n: int) -> int:
        seen.append(n)
        return n + 1
    assert sb.execute("t = 0\nfor i in range(1000):\n    t = inc(t)\nt") == 1000
    assert seen == list(range(1000))
    r = sb.run("inc(0)")
    assert r.ok and r.tool_calls == 1
    # The 1001st call of one execute is refused.
    with pytest.raises(nsbox.ToolError) as ei:
        sb.execute("for i in range(1001):\n    inc(i)")
    assert "limit" in ei.value.message
    assert sb.execute("inc(1)") == 2                         # the cap is per execute


def test_max_tool_calls_option(libnsbox):
    with nsbox.Sandbox(max_tool_calls=5, timeout=30) as s:
        s.register_function("f", lambda: 1)
        assert s.execute("sum(f() for _ in range(5))") == 5
        with pytest.raises(nsbox.ToolError):
            s.execute("sum(f() for _ in range(6))")


def test_tool_runs_on_the_executing_thread(sb):
    threads = []
    sb.register_function("where", lambda: threads.append(threading.get_ident()))
    sb.execute("where()")
    result = []
    t = threading.Thread(target=lambda: result.append(sb.execute("where() or 1")))
    t.start()
    t.join()
    assert result == [1]
    assert threads == [threading.get_ident(), t.ident]


# ---- limits --------------------------------------------------------------

def test_timeout_interrupts_and_sandbox_survives(libnsbox):
    with nsbox.Sandbox(timeout=1) as s:
        s.execute("kept = 'yes'")
        t0 = time.monotonic()
        with pytest.raises(nsbox.TimeLimitExceeded) as ei:
            s.execute("import time\nwhile True: time.sleep(0.01)")
        assert time.monotonic() - t0 < 5
        if ei.value.session_lost:
            assert s.execute("'kept' in globals()") is False
        else:
            assert s.get_variable("kept") == "yes"
        assert s.execute("1 + 1") == 2
        with pytest.raises(nsbox.TimeLimitExceeded):
            s.execute("while True: pass", timeout=0.3)       # per-call timeout
        assert s.execute("2 + 2") == 4


# Swallows the interruption (which arrives while it sleeps, inside the try).
STUBBORN = "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except BaseException:\n        pass"


def test_timeout_kills_code_that_ignores_it(libnsbox):
    with nsbox.Sandbox(timeout=0.5) as s:
        s.execute("kept = 1")
        pid = s.pid
        with pytest.raises(nsbox.TimeLimitExceeded) as ei:
            s.execute(STUBBORN)
        assert ei.value.session_lost
        assert wait_for(lambda: not alive(pid))
        assert s.execute("'kept' in globals()") is False     # a fresh sandbox
        assert s.pid != pid


def test_no_auto_restart(libnsbox):
    with nsbox.Sandbox(timeout=0.5, auto_restart=False) as s:
        with pytest.raises(nsbox.TimeLimitExceeded) as ei:
            s.execute(STUBBORN)
        assert ei.value.session_lost
        with pytest.raises(nsbox.SandboxCrashed):
            s.execute("1")
        s.restart()
        assert s.execute("1") == 1


def test_memory_limit(libnsbox):
    with nsbox.Sandbox(memory="64M", timeout=30) as s:
        with pytest.raises(nsbox.MemoryLimitExceeded):
            s.execute("blocks = []\nfor _ in range(64):\n    blocks.append(b'x' * (8 << 20))")
        assert s.execute("3 * 3") == 9                       # usable afterwards (fresh if it was killed)


def test_set_limits(libnsbox):
    with nsbox.Sandbox(memory="512M", timeout=30) as s:
        s.execute("a = 1")
        first = s.info()
        s.set_limits(timeout=0.3)                            # applies at once, no restart
        assert s.timeout == 0.3
        with pytest.raises(nsbox.TimeLimitExceeded):
            s.execute("while True: pass")
        s.set_limits(timeout=30)
        if s.execute("'a' in globals()"):
            s.set_limits(memory="128M", pids=16)             # needs a restart, done lazily
            assert s.execute("'a' in globals()") is False
        else:
            s.set_limits(memory="128M", pids=16)
        info = s.info()
        assert info["pid"] != first["pid"]
        if first["memory_limit"]:                            # cgroups in use on this host
            assert first["memory_limit"] == 512 << 20 and info["memory_limit"] == 128 << 20
            assert info["pids_limit"] == 16
        assert "128M" in s.policy_text() or str(128 << 20) in s.policy_text()
        with pytest.raises(nsbox.PolicyError):
            s.set_limits(memory="lots")
        with pytest.raises(ValueError):
            s.set_limits(timeout=-1)


def test_cancel_from_another_thread(sb):
    timer = threading.Timer(0.3, sb.cancel)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(nsbox.Cancelled):
        sb.execute("import time\nwhile True: time.sleep(0.01)")
    assert time.monotonic() - t0 < 10
    timer.join()
    assert sb.execute("5") == 5


def test_cancel_the_code_ignores_is_reported_as_cancelled(libnsbox):
    """Code that swallows nsbox.Cancelled is killed after the grace: the
    exec is Cancelled, the sandbox lost (it was "the runner was killed by
    signal 9", a SandboxCrashed)."""
    with nsbox.Sandbox(timeout=20) as s:
        timer = threading.Timer(0.5, s.cancel)
        timer.start()
        with pytest.raises(nsbox.Cancelled) as ei:
            s.execute("import time\nwhile True:\n    try:\n        time.sleep(100)\n"
                      "    except BaseException:\n        pass\n")
        timer.join()
        assert ei.value.session_lost and "did not stop" in str(ei.value), str(ei.value)
        assert s.execute("5") == 5


# ---- policy, info, life cycle ---------------------------------------------

def test_bad_policy_and_limits(libnsbox):
    with pytest.raises(nsbox.PolicyError):
        nsbox.Sandbox(policy="no-such-policy-anywhere")
    with pytest.raises(nsbox.PolicyError):
        nsbox.Sandbox(memory="a lot")
    with pytest.raises(nsbox.PolicyError):
        nsbox.Sandbox(memory=-5)
    with pytest.raises(ValueError):
        nsbox.Sandbox(timeout=0)


def test_policy_file_and_workspace(libnsbox, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    (work / "in.txt").write_text("from the host")
    pol = tmp_path / "agent.policy"
    pol.write_text("[Limits]\nPids=48\n\n[Environment]\nSet=AGENT_MODE=test\n")
    with nsbox.Sandbox(policy=pol, workspace=work, timeout=30) as s:
        assert re.search(r"^Pids\s*=\s*48$", s.policy_text(), re.M), s.policy_text()
        assert s.execute("import os\nos.environ.get('AGENT_MODE')") == "test"
        assert s.execute("import os\nsorted(os.listdir('/workspace'))") == ["in.txt"]
        s.execute("open('/workspace/out.txt', 'w').write('from inside')")
    assert (work / "out.txt").read_text() == "from inside"
    bad = tmp_path / "bad.policy"
    bad.write_text("[Limits]\nMemory=lots\n")
    with pytest.raises(nsbox.PolicyError) as ei:
        nsbox.Sandbox(policy=bad)
    assert "bad.policy:2" in str(ei.value)


def test_policy_file_in_the_workspace_is_refused(libnsbox, tmp_path):
    """A policy file under the workspace (or a writable bind) is one the
    sandbox can rewrite for the next session: refused before anything
    starts, and by nsbox_session_new itself too."""
    work = tmp_path / "work"
    work.mkdir()
    pol = work / "agent.policy"
    pol.write_text("[Limits]\nPids=48\n")
    with pytest.raises(nsbox.PolicyError) as ei:
        nsbox.Sandbox(policy=pol, workspace=work, timeout=30)
    assert ei.value.errno == errno.EPERM and "holds the policy file" in str(ei.value), ei.value
    bound = work / "bind.policy"
    bound.write_text("[Filesystem]\nBind=%s:/data\n" % work)
    with pytest.raises(nsbox.PolicyError) as ei:
        nsbox.Sandbox(policy=bound, timeout=30)
    assert "[Filesystem] Bind=%s holds the policy file" % work in str(ei.value), ei.value
    lib = nsbox._lib.load()
    p, out, err = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.nsbox_policy_new(str(pol).encode(), ctypes.byref(p), ctypes.byref(err)) == 0
    try:
        assert lib.nsbox_policy_set(p, b"Filesystem", b"Workspace", str(work).encode(), ctypes.byref(err)) == 0
        assert lib.nsbox_session_new(p, None, ctypes.byref(out), ctypes.byref(err)) == -errno.EPERM
        lib.nsbox_error_free(err)
    finally:
        lib.nsbox_policy_free(p)
    # Outside it, as before.
    outside = tmp_path / "agent.policy"
    outside.write_text("[Limits]\nPids=48\n")
    with nsbox.Sandbox(policy=outside, workspace=work, timeout=30) as s:
        assert s.execute("1 + 1") == 2


def test_sys_path_as_python_sets_it(libnsbox, tmp_path):
    """'' first (the working directory, /workspace), then PYTHONPATH, as for
    python -c: the workspace's modules import; with the template (spare) and
    cold alike."""
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    (work / "sib.py").write_text("X = 5\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "extra.py").write_text("Y = 6\n")
    pol = tmp_path / "p.policy"
    pol.write_text("[Environment]\nSet=PYTHONPATH=/opt/lib\n\n[Filesystem]\nReadOnlyBind=%s:/opt/lib\n" % (tmp_path / "lib"))
    for cold in (False, True):
        with nsbox.Sandbox(policy=pol, workspace=work, timeout=30, cold=cold) as s:
            assert s.execute("import sys; sys.path[:2]") == ["", "/opt/lib"]
            assert s.execute("import sib, extra; (sib.X, extra.Y)") == (5, 6)
    # The path the runner starts with holds nothing of the sandbox's files.
    with nsbox.Sandbox(timeout=30) as s:
        assert s.execute("import sys; sys.path[0]") == ""
        assert s.execute("import sys; sys.path[1]").startswith("/usr/lib/python3")


def test_strict_policy(libnsbox):
    with nsbox.Sandbox() as d:
        have_cgroups = bool(d.info()["cgroup"])
    if not have_cgroups:
        # strict says Cgroups=require: refused, naming the cause, where the
        # default policy falls back to rlimits.
        with pytest.raises(nsbox.SandboxError) as ei:
            nsbox.Sandbox(policy="strict")
        assert "cgroup" in str(ei.value)
        return
    with nsbox.Sandbox(policy="strict", timeout=30) as s:
        assert s.info()["memory_limit"] == 256 << 20
        assert s.execute("sum(range(10))") == 45


def test_info(sb):
    i = sb.info()
    assert i["pid"] > 0 and i["alive"] is True
    assert sb.pid == i["pid"]
    assert alive(i["pid"])


def test_close_and_context_manager(libnsbox):
    with nsbox.Sandbox() as s:
        pid = s.pid
        assert s.execute("1") == 1
    assert s.closed
    assert wait_for(lambda: not alive(pid))
    s.close()                                                # idempotent
    with pytest.raises(nsbox.SandboxError):
        s.execute("1")
    with pytest.raises(nsbox.SandboxError):
        s.register_function("f", len)
    s2 = nsbox.Sandbox()
    s2.close()
    s2.close()


def test_close_inside_a_tool_is_refused(sb):
    sb.register_function("close_me", sb.close)
    with pytest.raises(nsbox.ToolError) as ei:
        sb.execute("close_me()")
    assert "cannot close" in ei.value.message
    assert sb.execute("1") == 1


def test_streaming_output(libnsbox):
    got = []
    with nsbox.Sandbox(on_output=lambda stream, text: got.append((stream, text)), timeout=30) as s:
        s.execute("import sys\nprint('hello')\nprint('oops', file=sys.stderr)")
    assert "hello\n" in "".join(t for st, t in got if st == "stdout")
    assert "oops\n" in "".join(t for st, t in got if st == "stderr")


def test_cold_start(libnsbox):
    with nsbox.Sandbox(cold=True, timeout=30) as s:
        assert s.execute("import sys\nsys.version_info[:2]") == (3, 11)


# ---- concurrency ---------------------------------------------------------

def test_several_sandboxes_in_threads(libnsbox):
    n = 4
    results = [None] * n
    errors = []

    def work(i):
        try:
            with nsbox.Sandbox(timeout=60) as s:
                s.register_function("ident", lambda x: x * 1000 + i)
                s.set_variable("me", i)
                total = 0
                for k in range(20):
                    total += s.execute("ident(me) + %d" % k)
                results[i] = (total, s.get_variable("me"), s.execute("sum(ident(j) for j in range(50))"))
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for i in range(n):
        assert results[i] == (20 * (i * 1000 + i) + sum(range(20)), i, sum(j * 1000 + i for j in range(50)))


def test_sandboxes_run_in_parallel(libnsbox):
    """ctypes releases the GIL around nsbox_exec: two sandboxes sleeping
    0.6 s each from two threads take about 0.6 s, not 1.2 s."""
    boxes = [nsbox.Sandbox(timeout=30) for _ in range(2)]
    try:
        for b in boxes:
            b.execute("import time")
        threads = [threading.Thread(target=b.execute, args=("time.sleep(0.6)",)) for b in boxes]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert time.monotonic() - t0 < 1.1
    finally:
        for b in boxes:
            b.close()


def test_one_sandbox_shared_by_threads(sb):
    sb.execute("counter = 0")
    sb.register_function("bump", lambda: 1)

    def work():
        for _ in range(25):
            sb.execute("counter += bump()")
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sb.get_variable("counter") == 100


# ---- garbage collection --------------------------------------------------

def _make_and_drop(count, **kw):
    kw.setdefault("spare", False)
    pids = []
    for _ in range(count):
        s = nsbox.Sandbox(timeout=30, **kw)
        s.register_function("f", lambda x: x)
        assert s.execute("f(21) * 2") == 42
        pids.append(s.pid)
        del s                                                # no close()
    return pids


def _cyclic_sandbox():
    s = nsbox.Sandbox(timeout=30, spare=False)
    s.register_function("get_sb", lambda: repr(s))       # sandbox -> tool -> closure -> sandbox
    assert s.execute("get_sb()") == "<nsbox.Sandbox running>"
    return s.pid


def test_garbage_collected_sandbox_leaks_nothing(libnsbox):
    # Warm up: the library's helper process and any lazy fds exist from here on.
    _make_and_drop(1)
    gc.collect()
    base_procs = descendants()
    base_fds = open_fds()
    pids = _make_and_drop(5)
    gc.collect()
    for pid in pids:
        assert wait_for(lambda: not alive(pid)), "sandbox %d still running" % pid
    assert wait_for(lambda: descendants() == base_procs), (descendants(), base_procs)
    assert open_fds() == base_fds
    # A Sandbox caught in a reference cycle goes too (at the next collection).
    pid = _cyclic_sandbox()
    gc.collect()
    assert wait_for(lambda: not alive(pid))
    assert wait_for(lambda: descendants() == base_procs)
    assert open_fds() == base_fds


def test_spares_do_not_accumulate(libnsbox, monkeypatch):
    # Spares are the default: each new Sandbox takes the waiting spare and
    # the helper makes one more, so however many come and go, one spare
    # (its pid 1 and payload) is all that stays beside the helper.
    monkeypatch.delenv("NSBOX_SPARE", raising=False)     # NSBOX_SPARE=0 would win
    s = nsbox.Sandbox(timeout=30)                        # the default: spare on
    s.close()
    assert wait_for(lambda: len(descendants()) >= 3)        # helper, spare pid 1, spare payload
    base = len(descendants())
    pids = []
    for _ in range(5):
        s = nsbox.Sandbox(timeout=30)
        assert s.execute("6 * 7") == 42
        pids.append(s.pid)
        del s
    gc.collect()
    for pid in pids:
        assert wait_for(lambda: not alive(pid)), "sandbox %d still running" % pid
    assert wait_for(lambda: len(descendants()) == base), (descendants(), base)
    assert set(pids).isdisjoint(descendants())


def test_unclosed_sandbox_at_exit(libnsbox):
    # on_warning: a host with no cgroup delegation warns about its fallbacks
    # on stderr, which must otherwise stay empty.
    code = ("import nsbox, os\ns = nsbox.Sandbox(on_warning=lambda m: None)\nprint(s.pid, flush=True)\n"
            "s.execute('x = 1')\n")
    env = dict(os.environ, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    pid = int(out.stdout.split()[0])
    assert wait_for(lambda: not alive(pid))


# ---- README --------------------------------------------------------------

def _readme_blocks():
    with open(os.path.join(PYDIR, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_quick_start_runs(libnsbox, tmp_path):
    blocks = _readme_blocks()
    assert blocks, "README.md has no python block"
    # The AsyncSandbox example is run by test_readme_async_example.
    blocks = [b for b in blocks if "AsyncSandbox" not in b]
    script = tmp_path / "quickstart.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # The comments in the README say what each line prints.
    assert "def get_weather(city: str, unit: str = 'C') -> dict:" in out.stdout
    lines = out.stdout.splitlines()
    assert "21" in lines
    assert "2 ['Paris', 'Oslo']" in lines
    assert "ZeroDivisionError: division by zero" in lines
    assert any(line.startswith("stopped: ") for line in lines)
    assert "{'xs': [1, 2, 3], 'total': 6}" in lines
    assert "hello from the sandbox" in lines and "3 True 3" in lines      # nsbox.run
    assert "124 True" in lines


def test_readme_async_example(libnsbox, tmp_path):
    from nsbox import _lib
    if not _lib.has_event_api():
        pytest.skip("%s lacks the event-loop exec API (libnsbox 0.4.0)" % _lib.library_path)
    blocks = [b for b in _readme_blocks() if "AsyncSandbox" in b]
    assert len(blocks) == 1
    script = tmp_path / "async_example.py"
    script.write_text(blocks[0])
    env = dict(os.environ, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str([["A", "B", i] for i in range(5)]), "cancelled; x is still 1"]


# ---- packaging -----------------------------------------------------------

def test_pip_install_offline(tmp_path):
    """The README's install: a fresh venv of Debian's python3.11 made with
    --system-site-packages (Debian's setuptools and wheel: no network, no
    build isolation), pip install ./python; the installed package imports
    with the tree's version and carries py.typed."""
    import shutil
    src = tmp_path / "src"
    shutil.copytree(PYDIR, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3.11", "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    py = str(venv / "bin" / "python")
    env = dict(os.environ, PIP_NO_INDEX="1")
    env.pop("PYTHONPATH", None)
    out = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation", str(src)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    out = subprocess.run([py, "-c", "import importlib.metadata as m, os, nsbox; print(nsbox.__file__); "
                          "print(nsbox.Sandbox.__name__, nsbox.AsyncSandbox.__name__); print(nsbox.__version__); "
                          "print(m.version('nsbox')); "
                          "print(os.path.exists(os.path.join(os.path.dirname(nsbox.__file__), 'py.typed')))"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    path, names, version, dist_version, typed = out.stdout.splitlines()
    assert path.startswith(str(venv)) and names == "Sandbox AsyncSandbox"
    assert version == dist_version == nsbox.__version__
    assert typed == "True"
    from nsbox import _lib
    try:
        _lib.load()
    except nsbox.SandboxError:
        return                                               # the live tests report the missing library
    env["NSBOX_LIB"] = os.path.abspath(_lib.library_path)
    env.pop("NSBOX_RUNNER", None)
    out = subprocess.run([py, "-c", "import nsbox\nwith nsbox.Sandbox() as s: print(s.execute('6 * 7'))"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert out.returncode == 0 and out.stdout == "42\n", out.stderr


def test_type_hints_check_with_mypy(tmp_path):
    """The package's hints are consistent (mypy nsbox) and a typed client
    using the public API passes mypy --strict (every public call is
    annotated).  Needs Debian's python3-mypy (scripts/install-deps.sh)."""
    probe = subprocess.run(["/usr/bin/python3.11", "-m", "mypy", "--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        if os.environ.get("NSBOX_MUST_WORK") == "1":
            pytest.fail("NSBOX_MUST_WORK=1 and mypy is missing (apt-get install python3-mypy)")
        pytest.skip("mypy is not installed (python3-mypy)")
    client = tmp_path / "client.py"
    client.write_text(textwrap.dedent("""\
        import asyncio
        from typing import Any, List, Optional, Tuple

        import nsbox


        def sync_part() -> Tuple[Any, List[str], nsbox.ExecResult, nsbox.RunResult, str]:
            with nsbox.Sandbox(memory="256M", timeout=10, on_output=lambda s, t: None) as sb:
                @sb.tool
                def add(a: int, b: int) -> int:
                    return a + b

                @sb.tool(name="mul", description="multiply")
                def mul(a: int, b: int) -> int:
                    return a * b

                sb.register_function("neg", lambda x: -x)
                v = sb.execute("add(1, 2)")
                value, lines = sb.execute_with_output("print(1)")
                r: nsbox.ExecResult = sb.run("1")
                ok: bool = r.ok
                err: Optional[nsbox.SandboxError] = r.error
                sb.set_variable("x", [1, 2])
                x = sb.get_variable("x", None)
                sb.set_limits(memory="512M", timeout=5.0)
                t: Optional[float] = sb.timeout
                info = sb.info()
                pid: Optional[int] = sb.pid
                sb.reset()
                sb.cancel()
                sb.restart()
                text: str = sb.describe_tools() + sb.policy_text() + nsbox.library_version()
            res = nsbox.run(["true"], timeout=5)
            code: int = res.exit_code
            return v, lines, r, res, text


        async def async_part() -> int:
            async with nsbox.AsyncSandbox(timeout=10) as sb:
                @sb.tool
                async def fetch(url: str) -> str:
                    return url

                v = await sb.execute("1")
                value, lines = await sb.execute_with_output("1")
                r: nsbox.ExecResult = await sb.run("1")
                await sb.set_variable("x", 1)
                x = await sb.get_variable("x")
                await sb.reset()
                await sb.restart()
                info = await sb.info()
                sb.cancel()
                try:
                    await sb.execute("1 / 0")
                except nsbox.SandboxedException as e:
                    name: str = e.type_name
                    tb: str = e.traceback
                except nsbox.TimeLimitExceeded as e:
                    lost: bool = e.session_lost
            return 1


        asyncio.run(async_part())
        """))
    # --strict for the client only: the package's own internals are checked
    # by the first run, with mypy's defaults.
    cfg = tmp_path / "mypy.ini"
    cfg.write_text("[mypy]\nstrict = True\n[mypy-nsbox.*]\nignore_errors = True\n")
    env = dict(os.environ, MYPYPATH=PYDIR)
    for args in (["-p", "nsbox"], ["--config-file", str(cfg), str(client)]):
        out = subprocess.run(["/usr/bin/python3.11", "-m", "mypy", "--no-incremental",
                              "--cache-dir", str(tmp_path / "cache")] + args,
                             capture_output=True, text=True, timeout=600, env=env, cwd=PYDIR)
        assert out.returncode == 0, out.stdout + out.stderr


def test_sources_parse_as_python_3_9():
    """The package must run on any CPython >= 3.9: no newer syntax."""
    import ast
    pkg = os.path.join(PYDIR, "nsbox")
    for name in sorted(os.listdir(pkg)) + ["../bench_sdk.py"]:
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), encoding="utf-8") as f:
                ast.parse(f.read(), name, feature_version=(3, 9))


def test_library_version(libnsbox):
    assert re.match(r"^\d+\.\d+\.\d+", nsbox.library_version())


def test_forked_child_does_not_kill_the_parents_sandbox(sb):
    sb.execute("x = 'parent'")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            sb.close()                                       # the child forgets, never frees
            del sb
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert sb.get_variable("x") == "parent"


def test_sandbox_killed_from_outside(sb):
    import signal
    sb.execute("x = 1")
    pid = sb.pid
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not alive(pid))
    with pytest.raises(nsbox.SandboxCrashed) as ei:
        sb.execute("x")
    assert ei.value.session_lost
    assert sb.execute("'x' in globals()") is False           # a fresh sandbox
    assert sb.pid != pid


def test_large_values_and_output(sb):
    big = "\u00e9" * (2 << 20)
    sb.set_variable("big", big)
    assert sb.execute("len(big)") == len(big)
    assert sb.get_variable("big") == big
    assert sb.execute("'y' * 3_000_000") == "y" * 3_000_000
    value, lines = sb.execute_with_output("for i in range(20000): print(i)")
    assert lines[:3] == ["0", "1", "2"] and lines[-1] == "19999"
    sb.register_function("blob", lambda n: "z" * n)
    assert sb.execute("len(blob(1 << 20))") == 1 << 20


# ---- libnsbox 0.2: nsbox.run, spare sandboxes, warnings ------------------

# Cgroups=off makes the jail fall back to rlimits, silently (an explicit
# choice).  Memory=infinity: the memory fallback, RLIMIT_AS, breaks
# AddressSanitizer builds of the runner.
NO_CGROUP_POLICY = "[Limits]\nCgroups=off\nPids=50\nMemory=infinity\n"
# Cgroups=auto on a host that can't give nsbox a pids cgroup (no
# delegation, as uid 65534 in the integration run) falls back with a warning.
FALLBACK_POLICY = "[Limits]\nPids=50\nMemory=infinity\n"


def test_struct_layouts_match_the_header(tmp_path):
    """Every ctypes struct has the C header's size and field offsets (the
    ABI: a field out of place corrupts memory without an error)."""
    import ctypes
    import shutil
    from nsbox import _lib
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    header = os.path.join(os.path.dirname(PYDIR), "include", "nsbox.h")
    if cc is None or not os.path.exists(header):
        pytest.skip("needs a C compiler and include/nsbox.h of the source tree")
    structs = {"session_opts": _lib.SessionOpts, "exec_opts": _lib.ExecOpts, "session_info": _lib.SessionInfo,
               "run_opts": _lib.RunOpts, "run_status": _lib.RunStatus, "event": _lib.Event}
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "nsbox.h"', "int main(void) {"]
    want = []
    for cname, cls in structs.items():
        lines.append('printf("%%s %%zu\\n", "%s", sizeof(struct nsbox_%s));' % (cname, cname))
        want.append("%s %d" % (cname, ctypes.sizeof(cls)))
        for f, _ in cls._fields_:
            lines.append('printf("%%s %%zu\\n", "%s.%s", offsetof(struct nsbox_%s, %s));' % (cname, f, cname, f))
            want.append("%s.%s %d" % (cname, f, getattr(cls, f).offset))
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", os.path.dirname(header), "-o", str(exe), str(src)], check=True, timeout=120)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout.split("\n")
    assert got[:-1] == want
    assert _lib.INCOMPLETE == 7


def test_run_exit_status_and_pipes(libnsbox):
    r, w = os.pipe()
    try:
        res = nsbox.run(["sh", "-c", "echo out; echo err >&2; exit 3"], stdout=w, timeout=30)
        os.close(w)
        w = -1
        assert os.read(r, 4096) == b"out\n"                  # stderr stayed ours
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert isinstance(res, nsbox.RunResult) and isinstance(res, tuple)
    assert res.exit_code == 3 and res.exited and res.exit_status == 3 and res.signal is None
    assert not res.ok and not res.time_limit and not res.oom_killed and res.exec_errno == 0
    assert res.wall > 0 and res.peak_memory >= 0 and res.cpu_user >= 0 and res.cpu_system >= 0
    assert res.cgroup_mode in ("v2", "hybrid", "v1", "none")
    assert set(res.enforced) == {"memory", "pids", "cpu"}
    assert all(type(v) is bool for v in res.enforced.values())


def test_run_stdin_and_file_objects(libnsbox, tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"line one\nline two\n")
    out = tmp_path / "out.txt"
    with open(src, "rb") as fin, open(out, "w") as fout:
        fout.write("before\n")                               # buffered: flushed before the command writes
        res = nsbox.run(["sh", "-c", "tr a-z A-Z; echo oops >&2"], stdin=fin, stdout=fout, stderr=fout,
                        timeout=30)
    assert res.exit_code == 0 and res.ok
    assert out.read_text() == "before\nLINE ONE\nLINE TWO\noops\n"


# Inside: what the command sees of its stdio, then its ioctls on them: echo
# off (TCSETS) and exclusive mode (TIOCEXCL) on each, then a typed line.
TTY_CODE = r'''
import fcntl, os, sys, termios
print("tty", os.isatty(0), os.isatty(1), os.isatty(2), flush=True)
for fd in (0, 1, 2):
    try:
        a = termios.tcgetattr(fd)
        a[3] &= ~termios.ECHO
        termios.tcsetattr(fd, termios.TCSANOW, a)
        fcntl.ioctl(fd, termios.TIOCEXCL)
    except (OSError, termios.error):
        pass
print("got", sys.stdin.readline().strip(), flush=True)
'''


def test_run_never_hands_over_a_terminal(libnsbox):
    # A terminal as the command's stdio (this process's own, under a
    # shell): its output goes to a pty of its own, relayed, its input
    # through a pipe, and the caller's terminal keeps its modes and can be
    # opened again.  Handed over, it was left with echo off and exclusive.
    import pty
    import termios
    master, slave = pty.openpty()
    got: List[bytes] = []
    typed: List[int] = []

    def read_master():
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:
                return
            if not b:
                return
            got.append(b)
            if b"tty" in b and not typed:
                typed.append(os.write(master, b"hello\n"))     # typed once the command is up
    t = threading.Thread(target=read_master, daemon=True)
    t.start()
    try:
        modes = termios.tcgetattr(slave)
        res = nsbox.run(["python3", "-c", TTY_CODE], stdin=slave, stdout=slave,
                        stderr=slave, timeout=30)
        assert res.exit_code == 0, (res, got)
        assert termios.tcgetattr(slave) == modes
        os.close(os.open(os.ttyname(slave), os.O_RDWR | os.O_NOCTTY))   # not EBUSY
        # A command that does not read its input ends the run at once.
        assert nsbox.run(["true"], stdin=slave, stdout=slave, timeout=30).exit_code == 0
        # The caller's terminal non-blocking (asyncio's, node's): nothing
        # of a large output is lost when the terminal is full.
        os.set_blocking(slave, False)
        res = nsbox.run(["python3", "-c", "print('z' * 400000, end='|')"], stdout=slave, timeout=30)
        assert res.exit_code == 0, res
    finally:
        os.close(slave)
        t.join(10)
        os.close(master)
    out = b"".join(got).decode()
    assert "tty False True True" in out, out[:300]
    assert "got hello" in out, out[:300]
    assert out.count("z") == 400000 and out.endswith("|"), (out.count("z"), out[-20:])


def test_run_on_a_terminal_ends_when_the_command_does(libnsbox):
    # A fork of the caller made while the command runs holds copies of the
    # relay's pty and pipe ends: the relay waited for every copy to close,
    # and run() for the relay, as long as that child lived.
    import pty
    master, slave = pty.openpty()
    kids = []

    def fork_meanwhile():
        time.sleep(0.3)
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)

    def drain():
        try:
            while os.read(master, 4096):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    t = threading.Thread(target=fork_meanwhile)
    t.start()
    try:
        t0 = time.monotonic()
        res = nsbox.run(["sh", "-c", "sleep 1; echo done"], stdin=slave, stdout=slave, timeout=30)
        took = time.monotonic() - t0
        assert res.exit_code == 0, res
        assert took < 15, took
    finally:
        t.join()
        for pid in kids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(slave)
        os.close(master)


def test_run_missing_command(libnsbox):
    import errno
    res = nsbox.run(["no-such-command-anywhere"], timeout=30)
    assert res.exit_code == 127 and res.exec_errno == errno.ENOENT
    assert res.exited and res.exit_status == 127


def test_run_timeout(libnsbox):
    t0 = time.monotonic()
    res = nsbox.run(["sleep", "30"], timeout=0.5)
    took = time.monotonic() - t0
    assert res.time_limit and res.exit_code == 124
    assert not res.exited and res.exit_status is None
    assert took < 10, took
    assert res.wall >= 0.4


def test_run_killed_by_a_signal(libnsbox):
    res = nsbox.run(["sh", "-c", "kill -TERM $$"], timeout=30)
    assert res.exit_code == 143 and res.signal == 15
    assert not res.exited and not res.time_limit


# A fresh process runs nsbox.run(..., forward_signals=True) from dispositions
# it sets itself, whatever the test's own are (a shell starts a background
# job with SIGINT and SIGQUIT ignored), and sends itself a signal DELAY s
# after the run has started the helper (its first child, made inside the
# call, cold in a fresh process): 0 and 5 ms land while the sandbox is being
# built, 50 ms about when the command starts, 1 s while it runs.  Prints how
# the run ended, as JSON.
_FORWARD_CHILD = r"""
import json, os, signal, sys, threading, time
import nsbox

sigint, sig, delay, argv = sys.argv[1], getattr(signal, sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, signal.SIG_DFL)
mine = signal.default_int_handler if sigint == "handled" else signal.SIG_IGN
signal.signal(signal.SIGINT, mine)


def helper_started():
    with open("/proc/self/task/%d/children" % os.getpid()) as f:
        return f.read().strip()


def send():
    while not helper_started():
        time.sleep(0.0002)
    time.sleep(delay)
    os.kill(os.getpid(), sig)


t = threading.Thread(target=send, daemon=True)
t.start()
t0 = time.monotonic()
out = {}
try:
    r = nsbox.run(argv, timeout=60, forward_signals=True)
    out.update(exit_code=r.exit_code, signal=r.signal)
except KeyboardInterrupt:
    out["keyboard_interrupt"] = True
out["took"] = time.monotonic() - t0
t.join(10)
out["restored"] = signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
print(json.dumps(out))
"""


def _forward_child(sigint, sig, delay, argv):
    import json
    env = dict(os.environ, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, "-c", _FORWARD_CHILD, sigint, sig, str(delay)] + argv, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("delay", [0, 0.005, 0.05, 1.0])
def test_run_forward_signals(libnsbox, delay):
    import signal
    # A SIGINT that came before the command existed used to reach Python
    # instead: KeyboardInterrupt once the command had run to its end.
    got = _forward_child("handled", "SIGINT", delay, ["sleep", "30"])
    assert got.get("signal") == signal.SIGINT and got.get("exit_code") == 130, got
    assert "keyboard_interrupt" not in got and got["took"] < 20, got
    assert got["restored"], got                                     # handlers put back


def test_run_forward_signals_keeps_an_ignored_sigint_ignored(libnsbox):
    # As a program started in the background with SIGINT ignored (POSIX
    # shells do that) must: nobody meant that SIGINT for the command.
    got = _forward_child("ignored", "SIGINT", 0, ["sh", "-c", "sleep 1; exit 3"])
    assert got.get("exit_code") == 3 and "keyboard_interrupt" not in got, got
    assert got["restored"], got
    # The other signals are still forwarded.
    got = _forward_child("ignored", "SIGTERM", 0.005, ["sleep", "30"])
    assert got.get("exit_code") == 143 and got["took"] < 20, got


def test_run_arguments_are_checked(libnsbox):
    with pytest.raises(TypeError):
        nsbox.run("ls -l")
    with pytest.raises(ValueError):
        nsbox.run([])
    with pytest.raises(ValueError):
        nsbox.run(["echo", "a\0b"])
    with pytest.raises(ValueError):
        nsbox.run(["true"], timeout=0)
    with pytest.raises(TypeError):
        nsbox.run(["true"], stdout=object())
    with pytest.raises(TypeError):
        nsbox.run(["true"], on_warning="not callable")
    with pytest.raises(nsbox.PolicyError):
        nsbox.run(["true"], policy="no-such-policy-anywhere")
    with pytest.raises(nsbox.PolicyError):
        nsbox.run(["true"], memory="a lot")
    assert nsbox.run([b"true"], timeout=30).exit_code == 0


def test_run_limits_and_workspace(libnsbox, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    res = nsbox.run(["sh", "-c", "echo made > /workspace/f; exit 0"], workspace=work, memory="256M", pids=32,
                    timeout=30)
    assert res.exit_code == 0
    assert (work / "f").read_text() == "made\n"


def test_spare_sandboxes(libnsbox):
    with nsbox.Sandbox(spare=True, timeout=30) as a:
        assert a.execute("6 * 7") == 42
        pid_a = a.pid
    with nsbox.Sandbox(spare=True, timeout=30) as b:
        assert b.execute("'x' in globals()") is False
        b.execute("x = 1")
        assert b.execute("x + 1") == 2
        pid_b = b.pid
        assert pid_b != pid_a
    with nsbox.Sandbox(spare=True, timeout=30) as c:           # the spare built after b's start
        assert c.execute("'x' in globals()") is False
        assert c.pid not in (pid_a, pid_b)
    assert wait_for(lambda: not alive(pid_a) and not alive(pid_b))


_SCAN_OWN_MEMORY = """
import re
def scan(needle):
    hits = []
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    with open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split()
            a, b = (int(x, 16) for x in parts[0].split("-"))
            # Not the sanitizers' shadow (terabytes reserved, in a build with ASan).
            if "r" not in parts[1] or (len(parts) > 5 and parts[5].startswith("[v")) or b - a > (1 << 30):
                continue
            for o in range(a, b, 1 << 20):
                try:
                    mem.seek(max(a, o - 64))
                    data = mem.read(min(b, o + (1 << 20)) - max(a, o - 64))
                except OSError:
                    continue
                hits += [(parts[5] if len(parts) > 5 else "anon", data[max(0, m.start() - 24):m.end() + 24])
                         for m in re.finditer(re.escape(needle.encode()), data)]
    return hits
"""


def test_a_sessions_policy_never_reaches_a_later_sandboxs_memory(libnsbox, tmp_path):
    """Sandboxes are forked from the helper's heap, where each SPAWN's policy
    is parsed: no string of an earlier session's policy (a Set= secret, the
    workspace and bind paths, the hostname, an allow rule) may be in a later
    session's copy.  The needle is built inside, so the scanning code holds
    only its halves.  The workspace path was there before every string of a
    freed policy was wiped."""
    mark = "q7zmark"
    work = tmp_path / (mark + "workspace")
    work.mkdir()
    src = tmp_path / (mark + "bindsrc")
    src.mkdir()
    os.chmod(tmp_path, 0o755)
    pol = tmp_path / "a.policy"
    pol.write_text("[Environment]\nSet=TOKEN=%ssecret\n[Sandbox]\nHostname=%shost\n"
                   "[Filesystem]\nBind=%s:/data/%sdst\n" % (mark, mark, src, mark))
    with nsbox.Sandbox(policy=str(pol), spare=False, workspace=str(work), allow_net=[mark + "allow.example:443"],
                       timeout=60) as a:
        assert a.execute("import os; os.environ['TOKEN']") == mark + "secret"
    with nsbox.Sandbox(spare=False, timeout=60) as b:
        hits = b.execute(_SCAN_OWN_MEMORY + "\nscan(%r + %r)" % (mark[:3], mark[3:]))
    # Only the needle b built itself (its str objects): nothing of a's.
    assert all(not any(w in ctx for w in (b"secret", b"host", b"workspace", b"bindsrc", b"dst", b"allow"))
               for _, ctx in hits), hits


def test_a_write_back_never_holds_an_exec_or_another_session(libnsbox, tmp_path):
    """A bounded workspace is copied back when the session is closed, on
    the closing thread: not when a limit kills the sandbox during an exec
    (the exec's result waited for the copy, an AsyncSandbox's event loop
    with it), and not inside the helper, where another session's kill at
    its time limit waited behind it (red team 13: 42 s for a 2 s limit,
    and past 60 s the helper and its other sandboxes were killed).  The
    copy is held stopped here while the other session's limit fires."""
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    a = nsbox.Sandbox(workspace=str(work), spare=False, timeout=60)
    b = nsbox.Sandbox(spare=False, timeout=60)
    copy = []
    try:
        a.execute("for i in range(20000): open('/workspace/f%d' % i, 'w').close()")
        with pytest.raises(nsbox.TimeLimitExceeded):
            a.execute("sum(range(10 ** 13))", timeout=1)
        assert os.listdir(work) == [], "copied back at the kill, before the close"
        # The copy is made in this process now: it must hold no copy of
        # our descriptors (a FUSE file's close in it would wait on that
        # file's server): closing our only write end is the pipe's end.
        rd, wr = os.pipe()
        before = set(descendants())
        closer = threading.Thread(target=a.close)
        closer.start()
        assert wait_for(lambda: set(descendants()) - before, timeout=30), "no copying process seen"
        copy = sorted(set(descendants()) - before)
        signal_all(copy, signal.SIGSTOP)
        os.close(wr)
        import select
        assert select.select([rd], [], [], 5)[0] and os.read(rd, 1) == b"", "the copy holds our descriptors"
        os.close(rd)
        t0 = time.monotonic()
        waited = threading.Timer(30, signal_all, (copy, signal.SIGCONT))
        waited.start()
        try:
            with pytest.raises(nsbox.TimeLimitExceeded):
                b.execute("sum(range(10 ** 13))", timeout=1)
        finally:
            waited.cancel()
        took = time.monotonic() - t0
        assert took < 20, "b's time limit waited %.1f s for a's stopped copy" % took
        assert b.execute("6 * 7") == 42  # a fresh sandbox, from the same helper
    finally:
        signal_all(copy, signal.SIGCONT)
        a.close()
        b.close()
    closer.join(60)
    assert not closer.is_alive()
    assert sorted(os.listdir(work)) == sorted("f%d" % i for i in range(20000))


def test_a_failed_write_back_is_a_warning_at_close(libnsbox, tmp_path):
    """The write-back runs in close(); what it warned about was queued and
    never issued (only a start flushed the queue): changes lost in silence."""
    if os.geteuid() != 0 and os.stat(tmp_path).st_uid != os.geteuid():
        pytest.skip("needs a directory of our own")
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    s = nsbox.Sandbox(workspace=str(work), spare=False, timeout=60)
    try:
        s.execute("open('/workspace/made', 'w').write('x')")
        os.chmod(work, 0o555)   # the copy (no capability) can't write into it
        with pytest.warns(nsbox.SandboxWarning, match="copy /workspace/made back"):
            s.close()
    finally:
        os.chmod(work, 0o755)
        s.close()


def test_a_relative_workspace_is_this_processs(libnsbox, tmp_path, monkeypatch):
    """Sandbox(workspace="proj"), as `nsbox python --workspace proj` takes
    it: relative to the working directory (it was a PolicyError, "not an
    absolute path")."""
    (tmp_path / "proj").mkdir()
    os.chmod(tmp_path, 0o755)
    monkeypatch.chdir(tmp_path)
    with nsbox.Sandbox(workspace="proj", spare=False, timeout=60) as s:
        s.execute("open('/workspace/made', 'w').write('x')")
    assert (tmp_path / "proj" / "made").read_text() == "x"


def test_info_has_the_python_version(sb):
    v = sb.info()["python"]
    assert re.match(r"^3\.11\.\d+$", v), v
    assert sb.execute("import platform\nplatform.python_version()") == v


def _no_cgroup_policy(tmp_path):
    """A policy whose pids limit falls back to RLIMIT_NPROC with a warning,
    or a skip where this host enforces it by a cgroup (as root: the
    uid-65534 pass of scripts/run-integ.sh runs these)."""
    pol = tmp_path / "fallback.policy"
    pol.write_text(FALLBACK_POLICY)
    if nsbox.run(["true"], policy=pol, on_warning=lambda m: None, timeout=30).enforced["pids"]:
        pytest.skip("this host enforces Pids by a cgroup: no fallback warning to relay")
    return pol


def test_cgroups_off_is_silent(libnsbox, tmp_path):
    """Cgroups=off is the caller's choice: its fallbacks are not warned about."""
    pol = tmp_path / "nocg.policy"
    pol.write_text(NO_CGROUP_POLICY)
    got = []
    with nsbox.Sandbox(policy=pol, on_warning=got.append, timeout=30) as s:
        assert s.execute("1 + 1") == 2
    res = nsbox.run(["true"], policy=pol, on_warning=got.append, timeout=30)
    assert res.exit_code == 0 and not res.enforced["pids"]
    assert got == []


def test_on_warning_receives_the_jails_warnings(libnsbox, tmp_path):
    pol = _no_cgroup_policy(tmp_path)
    got = []
    with nsbox.Sandbox(policy=pol, on_warning=got.append, timeout=30) as s:
        assert s.execute("1 + 1") == 2
    assert got and all(isinstance(m, str) and m and not m.endswith("\n") for m in got), got
    assert any("pids" in m for m in got), got
    got_run = []
    res = nsbox.run(["true"], policy=pol, on_warning=got_run.append, timeout=30)
    assert res.exit_code == 0
    assert any("pids" in m for m in got_run), got_run
    assert not res.enforced["pids"]


def test_warnings_become_sandbox_warnings(libnsbox, tmp_path):
    import warnings
    pol = _no_cgroup_policy(tmp_path)
    assert issubclass(nsbox.SandboxWarning, UserWarning)
    with pytest.warns(nsbox.SandboxWarning, match="pids") as rec:
        s = nsbox.Sandbox(policy=pol, timeout=30)
    try:
        assert s.execute("2") == 2
    finally:
        s.close()
    # They point at the caller's line, not at the SDK's insides.
    assert all(w.filename == __file__ for w in rec.list), [w.filename for w in rec.list]
    with pytest.warns(nsbox.SandboxWarning, match="pids"):
        assert nsbox.run(["true"], policy=pol, timeout=30).exit_code == 0
    # Warnings made errors by a filter raise from the constructor, like
    # any warning, and the sandbox made is freed.
    with warnings.catch_warnings():
        warnings.simplefilter("error", nsbox.SandboxWarning)
        with pytest.raises(nsbox.SandboxWarning):
            nsbox.Sandbox(policy=pol, timeout=30)


def test_on_warning_that_raises(libnsbox, tmp_path):
    """on_warning's exception comes out of Sandbox() and run() after the C
    call, and the sandbox that was made is freed (in a fresh process, to
    count its sandboxes)."""
    pol = _no_cgroup_policy(tmp_path)
    code = r"""
import os, sys, time, nsbox
def live():
    out = set()
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            st = open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if st[0] != "Z":
            out.add((int(p), int(st[1])))
    mine, todo = set(), [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid, ppid in out:
            if ppid == parent and pid not in mine:
                mine.add(pid)
                todo.append(pid)
    return mine
calls = []
def bad(msg):
    calls.append(msg)
    raise RuntimeError("refused: " + msg)
nsbox.Sandbox().close()                      # the helper is up
time.sleep(0.3)
before = live()
try:
    nsbox.Sandbox(policy=sys.argv[1], on_warning=bad)
except RuntimeError as e:
    print("SANDBOX", e)
try:
    nsbox.run(["true"], policy=sys.argv[1], on_warning=bad)
except RuntimeError as e:
    print("RUN", e)
for _ in range(100):
    if live() <= before:
        break
    time.sleep(0.05)
print("LEAKED", len(live() - before), "CALLS", len(calls))
"""
    env = dict(os.environ, PYTHONPATH=PYDIR)
    # No spares: with them on (the default) the helper would rightly keep
    # one ready for the refused policy too, and it would count as "left".
    env["NSBOX_SPARE"] = "0"
    out = subprocess.run([sys.executable, "-c", code, str(pol)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(x.startswith("SANDBOX refused: ") for x in lines), out.stdout
    assert any(x.startswith("RUN refused: ") for x in lines), out.stdout
    m = re.search(r"^LEAKED (\d+) CALLS (\d+)$", out.stdout, re.M)
    assert m and m.group(1) == "0" and int(m.group(2)) >= 2, out.stdout + out.stderr


# ---- the runner's C fast path for EXEC keeps Python's semantics ----

def test_repeated_exec_keeps_compile_warnings(sb):
    # The runner caches compiled snippets; a compile that warns is not
    # cached, so the warning is shown every time, as Python would.
    code = "x = 5\ny = x is 5\n"
    for _ in range(3):
        r = sb.run(code)
        assert r.error is None
        assert "SyntaxWarning" in r.stderr


def test_future_import_does_not_leak_into_later_execs(sb):
    sb.execute("from __future__ import annotations\ndef f(a: undefined_name): return a")
    assert sb.execute("f.__annotations__['a']") == "undefined_name"
    # A later exec compiles without the future flag: annotations are evaluated.
    r = sb.run("def g(a: undefined_name): return a")
    assert r.error is not None and "NameError" in type(r.error).__name__ + str(r.error)


def test_coding_cookie_is_ignored_like_compile(sb):
    assert sb.execute("# -*- coding: latin-1 -*-\ns = 'é'\nlen(s)") == 1


def test_same_snippet_many_times_and_repl_value(sb):
    for i in range(50):
        assert sb.execute("n = globals().get('n', 0) + 1\nn") == i + 1
    value, lines = sb.execute_with_output("print('a')\nprint('b')\n40 + 2")
    assert value == 42 and lines == ["a", "b"]


def test_exception_in_cached_snippet_has_user_traceback(sb):
    for _ in range(2):
        r = sb.run("def h():\n    return 1 / 0\nh()")
        assert isinstance(r.error, nsbox.SandboxedException)
        assert r.error.type_name == "ZeroDivisionError"
        assert "h()" in r.error.traceback and "runner" not in r.error.traceback


def test_helper_stopped_by_sigterm_takes_its_sandboxes_down(libnsbox):
    # A service manager stopping the host sends SIGTERM to every process in
    # its cgroup, the helper included: the helper must take its sandboxes
    # (and their cgroups, named after it) down with it, not leave them.
    # Run in a child process: the helper of this pytest process is shared.
    code = r"""
import os, signal, sys, time, nsbox
def cgroups(tag):
    found = []
    for root in ("/sys/fs/cgroup",):
        for d, subdirs, _ in os.walk(root):
            found += [os.path.join(d, s) for s in subdirs if s.startswith(tag)]
    return found
s = nsbox.Sandbox(spare=True, timeout=30, on_warning=lambda m: None)
assert s.execute("6 * 7") == 42
print("CG", bool(s.info()["cgroup"]))
pid1 = s.pid
with open("/proc/%d/stat" % pid1) as f:
    helper = int(f.read().rsplit(")", 1)[1].split()[1])
time.sleep(0.5)                          # the spare is built meanwhile
tag = "nsbox-%d-" % helper
print("BEFORE", len(cgroups(tag)))
os.kill(helper, signal.SIGTERM)
for _ in range(200):
    try:
        os.kill(pid1, 0)
    except ProcessLookupError:
        break
    time.sleep(0.05)
else:
    print("PID1 ALIVE")
for _ in range(200):
    if not os.path.exists("/proc/%d" % helper) or open("/proc/%d/stat" % helper).read().rsplit(")", 1)[1].split()[0] == "Z":
        break
    time.sleep(0.05)
print("AFTER", len(cgroups(tag)))
try:
    s.execute("1")
    print("EXEC OK")
except Exception as e:
    print("EXEC FAILED", type(e).__name__, e)
s.close()
with nsbox.Sandbox(timeout=30, on_warning=lambda m: None) as t:
    print("NEW", t.execute("1 + 1"))
"""
    env = dict(os.environ, PYTHONPATH=PYDIR)
    env.pop("NSBOX_SPARE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    before = int([x for x in lines if x.startswith("BEFORE")][0].split()[1])
    after = int([x for x in lines if x.startswith("AFTER")][0].split()[1])
    assert "PID1 ALIVE" not in lines, out.stdout
    assert after == 0, out.stdout
    assert "EXEC FAILED" in " ".join(lines), out.stdout
    assert "NEW 2" in lines, out.stdout
    if "CG True" in lines:
        assert before > 0, out.stdout        # the test sees what it checks


def test_no_default_spare_with_a_workspace(libnsbox, tmp_path, monkeypatch):
    # A spare's mounts are made in advance: a workspace directory replaced
    # between two sandboxes must be the new one in the second, so a policy
    # naming host paths gets no spare unless asked for.
    import shutil
    monkeypatch.delenv("NSBOX_SPARE", raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_text("1")
    with nsbox.Sandbox(workspace=str(ws), timeout=30) as s:
        assert s.execute("open('/workspace/a').read()") == "1"
    time.sleep(0.5)                                          # time enough to build a spare
    shutil.rmtree(ws)
    ws.mkdir()
    (ws / "b").write_text("2")
    with nsbox.Sandbox(workspace=str(ws), timeout=30) as s:
        assert s.execute("sorted(__import__('os').listdir('/workspace'))") == ["b"]


def test_workspace_is_checked_before_starting(libnsbox, tmp_path):
    """A workspace the sandbox could not mount is a PolicyError naming it,
    raised before any sandbox starts (not a failure at the mount step)."""
    f = tmp_path / "README.md"
    f.write_text("hi\n")
    for ws, why in (("/nonexistent", "No such file or directory"), (str(f), "not a directory")):
        with pytest.raises(nsbox.PolicyError, match="workspace=%r: %s" % (ws, why)):
            nsbox.Sandbox(workspace=ws, timeout=30)
        with pytest.raises(nsbox.PolicyError, match="not a directory|No such file"):
            nsbox.run(["true"], workspace=ws, timeout=30)
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0)
        try:
            with pytest.raises(nsbox.PolicyError, match="not accessible to uid %d" % os.getuid()):
                nsbox.Sandbox(workspace=locked, timeout=30)
        finally:
            locked.chmod(0o700)


# ---- values, both ways, through a sandbox ---------------------------------

def test_builtin_values_cross_both_ways(sb):
    for v in BUILTIN_VALUES:
        sb.set_variable("v", v)
        # Inside, the value is the real thing: same type, same repr (str and
        # bytes hashes differ between processes: sets of them are left out).
        assert sb.execute("type(v).__name__") == type(v).__name__, v
        assert sb.execute("repr(v)") == repr(v), v
        back = sb.get_variable("v")
        assert back == v and type(back) is type(v), v
        got = sb.execute("v")
        assert got == v and type(got) is type(v), v
    v = sb.execute("{1: 2}")
    assert v == {1: 2} and v[1] == 2
    assert math.isnan(sb.execute("float('nan')"))
    c = sb.execute("complex(float('nan'), float('inf'))")
    assert math.isnan(c.real) and c.imag == float("inf")


def test_values_that_cannot_cross_fall_back_to_repr_value(sb):
    # A cycle: the container crosses, the back-reference is a ReprValue.
    a = sb.execute("a = [1]; a.append(a); a")
    assert a[0] == 1 and isinstance(a[1], nsbox.ReprValue) and a[1].why == "cycle" and a[1].repr == "[1, [...]]"
    d = sb.execute("d = {}; d['self'] = d; d")
    assert isinstance(d["self"], nsbox.ReprValue) and d["self"].why == "cycle"
    # Objects, as themselves or as keys and members.
    r = sb.execute("import os\n{1: os, os: 2}")
    (k1, v1), (k2, v2) = r.items()
    assert k1 == 1 and isinstance(v1, nsbox.ReprValue) and v1.type_name == "builtins.module"
    assert isinstance(k2, nsbox.ReprValue) and v2 == 2
    # Too deep: past 100 levels the rest is one ReprValue.
    v = sb.execute("v = 0\nfor _ in range(150): v = [v]\nv")
    depth = 0
    while isinstance(v, list):
        v, = v
        depth += 1
    assert isinstance(v, nsbox.ReprValue) and v.why == "nested too deeply" and depth == 101
    # Too large for a frame: the value is a ReprValue saying so.
    r = sb.execute("b'x' * (13 << 20)")
    assert isinstance(r, nsbox.ReprValue) and r.why == "too large"
    # Subclasses are not the built-in type: they fall back, with their type.
    r = sb.execute("import collections\ncollections.Counter('aab')")
    assert isinstance(r, nsbox.ReprValue) and r.type_name == "collections.Counter"


def test_host_refuses_what_cannot_cross(sb):
    cyc = []
    cyc.append(cyc)
    with pytest.raises(ValueError):
        sb.set_variable("c", cyc)
    with pytest.raises(TypeError):
        sb.set_variable("o", {1: object()})
    assert sb.execute("1 + 1") == 2


def test_tool_arguments_and_results_keep_their_types(sb):
    seen = []

    @sb.tool
    def echo(*args, **kwargs):
        seen.append((args, kwargs))
        return args, kwargs

    for v in BUILTIN_VALUES:
        sb.set_variable("v", v)
        sb.execute("r = echo(v, k=v)\nassert r == ((v,), {'k': v}), r\nassert type(r[0][0]) is type(v)")
        a, kw = seen[-1]
        assert a == (v,) and type(a[0]) is type(v) and kw == {"k": v} and type(kw["k"]) is type(v)

    @sb.tool
    def typed(b: bytes, s: set, t: tuple, c: complex, fs: frozenset, ba: bytearray) -> tuple:
        return b, s, t, c, fs, ba

    out = sb.execute("r = typed(b'\\x01', {1}, (2, 3), 1j, frozenset('a'), bytearray(b'z'))\n"
                     "assert [type(x).__name__ for x in r] == ['bytes', 'set', 'tuple', 'complex', "
                     "'frozenset', 'bytearray'], r\nr")
    assert out == (b"\x01", {1}, (2, 3), 1j, frozenset("a"), bytearray(b"z"))


# A sandbox writing raw CALL frames with malformed tags: the host refuses
# them with an error (a ToolError inside, nothing called), and lives on.
@pytest.mark.parametrize("arg", [
    '{"$set": [[1]]}', '{"$dict": [[[1], 2]]}', '{"$dict": [[1]]}', '{"$dict": [1]}', '{"$bytes": "@@"}',
    '{"$bytes": 5}', '{"$bytearray": "a"}', '{"$complex": [1]}', '{"$complex": ["1", 2]}',
    '{"$complex": [{"$tuple": []}, 1]}', '{"$frozenset": {}}', '{"$int": "1e5"}', '{"$float": "1j"}',
    '{"$tuple": 3}', '{"$set": [{"$set": []}]}', '{"$complex": [{"$int": "1%s"}, 0]}' % ("0" * 400),
    # Deeper than the runner ever nests (100 levels), under the frame
    # parser's own cap (256, a protocol error).
    '[' * 200 + ']' * 200,
])
def test_malformed_tags_from_inside_are_errors(sb, arg):
    calls = []

    @sb.tool
    def take(*args, **kwargs):
        calls.append(args)
        return 1

    code = ("import _nsbox, json\n"
            "t, _, a = _nsbox.call(('{\"name\":\"take\",\"args\":[%s],\"kwargs\":{}}' % ARG).encode())\n"
            "(t, json.loads(a))").replace("ARG", repr(arg))
    t, answer = sb.execute(code)
    assert t == 7 and "cannot decode" in answer["message"], answer       # RAISE
    assert calls == []
    assert sb.execute("take(1)") == 1 and calls == [(1,)]


# A forged CALL's arguments reach the tool as the sandbox spelt them
# (libnsbox passes the text on, judged but not rebuilt): spaces, escapes,
# kwargs before args and other members are all the same call.
FORGED_CALLS = [
    (' { "kwargs" : {"b": [1, 2]} , "x": [{}], "name":"echo", "args" : [ 1 , {"a": null, "\\u00e9": 1.5e300} ] } ',
     [1, {"a": None, "\u00e9": 1.5e300}], {"b": [1, 2]}),
    ('{"\\u006eame":"\\u0065cho","args":["\\ud83d\\ude00\\n", -0, 9223372036854775807],"kwargs":{"\\u006b":true}}',
     ["\U0001F600\n", 0, 9223372036854775807], {"k": True}),
]
# Refused as the parser refuses them (the exec ends with a protocol error),
# and one the parser took: a NUL after a number (jansson drops it) would cut
# the text handed to the host.
BAD_CALLS = ['{"name":"echo","args":[{"a":1,"\\u0061":2}],"kwargs":{}}',
             '{"name":"echo","args":[],"kwargs":{"\\u0000":1}}',
             '{"name":"echo","args":[9223372036854775808],"kwargs":{}}',
             '{"name":"echo","args":[1.7976931348623159e308],"kwargs":{}}',
             '{"name":"echo","args":["\\ud800"],"kwargs":{}}',
             '{"name":"echo","args":[1\x00],"kwargs":{}}']


def test_forged_calls_reach_the_tool_as_spelt(sb):
    got = []

    @sb.tool
    def echo(*args, **kwargs):
        got.append((list(args), kwargs))
        return 1

    for text, args, kwargs in FORGED_CALLS:
        t, answer = sb.execute("import _nsbox, json\nt, _, a = _nsbox.call(%r.encode())\n(t, json.loads(a))" % text)
        assert (t, answer) == (6, {"value": 1}) and got[-1] == (args, kwargs), (text, t, answer, got)
    for text in BAD_CALLS:
        n = len(got)
        with pytest.raises(nsbox.SandboxError, match="protocol|CALL"):
            sb.execute("import _nsbox\n_nsbox.call(%r.encode())" % text)
        assert len(got) == n, text
        assert sb.execute("echo(2)") == 1 and got[-1] == ([2], {})
    # A name past 64 bytes, cut inside a character for the answer's message:
    # a ToolError inside, not an answer that isn't UTF-8 (a protocol error).
    t, answer = sb.execute("import _nsbox, json\nt, _, a = _nsbox.call(%r.encode())\n(t, json.loads(a))"
                           % ('{"name":"%s","args":[],"kwargs":{}}' % ("a" * 63 + "\u00e9")))
    assert t == 7 and answer["message"].startswith("unknown tool 'aaa"), answer


BIG_CALL = """
import resource, nsbox
with nsbox.Sandbox(memory="1G", timeout=120) as sb:
    @sb.tool
    def lookup(x: list) -> int:
        return len(x)
    n = sb.execute(
        "import _nsbox, json\\n"
        "p = json.dumps({'name': 'lookup', 'args': [[10] * 3_900_000], 'kwargs': {}}, separators=(',', ':')).encode()\\n"
        "[json.loads(_nsbox.call(p)[2])['value'] for _ in range(2)]")
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def test_a_large_tool_call_is_not_rebuilt_on_the_host(libnsbox):
    """A 12 MB CALL of 3.9M small values: libnsbox used to build a jansson
    tree of it (some 16 times its size) and dump it again before the SDK
    decoded it: the host's peak memory was ~260-290 MiB, ~100 after."""
    out = subprocess.run([sys.executable, "-c", BIG_CALL], env=dict(os.environ, PYTHONPATH=PYDIR), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    n, rss = out.stdout.rsplit(" ", 1)
    assert n == "[3900000, 3900000]", out.stdout
    # Under ASan (its runtime preloaded: the sanitized passes) a process's
    # peak is mostly the sanitizer's own (684 MiB here).
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        assert int(rss) < 200, out.stdout


@pytest.mark.parametrize("text", [b'{"$set":[[1]]}', b'{"$dict":[[1]]}', b'{"$bytes":"@"}', b'{"$complex":[1]}',
                                  b'{"$complex":[true,1]}', b'{"$bytearray":1}', b'{"$dict":[[{"$set":[]},1]]}',
                                  b'[' * 120 + b']' * 120, b"[" * 5000 + b"]" * 5000, b'{"$int":"12z"}',
                                  b'{"$float":"nope"}', b'{"$tuple":[{"$int":"0xg"}]}',
                                  # a part past a float's range: OverflowError
                                  b'{"$complex":[{"$int":"1' + b'0' * 400 + b'"},0]}'])
def test_malformed_tags_are_undecodable(text):
    with pytest.raises(nsbox.SandboxError) as ei:  # never a bare RecursionError or ValueError
        _values.loads(text)
    assert isinstance(ei.value, nsbox.UndecodableValue)


P61 = (1 << 61) - 1   # hash(n) is n mod P61 for an int: no seed


@pytest.mark.parametrize("tag", ["$set", "$frozenset", "$dict"])
def test_hash_floods_are_undecodable(tag):
    """A set (or $dict keys) from inside whose members all hash alike made
    the host's decode quadratic: 40,000 multiples of 2**61 - 1 (1.5 MB)
    took 6.4 s to build; a frame's cap of 262,144 objects, about 4.5 minutes of the
    host's thread under the GIL.  More than 32 alike are refused, at once;
    32 still cross, as do large sets of distinct hashes that share bits."""
    def text(members):
        items = [{"$int": str(m)} for m in members]
        return json.dumps({tag: [[i, 0] for i in items] if tag == "$dict" else items}).encode()
    t = time.monotonic()
    with pytest.raises(nsbox.UndecodableValue, match="hash flood"):
        _values.loads(text(P61 * (i + 1) for i in range(40000)))
    assert time.monotonic() - t < 1
    with pytest.raises(nsbox.UndecodableValue):
        _values.loads(text(P61 * (i + 1) for i in range(33)))
    assert len(_values.loads(text(P61 * (i + 1) for i in range(32)))) == 32
    t = time.monotonic()
    assert len(_values.loads(text((i + 1) << 54 for i in range(100000)))) == 100000
    assert time.monotonic() - t < 5


# ---- tool argument checking and names --------------------------------------

def test_tool_hints_are_enforced(sb):
    got = []

    @sb.tool
    def pick(mode: Literal["a", "b"], n: Optional[int] = None, xs: Optional[List[int]] = None,
             d: Optional[Dict[str, int]] = None, t: Optional[Tuple[int, str]] = None,
             u: Union[int, str, None] = None, lit: Literal[1, 2] = 1, f: float = 0.0) -> str:
        got.append(mode)
        return mode

    assert sb.execute("pick('a')") == "a"
    assert sb.execute("pick('b', n=None, xs=[1], d={'k': 1}, t=(1, 'x'), u='s', lit=2, f=1)") == "b"
    for call, what in [("pick('c')", "one of 'a', 'b'"), ("pick(1)", "'mode'"),
                       ("pick('a', n='1')", "'n'"), ("pick('a', xs=[1, 'x'])", "'xs'[1]"),
                       ("pick('a', d={'k': 'v'})", "'d'['k']"), ("pick('a', t=(1, 2))", "'t'[1]"),
                       ("pick('a', t=(1, 'x', 3))", "'t'"), ("pick('a', u=1.5)", "'u'"),
                       ("pick('a', lit=True)", "'lit'"), ("pick('a', f='x')", "'f'")]:
        with pytest.raises(nsbox.SandboxedException) as ei:
            sb.execute(call)
        assert ei.value.type_name == "TypeError" and what in ei.value.message, (call, ei.value.message)
    # The host checks again: a sandbox that skips the runner's check gets a
    # ToolError, and the function is not called.
    n = len(got)
    t, answer = sb.execute("import _nsbox, json\nt, _, a = _nsbox.call(json.dumps({'name': 'pick', 'args': [], "
                           "'kwargs': {'mode': 'zz'}}).encode())\n(t, json.loads(a))")
    assert t == 7 and "one of 'a', 'b'" in answer["message"] and len(got) == n
    t, answer = sb.execute("import _nsbox, json\nt, _, a = _nsbox.call(json.dumps({'name': 'pick', 'args': [], "
                           "'kwargs': {'mode': 'a', 'xs': [1, [2]]}}).encode())\n(t, json.loads(a))")
    assert t == 7 and "xs" in answer["message"] and len(got) == n
    # ... however the arguments are passed: by position, too many, or none.
    for args, kwargs, what in [(["zz"], {}, "one of 'a', 'b'"), (["a", "1"], {}, "'n'"),
                               (["a"], {"mode": "a"}, "multiple values"), ([], {}, "missing"),
                               (["a"] * 9, {}, "too many")]:
        t, answer = sb.execute("import _nsbox, json\nt, _, a = _nsbox.call(json.dumps({'name': 'pick', 'args': %r, "
                               "'kwargs': %r}).encode())\n(t, json.loads(a))" % (args, kwargs))
        assert t == 7 and what in answer["message"] and len(got) == n, (args, kwargs, answer)

    # A *args or **kwargs parameter's hint holds for each element, from the
    # runner and from a forged call.
    @sb.tool
    def total(*xs: int, **named: int) -> int:
        got.append(xs)
        return sum(xs) + sum(named.values())

    assert sb.execute("total(1, 2, c=3)") == 6
    n = len(got)
    for args, kwargs, what in [([1, "2"], {}, "argument 1 of *xs"), ([1], {"c": "3"}, "argument 'c'")]:
        t, answer = sb.execute("import _nsbox, json\nt, _, a = _nsbox.call(json.dumps({'name': 'total', 'args': %r, "
                               "'kwargs': %r}).encode())\n(t, json.loads(a))" % (args, kwargs))
        assert t == 7 and what in answer["message"] and len(got) == n, (args, kwargs, answer)


def test_check_value_directly():
    from typing import Any, FrozenSet, Sequence, Set
    from nsbox._tools import _Mismatch, check_value
    good = [(1, int), (1, float), (True, bool), (None, Optional[int]), ("a", Literal["a"]),
            ([1, 2], List[int]), ((1, "x"), Tuple[int, str]), ((1, 2, 3), Tuple[int, ...]),
            ({"a": 1}, Dict[str, int]), ({1, 2}, Set[int]), (frozenset({1}), FrozenSet[int]),
            ([1], Sequence[int]), ((1,), Sequence[int]), (object(), Any), (b"x", bytes), (1j, complex),
            ({1: [b""]}, Dict[int, List[bytes]]), (1, int | None), ([1], list[int])]
    for v, h in good:
        check_value(v, h, "x")
    bad = [(True, int), ("1", int), (1, Literal["1"]), (True, Literal[1]), ([1], Tuple[int]),
           ((1,), List[int]), ({"a": "b"}, Dict[str, int]), ({1: 1}, Dict[str, int]), ({"x"}, Set[int]),
           ((1, 2), Tuple[int]), (1.5, int), (None, int), ("x", bytes), ("x", int | None)]
    for v, h in bad:
        with pytest.raises(_Mismatch):
            check_value(v, h, "x")


@pytest.mark.parametrize("name", ["len", "print", "open", "input", "exec", "Exception", "_", "match", "case",
                                  "__name__", "__import__"])
def test_tool_names_that_shadow_builtins_are_refused(sb, name):
    with pytest.raises(ValueError) as ei:
        sb.register_function(name, lambda: 0)
    assert repr(name) in str(ei.value)
    assert sb.execute("len('abc')") == 3


@pytest.mark.parametrize("name", ["class", "def", "1x", "a-b", ""])
def test_tool_names_that_are_not_identifiers_are_refused(sb, name):
    with pytest.raises(ValueError):
        sb.register_function(name, lambda: 0)


# ---- output truncation ------------------------------------------------------

def test_output_truncation_is_flagged(libnsbox):
    with nsbox.Sandbox(timeout=30, output_limit="1K") as sb:
        r = sb.run("import sys\nprint('x' * 5000)\nprint('e', file=sys.stderr)")
        assert r.stdout_truncated and not r.stderr_truncated and r.truncated
        assert r.stdout_bytes == 5001 and r.stderr_bytes == 2
        assert len(r.stdout) < 1100 and "bytes truncated" in r.stdout
        r = sb.run("print('short')")
        assert not r.truncated and r.stdout == "short\n" and r.stdout_bytes == 6
    with nsbox.Sandbox(timeout=30, output_limit=64) as sb:
        r = sb.run("import sys\nsys.stderr.write('y' * 100)")
        assert r.stderr_truncated and not r.stdout_truncated and r.stderr_bytes == 100
    with nsbox.Sandbox(timeout=30) as sb:
        r = sb.run("print('z' * (1 << 20))")
        assert r.stdout_truncated and r.stdout_bytes == (1 << 20) + 1


@pytest.mark.parametrize("bad", [0, 15, (2 << 20) + 1, "3M", "lots", -1, 1.5, True])
def test_output_limit_is_checked(libnsbox, bad):
    with pytest.raises(nsbox.PolicyError) as ei:
        nsbox.Sandbox(output_limit=bad)
    assert "output_limit" in str(ei.value)


def test_policy_error_names_its_subject_once(libnsbox):
    with pytest.raises(nsbox.PolicyError) as ei:
        nsbox.Sandbox(policy="nosuch-policy")
    msg = str(ei.value)
    assert msg.count("nosuch-policy") == 1 and not msg.startswith("policy nosuch-policy: policy"), msg
    with pytest.raises(nsbox.PolicyError) as ei:
        nsbox.Sandbox(memory="12Q")
    assert str(ei.value).count("12Q") == 1 and not str(ei.value).startswith("policy memory:"), str(ei.value)


# ---- the time limit includes tool time --------------------------------------

def test_slow_sync_tool_fails_the_exec_when_it_returns(libnsbox):
    with nsbox.Sandbox(timeout=0.5) as sb:
        @sb.tool
        def slow() -> int:
            time.sleep(1.5)
            return 5

        t0 = time.monotonic()
        with pytest.raises(nsbox.TimeLimitExceeded) as ei:
            sb.execute("got = slow()\ngot")
        assert time.monotonic() - t0 >= 1.5          # a sync tool can't be interrupted
        assert not ei.value.session_lost
        assert sb.execute("'got' in globals()") is False
        r = sb.run("try:\n    slow()\nexcept BaseException:\n    pass\n'finished'")
        assert isinstance(r.error, nsbox.TimeLimitExceeded)
        assert sb.execute("1 + 1") == 2


def test_slow_async_tool_is_cancelled_at_the_deadline(libnsbox):
    import asyncio
    state = {}
    with nsbox.Sandbox(timeout=0.5) as sb:
        @sb.tool
        async def aslow() -> int:
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                state["cancelled"] = time.monotonic()
                raise
            return 5

        t0 = time.monotonic()
        with pytest.raises(nsbox.TimeLimitExceeded):
            sb.execute("aslow()")
        took = time.monotonic() - t0
        assert "cancelled" in state and took < 4, took
        assert sb.execute("1 + 1") == 2


def test_async_sandbox_tools_count_toward_the_limit(libnsbox):
    import asyncio
    state = {}

    async def main():
        async with nsbox.AsyncSandbox(timeout=0.5) as sb:
            @sb.tool
            async def aslow() -> int:
                try:
                    await asyncio.sleep(5)
                except asyncio.CancelledError:
                    state["cancelled"] = True
                    raise
                return 5

            @sb.tool
            def slow() -> int:
                time.sleep(1.2)
                return 5

            t0 = time.monotonic()
            with pytest.raises(nsbox.TimeLimitExceeded):
                await sb.execute("aslow()")
            state["took"] = time.monotonic() - t0
            with pytest.raises(nsbox.TimeLimitExceeded):
                await sb.execute("got = slow()")
            assert await sb.execute("'got' in globals()") is False
            assert await sb.execute("2 + 2") == 4

    asyncio.run(main())
    assert state.get("cancelled") and state["took"] < 4, state


def test_hints_of_other_classes_accept_what_comes(sb):
    import dataclasses
    from typing import TypedDict

    @dataclasses.dataclass
    class Point:
        x: int

    class Movie(TypedDict):
        title: str

    @sb.tool
    def take(p: Point, m: Movie, ps: List[Point]) -> str:
        return repr((p, m, ps))

    assert sb.execute("take({'x': 1}, {'title': 't'}, [{'x': 2}])") == "({'x': 1}, {'title': 't'}, [{'x': 2}])"


def test_calls_after_close_are_refused(libnsbox):
    sb = nsbox.Sandbox()
    assert any(p["name"] == "libc6" for p in sb.list_packages())
    sb.close()
    for call in (sb.list_packages, lambda: sb.execute("1"), lambda: sb.list_files("/")):
        with pytest.raises(nsbox.SandboxError) as ei:
            call()
        assert "closed" in str(ei.value), ei.value


def test_nul_characters_cross(sb):
    # U+0000 is a character like another in what the code prints, returns,
    # is given and calls tools with; it used to cost the session.
    r = sb.run("import sys; sys.stdout.write('a\\0b'); sys.stderr.write('e\\0'); 5")
    assert (r.stdout, r.stderr, r.value, r.error) == ("a\0b", "e\0", 5, None)
    assert sb.execute("'x\\0y'") == "x\0y"
    assert sb.execute("{'k\\0': ['\\0'], 'plain': 1}") == {"k\0": ["\0"], "plain": 1}
    sb.set_variable("v", {"a\0": b"b\0", "c": "\0"})
    assert sb.execute("v") == {"a\0": b"b\0", "c": "\0"}

    @sb.tool
    def nul(s: str) -> str:
        return s + "\0"
    assert sb.execute("nul('q\\0')") == "q\0\0"
    with pytest.raises(nsbox.SandboxedException):
        sb.execute("raise ValueError('m\\0n')")
    assert sb.execute("1 + 1") == 2


# ---- red team 4: the host misusing the SDK ----

def _wait_child(pid, limit=20.0):
    """The child's wait status, killing it when it outlives limit (a hang)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            return st
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_fork_while_another_thread_is_in_a_call(sb):
    """A child forked while another thread runs execute() inherits the
    Sandbox's lock held by a thread it does not have: its first call on it,
    and its close at exit, waited forever.  Now the child is refused at once
    (the sandbox is the parent's) and closes, and the parent is untouched."""
    sb.set_variable("x", 42)
    box = {}
    t = threading.Thread(target=lambda: box.update(v=sb.execute("import time; time.sleep(1.5); x")))
    t.start()
    time.sleep(0.5)
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            try:
                sb.execute("1")
            except nsbox.SandboxError as e:
                if "parent process" in str(e):
                    rc = 0
            sb.close()
            nsbox.sandbox._close_all()          # what the child's exit runs
        finally:
            os._exit(rc)
    st = _wait_child(pid)
    t.join()
    assert st is not None, "the forked child hung on the Sandbox's lock"
    assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
    assert box["v"] == 42 and sb.execute("x") == 42


def test_an_empty_connect_is_refused(libnsbox, monkeypatch):
    """connect="" made an abstract socket address of NULs ("connect to
    nsboxd at : Connection refused"); refused, saying why.  An empty
    NSBOX_CONNECT means unset, as before."""
    with pytest.raises(nsbox.SandboxError, match="connect is empty"):
        nsbox.Sandbox(connect="")
    monkeypatch.setenv("NSBOX_CONNECT", "")
    with nsbox.Sandbox() as s:
        assert s.execute("1 + 1") == 2


def test_bad_environment_values_are_refused(libnsbox, monkeypatch):
    """NSBOX_FILE_MAX=128M was the 64 MiB default (strtoull stopped at the
    M) and NSBOX_SPARE=no left the spare on: a value libnsbox can't use is
    an error naming it now, and the spellings a user means work."""
    for var, val in (("NSBOX_FILE_MAX", "128X"), ("NSBOX_FILE_MAX", "0"), ("NSBOX_FILE_MAX", "abc"),
                     ("NSBOX_SPARE", "maybe")):
        monkeypatch.setenv(var, val)
        with pytest.raises(nsbox.SandboxError, match=f"{var}={val}: "):
            nsbox.Sandbox()
        monkeypatch.delenv(var)
    monkeypatch.setenv("NSBOX_FILE_MAX", "1K")
    monkeypatch.setenv("NSBOX_SPARE", "No")
    with nsbox.Sandbox() as s:
        s.write_file("/tmp/a", b"x" * 1024)
        with pytest.raises(nsbox.SandboxError, match="1024 bytes"):
            s.write_file("/tmp/b", b"x" * 1025)
    monkeypatch.setenv("NSBOX_ROOTFS_CACHE", "relative/cache")
    with pytest.raises(nsbox.SandboxError, match="NSBOX_ROOTFS_CACHE=relative/cache: not an absolute path"):
        nsbox.Sandbox(rootfs="datascience")


def test_limits_do_not_wrap_through_ctypes(libnsbox):
    """ctypes keeps an int's low bits: pids=2**64 was 0 (no limit),
    memory=2**70 no limit, max_tool_calls=2**32+1 was 1, -1 was 2**32-1."""
    for kw in (dict(pids=2 ** 64), dict(pids=2 ** 64 + 5), dict(memory=2 ** 70), dict(memory=2 ** 64 + (256 << 20))):
        with pytest.raises(nsbox.PolicyError, match="too large"):
            nsbox.Sandbox(**kw)
    with pytest.raises(nsbox.PolicyError, match="max_tool_calls is too large"):
        nsbox.Sandbox(max_tool_calls=2 ** 32 + 1)
    with pytest.raises(nsbox.PolicyError, match="max_tool_calls must not be negative"):
        nsbox.Sandbox(max_tool_calls=-1)
    with pytest.raises(nsbox.PolicyError, match="memory must be"):
        nsbox.Sandbox(memory=float("inf"))
    with pytest.raises(nsbox.PolicyError, match="cpus must be"):
        nsbox.Sandbox(cpus=[1])
    with nsbox.Sandbox(pids="12", cpus="0.5") as s:      # numeric strings still do
        i = s.info()
        assert i["pids_limit"] == 12 and i["cpus_limit"] == 0.5
    for kw in (dict(pids=2 ** 64), dict(memory=2 ** 70)):
        with pytest.raises(nsbox.PolicyError, match="too large"):
            nsbox.run(["true"], **kw)
    # A fraction was cut, not refused: memory=0.5 and pids=0.5 became 0
    # (no limit at all), pids=2.9 became 2.  Whole floats still do.
    for kw in (dict(memory=0.5), dict(pids=0.5), dict(pids=2.9), dict(memory=1e8 + 0.5)):
        with pytest.raises(nsbox.PolicyError, match="must be a whole number"):
            nsbox.Sandbox(**kw)
    with nsbox.Sandbox(pids=12.0, memory=256e6) as s:
        i = s.info()
        assert i["pids_limit"] == 12 and i["memory_limit"] == 256000000


def test_timeout_out_of_range_is_refused(sb):
    """An infinite or huge timeout killed the code at once ('time limit
    exceeded (inf s)') and lost the session."""
    sb.set_variable("keep", 1)
    for bad in (float("inf"), 1e300, 2e9):
        with pytest.raises(ValueError, match="at most"):
            nsbox.Sandbox(timeout=bad)
        with pytest.raises(ValueError, match="at most"):
            sb.execute("1", timeout=bad)
        with pytest.raises(ValueError, match="at most"):
            sb.set_limits(timeout=bad)
    assert sb.execute("keep") == 1
    assert sb.execute("2", timeout=1e9) == 2


def test_wrong_types_are_type_errors(sb):
    """Code that is not str/bytes ran as its str(): execute(None) ran
    'None'.  Names of variables are reported as such."""
    for bad in (None, 5, ["1"], object()):
        with pytest.raises(TypeError, match="code must be str or bytes"):
            sb.execute(bad)
        with pytest.raises(TypeError, match="code must be str or bytes"):
            sb.run(bad)
    assert sb.execute(bytearray(b"6*7")) == 42
    with pytest.raises(TypeError, match="variable name"):
        sb.set_variable(5, 1)
    with pytest.raises(ValueError, match="variable name must be a Python identifier"):
        sb.get_variable("1x")
    with pytest.raises(TypeError, match="on_output must be callable"):
        nsbox.Sandbox(on_output=5)
    with pytest.raises(TypeError, match="tool h: description must be a str"):
        sb.register_function("h", len, description=5)     # was AttributeError from .encode()
    assert sb.describe_tools() == ""


def test_close_from_another_thread_cancels_the_running_code(libnsbox):
    """close() from another thread waited for the running execute(): with
    no time limit, forever."""
    s = nsbox.Sandbox()
    pid = s.pid
    box = {}

    def run():
        try:
            s.execute("while True: pass")
        except BaseException as e:  # noqa: B036
            box["e"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    closer = threading.Thread(target=s.close, daemon=True)
    closer.start()
    closer.join(10)
    if closer.is_alive():
        s.cancel()
        closer.join(10)
        t.join(10)
        pytest.fail("close() from another thread waited for the running execute()")
    t.join(10)
    assert time.monotonic() - t0 < 5
    assert isinstance(box.get("e"), nsbox.Cancelled)
    assert s.closed and not os.path.exists("/proc/%d" % pid)


def test_too_large_tool_answer_names_the_tool(sb):
    """The ToolError for an answer over the frame limit said tool '?'."""
    @sb.tool
    def huge_answer():
        return "x" * (20 << 20)

    with pytest.raises(nsbox.SandboxedToolError, match="the answer of tool 'huge_answer' is too large"):
        sb.execute("huge_answer()")
    assert sb.execute("1 + 1") == 2


_ASYNC_TOOL_SIGINT_CHILD = r"""
import asyncio, os, signal, threading, time
import nsbox

# Started from a background job (CI's), SIGINT is ignored and Python keeps
# it so: the Ctrl-C below would never come.  As an interactive python.
signal.signal(signal.SIGINT, signal.default_int_handler)

sb = nsbox.Sandbox()            # no time limit


@sb.tool
async def forever():
    await asyncio.sleep(3600)


async def main():
    # asyncio.run's SIGINT handler: the first Ctrl-C cancels the main task
    # (blocked in execute), the second raises KeyboardInterrupt.
    for d in (0.7, 1.4):
        threading.Timer(d, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        sb.execute("forever()")
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    print("after", sb.execute("1 + 1"), flush=True)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    pass
time.sleep(0.5)
print("threads", sorted(t.name for t in threading.enumerate() if t.name.startswith("nsbox-async")), flush=True)
"""


def test_interrupted_async_tool_in_a_helper_thread_is_cancelled(libnsbox):
    """A Sandbox's async tool called while an event loop runs on the thread
    runs on a helper thread; a KeyboardInterrupt while execute() waited for
    it left that thread running the coroutine for good (here an hour)."""
    p = subprocess.run([sys.executable, "-c", _ASYNC_TOOL_SIGINT_CHILD], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(nsbox.__file__))))
    assert "interrupted" in p.stdout and "after 2" in p.stdout, p.stdout + p.stderr
    assert "threads []" in p.stdout, p.stdout + p.stderr


def test_sandbox_cannot_be_copied_or_pickled(sb):
    """copy.copy(sb) shared the session handle: closing the copy freed it,
    and the original then used freed memory and freed it again (SIGSEGV)."""
    import copy
    import pickle
    for fn in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="cannot be (copied|pickled)"):
            fn(sb)
    assert sb.execute("6 * 7") == 42


def test_async_sandbox_cannot_be_copied(libnsbox):
    import copy
    s = nsbox.AsyncSandbox()
    try:
        with pytest.raises(TypeError, match="AsyncSandbox cannot be copied"):
            copy.copy(s)
    finally:
        s.close()


def test_run_stream_fds_are_checked_not_wrapped(libnsbox):
    """stdin=2**32 went through ctypes as fd 0 (the host's own stdin),
    stdout=2**40 as fd 0 too; a StringIO raised a bare 'fileno'."""
    import io
    for what in ("stdin", "stdout", "stderr"):
        for bad in (2 ** 32, 2 ** 40, -1):
            with pytest.raises(ValueError, match="%s: bad file descriptor" % what):
                nsbox.run(["true"], **{what: bad})
    with pytest.raises(TypeError, match="stdout: .* has no file descriptor"):
        nsbox.run(["echo", "hi"], stdout=io.StringIO())


def test_ctrl_c_while_a_sandbox_is_made_does_not_leak_it(libnsbox):
    """A SIGINT during nsbox_session_new is handled as the call returns: the
    KeyboardInterrupt came before the new handle was kept, and its sandbox
    ran on, owned by nobody, until the host process ended.  Simulated
    exactly: the signal is raised as the C call returns."""
    import signal
    from nsbox import _lib as lib_mod
    lib = lib_mod.load()
    real = lib.nsbox_session_new
    pids = []

    def interrupted(policy, opts, out, err):
        rc = real(policy, opts, out, err)
        h = ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0]
        info = lib_mod.SessionInfo(struct_size=ctypes.sizeof(lib_mod.SessionInfo))
        e = ctypes.c_void_p()
        assert lib.nsbox_session_info(h, ctypes.byref(info), ctypes.byref(e)) == 0
        pids.append(info.pid)
        os.kill(os.getpid(), signal.SIGINT)
        return rc

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    lib.nsbox_session_new = interrupted
    try:
        for _ in range(3):
            with pytest.raises(KeyboardInterrupt):
                nsbox.Sandbox(spare=False)
    finally:
        lib.nsbox_session_new = real
        signal.signal(signal.SIGINT, old)
    assert len(pids) == 3 and all(pids)
    gc.collect()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if os.path.exists("/proc/%d" % p)], "sandboxes left running"
    with nsbox.Sandbox(spare=False) as s:
        assert s.execute("1") == 1


def test_share_net_takes_a_bool_only(libnsbox):
    """share_net="no" (truthy) shared the host's network."""
    for bad in ("no", "false", "0", [], None, 2):
        with pytest.raises(TypeError, match="share_net must be True or False"):
            nsbox.Sandbox(share_net=bad)
        with pytest.raises(TypeError, match="share_net must be True or False"):
            nsbox.run(["true"], share_net=bad)
    with nsbox.Sandbox(share_net=0) as s:
        assert s.execute("1") == 1


def test_switches_take_a_bool_only(libnsbox):
    """spare, cold, auto_restart and run()'s forward_signals took any truthy
    value: cold="no" started a cold sandbox, auto_restart="false" restarted."""
    for name in ("cold", "auto_restart", "spare"):
        for bad in ("no", "false", [], 2) + ((None,) if name != "spare" else ()):
            with pytest.raises(TypeError, match="%s must be True or False" % name):
                nsbox.Sandbox(**{name: bad})
    for bad in ("no", None, 2):
        with pytest.raises(TypeError, match="forward_signals must be True or False"):
            nsbox.run(["true"], forward_signals=bad)
    with nsbox.Sandbox(spare=None, cold=0, auto_restart=1) as s:
        assert s.execute("1") == 1


def test_interrupted_get_variable_frees_its_buffer(sb):
    """A KeyboardInterrupt handled as nsbox_get_var returned leaked the
    value's buffer (the free was in a try entered after the call)."""
    from conftest import ctrl_c_after
    sb.set_variable("big", "v" * 100000)
    with ctrl_c_after(sb._lib, "nsbox_get_var") as freed:
        with pytest.raises(KeyboardInterrupt):
            sb.get_variable("big")
    assert len(freed) == 1 and freed[0]
    assert sb.get_variable("big") == "v" * 100000


def test_fd_exhaustion_in_one_start_spares_the_other_sandboxes(libnsbox):
    """At RLIMIT_NOFILE, a start whose answer carried fds the process had
    no room for (MSG_CTRUNC) was taken for a broken helper: the helper was
    dropped, and every other sandbox of the process died with it ('the
    runner was killed by signal 9' at their next call)."""
    import resource
    warm = nsbox.Sandbox(timeout=30)
    warm.execute("1")
    warm.close()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    boxes, errors = [], []
    try:
        # Each start gets a limit near what is open now, 3 below to 6 above:
        # the sweep makes some starts fail at their own first descriptors
        # (socketpair) and some only when the helper's answer brings the
        # sandbox's fds (MSG_CTRUNC), whatever a start happens to open.
        for extra in range(-3, 7):
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + extra, hard))
            try:
                boxes.append(nsbox.Sandbox(timeout=30, spare=False))
            except nsbox.SandboxError as e:
                errors.append(e)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        before = descendants()
        assert boxes and errors
        assert all(b.execute("6 * 7") == 42 for b in boxes), "a failed start killed the other sandboxes"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert any("helper's answer" in str(e) for e in errors), [(e.errno, str(e)) for e in errors]
    assert all("RLIMIT_NOFILE" in str(e) for e in errors), [(e.errno, str(e)) for e in errors]
    # EMFILE is documented as ENOSPC (libnsbox(3), ERRORS).
    assert all(e.errno == errno.ENOSPC for e in errors), [(e.errno, str(e)) for e in errors]
    for b in boxes:
        b.close()
    time.sleep(0.3)
    # What the helper made for the failed starts is gone, not left running.
    assert len(descendants()) <= len(before) - len(boxes)


_LOW_NOFILE_CHILD = r"""
import resource, sys
import nsbox
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
with nsbox.Sandbox(timeout=30) as s:
    print("sandbox", s.execute("6 * 7"))
with nsbox.Sandbox(timeout=30, cold=True, spare=False) as s:
    print("cold", s.execute("6 * 7"))
print("run", nsbox.run(["true"], timeout=30).exit_code)
"""


def test_a_host_started_with_a_low_fd_limit_can_make_sandboxes(libnsbox):
    """A host process with RLIMIT_NOFILE 64 (ulimit -n 64) could make no
    sandbox at all: "setup step 'fds' failed: dup fd 6: Invalid argument"
    (the payload parked fds at a fixed 100, past the limit it inherits)."""
    p = subprocess.run([sys.executable, "-c", _LOW_NOFILE_CHILD], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(nsbox.__file__))))
    assert p.returncode == 0 and "sandbox 42" in p.stdout and "cold 42" in p.stdout and "run 0" in p.stdout, \
        p.stdout + p.stderr
