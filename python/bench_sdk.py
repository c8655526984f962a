#!/usr/bin/python3.11
"""Round-trip times through the Python SDK, beside the same calls made
through the bare C API from Python (ctypes, no SDK code), so that the SDK's
own overhead is visible.  bench/session-bench.c prints the C figures.

    /usr/bin/python3.11 python/bench_sdk.py [N] [--tsv]

--tsv prints bench/report.py's input ("label<TAB>us us ...") instead.

Target (issue 4): the SDK adds at most 15 us to an exec round trip.
"""

import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nsbox  # noqa: E402
from nsbox import _lib  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def timed(fn, n, warm=50):
    for _ in range(warm):
        fn()
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        out.append((clock() - t0) / 1000.0)
    return out


def row(name, us):
    print("%-52s p50 %8.1f us   p99 %8.1f us   mean %8.1f us" % (name, pct(us, 50), pct(us, 99),
                                                               statistics.fmean(us)))


INSIDE = ("import time\nd = []\nfor i in range(%d):\n"
          "    t = time.perf_counter_ns(); %s(); d.append(time.perf_counter_ns() - t)\nd")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    tsv = "--tsv" in sys.argv
    n = int(args[0]) if args else 2000
    lib = _lib.load()
    if not tsv:
        print("libnsbox %s (%s), Python %s, %d calls each" % (
            lib.nsbox_version().decode(), _lib.library_path, sys.version.split()[0], n))
    sb = nsbox.Sandbox(timeout=60)
    # Like bench/session-bench.c's noop: no schema, so no argument checks inside.
    sb.register_function("noop", lambda *a, **k: None)
    sb.execute("0")
    h = sb._session()

    # The bare C API from Python: nsbox_exec + status + value + free, and a
    # bare ctypes tool callback, everything prepared in advance: what any
    # binding must at least pay.
    def raw_tool(ud, name, args_json, result, error):
        return 0
    raw_cb = _lib.TOOL_FN(raw_tool)
    err = ctypes.c_void_p()
    if lib.nsbox_session_add_tool(h, b"raw_noop", None, None, raw_cb, None, ctypes.byref(err)) < 0:
        raise SystemExit("nsbox_session_add_tool failed")
    opts = _lib.ExecOpts(struct_size=ctypes.sizeof(_lib.ExecOpts), timeout=60.0, repl=True)
    res = ctypes.c_void_p()
    code = b"1+1"
    pres, perr = ctypes.byref(res), ctypes.byref(err)
    ex, st, val, free = lib.nsbox_exec, lib.nsbox_result_status, lib.nsbox_result_value, lib.nsbox_result_free

    def raw():
        if ex(h, code, opts, pres, perr) < 0:
            raise RuntimeError("nsbox_exec failed")
        r = res.value
        st(r)
        val(r)
        free(r)

    def sdk():
        sb.execute("1+1")

    # Interleaved so that drift (CPU frequency, other load) hits both.
    raw_us, sdk_us = [], []
    for _ in range(4):
        raw_us += timed(raw, n // 4)
        sdk_us += timed(sdk, n // 4)
    calls = 1000
    raw_tool_us = [x / 1000.0 for x in sb.execute(INSIDE % (calls, "raw_noop"))]
    sdk_tool_us = [x / 1000.0 for x in sb.execute(INSIDE % (calls, "noop"))]
    sb.close()

    if tsv:  # bench/report.py's input: "label<TAB>us us ..." groups
        def line(label, xs):
            print("%s\t%s" % (label, " ".join("%.1f" % x for x in xs)))
        line("exec round trip of 1+1, C API via ctypes", raw_us)
        line("exec round trip of 1+1, Python SDK", sdk_us)
        print()
        line("tool-call round trip (timed inside), bare ctypes callback", raw_tool_us)
        line("tool-call round trip (timed inside), Python SDK", sdk_tool_us)
        print()
        return
    row("exec '1+1', C API via ctypes (no SDK)", raw_us)
    row("exec '1+1', SDK Sandbox.execute", sdk_us)
    added = pct(sdk_us, 50) - pct(raw_us, 50)
    print("%-52s %+.1f us at p50 (target <= 15 us): %s" % ("SDK overhead per exec", added,
                                                           "OK" if added <= 15 else "OVER"))
    row("tool call timed inside, bare ctypes callback", raw_tool_us)
    row("tool call timed inside, SDK tool", sdk_tool_us)
    print("%-52s %+.1f us at p50" % ("SDK overhead per tool call", pct(sdk_tool_us, 50) - pct(raw_tool_us, 50)))


if __name__ == "__main__":
    main()
