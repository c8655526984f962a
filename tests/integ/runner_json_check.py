"""Run inside a sandbox by test_python.py::test_runner_json_matches_cpython:
the runner's C JSON codec (runner/pyjson.c, _nsbox.dumps/loads) against
json.dumps(ensure_ascii=False, allow_nan=False, compact)/json.loads."""
import json, random, _nsbox, math, sys
random.seed(7)
def rstr():
    pool = ['a', 'é', '"', '\\', '\n', '\x00', '\x1f', '\x7f', '\u2028', '\ud800', '😀', '/', '\t', 'z']
    return ''.join(random.choice(pool) for _ in range(random.randint(0, 8)))
def rval(d=0):
    t = random.randint(0, 9 if d < 4 else 5)
    if t == 0: return None
    if t == 1: return random.choice([True, False])
    if t == 2: return random.randint(-2**70, 2**70)
    if t == 3: return random.choice([0.0, -0.0, 1.5, 1e16, 1e-7, 123456789.125, 2.0**60, random.random()])
    if t == 4: return rstr()
    if t == 5: return random.randint(-5, 5)
    if t == 6: return [rval(d+1) for _ in range(random.randint(0, 4))]
    if t == 7: return tuple(rval(d+1) for _ in range(random.randint(0, 3)))
    if t == 8: return {random.choice([rstr(), 1, 2.5, True, None, -3]): rval(d+1) for _ in range(random.randint(0, 4))}
    return {rstr(): rval(d+1) for _ in range(random.randint(0, 3))}
n = 0
for i in range(20000):
    v = rval()
    a = _nsbox.dumps(v)
    b = json.dumps(v, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8", "replace")
    assert a == b, (v, a, b)
    if '\ud800' not in b.decode('utf-8', 'replace') and b'\xed' not in b:
        try:
            ref = json.loads(b)
        except Exception:
            continue
        def norm(x):  # loads gives lists for tuples; big ints may not pass jansson
            return x
        try:
            got = _nsbox.loads(b)
        except ValueError as e:
            # jansson: integers beyond 64 bits are refused
            assert "too big" in str(e) or "integer" in str(e) or "NUL byte in object key" in str(e), (b, e)
            continue
        assert got == ref or (isinstance(ref, float) and math.isnan(ref)), (b, got, ref)
        got2 = _nsbox.loads(b.decode())
        assert got2 == got
        n += 1
for bad, exc in [(float('nan'), ValueError), (float('inf'), ValueError), ({(1,): 2}, TypeError), (object(), TypeError), ({1.5: float('inf')}, ValueError), ({float('nan'): 1}, ValueError)]:
    for f in (_nsbox.dumps, lambda o: json.dumps(o, ensure_ascii=False, allow_nan=False, separators=(",", ":"))):
        try:
            f(bad); raise SystemExit("no error for %r" % (bad,))
        except exc:
            pass
l = []; l.append(l)
for f in (_nsbox.dumps,):
    try: f(l); raise SystemExit("no recursion error")
    except RecursionError: pass
for s in [b'', b'{', b'[1,]', b'{"a":1}x', b'\xff', b'NaN', b'"\\ud800"']:
    try: _nsbox.loads(s); raise SystemExit("accepted %r" % s)
    except ValueError: pass
assert _nsbox.loads(b' {"b": 1, "a": [true, false, null, "x\\u0000y", -0, 1E2, 2.5e-3]} ') == {"b": 1, "a": [True, False, None, "x\x00y", 0, 100.0, 0.0025]}
assert list(_nsbox.loads(b'{"z":1,"a":2,"m":3}')) == ["z", "a", "m"]
print("OK", n)
class D(dict):
    def items(self): return [("a", 1)]
assert _nsbox.dumps(D()) == json.dumps(D(), separators=(",", ":")).encode()
import datetime
msgs = []
for f in (_nsbox.dumps, json.dumps):
    try:
        f(datetime.date(2020, 1, 1))
    except TypeError as e:
        msgs.append(str(e))
assert len(msgs) == 2 and msgs[0] == msgs[1], msgs
print("OK2")
