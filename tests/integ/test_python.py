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
    assert r["stdout"] == "py-out\nfd-out\nsub-out\n"
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


def test_output_cap_streaming_mode():
    p = run("--output-limit", "4K", "-c", "for i in range(5000): print(i)")
    assert p.returncode == 0
    assert p.stdout.startswith("0\n1\n")
    assert p.stdout.endswith("4999\n")
    assert "truncated" in p.stdout
    assert len(p.stdout) < 6000


def test_output_flood_is_bounded_by_time_limit():
    t0 = time.time()
    p = run("--time-limit", "1", "-c", "while True: print('x' * 1000)")
    assert p.returncode == 124
    assert time.time() - t0 < 10
    assert len(p.stdout) < 3 * (1 << 20)
    assert "time limit exceeded" in p.stderr


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
    assert p.stdout == "[%r, 'a', 'b']\n" % str(f)
    assert 'File "%s", line 3' % f in p.stderr
    assert p.returncode == 1
    p = run("-", stdin="print(6 * 7)\n")
    assert p.stdout == "42\n" and p.returncode == 0


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
    assert lines[0] == "['/usr/lib/python311.zip', '/usr/lib/python3.11', '/usr/lib/python3.11/lib-dynload']"
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
        return
    assert p.returncode == 123, r
    assert r["outcome"] == "memory"
    assert "memory limit exceeded" in r["message"]
    assert r["usage"]["peak_memory"] > 32 << 20


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
    ("flood", 121, "more OUTPUT than the output limit"),
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
        # The EXEC's output streams as it comes; the host stops at twice
        # the output limit (1 MiB per stream) and a frame (host/session.c).
        assert set(p.stdout) <= {"x"} and len(p.stdout) <= 2 * (1 << 20) + 4096
    else:
        assert p.stdout == ""


def test_hostile_runner_silent_on_a_control_request(evil):
    # -m sends SET_VAR (the module name) before any EXEC: a runner silent
    # after HELLO meets the control-request timeout (time limit + 5 s),
    # not the EXEC time limit.
    t0 = time.time()
    p = run("--time-limit", "1", "-m", "json.tool", env=evil("silent"), timeout=60)
    assert p.returncode == 121, p.stderr
    assert "did not answer" in p.stderr, p.stderr
    assert time.time() - t0 < 15
    assert p.stdout == ""


# ---- CPython's own tests, inside ----

def test_cpython_regression_tests_inside():
    if not os.path.isdir("/usr/lib/python3.11/test/test_json"):
        pytest.fail("libpython3.11-testsuite is not installed (/usr/lib/python3.11/test)")
    p = run("-m", "test", "test_json", "test_re", "test_collections", "test_datetime", "test_decimal",
            "test_math", timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Tests result: SUCCESS" in p.stdout


def test_runner_runs_from_a_read_only_bind(tmp_path):
    """The runner is not copied for `nsbox python`: pid 1 binds it
    read-only at /run/nsbox/runner and the payload executes it through a
    descriptor, so a policy bind over /run hides the path but not the
    program.  The file there is the host's runner, read-only, nosuid."""
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
    assert p.stdout.splitlines() in (["/run/nsbox/runner True True " + want, "refused %d" % e]
                                     for e in (errno.ETXTBSY, errno.EROFS, errno.EACCES)), p.stdout
    d = tmp_path / "run"
    d.mkdir()
    (d / "mine").write_text("x")
    p = run("--ro-bind", "%s:/run" % d, "-c", "import os; print(sorted(os.listdir('/run')), os.readlink('/proc/self/exe'))")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "['mine'] /run/nsbox/runner\n"


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


def test_tool_time_counts_toward_the_time_limit():
    # The command can't be interrupted: the exec fails when it returns late,
    # and its result never reaches the code.
    t0 = time.time()
    p = run("--time-limit", "0.5", "--tool", "slow=sleep 1.5; echo 1", "-c", "x = slow(); print('got', x)")
    assert p.returncode == 124, p.stderr
    assert "got" not in p.stdout and "time limit exceeded" in p.stderr
    assert 1.5 <= time.time() - t0 < 10


@pytest.mark.parametrize("name", ["len", "print", "class", "__name__"])
def test_tool_names_that_replace_python_names_are_refused(name):
    p = run("--tool", name + "=cat", "-c", "1")
    assert p.returncode == 120, (p.returncode, p.stderr)
    assert repr(name) in p.stderr or name in p.stderr
