"""Integration tests of `nsbox python`, the runner and the host session.

Run: NSBOX_BUILD=$PWD/build /usr/bin/python3.11 -m pytest tests/integ/test_python.py
The C session API (persistence, variables, reset, cancel, soft/hard
deadlines, jailed and unjailed) is driven by build/tests/test-session, run
here too.
"""
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

BUILD = os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "..", "build")
NSBOX = os.path.join(BUILD, "nsbox")
EVIL = os.path.join(BUILD, "tests", "probe", "evil-runner")


def run(*args, stdin=None, env=None, timeout=60):
    e = dict(os.environ)
    e.pop("NSBOX_RUNNER", None)
    if env:
        e.update(env)
    return subprocess.run([NSBOX, "python", *args], input=stdin, capture_output=True, text=True,
                          env=e, timeout=timeout)


MODE = os.environ.get("NSBOX_TEST_MODE", "root" if os.geteuid() == 0 else "nodeleg")


def no_warnings(text):
    """stderr without the jail's warnings about limits it can't enforce
    (uid 65534 without a delegated cgroup gets them on every run)."""
    return "".join(l for l in text.splitlines(True) if not l.startswith("nsbox: warning:"))


def run_json(*args, **kw):
    p = run("--json", *args, **kw)
    try:
        return p, json.loads(p.stdout)
    except ValueError:
        raise AssertionError("not JSON: rc=%d out=%r err=%r" % (p.returncode, p.stdout, p.stderr))


@pytest.fixture(scope="module", autouse=True)
def built():
    for f in (NSBOX, os.path.join(BUILD, "nsbox-runner")):
        assert os.path.exists(f), "%s missing: run make" % f


def test_hello_world():
    p = run("-c", "print('hello')")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "hello\n"


