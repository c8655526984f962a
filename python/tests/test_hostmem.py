"""The host's own memory, through the protocol: sandboxed code writes forged
frames on its session socket, and the host (a fresh Python process using
the SDK, so that its VmHWM is its own) measures what they cost it.  The
host's cost of a frame must be a small multiple of its size, return after
close, and every failure the frame causes must be a SandboxError."""

import json
import os
import subprocess
import sys

import pytest

import nsbox
from forge import PRELUDE  # noqa: E402  (tests/integ/forge.py: frames written by hand inside)

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
MiB = 1 << 20


HOST = r'''
import json, sys
sys.path.insert(0, %(pydir)r)
import nsbox

def vm():
    d = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS"):
            d[k] = int(v.split()[0]) * 1024
    return d

out = {}
sb = nsbox.Sandbox(timeout=30)
if %(tool)r:
    sb.tool(name=%(tool)r)(lambda *a, **k: len(a))
sb.execute("1")
out["before"] = vm()
try:
    r = sb.run(%(code)r)
    out["error"] = type(r.error).__name__ if r.error is not None else None
    out["mro"] = [c.__name__ for c in type(r.error).__mro__] if r.error is not None else []
    out["stdout_len"] = len(r.stdout)
    out["stderr_len"] = len(r.stderr)
except BaseException as e:
    out["raised"] = type(e).__name__
    out["mro"] = [c.__name__ for c in type(e).__mro__]
out["after"] = vm()
sb.close()
out["closed"] = vm()
print(json.dumps(out))
'''


def host(code, tool=None):
    """Run a host process whose sandbox runs code; its measurements."""
    src = HOST % {"pydir": PYDIR, "code": PRELUDE + code, "tool": tool}
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def grew(m):
    return m["after"]["VmHWM"] - m["before"]["VmRSS"]


# A CALL whose arguments are 4 million zeros (under the old per-frame
# element cap of 2**22): 8 MB of text, ~170 MB of
# parsed jansson tree before the fix.
BIG_CALL = r'''
args = "[" + ",".join(["0"] * 4000000) + "]"
frame(5, 77, '{"name":"%s","args":%s,"kwargs":{}}' % (NAME, args))
time.sleep(3)
'''
BIG_CALL_SIZE = 8 * 10 ** 6


def test_unknown_tool_call_costs_the_host_about_its_size(libnsbox):
    m = host("NAME = 'nope'\n" + BIG_CALL)
    assert grew(m) < 2 * BIG_CALL_SIZE + 16 * MiB, m
    assert m["closed"]["VmRSS"] < m["before"]["VmRSS"] + 16 * MiB, m


def test_registered_tool_call_is_bounded_and_memory_returns(libnsbox):
    m = host("NAME = 'echo'\n" + BIG_CALL, tool="echo")
    assert grew(m) < 8 * BIG_CALL_SIZE + 32 * MiB, m
    assert m["closed"]["VmRSS"] < m["before"]["VmRSS"] + 32 * MiB, m


def test_deep_result_is_a_sandbox_error(libnsbox):
    m = host(r'''
result(2, '"value":' + "[" * 1500 + "]" * 1500)
''')
    assert "raised" not in m or "SandboxError" in m["mro"], m
    assert m.get("error") and "SandboxError" in m["mro"], m


def test_result_claiming_more_output_than_the_limit_is_not_handed_over(libnsbox):
    m = host(r'''
s = "x" * (7 << 20)
frame(3, 2, '{"error":null,"stdout":"%s","stderr":"%s"}' % (s, s))
time.sleep(5)
''')
    assert m["stdout_len"] <= MiB + 64 and m["stderr_len"] <= MiB + 64, m
    assert m["error"] == "ProtocolError", m


def test_honest_values_still_cross(libnsbox):
    with nsbox.Sandbox(timeout=60) as sb:
        # 100 levels of tuples: 200 JSON levels with the $tuple tags.
        v = sb.execute("v = ()\nfor _ in range(99): v = (v,)\nv")
        depth = 0
        while v:
            v, = v
            depth += 1
        assert depth == 99
        assert sb.execute("[0] * 500000") == [0] * 500000
        # Output past the limit, truncated by the runner (marker included),
        # and undecodable bytes, each one U+FFFD (3 bytes) in the RESULT.
        out = sb.run("print('y' * 3000000)").stdout
        assert MiB < len(out) <= MiB + 64 and "bytes truncated" in out
        out = sb.run("import os, sys; sys.stdout.flush(); os.write(1, b'\\xff' * 3000000)").stdout
        assert MiB < len(out) <= MiB + 64 and len(out.encode()) > 2 * MiB
        assert sb.execute("1 + 1") == 2


# The last: a set of ints that all hash alike (multiples of 2**61 - 1), a hash flood.
@pytest.mark.parametrize("value", ['{"$set":[[1]]}', '{"$dict":[[{"$set":[]},1]]}', '{"$bytes":"%%%"}',
                                   '{"$complex":["x",1]}', '{"$frozenset":[{"$bytearray":"AA=="}]}',
                                   pytest.param('{"$set":[%s]}' % ",".join('{"$int":"%d"}' % (((1 << 61) - 1) * (i + 1))
                                                                           for i in range(40)), id="hash-flood")])
def test_forged_result_with_malformed_tags_is_a_sandbox_error(libnsbox, value):
    # The RESULT of the running exec (id 2: the host's first exec after the
    # handshake is 1), written by hand with a value no runner would send.
    m = host("result(2, %r)\n" % ('"value":' + value))
    # run() returns it in .error (it raises for misuse only)
    assert m.get("error") == "UndecodableValue" and "SandboxError" in m["mro"], m