def test_session_api_driver():
    t = os.path.join(BUILD, "tests", "test-session")
    assert os.path.exists(t), "build/tests/test-session missing"
    p = subprocess.run([t], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not ok" not in p.stdout


@pytest.mark.parametrize("expr,want", [
    ("None", None), ("True", True), ("False", False), ("42", 42), ("-7", -7),
    ("2**53", 2 ** 53), ("2**53 + 1", {"$int": str(2 ** 53 + 1)}), ("-(10**30)", {"$int": str(-10 ** 30)}),
    ("1.5", 1.5), ("float('nan')", {"$float": "nan"}), ("float('-inf')", {"$float": "-inf"}),
    ("'h\u00e9llo \\u2603'", "h\u00e9llo \u2603"), ("[1, [2, 'x']]", [1, [2, "x"]]),
    ("(1, (2,))", {"$tuple": [1, {"$tuple": [2]}]}), ("{'a': {'b': None}}", {"a": {"b": None}}),
    ("{'$int': 1}", {"$dict": {"$int": 1}}),
])
def test_value_types(expr, want):
    p, r = run_json("-c", expr)
    assert p.returncode == 0, p.stderr
    assert r["value"] == want
    assert r["error"] is None


def test_unserialisable_values_come_back_as_repr():
    p, r = run_json("-c", "print('kept'); (object, '\\ud800', {object: 1})")
    assert p.returncode == 0
    assert r["stdout"] == "kept\n"
    cls, bad, d = r["value"]["$tuple"]
    assert cls["$type"] == "builtins.type" and "object" in cls["$repr"]
    assert bad["$type"] == "builtins.str"
    (k, v), = d["$dict"]
    assert k["$type"] == "builtins.type" and v == 1


@pytest.mark.parametrize("expr,want", [
    ("{1: 2}", {"$dict": [[1, 2]]}), ("{1, 2}", {"$set": [1, 2]}), ("frozenset()", {"$frozenset": []}),
    ("b'\\x00\\xff'", {"$bytes": "AP8="}), ("bytearray(b'x')", {"$bytearray": "eA=="}),
    ("1+2j", {"$complex": [1.0, 2.0]}), ("{(1,): {b''}}", {"$dict": [[{"$tuple": [1]}, {"$set": [{"$bytes": ""}]}]]}),
])
def test_builtin_value_tags(expr, want):
    p, r = run_json("-c", expr)
    assert p.returncode == 0, p.stderr
    assert r["value"] == want


def test_deep_and_cyclic_values():
    p, r = run_json("-c", "a = []; a.append(a); a")
    assert p.returncode == 0
    s = json.dumps(r["value"])
    assert "$repr" in s


def test_output_capture_python_and_fd_level():
    code = ("import os, sys, subprocess\n"
            "print('py-out'); print('py-err', file=sys.stderr)\n"
            "os.write(1, b'fd-out\\n'); os.write(2, b'fd-err\\n')\n"
            "subprocess.run(['/bin/sh', '-c', 'echo sub-out; echo sub-err >&2'])\n")
    p, r = run_json("-c", code)
    assert p.returncode == 0, r
    # stdout is block buffered inside, as python's to a pipe: print's
    # text comes at the flush (python3.11 gives the same order).
    assert r["stdout"] == "fd-out\nsub-out\npy-out\n"
    assert r["stderr"] == "py-err\nfd-err\nsub-err\n"
    assert r["stdout_truncated"] is False


def test_output_streams_without_json():
    p = run("-c", "import sys; print('a'); sys.stdout.flush(); print('b', file=sys.stderr)")
    assert p.returncode == 0
    assert p.stdout == "a\n" and no_warnings(p.stderr) == "b\n"


def test_output_cap_keeps_head_and_tail():
    code = "for i in range(20000): print('line %05d' % i)"
    p, r = run_json("--output-limit", "64K", "-c", code)
    assert p.returncode == 0
    out = r["stdout"]
    assert r["stdout_truncated"] is True
    assert out.startswith("line 00000\n")
    assert out.endswith("line 19999\n")
    assert "bytes truncated" in out
    assert len(out) < 70000
    assert r["stdout_bytes"] == 20000 * 11


def test_streamed_output_is_never_cut():
    # Shown as produced (a file, a pipe): all of it, as python writes it;
    # the limit is for --json's results.
    p = run("--output-limit", "4K", "-c", "for i in range(5000): print(i)")
    assert p.returncode == 0
    assert p.stdout == "".join("%d\n" % i for i in range(5000))
    assert "truncated" not in p.stderr


def test_json_cut_is_flagged_and_warned():
    p, r = run_json("--output-limit", "4K", "-c", "for i in range(5000): print(i)")
    assert r["stdout_truncated"] is True
    assert "stdout cut to the output limit" in p.stderr
    p, r = run_json("--output-limit", "unlimited", "-c", "for i in range(5000): print(i)")
    assert r["stdout_truncated"] is False and len(r["stdout"]) == r["stdout_bytes"]
    assert run("--output-limit", "8", "-c", "1").returncode == 120  # usage


def test_output_flood_is_bounded_by_time_limit():
    t0 = time.time()
    p = run("--time-limit", "1", "-c", "while True: print('x' * 1000)")
    assert p.returncode == 124
    assert time.time() - t0 < 10
    assert "time limit exceeded" in p.stderr


@pytest.mark.parametrize("held", ["stdout", "stderr"])
def test_time_limit_fires_while_nsbox_waits_for_its_reader(held):
    """A caller that reads one of nsbox's pipes to its end before the other
    (Popen's classic pattern) leaves nsbox itself blocked writing the unread
    one: the code must still end at its time limit (124), not run on for as
    long as the caller does not read.  What the held pipe had no room for at
    the limit is dropped."""
    import threading
    code = ("import sys, threading, time\n"
            "def spin():\n"
            "    while True: pass\n"
            "threading.Thread(target=spin, daemon=True).start()\n"
            "sys.%s.write('e' * (1 << 20)); sys.%s.flush()\n"
            "time.sleep(3600)\n" % (held, held))
    p = subprocess.Popen([NSBOX, "python", "--time-limit", "2", "-c", code],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    other = p.stderr if held == "stdout" else p.stdout
    got = []
    t = threading.Thread(target=lambda: got.append(other.read()), daemon=True)
    t.start()
    t.join(60)
    try:
        assert not t.is_alive(), "nsbox python still running 60 s into a 2 s time limit"
        assert p.wait(10) == 124
        # Less the jail's warnings (uid 65534 without a delegated cgroup).
        kept = b"".join(l for l in getattr(p, held).read().splitlines(True) if not l.startswith(b"nsbox: warning:"))
        assert 0 < len(kept) < 1 << 20 and kept.strip(b"e") == b""
        if held == "stdout":
            assert b"time limit exceeded" in got[0]
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()


def test_traceback_points_at_user_lines():
    p = run("-c", "def f():\n    raise ValueError('bad thing')\n\nf()")
    assert p.returncode == 1
    assert 'File "<string>", line 4, in <module>' in p.stderr
    assert 'File "<string>", line 2, in f' in p.stderr
    assert "raise ValueError('bad thing')" in p.stderr
    assert "ValueError: bad thing" in p.stderr
    assert "nsbox-runner" not in p.stderr and "runner.py" not in p.stderr


def test_traceback_json_and_syntax_error():
    p, r = run_json("-c", "x = (")
    assert p.returncode == 1
    assert r["error"]["type"] == "SyntaxError"
    assert "<nsbox" not in r["error"]["traceback"]


def test_file_and_stdin_and_argv(tmp_path):
    f = tmp_path / "prog.py"
    f.write_text("import sys\nprint(sys.argv)\n1/0\n")
    p = run(str(f), "a", "b")
    # Outside the workspace, the file's name alone (not its host path).
    assert p.stdout == "['prog.py', 'a', 'b']\n"
    assert 'File "/nsbox-script/prog.py", line 3' in p.stderr
    assert p.returncode == 1
    p = run("-", stdin="print(6 * 7)\n")
    assert p.stdout == "42\n" and p.returncode == 0


def test_closed_stdio_is_dev_null_not_one_of_nsboxs_own_descriptors(tmp_path):
    # Started with 0 and 1 closed, nsbox's first descriptors (an eventfd, a
    # session's socket) would take their places: the sandbox would read and
    # write one of the host's own.  They are /dev/null instead.
    code = ("import os, sys; os.write(2, (os.readlink('/proc/self/fd/0') + ' ' + repr(sys.stdin.read())).encode()); "
            "print('to nowhere')")
    p = subprocess.run(["/bin/sh", "-c", 'exec "$0" python -c "$1" <&- >&-', NSBOX, code],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert no_warnings(p.stderr) == "/dev/null ''", p.stderr


PY_FLAG_CASES = [
    # (flags, code): the same stdout, stderr's last line and status as python3.11 itself
    (["-u"], "import sys; print(type(sys.stdout.buffer).__name__, sys.stdout.write_through)"),
    (["-uc"], None),
    (["-W", "error"], "import warnings; warnings.warn('x')"),
    (["-Wignore"], "import warnings; warnings.warn('x'); print('quiet')"),
    (["-W", "bogus:::"], "print('after')"),
    (["-X", "int_max_str_digits=700"], "import sys; print(sys.get_int_max_str_digits(), sys._xoptions)"),
    (["-X", "int_max_str_digits=5"], "print('never')"),
    (["-X", "faulthandler", "-X", "tracemalloc=3"],
     "import faulthandler, tracemalloc; print(faulthandler.is_enabled(), tracemalloc.get_traceback_limit())"),
    (["-BEsSIRPq"], "import sys; print(sys.flags.isolated, sys.flags.no_site, sys.dont_write_bytecode)"),
    (["-V"], None),
    (["--version"], None),
]


@pytest.mark.parametrize("flags,code", PY_FLAG_CASES, ids=[" ".join(f) for f, _ in PY_FLAG_CASES])
def test_pythons_own_flags_do_what_they_do_in_python(flags, code):
    if flags == ["-uc"]:
        args = ["-uc", "import sys; print(type(sys.stdout.buffer).__name__)"]
    else:
        args = flags + (["-c", code] if code else [])
    want = subprocess.run(["/usr/bin/python3.11", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    got = run(*args)
    got.stderr = no_warnings(got.stderr)
    assert got.returncode == want.returncode, (got.stderr, want.stderr)
    assert got.stdout == want.stdout
    if "int_max_str_digits=5" in flags:     # python's is a fatal error at initialisation: the same words
        assert got.stderr.strip() in want.stderr and got.stderr.strip(), got.stderr
    else:
        assert got.stderr.strip().splitlines()[-1:] == want.stderr.strip().splitlines()[-1:], got.stderr


def test_unbuffered_output_arrives_before_the_code_ends():
    p = subprocess.Popen([NSBOX, "python", "-u", "-c", "import time; print('first'); time.sleep(30)"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        assert p.stdout.readline() == "first\n"    # within the sleep: not held for the end
    finally:
        p.terminate()
        p.wait(timeout=30)


@pytest.mark.parametrize("flag", ["-O", "-OO", "-b", "-d", "-i", "-v", "-x", "-X dev", "-X importtime", "-z"])
def test_flags_the_initialised_interpreter_cant_take_are_refused_by_name(flag):
    p = run(*flag.split(), "-c", "print('ran')")
    assert p.returncode == 120 and "ran" not in p.stdout
    first = flag.split()[-1] if flag.startswith("-X") else flag[:2]
    assert first in p.stderr and ("not supported" in p.stderr or "unknown option" in p.stderr), p.stderr


@pytest.mark.parametrize("status", [0, 7])
def test_os_exit_ends_with_its_status_as_in_python(status):
    p = run("-c", "import os; os._exit(%d)" % status)
    assert p.returncode == status, p.stderr


def test_options_after_the_program_are_the_programs():
    # --policy after -c CODE or a script was read by nsbox too: a strict or
    # missing policy chosen by the program's own argv.
    p = run("-c", "import sys; print(sys.argv)", "--policy", "no-such-policy")
    assert p.returncode == 0 and p.stdout == "['-c', '--policy', 'no-such-policy']\n", p.stderr
    rc = subprocess.run([NSBOX, "run", "/bin/echo", "--policy", "no-such-policy"], capture_output=True, text=True)
    assert rc.returncode == 0 and rc.stdout == "--policy no-such-policy\n", rc.stderr


def test_argv_like_python():
    # Quotes, backslashes, control characters, non-ASCII and bytes that are
    # not UTF-8 reach sys.argv as CPython itself would put them there.
    args = ["a", "b'c", "d\\e", "'''", "x\ny", "\x01", "\u00e9", os.fsdecode(b"\xff\xfe")]
    code = "import sys, json; print(json.dumps(sys.argv))"
    want = subprocess.run(["/usr/bin/python3.11", "-I", "-c", code] + args, capture_output=True, text=True).stdout
    p = run("-c", code, *args)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == json.loads(want) == ["-c"] + args


def test_tool_that_ignores_its_stdin():
    # The tool exits without reading its 1 MB of arguments: writing them is
    # EPIPE for nsbox, a ToolError inside, never a SIGPIPE that kills nsbox
    # (it did: exit 141).
    code = ("try:\n    quit('x' * 1000000)\nexcept Exception as e:\n"
            "    print(type(e).__name__)\n")
    p = run("--tool", "quit=exit 0", "-c", code)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert p.stdout == "ToolError\n"


def test_runner_json_matches_cpython():
    # The runner's frames are encoded and decoded in C (runner/pyjson.c);
    # 20000 random values must come out byte for byte as CPython's json
    # module writes them, read back equal, and fail the same way.
    script = os.path.join(os.path.dirname(__file__), "runner_json_check.py")
    p = run("--time-limit", "300", script)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("OK "), p.stdout


def test_system_exit_status():
    assert run("-c", "import sys; sys.exit(7)").returncode == 7
    assert run("-c", "raise SystemExit").returncode == 0


def test_isolated_interpreter():
    code = ("import sys, os\n"
            "print(sys.path)\n"
            "print(sys.flags.isolated, sys.flags.no_user_site, sys.dont_write_bytecode)\n"
            "print('site' in sys.modules, sorted(k for k in os.environ if k.startswith('PYTHON')))\n")
    p = run("-c", code, env={"PYTHONPATH": "/evil", "PYTHONSTARTUP": "/evil.py"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # '' first, as python -c (the working directory); the host's
    # PYTHONPATH does not reach inside (--setenv's does).
    assert lines[0] == "['', '/usr/lib/python311.zip', '/usr/lib/python3.11', '/usr/lib/python3.11/lib-dynload']"
    assert lines[1] == "1 1 True"
    assert lines[2] == "False []"


def test_dist_packages_optional():
    p = run("--dist-packages", "-c", "import sys; print(sys.path[-1])")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "/usr/lib/python3/dist-packages"


# ---- tools ----

ADD = ("/usr/bin/python3.11 -c 'import json,sys; d=json.load(sys.stdin); "
       "print(json.dumps(sum(d[\"args\"]) + sum(d[\"kwargs\"].values())))'")


def test_tool_success_and_module():
    code = ("from nsbox import tools\nimport nsbox.tools\n"
            "print(add(1, 2, c=3), tools.add(10), nsbox.tools.add is add)\n"
            "print(add.__doc__.splitlines()[0])")
    p = run("--tool", "add=" + ADD, "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "6 10 True"


def test_a_tool_reading_one_line_gets_the_whole_call():
    """libnsbox hands the sandbox's own spelling of a call on: a forged CALL
    with line breaks between its tokens reached a --tool program reading one
    line as a piece of JSON.  The command gets it on one line."""
    line = "/usr/bin/python3.11 -c 'import json,sys; print(json.dumps(json.loads(sys.stdin.readline())))'"
    code = ("import _nsbox, json\n"
            "t, _, a = _nsbox.call(b'{\\n\"name\": \"echo\",\\r\\n\"args\": [1,\\n2],\\n\"kwargs\": {\"k\":\\n\"a\\\\nb\"}\\n}')\n"
            "print(t, json.loads(a))")
    p = run("--tool", "echo=" + line, "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "6 {'value': {'args': [1, 2], 'kwargs': {'k': 'a\\nb'}}}", p.stdout


def test_tool_error_and_non_json():
    code = ("import nsbox\n"
            "for f in (fail, junk):\n"
            "    try:\n        f(1)\n    except nsbox.ToolError as e:\n        print(type(e).__name__, e)\n")
    p = run("--tool", "fail=exit 3", "--tool", "junk=echo not json", "-c", code)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[0] == "ToolError tool fail: command failed (exit status 3)"
    assert out[1].startswith("ToolError tool junk: the command's output is not JSON")


def test_unknown_tool():
    p = run("--tool", "add=" + ADD, "-c", "from nsbox import tools\ntools.nope(1)")
    assert p.returncode == 1
    assert "AttributeError" in p.stderr and "nope" in p.stderr
    p = run("-c", "nope(1)")
    assert "NameError" in p.stderr


def test_concurrent_tool_calls_from_threads_and_asyncio():
    code = ("import threading, asyncio\n"
            "res = []\n"
            "ts = [threading.Thread(target=lambda i=i: res.append(add(i, 1000))) for i in range(16)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(sorted(res) == [i + 1000 for i in range(16)])\n"
            "async def main():\n"
            "    return await asyncio.gather(*(add.aio(i, i) for i in range(8)))\n"
            "print(asyncio.run(main()))\n")
    p = run("--tool", "add=" + ADD, "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["True", "[0, 2, 4, 6, 8, 10, 12, 14]"]


def test_tool_huge_answer(tmp_path):
    big = tmp_path / "big.py"
    big.write_text("import json, sys\nn = json.load(sys.stdin)['args'][0]\nprint(json.dumps('x' * n))\n")
    cmd = "big=/usr/bin/python3.11 %s" % big
    code = ("import nsbox\n"
            "print(len(big(4 * 1024 * 1024)))\n"
            "try:\n    big(17 * 1024 * 1024)\nexcept nsbox.ToolError as e:\n    print('ToolError', e)\n")
    p = run("--tool", cmd, "-c", code, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == str(4 * 1024 * 1024)
    assert lines[1].startswith("ToolError") and "too large" in lines[1]


# ---- limits ----

def test_soft_time_limit_is_catchable_exception():
    code = ("import nsbox, time\n"
            "try:\n    time.sleep(30)\nexcept nsbox.TimeLimitExceeded:\n    print('caught')\n    raise\n")
    t0 = time.time()
    p = run("--time-limit", "0.5", "-c", code)
    assert p.returncode == 124
    assert p.stdout == "caught\n"
    assert time.time() - t0 < 5


def test_swallowed_timeout_still_ends_at_hard_deadline():
    code = ("while True:\n    try:\n        while True:\n            x = 1\n"
            "    except BaseException:\n        pass\n")
    t0 = time.time()
    p = run("--time-limit", "0.5", "-c", code)
    took = time.time() - t0
    assert p.returncode == 124
    assert "time limit exceeded" in p.stderr and "killed" in p.stderr
    assert took < 5


def test_stuck_in_c_ends_at_hard_deadline():
    # signal.pthread_sigmask blocks the cancel signal: only the kill works.
    code = "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\ntime.sleep(60)\n"
    t0 = time.time()
    p = run("--time-limit", "0.5", "-c", code)
    assert p.returncode == 124
    assert time.time() - t0 < 5


def test_memory_limit():
    code = "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n"
    p, r = run_json("--memory", "64M", "-c", code, timeout=60)
    if MODE == "nodeleg":
        # No memory cgroup: the jail falls back to RLIMIT_AS, so the
        # allocation fails inside instead of the OOM killer firing.
        assert p.returncode == 1 and r["error"]["type"] == "MemoryError", r
        assert "memory limit not enforced by a cgroup" in p.stderr
        # Deliberately not relabelled as a limit kill (README, "Per-user
        # and host-wide kernel budgets"): nothing was killed, the code can
        # catch it and the session goes on.
        caught = "try:\n" + "".join("    " + l + "\n" for l in code.splitlines()) + \
                 "except MemoryError:\n    del x\n    print('caught')\nprint(sum(range(10)))\n"
        p = run("--memory", "64M", "-c", caught, timeout=60)
        assert p.returncode == 0 and p.stdout == "caught\n45\n", (p.stdout, p.stderr)
        return
    assert p.returncode == 123, r
    assert r["outcome"] == "memory"
    assert "memory limit exceeded" in r["message"]
    assert r["usage"]["peak_memory"] > 32 << 20


def test_a_runner_killed_in_the_middle_of_a_frame_is_reported_by_how_it_ended():
    """The OOM killer (or the time limit's kill) can take the runner while it
    writes a frame: the host then reads the socket's end inside one.  That
    is the sandbox ending, reported by how it ended, not a protocol error
    (an OOM kill was "connection closed in the middle of a frame").  A
    frame's first 3 bytes, then a SIGKILL, as the OOM killer sends (here
    without a cgroup too)."""
    p = run("-c", "import os, signal\nos.write(3, b'\\x00\\x01\\x02')\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert p.returncode == 128 + 9, p.stderr
    assert "killed by signal 9" in p.stderr and "protocol error" not in p.stderr


def test_pids_limit_contained():
    code = ("import os\nn = 0\ntry:\n    for i in range(200):\n        if os.fork() == 0:\n"
            "            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n"
            "    print('fork failed after', n)\n")
    p = run("--pids", "20", "--time-limit", "10", "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("fork failed after")


# ---- hostile runner ----

@pytest.fixture()
def evil(tmp_path):
    def make(mode):
        dst = tmp_path / ("evil-runner-" + mode)
        shutil.copy(EVIL, dst)
        return {"NSBOX_RUNNER": str(dst)}
    assert os.path.exists(EVIL), "build/tests/probe/evil-runner missing"
    return make


@pytest.mark.parametrize("mode,code,text", [
    ("garbage", 121, "bad frame magic"),
    ("oversize", 121, "exceeds the limit"),
    ("wrongver", 125, "version 99"),
    ("wrongid", 121, "unexpected RESULT"),
    ("badjson", 121, "not valid JSON"),
    ("unexpected", 121, "not allowed towards the host"),
    # nsbox python streams all output (stream_all): a flood is shown until
    # the time limit, never held in memory.
    ("flood", 124, "time limit exceeded"),
    ("crash", 139, "killed by signal 11"),
    # HELLO answered, then nothing: the first request is the EXEC, under
    # the 1 s limit, so the host kills the sandbox at the limit.
    ("silent", 124, "time limit exceeded"),
    ("mute", 125, "did not answer the handshake"),
    ("bigcall", 124, "time limit exceeded"),
])
def test_hostile_runner(evil, mode, code, text):
    t0 = time.time()
    p = run("--time-limit", "1", "-c", "print(1)", env=evil(mode), timeout=60)
    assert p.returncode == code, p.stderr
    assert text in p.stderr, p.stderr
    assert time.time() - t0 < 15
    if mode == "flood":
        assert set(p.stdout) <= {"x"}
    else:
        assert p.stdout == ""


def test_hostile_runner_silent_on_the_launcher(evil):
    # -m's settings travel in its EXEC (no control request first): a
    # runner silent after HELLO meets the EXEC's time limit.
    t0 = time.time()
    p = run("--time-limit", "1", "-m", "json.tool", env=evil("silent"), timeout=60)
    assert p.returncode == 124, p.stderr
    assert "time limit exceeded" in p.stderr, p.stderr
    assert time.time() - t0 < 15
    assert p.stdout == ""


# ---- CPython's own tests, inside ----

CPYTHON_TESTS = ["test_json", "test_re", "test_collections", "test_datetime", "test_decimal", "test_math",
                 "test_io", "test_os", "test_pty", "test_socket", "test_subprocess", "test_signal",
                 "test_tempfile", "test_shutil", "test_pathlib", "test_threading", "test_unicode",
                 "test_codecs", "test_struct", "test_itertools", "test_functools", "test_dict", "test_list",
                 "test_exceptions", "test_traceback", "test_file", "test_fileio", "test_select",
                 "test_selectors", "test_fcntl", "test_resource", "test_posix"]
# Known differences, each with its reason (also in README.md):
CPYTHON_EXCLUDED = {
    "test_os": "chown/setuid-family calls are forbidden by the seccomp policy",
    "test_posix": "setuid/setgid/chown/mknod forbidden; no other users in /etc/passwd",
    "test_socket": "no network namespace peers: AF_NETLINK, CAN, RDS, TIPC and IPv6 routes absent",
    "test_resource": "RLIMIT changes above the policy's limits are refused",
}
CPYTHON_TESTS = [t for t in CPYTHON_TESTS if t not in CPYTHON_EXCLUDED]
# Single test cases left out of modules that otherwise run (regrtest -i),
# each for an intended difference (also in README.md):
CPYTHON_IGNORED = {
    "test_fcntl_f_pipesize": "F_SETPIPE_SZ is refused (seccomp, EPERM): pipe buffers count against the "
                             "host user's pipe-user-pages budget",
    "test_pipesizes": "the same: subprocess's pipesize= uses F_SETPIPE_SZ",
    "test_user": "setuid-family calls are forbidden by the seccomp policy",
    "test_group": "setgid-family calls are forbidden by the seccomp policy",
    "test_fcntl_64_bit": "it calls F_NOTIFY (dnotify), refused by seccomp with inotify: the files a sandbox "
                         "could watch are the host's own",
}


def test_cpython_regression_tests_inside():
    # 140 s a pass: run in the unsanitized root pass, where its result
    # doesn't depend on how the memory limit is kept; the uid 65534 passes
    # and the sanitized one run it with NSBOX_CPYTHON_EVERY_PASS=1 (.ci/run
    # keeps CI near 20 min; the sanitized runner's C code is driven by the
    # rest of the suite).
    if (MODE != "root" or os.environ.get("NSBOX_SANITIZE")) and not os.environ.get("NSBOX_CPYTHON_EVERY_PASS"):
        pytest.skip("CPython's suite runs in the unsanitized root pass (NSBOX_CPYTHON_EVERY_PASS=1 runs it here)")
    if not os.path.isdir("/usr/lib/python3.11/test/test_json"):
        pytest.fail("libpython3.11-testsuite is not installed (/usr/lib/python3.11/test)")
    # A broad list, run inside as the CI's standing check of fidelity.
    # Left out, with the reason (README, "CPython's tests inside"):
    # CPYTHON_EXCLUDED below.
    # --file-size: test_io's large file test writes past 2 GiB (sparse, on
    # /tmp), beyond the default RLIMIT_FSIZE of 1 GiB: a policy choice.
    ign = [a for t in CPYTHON_IGNORED for a in ("-i", t)]
    p = run("--memory", "2G", "--file-size", "4G", "--time-limit", "540", "-m", "test", "-j2", *ign, *CPYTHON_TESTS,
            timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Tests result: SUCCESS" in p.stdout


def test_runner_runs_from_a_read_only_bind(tmp_path):
    """The runner is not copied for `nsbox python`: pid 1 clones it as a
    detached read-only mount of its own, never attached to the sandbox's
    tree, and the payload executes it through that descriptor, so no path
    inside names it (/proc/self/exe reads "/") and a policy bind over /run
    changes nothing.  The file is the host's runner, read-only, nosuid."""
    code = ("import os, hashlib\n"
            "st = os.statvfs('/proc/self/exe')\n"
            "h = hashlib.sha256(open('/proc/self/exe', 'rb').read()).hexdigest()\n"
            "print(os.readlink('/proc/self/exe'), bool(st.f_flag & os.ST_RDONLY), bool(st.f_flag & os.ST_NOSUID), h)\n"
            "try:\n"
            "    os.open('/proc/self/exe', os.O_WRONLY)\n"
            "except OSError as e:\n"
            "    print('refused', e.errno)\n")
    with open(os.path.join(BUILD, "nsbox-runner"), "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    p = run("-c", code)
    assert p.returncode == 0, p.stderr
    # ETXTBSY while it runs, EROFS (the mount) were it not running, EACCES
    # where the sandbox's user does not own it (the uid 65534 passes); the
    # rewrite itself is tested in test_runner_exe.py.
    assert p.stdout.splitlines() in (["/ True True " + want, "refused %d" % e]
                                     for e in (errno.ETXTBSY, errno.EROFS, errno.EACCES)), p.stdout
    d = tmp_path / "run"
    d.mkdir()
    (d / "mine").write_text("x")
    p = run("--ro-bind", "%s:/run" % d, "-c", "import os; print(sorted(os.listdir('/run')), os.readlink('/proc/self/exe'))")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "['mine'] /\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a directory owned by another user, a tmpfs mount")
@pytest.mark.parametrize("where", ["unreachable", "noexec"])
def test_runner_the_sandbox_cannot_bind_runs_from_a_sealed_copy(tmp_path, where):
    """Where pid 1, as the sandbox's user, can't bind the runner the
    launcher opened (a 0700 directory of another user, as with sudo from a
    home directory; a noexec mount), it runs a sealed memfd copy."""
    d = tmp_path / "r"
    d.mkdir()
    mounted = False
    try:
        if where == "noexec":
            subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,size=32m", "tmpfs", str(d)], check=True)
            mounted = True
        runner = d / "nsbox-runner"
        shutil.copy2(os.path.join(BUILD, "nsbox-runner"), runner)
        if where == "unreachable":
            os.chown(runner, 65534, 65534)
            os.chown(d, 65534, 65534)
            os.chmod(d, 0o700)
        p = run("-c", "import os; print(os.readlink('/proc/self/exe')); open('/proc/self/exe', 'ab')",
                env={"NSBOX_RUNNER": str(runner)})
        assert p.stdout.startswith("/memfd:nsbox-runner"), (p.stdout, p.stderr)
        assert p.returncode == 1 and "PermissionError" in p.stderr, p.stderr
    finally:
        if mounted:
            subprocess.run(["umount", str(d)], check=True)


def test_every_lib_dynload_extension_imports():
    """The runner links libpython statically and exports CPython's API
    (runner/exports.list): every extension module of the standard library,
    and a C extension from dist-packages, must find what it needs."""
    dyn = "/usr/lib/python3.11/lib-dynload"
    mods = sorted({f.split(".")[0] for f in os.listdir(dyn) if f.endswith(".so")})
    assert len(mods) > 30, mods
    code = ("import importlib, warnings\nwarnings.simplefilter('ignore')\nbad = []\n"
            "for m in %r:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception as e:\n        bad.append((m, repr(e)))\n"
            "print(len(%r) - len(bad), bad)\n") % (mods, mods)
    p = run("-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "%d []\n" % len(mods), p.stdout
    if os.path.exists("/usr/lib/python3/dist-packages/yaml/_yaml.cpython-311-x86_64-linux-gnu.so"):
        p = run("--dist-packages", "-c", "import yaml._yaml as y; print(y.__name__)")
        assert p.returncode == 0 and p.stdout == "yaml._yaml\n", p.stderr


# ---- `nsbox python` behaves like python ----

def test_stdin_is_passed_through():
    p = run("-c", "import sys; print(sys.stdin.read().upper(), end='')", stdin="hi\nthere\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "HI\nTHERE\n"
    p = run("-m", "json.tool", stdin='{"a":1}')
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"a": 1}


def test_m_of_a_missing_module_is_python_s_message(tmp_path):
    # python3.11 -m nosuchmod: "python3.11: No module named nosuchmod",
    # status 1, no traceback through runpy.
    for name in ("nosuchmod", "json.nosuch"):
        p = run("-m", name)
        assert p.returncode == 1, p.stderr
        # (unprivileged, nsbox's own warnings come first)
        err = [l for l in p.stderr.splitlines() if not l.startswith("nsbox: warning:")]
        assert err == ["/usr/bin/python3.11: No module named %s" % name], p.stderr
    # The module's own failing import is a traceback, as in python.
    (tmp_path / "badimp.py").write_text("import nosuch_inner\n")
    p = subprocess.run([NSBOX, "python", "--workspace", ".", "-m", "badimp"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "Traceback" in p.stderr and "ModuleNotFoundError: No module named 'nosuch_inner'" in p.stderr, p.stderr


def test_traceback_carets_where_python_puts_them(tmp_path):
    # Code without a final newline: the carets under the failing call, as
    # python3.11 puts them for the same lines in a file (3.11's traceback
    # shifted them one column right when the cached last line had no
    # newline).
    for code in ("import time; x = time.nope(3)", "x = (1 +\n undefined_name)"):
        (tmp_path / "f.py").write_text(code)
        want = subprocess.run(["/usr/bin/python3.11", str(tmp_path / "f.py")], capture_output=True, text=True,
                              timeout=60).stderr
        p = run("-c", code)
        assert p.returncode == 1
        carets = [l for l in p.stderr.splitlines() if l.strip().startswith("^")]
        assert carets and carets == [l for l in want.splitlines() if l.strip().startswith("^")], (p.stderr, want)


def test_file_runs_as_python_runs_it(tmp_path):
    (tmp_path / "main.py").write_text("import sys, sib\nprint(__file__, sys.path[0], sys.argv)\n")
    (tmp_path / "sib.py").write_text("print('sib')\n")
    p = subprocess.run([NSBOX, "python", "--workspace", ".", "main.py", "x"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "sib\n/workspace/main.py /workspace ['main.py', 'x']\n"
    p = subprocess.run([NSBOX, "python", "--workspace", ".", "-c", "import sib"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.stdout == "sib\n", p.stderr


def test_source_encoding_pep263(tmp_path):
    f = tmp_path / "l1.py"
    f.write_bytes(b"# -*- coding: latin-1 -*-\nprint('caf\xe9')\n")
    p = run(str(f))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "caf\u00e9\n"
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"print(1)\nx = '\xff'\n")
    p = run(str(bad))
    assert p.returncode == 1 and p.stdout == ""
    assert 'File "/nsbox-script/bad.py", line 2' in p.stderr and "SyntaxError" in p.stderr, p.stderr


def test_a_file_outside_the_workspace_is_named_by_its_name_alone(tmp_path):
    # Its host path (/home/USER/clients/...) was __file__, sys.argv[0] and
    # the file name of every traceback inside (audit-infoleak).
    # Nor can a file the code writes where __file__ points stand in for
    # it in the traceback (linecache reads a file found there first).
    d = tmp_path / "secret-client-dir"
    d.mkdir()
    (d / "t.py").write_text("import sys\nprint(__file__, sys.argv)\n"
                            "open('/tmp/t.py', 'w').write('FORGED\\n' * 9)\nraise KeyError(1)\n")
    p = run(str(d / "t.py"), "a")
    assert p.returncode == 1 and "secret-client-dir" not in p.stdout + p.stderr, (p.stdout, p.stderr)
    assert p.stdout == "/nsbox-script/t.py ['t.py', 'a']\n", p.stdout
    assert 'File "/nsbox-script/t.py", line 4' in p.stderr and "raise KeyError(1)" in p.stderr, p.stderr
    assert "FORGED" not in p.stderr, p.stderr


def test_pythonpath_from_setenv():
    p = run("--setenv", "PYTHONPATH=/opt/a:/opt/b", "-c", "import sys; print(sys.path[:3])")
    assert p.stdout == "['', '/opt/a', '/opt/b']\n", p.stderr


def test_sigint_is_keyboardinterrupt_130():
    proc = subprocess.Popen([NSBOX, "python", "-c", "import time\nprint('go', flush=True)\ntime.sleep(30)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "go\n"
    proc.send_signal(2)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err and "Traceback" in err


def test_site_builtins():
    p = run("-c", "print(repr(exit)); print(repr(help)); help(len); quit(3)")
    assert p.returncode == 3
    assert "Use exit() or Ctrl-D" in p.stdout and "len(obj, /)" in p.stdout


def test_file_size_limit_is_efbig_not_death():
    code = ("f = open('/tmp/big', 'wb'); f.seek(5 << 30)\n"
            "try:\n    f.write(b'x'); f.flush()\nexcept OSError as e:\n    print('EFBIG', e.errno)\n")
    p = run("--file-size", "1M", "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "EFBIG %d\n" % errno.EFBIG


def test_etc_services_and_openpty():
    code = ("import socket, os\n"
            "print(socket.getservbyname('http'), socket.getprotobyname('tcp'))\n"
            "m, s = os.openpty(); os.write(m, b'hi\\n'); print(os.read(s, 10), os.ttyname(s))\n"
            "print(os.readlink('/dev/ptmx'))\n")
    p = run("-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "80 6\nb'hi\\n' /dev/pts/0\npts/ptmx\n"


def test_devpts_is_private_and_bounded():
    # Inside: /dev/pts is a devpts instance of its own, nosuid and noexec,
    # holding at most 64 ptys (the host-wide kernel.pty.max is shared).
    code = ("import os, errno\n"
            "mi = [l.split() for l in open('/proc/self/mountinfo')]\n"
            "pts = [l for l in mi if l[4] == '/dev/pts'][0]\n"
            "sep = pts.index('-')\n"
            "print(pts[sep + 1], 'nosuid' in pts[5], 'noexec' in pts[5], 'max=64' in pts[sep + 3])\n"
            "fds = []\n"
            "try:\n"
            "    while True:\n"
            "        fds.append(os.openpty())\n"
            "except OSError as e:\n"
            "    print(len(fds), errno.errorcode[e.errno])\n"
            "print(sorted(os.listdir('/dev/pts'))[:3])\n")
    host_before = sorted(os.listdir("/dev/pts"))
    p = run("--open-files", "1024", "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["devpts True True True", "64 ENOSPC", "['0', '1', '10']"], p.stdout
    # From the host: none of those ptys appeared in (or stayed in) the host's instance.
    assert sorted(os.listdir("/dev/pts")) == host_before


def test_many_prints_stream_to_a_file(tmp_path):
    out = tmp_path / "out"
    with open(out, "w") as f:
        p = subprocess.run([NSBOX, "python", "-c", "for i in range(300000): print(i)"], stdout=f,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert out.read_text() == "".join("%d\n" % i for i in range(300000))


def _tmux_repl(tmp_path, keys):
    """Drive the interactive REPL in a tmux pane; returns the screen."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed (scripts/install-deps.sh)")
    sock = str(tmp_path / "tmux.sock")
    # SHELL: tmux runs the pane's command with $SHELL, else the user's login
    # shell, and uid 65534's is nologin (CI runs with no SHELL set).  bash,
    # not dash: the pane's shell gets the test's ^Cs too, and dash exits on
    # them once its child does, taking the pane with it before STATUS=.
    env = dict(os.environ, HOME=str(tmp_path), SHELL="/bin/bash")
    env.pop("NSBOX_RUNNER", None)
    t = ["tmux", "-S", sock]
    subprocess.run(t + ["new-session", "-d", "-x", "120", "-y", "50", "%s python; echo STATUS=$?; sleep 30" % NSBOX],
                   check=True, env=env)
    try:
        def screen():
            return subprocess.run(t + ["capture-pane", "-p"], capture_output=True, text=True).stdout

        def wait(text, n=1):
            for _ in range(200):
                if screen().count(text) >= n:
                    return
                time.sleep(0.1)
            raise AssertionError("no %r on the screen:\n%s" % (text, screen()))
        wait(">>>")
        for k, until in keys:
            subprocess.run(t + ["send-keys"] + k, check=True)
            # (text, n), or a list of them: a Ctrl-C must only be sent once
            # the REPL is where the test means it to be (a ^C typed ahead
            # while the terminal is not in the line editor's mode flushes
            # the input typed before it, as in python's REPL).
            for u in (until if isinstance(until, list) else [until] if until else []):
                wait(*u)
        return screen()
    finally:
        subprocess.run(t + ["kill-server"])


def test_repl_blocks_interrupt_history_completion_exit(tmp_path):
    s = _tmux_repl(tmp_path, [
        (["if True:", "Enter"], ("...",)),
        (["    a = 1", "Enter"], ("...", 2)),
        (["    b = 2", "Enter"], ("...", 3)),
        (["Enter"], (">>>", 2)),
        (["print(a + b)", "Enter"], ("3\n",)),
        (["for i in range(2):", "Enter"], ("...", 4)),
        # Ctrl-C inside a half-typed block: the block is dropped, a new prompt
        (["C-c"], [("KeyboardInterrupt", 1), (">>>", 4)]),
        # Ctrl-C at an empty prompt: the same
        (["C-c"], [("KeyboardInterrupt", 2), (">>>", 5)]),
        # Ctrl-C in running code: KeyboardInterrupt with its traceback
        (["import time; print('zz' + 'sleeping'); time.sleep(30)", "Enter"], ("zzsleeping\n",)),
        (["C-c"], [("KeyboardInterrupt", 3), ("Traceback", 1), (">>>", 6)]),
        # after both interrupts the session is alive and kept its state:
        # history's third line back is print(a + b), run again
        (["Up", "Up", "Up", "Enter"], [("\n3\n", 2), (">>>", 7)]),
        (["zz_unique = 5", "Enter"], (">>>", 8)),
        (["zz_un", "Tab", "Enter"], ("\n5\n",)),
        (["exit(7)", "Enter"], ("STATUS=7",)),
    ])
    assert "IndentationError" not in s and "U+001B" not in s, s
    assert (tmp_path / ".nsbox_history").exists()


def test_tool_time_counts_toward_the_time_limit():
    # The exec fails at its limit, and the tool's result never reaches the
    # code.  The command is stopped there (it ran its 20 s before: the
    # sandbox, which chooses when and with what to call a tool, held the
    # host past --time-limit for as long as the command ran).
    t0 = time.time()
    p = run("--time-limit", "0.5", "--tool", "slow=sleep 20; echo 1", "-c", "x = slow(); print('got', x)")
    assert p.returncode == 124, p.stderr
    assert "got" not in p.stdout and "time limit exceeded" in p.stderr
    assert time.time() - t0 < 10


def _sleeps(tag):
    return [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline(pid) == ["sleep", tag]]


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


# How a tool command outlives its answer: a background child that holds its
# stdout (nsbox read on until that child ended, 30 s, then left it
# running), or the command itself after closing its stdout (waited for
# without the exec's deadline or a stop: red team 13).  Either way the
# exec's time limit and SIGTERM hold, and nothing of the call is left.
OUTLIVING = {"background child": "(sleep %s &); echo 1", "closed stdout": "echo 1; exec >&-; sleep %s"}


@pytest.mark.parametrize("how", sorted(OUTLIVING))
def test_a_tool_command_and_what_it_starts_end_at_the_time_limit(how):
    tag = "31.%d" % os.getpid()
    t0 = time.time()
    p = run("--time-limit", "1", "--tool", "bg=" + OUTLIVING[how] % tag, "-c", "print(bg())")
    took = time.time() - t0
    left = _sleeps(tag)
    for pid in left:
        os.kill(int(pid), 9)
    assert p.returncode == 124, p.stderr
    assert took < 15, took
    assert not left, "the tool command or its child outlived the call"


def test_nothing_a_tool_call_started_outlives_it():
    """What a command leaves in its process group when it exits (a
    background job with its output elsewhere) is killed with the call."""
    tag = "34.%d" % os.getpid()
    p = run("--tool", "t=(sleep %s >/dev/null 2>&1 &); echo 1" % tag, "-c", "print(t())")
    left = _sleeps(tag)
    for pid in left:
        os.kill(int(pid), 9)
    assert p.returncode == 0 and p.stdout == "1\n", p.stderr
    assert not left, "the tool command's background job outlived the call"


@pytest.mark.parametrize("command", ["sleep %s; echo 1", OUTLIVING["closed stdout"]])
def test_sigterm_stops_a_running_tool_command(command):
    # SIGTERM (or Ctrl-C) cancels the exec; while a tool command ran it was
    # taken only after the command ended (a 30 s command: 30 s), and after
    # one that had closed its stdout (red team 13).  Now the command is
    # stopped and the code is interrupted as it would be anywhere else
    # (KeyboardInterrupt, status 130).
    tag = "32.%d" % os.getpid()
    p = subprocess.Popen([NSBOX, "python", "--tool", "slow=" + command % tag, "-c", "slow()"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if _sleeps(tag):
                break
            time.sleep(0.1)
        t0 = time.time()
        p.terminate()
        out, err = p.communicate(timeout=20)
        took = time.time() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        left = _sleeps(tag)
        for pid in left:
            os.kill(int(pid), 9)
    assert took < 5, took
    assert p.returncode == 130, (p.returncode, err)
    assert "KeyboardInterrupt" in err, err
    assert not left, "the tool command outlived the call"


@pytest.mark.parametrize("name", ["len", "print", "class", "__name__"])
def test_tool_names_that_replace_python_names_are_refused(name):
    p = run("--tool", name + "=cat", "-c", "1")
    assert p.returncode == 120, (p.returncode, p.stderr)
    assert repr(name) in p.stderr or name in p.stderr


def test_nul_in_output_is_output():
    # As python prints it: U+0000 on stdout and stderr, the session alive
    # (it was a protocol error, status 121).
    p = subprocess.run([NSBOX, "python", "-c", "import sys; print('a\\0b'); sys.stderr.write('e\\0f\\n'); print(1)"],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"a\0b\n1\n" and p.stderr.endswith(b"e\0f\n"), p.stderr  # after any fallback warning


def test_repl_completion_shows_no_escape_from_the_sandbox():
    # Completions are names the sandbox chose (its globals): one holding
    # an escape sequence (here OSC 0, which retitles the terminal) or a
    # bidi override must not reach the user's terminal when libedit lists
    # the matches; the plain one still completes.
    import pty
    import select
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["HOME"] = "/tmp"
        os.environ.pop("NSBOX_RUNNER", None)
        os.execv(NSBOX, [NSBOX, "python"])
    out = b""

    def pump(until, t=20):
        nonlocal out
        end = time.time() + t
        while until not in out and time.time() < end:
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    return
    status = None
    try:
        pump(b">>> ")
        os.write(fd, b'globals()["zq\\x1b]0;PWNED\\x07a"] = globals()["zq\\u202eb"] = 1; zqok = 2\r')
        pump(b">>> ", 5)
        mark = len(out)
        os.write(fd, b"zq\t\t")
        time.sleep(1)
        os.write(fd, b"\r")
        pump(b"\r\n2\r\n>>> ", 10)
        time.sleep(0.3)  # the line editor back in its mode: typed ahead, ^D would be flushed
        os.write(fd, b"\x04")  # Ctrl-D: the REPL ends
        end = time.time() + 20
        while status is None and time.time() < end:
            pump(b"\0", 0.1)
            p, st = os.waitpid(pid, os.WNOHANG)
            status = st if p else None
    finally:
        if status is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
    assert status == 0, out
    assert b"\x1b]0;PWNED" not in out and "\u202e".encode() not in out, out
    assert b"\r\n2\r\n" in out[mark:], out  # zq<Tab> completed to zqok, the only inert match


def test_a_closed_pipe_cancels_and_keeps_the_workspace(tmp_path):
    # `nsbox python ... | head -1`: the code is cancelled and nsbox exits
    # 141 as SIGPIPE would make it, but after the session is freed, so the
    # bounded workspace's write-back still happens (SIGPIPE lost it).
    ws = tmp_path / "ws"
    ws.mkdir()
    code = "open('/workspace/result.txt', 'w').write('x')\nfor i in range(10**7): print(i)"
    p = subprocess.run(["/bin/bash", "-c", '"$0" python --workspace "$1" -c "$2" | head -1; echo "${PIPESTATUS[0]}" >&2',
                        NSBOX, str(ws), code], capture_output=True, text=True, timeout=60)
    assert p.stdout == "0\n", p.stderr
    assert p.stderr.splitlines()[-1] == "141", p.stderr
    assert (ws / "result.txt").read_text() == "x"


def test_a_closed_pipe_under_json_is_not_a_success():
    p = subprocess.run(["/bin/bash", "-c", '"$0" python --json -c "print(\'x\' * 10**6)" | head -c5; '
                        'echo " ${PIPESTATUS[0]}"', NSBOX], capture_output=True, text=True, timeout=60)
    assert p.stdout == '{"val 141\n', (p.stdout, p.stderr)


def test_endless_script_or_stdin_is_refused_past_one_frame():
    # nsbox python /dev/zero (or an endless stdin) read until malloc failed:
    # a red-team run took 24 GiB and the host's OOM killer.  Past the one
    # frame (16 MiB) that carries the code it stops, named, status 120.
    # RLIMIT_AS bounds this test's own host side should it come back (under
    # ASan, whose shadow can't live under it, the sanitizer's RSS limit).
    import resource

    sanitized = bool(os.environ.get("NSBOX_SANITIZE"))
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":hard_rss_limit_mb=1024")

    def cap():
        if not sanitized:
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    for args in (["python", "/dev/zero"], ["python", "-"], ["python"]):
        p = subprocess.run([NSBOX] + args, stdin=open("/dev/zero", "rb"), capture_output=True, timeout=60,
                           preexec_fn=cap, env=env)
        err = p.stderr.decode(errors="replace")
        assert p.returncode == 120 and "exceeds the frame limit of one exec (16 MiB)" in err, (args, p.returncode, err)
