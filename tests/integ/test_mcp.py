"""Integration tests of `nsbox mcp`, driven by the official MCP TypeScript
SDK (tests/mcp/client.mjs: Client + StdioClientTransport; client2.mjs: the
v2 client package, for the 2026-07-28 revision) and the MCP Inspector's CLI
mode, plus raw lines written straight to the server's stdin for what an SDK
never sends.  Code mode runs against tests/mcp/server.mjs, a small MCP
server written with the SDK's server side.

Needs node and tests/mcp/node_modules (`npm ci` there; done here when
missing and the registry is reachable).  Without node the tests skip with
the reason, and fail under NSBOX_MUST_WORK=1.
"""
import base64
import json
import os
import shutil
import select
import signal
import struct
import subprocess
import sys
import time

import pytest

from conftest import NSBOX, MODE, reap

HERE = os.path.dirname(os.path.abspath(__file__))
MCPDIR = os.path.join(HERE, "..", "mcp")
CLIENT = os.path.join(MCPDIR, "client.mjs")


def _need(reason):
    if os.environ.get("NSBOX_MUST_WORK") == "1":
        pytest.fail(reason + " (NSBOX_MUST_WORK=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def node():
    exe = shutil.which("node")
    if not exe:
        _need("node is not installed: the MCP tests drive the server with the TypeScript SDK")
    if not all(os.path.isdir(os.path.join(MCPDIR, "node_modules", "@modelcontextprotocol", d))
               for d in ("sdk", "client", "inspector")):
        npm = shutil.which("npm")
        if not npm or not os.access(MCPDIR, os.W_OK):
            _need("tests/mcp/node_modules is missing and cannot be installed here (run scripts/install-deps.sh)")
        p = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=MCPDIR,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            _need("npm ci in tests/mcp failed: " + p.stderr[-2000:])
    return exe


def client(node, scenario, *server_args, timeout=120):
    p = subprocess.run([node, CLIENT, NSBOX, scenario, *server_args], capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        raise AssertionError("client output is not JSON: rc=%d out=%r err=%r" % (p.returncode, p.stdout, p.stderr))
    assert "fatal" not in out, out.get("fatal")
    assert p.returncode == 0, p.stderr
    return out


def test_basic(node):
    o = client(node, "basic")
    assert o["server"]["name"] == "nsbox" and o["server"]["version"]
    assert o["capabilities"]["tools"] is not None
    assert "sandbox" in o["instructions"]
    tools = {t["name"]: t for t in o["tools"]}
    assert set(tools) == {"run_python", "new_session", "close_session", "read_file", "write_file", "list_files"}
    rp = tools["run_python"]
    assert rp["inputSchema"]["required"] == ["code"]
    assert set(rp["inputSchema"]["properties"]) == {"code", "session", "timeout_s"}
    assert rp["annotations"]["readOnlyHint"] is False
    assert rp["annotations"]["idempotentHint"] is False
    assert rp["annotations"]["openWorldHint"] is False  # the default policy has no network
    assert tools["read_file"]["annotations"]["readOnlyHint"] is True
    assert tools["close_session"]["annotations"]["destructiveHint"] is True
    for t in tools.values():
        assert t["inputSchema"]["type"] == "object" and t["description"]

    assert o["run"] == {"text": "[stdout]\nhi\n42", "isError": False}
    assert o["state"] == {"text": "82", "isError": False}
    assert o["exception"]["isError"] and "ZeroDivisionError" in o["exception"]["text"]
    assert "Traceback" in o["exception"]["text"]
    assert o["after_exception"]["text"] == "41"

    h = o["handle"]
    assert len(h) == 32 and int(h, 16) >= 0
    assert "600" in o["new_session"]["text"]  # the stated idle lifetime
    assert o["s2"]["text"] == "('own', False)"  # its own globals, not the default session's
    assert o["read"] == {"text": "héllo\n", "isError": False}
    assert o["read_b64"]["text"].endswith("\nAP8Q")
    assert "a.txt\t7 bytes" in o["list"]["text"] and "b.bin\t3 bytes" in o["list"]["text"]
    assert o["read_missing"]["isError"] and "FileNotFoundError" in o["read_missing"]["text"]
    assert o["globals_clean"]["text"] == "[]"
    assert o["close"]["isError"] is False
    assert o["closed"]["isError"] and "unknown or expired session" in o["closed"]["text"]
    assert o["unknown_session"]["isError"] and "unknown or expired session" in o["unknown_session"]["text"]

    for k, arg in (("missing_code", "'code'"), ("mistyped_code", "'code'"), ("mistyped_timeout", "'timeout_s'"),
                   ("oversize", "'code'")):
        assert o[k].get("code") == -32602, (k, o[k])
        assert arg in o[k]["message"], (k, o[k])
    assert o["unknown_tool"]["code"] == -32602 and "no_such_tool" in o["unknown_tool"]["message"]
    assert o["ping"] == {}
    assert o["healthy"] == {"text": "41", "isError": False}


def test_structured(node):
    o = client(node, "structured", "--structured")
    schema = {t["name"]: t for t in o["tools"]}["run_python"]["outputSchema"]
    assert schema["required"] == ["status", "stdout", "stderr", "session_ended"]
    assert all("outputSchema" not in t for t in o["tools"] if t["name"] != "run_python")
    assert o["ok"]["text"] == "[stdout]\nhi\n[1, (2, 3)]"  # the text block stays
    assert o["ok"]["structured"] == {"status": "ok", "stdout": "hi\n", "stderr": "", "stdout_truncated": False,
                                     "stderr_truncated": False, "value": "[1, (2, 3)]", "session_ended": False,
                                     "displays": [], "displays_truncated": False, "files": [],
                                     "files_truncated": False}
    s = o["exc"]["structured"]
    assert o["exc"]["isError"] and s["status"] == "exception" and s["error"]["type"] == "ZeroDivisionError"
    assert "Traceback" in s["error"]["traceback"] and s["value"] is None
    assert o["none"]["structured"]["value"] is None and o["none"]["text"] == "(no output)"
    # Without --structured: no structured content, no outputSchema (clients
    # that see it drop the other blocks).
    b = client(node, "structured")
    assert b["ok"]["structured"] is None and all("outputSchema" not in t for t in b["tools"])


def _png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", data[:16]
    return struct.unpack(">II", data[16:24])


def test_rich_results(node):
    """A matplotlib figure comes back as an image block, display() without
    an image as a text block, files written to /out as resource links that
    resources/read resolves (reading the file back from the session)."""
    if subprocess.run(["/usr/bin/python3.11", "-c", "import matplotlib"], capture_output=True).returncode:
        pytest.fail("matplotlib is not installed on the host (scripts/install-deps.sh installs it)")
    for structured in (False, True):
        o = client(node, "rich", "--dist-packages", *(["--structured"] if structured else []))
        assert o["capabilities"]["resources"] is not None
        assert o["resources"] == {"resources": []}
        f = o["fig"]
        assert not f["isError"], f
        kinds = [c["type"] for c in f["content"]]
        # display() made its bundle at once, the open figure came at the end.
        assert kinds == ["text", "text", "image", "resource_link", "resource_link"], f["content"]
        # stdout alone: matplotlib's first import says nothing on stderr now
        # that the sandbox has the root's /etc/fonts (it printed a
        # Fontconfig error, a [stderr] section, before).
        assert f["content"][0]["text"] == "[stdout]\ndrawn", f["content"][0]
        assert f["content"][1]["text"] == "'a note'"
        img = f["content"][2]
        assert img["mimeType"] == "image/png"
        assert _png_size(base64.b64decode(img["data"], validate=True)) == (200, 150)  # 4x3 in at 50 dpi
        csv, raw = f["content"][3], f["content"][4]
        assert csv == {"type": "resource_link", "uri": "nsbox://session/default/out/data.csv", "name": "data.csv",
                       "mimeType": "text/csv", "size": 8}
        assert raw == {"type": "resource_link", "uri": "nsbox://session/default/out/raw%20b%C3%A9.bin",
                       "name": "raw bé.bin", "mimeType": "application/octet-stream", "size": 256}
        assert o["read_data.csv"] == {"contents": [{"uri": csv["uri"], "mimeType": "text/csv", "text": "x,y\n1,2\n"}]}
        (b,) = o["read_raw bé.bin"]["contents"]
        assert base64.b64decode(b["blob"], validate=True) == bytes(range(256)) and "text" not in b
        # Only new or changed files: the next call links none.
        assert [c["type"] for c in o["unchanged"]["content"]] == ["text"]
        # A display() before a plain value stays; a DataFrame's own bundle
        # (text/html, text/plain) is not repeated after its repr.
        assert o["display_then_value"]["content"] == [{"type": "text", "text": "5"},
                                                      {"type": "text", "text": "'shown'"}]
        (frame,) = o["frame"]["content"]
        assert frame["type"] == "text" and "a" in frame["text"] and "2" in frame["text"], frame
        h = o["handle"]
        link = o["in_session"]["content"][-1]
        assert link["uri"] == "nsbox://session/%s/out/s.txt" % h and link["size"] == 3
        assert o["read_session"]["contents"][0]["text"] == "own"
        assert o["read_gone"]["code"] == -32002, o["read_gone"]
        for k in ("read_dotdot", "read_slash", "read_other"):
            assert o[k]["code"] == -32602 and "not a URI this server gave" in o[k]["message"], (k, o[k])
        assert o["read_unknown"]["code"] == -32002 and o["read_closed"]["code"] == -32002
        assert o["healthy"] == {"text": "'ok'", "isError": False}
        if structured:
            s = f["structured"]
            assert s["displays"] == [{"mimeTypes": ["text/plain"]}, {"mimeTypes": ["image/png", "text/plain"]}]
            assert s["files"] == [{k: csv[k] for k in ("name", "uri", "mimeType", "size")},
                                  {k: raw[k] for k in ("name", "uri", "mimeType", "size")}]
            assert s["displays_truncated"] is False and s["files_truncated"] is False
        else:
            assert f["structured"] is None


def test_time_limit(node):
    o = client(node, "timeout")
    assert o["timeout"]["isError"] and "time limit" in o["timeout"]["text"]
    assert o["after"]["isError"] is False  # healthy after, in the same or a fresh session


def test_memory_limit(node):
    o = client(node, "memory", "--memory", "128M")
    assert o["memory"]["isError"]
    # A cgroup kill names the memory limit; without a cgroup (RLIMIT_AS,
    # mode nodeleg) it is a MemoryError inside.
    assert ("memory limit" if MODE != "nodeleg" else "memory") in o["memory"]["text"].lower(), o["memory"]
    assert o["after"] == {"text": "2", "isError": False}


def test_cancel(node):
    o = client(node, "cancel")
    assert "rejected" in o["cancelled"]
    assert o["after"] == {"text": "'alive'", "isError": False}
    assert o["after_ms"] < 5000


def test_progress_and_ping_during_exec(node):
    o = client(node, "progress")
    assert o["result"]["text"].endswith("tick 4\n'done'")
    assert len(o["progress"]) >= 1
    assert all("tick" in p.get("message", "") for p in o["progress"])
    prog = [p["progress"] for p in o["progress"]]
    assert prog == sorted(set(prog))
    assert o["ping_ms"][0] < 500  # answered while the exec ran


def raw(lines, *args, timeout=60):
    p = subprocess.run([NSBOX, "mcp", *args], input="".join(l + "\n" for l in lines), capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, [json.loads(l) for l in p.stdout.splitlines()], p.stderr


def req(i, method, params=None):
    m = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        m["params"] = params
    return json.dumps(m)


def test_raw_protocol():
    rc, out, err = raw([
        req(1, "initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                              "clientInfo": {"name": "raw", "version": "0"}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "{this is not json",
        req(2, "ping"),
        req(3, "no/such/method"),
        req(4, "tools/call", {"name": "run_python", "arguments": {"code": "6*7"}}),
        "[]",
        req(5, "initialize", {"protocolVersion": "1999-01-01"}),
    ])
    assert rc == 0, err
    by_id = {m.get("id"): m for m in out}
    assert by_id[1]["result"]["protocolVersion"] == "2024-11-05"
    caps = {"tools": {"listChanged": False}, "resources": {"listChanged": False}}
    assert by_id[1]["result"]["capabilities"] == caps
    parse = [m for m in out if m.get("error", {}).get("code") == -32700]
    assert len(parse) == 1 and parse[0]["id"] is None
    assert by_id[2]["result"] == {}
    assert by_id[3]["error"]["code"] == -32601
    assert by_id[4]["result"]["content"][0]["text"] == "42"
    assert any(m.get("error", {}).get("code") == -32600 for m in out)
    assert by_id[5]["result"]["protocolVersion"] == "2025-11-25"
    # Order is kept: the parse error comes between 1 and 2.
    ids = [m.get("id") for m in out]
    assert ids.index(1) < ids.index(None) < ids.index(2)


def test_idle_timeout_and_max_sessions():
    rc, out, err = raw([
        req(1, "tools/call", {"name": "new_session", "arguments": {}}),
        req(2, "tools/call", {"name": "new_session", "arguments": {}}),
    ], "--max-sessions", "1")
    assert rc == 0, err
    assert out[0]["result"]["isError"] is False
    assert out[1]["result"]["isError"] and "too many sessions" in out[1]["result"]["content"][0]["text"]

    p = subprocess.Popen([NSBOX, "mcp", "--idle-timeout", "0.5"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        p.stdin.write(req(1, "tools/call", {"name": "new_session", "arguments": {}}) + "\n")
        p.stdin.flush()
        h = json.loads(json.loads(p.stdout.readline())["result"]["content"][0]["text"].split("\n")[0])["session"]
        time.sleep(1.5)
        p.stdin.write(req(2, "tools/call", {"name": "run_python", "arguments": {"session": h, "code": "1"}}) + "\n")
        p.stdin.close()
        r = json.loads(p.stdout.readline())
        assert r["result"]["isError"] and "expired" in r["result"]["content"][0]["text"]
        assert p.wait(timeout=30) == 0
    finally:
        reap(p)


def test_idle_timeout_holds_while_the_client_does_not_read():
    """A client that sends requests and stops reading kept the server in a
    write, and the idle timeout never fired: a session's leftover process
    ran on for as long as the client did not read (red team 13).  Now its
    sandbox is killed at the timeout meanwhile, and the session closed once
    the server is back in its loop."""
    mark = "IDLE-BURNER-%d" % os.getpid()

    def burner_alive():
        for pid in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if mark.encode() in f.read():
                        return True
            except OSError:
                pass
        return False

    p = subprocess.Popen([NSBOX, "mcp", "--idle-timeout", "5"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        def send(m):
            p.stdin.write(m.encode() + b"\n")
            p.stdin.flush()
        send(req(1, "tools/call", {"name": "new_session", "arguments": {}}))
        h = json.loads(json.loads(p.stdout.readline())["result"]["content"][0]["text"].split("\n")[0])["session"]
        send(req(2, "tools/call", {"name": "run_python", "arguments": {"session": h, "code": (
            "import subprocess; subprocess.Popen(['/usr/bin/python3.11', '-c', 'while True: pass', %r])" % mark)}}))
        r = json.loads(p.stdout.readline())
        assert r["result"]["isError"] is False, r
        end = time.monotonic() + 30     # seen from here: a sanitized build is slow
        while not burner_alive() and time.monotonic() < end:
            time.sleep(0.1)
        assert burner_alive(), "the session's process never seen"
        for i in range(800):        # answers never read: the server blocks writing them
            send(req(100 + i, "tools/list"))
        end = time.monotonic() + 30
        while burner_alive() and time.monotonic() < end:
            time.sleep(0.2)
        assert not burner_alive(), "the session's process ran on past the idle timeout"
        p.stdin.close()
        os.set_blocking(p.stdout.fileno(), False)
        end = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < end:
            try:
                p.stdout.read()
            except BlockingIOError:
                pass
            time.sleep(0.05)
        assert p.wait(timeout=10) == 0
        assert b"closing idle session" in p.stderr.read()
    finally:
        reap(p)


def test_memory_caps_new_sessions():
    """nsbox mcp --memory 1G (the README's client setup) let new_session ask
    for 4 GiB each: --max-memory defaults to --memory when it is given."""
    call = [req(1, "tools/call", {"name": "new_session", "arguments": {"memory_mb": 4096}}),
            req(2, "tools/call", {"name": "new_session", "arguments": {"memory_mb": 64}})]
    rc, out, err = raw(call, "--memory", "64M")
    assert rc == 0, err
    assert out[0]["error"]["code"] == -32602 and "from 16 to 64" in out[0]["error"]["message"], out[0]
    assert out[1]["result"]["isError"] is False, out[1]
    # --max-memory given: it decides.
    rc, out, err = raw(call[:1], "--memory", "64M", "--max-memory", "8G")
    assert rc == 0 and out[0]["result"]["isError"] is False, (out, err)


def test_host_tool():
    rc, out, err = raw([
        req(1, "tools/call", {"name": "run_python", "arguments": {"code": "double(21)"}}),
        req(2, "tools/list"),
    ], "--tool", "double=python3 -c 'import json,sys; print(json.load(sys.stdin)[\"args\"][0]*2)'")
    assert rc == 0, err
    assert out[0]["result"]["content"][0]["text"] == "42", out
    assert "double(...)" in out[1]["result"]["tools"][0]["description"]


def test_eof_closes_and_exits():
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": "1"}})])
    assert rc == 0 and out[0]["result"]["content"][0]["text"] == "1"


def test_bad_option():
    # Each says what it expected (the range), names the option without its
    # "=value", and takes no hex float or blank (strtod's "0x1p3", " 5").
    for args, want in ((["--max-sessions", "0"], "--max-sessions: bad value '0' (expected a whole number from 1 to 256)"),
                       (["--max-sessions", "+3"], "--max-sessions: bad value '+3'"),
                       (["--idle-timeout=0"], "--idle-timeout: bad value '0' (expected seconds, above 0 and at most 1e7)"),
                       (["--idle-timeout", "1e8"], "at most 1e7"),
                       (["--call-timeout", "0x1p3"], "--call-timeout: bad value '0x1p3'"),
                       (["--mcp-timeout", " 5"], "--mcp-timeout: bad value ' 5'"),
                       (["--max-memory", "1M"], "(expected a size of at least 16M"),
                       (["--output-limit", "15"], "(expected a size from 16 to 16M)"),
                       (["--output-limit"], "--output-limit: needs a value"),
                       (["--call-timeout", "700"], "--call-timeout 700 is above --max-call-timeout 600"),
                       (["--mcp-server", "1x=true"], "--mcp-server 1x: NAME must be a Python identifier of at most 32")):
        p = subprocess.run([NSBOX, "mcp", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
        assert p.returncode == 120 and p.stderr.startswith("nsbox mcp: ") and want in p.stderr and p.stdout == "", (
            args, p.stderr)
        assert "64 characters" not in p.stderr, p.stderr


@pytest.mark.parametrize("code", ["{1: 2}", "{1, 2}", "set()", "frozenset({3})", "frozenset()",
                                  r"b'a\x00\'\\\n\t'", "b'\\x00\\xff\"'", "bytearray(b'xy')",
                                  "(1, {(2,): [b'']})", "{'$k': {1}}"])
def test_values_show_as_python_shows_them(code):
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": code}})])
    assert rc == 0, err
    want = subprocess.run([sys.executable, "-c", "print(repr(%s))" % code], capture_output=True, text=True).stdout
    assert out[0]["result"]["content"][0]["text"] == want.strip(), (code, out)


@pytest.mark.parametrize("structured", [False, True])
def test_a_value_is_held_to_the_output_limit(structured):
    """The last expression's repr was rendered and sent whole: b'\\x80' *
    3_000_000 made a 12 MB text (24 MB with --structured, where it shows
    twice), whatever --output-limit said for stdout.  Now held to the same
    limit, cut with a note; rendering stops there."""
    code = "b'\\x80' * 3_000_000"
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": code}})],
                       *(["--structured"] if structured else []))
    assert rc == 0, err
    res = out[0]["result"]
    text = res["content"][0]["text"]
    assert text.startswith("b'\\x80\\x80") and "the rest of the value is left out" in text, text[:200]
    assert len(text) < (64 << 10) + 200, len(text)
    if structured:
        v = res["structuredContent"]["value"]
        assert "the rest of the value is left out" in v and len(v) < (64 << 10) + 200, len(v)
    # Under the limit, whole as before.
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": "b'\\x80' * 1000"}})])
    assert out[0]["result"]["content"][0]["text"] == "b'" + "\\x80" * 1000 + "'"


def test_complex_values_show_readably():
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": "1+2j"}})])
    assert rc == 0, err
    assert out[0]["result"]["content"][0]["text"] == "complex(1.0, 2.0)"


# ---- code mode: --mcp-server NAME=COMMAND -----------------------------------

SERVER = os.path.join(MCPDIR, "server.mjs")


def _procs_with(tag):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if tag.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def _up(node, name="t"):
    """--mcp-server NAME=COMMAND for the test server, tagged so that the
    test can look for its processes afterwards."""
    tag = "nsbox-up-%d-%s-%d" % (os.getpid(), name, time.monotonic_ns())
    return ["--mcp-server", "%s=NSBOX_TEST_SECRET=hunter2 exec %s %s --tag=%s" % (name, node, SERVER, tag)], tag


def test_code_mode(node):
    args, tag = _up(node)
    o = client(node, "codemode", "--mcp-timeout", "2", *args)
    rp = [t for t in o["tools"] if t["name"] == "run_python"][0]
    # The description lists the functions with their signatures.
    assert "\n- t.add(a, b): Add two integers." in rp["description"]
    assert "- t.get_user(id, verbose=None)" in rp["description"]
    assert "- t.class_()" in rp["description"] and "second line" not in rp["description"]
    # The test server's tools all say openWorldHint false and read-only.
    assert rp["annotations"]["openWorldHint"] is False and rp["annotations"]["destructiveHint"] is False

    assert o["loop"] == {"text": "9900", "isError": False}  # 100 calls from one run_python
    assert o["structured"] == {"text": "('dict', {'id': '7', 'name': 'user 7', 'tags': ['a', 'b'], "
                                       "'$ref': '#/users/7'})", "isError": False}
    assert o["values"]["text"].startswith("('class ok', ['one', 'two', {'type': 'image', ")
    assert '[1,[2.5,{\\"k\\":null,\\"$x\\":' in json.dumps(o["values"]["text"])  # tuple -> array, "$" key kept
    assert o["values"]["text"].endswith(", '3', 'dunder ok')")  # positional arguments bound; __init__ renamed
    assert "Arguments:\n    a (integer, required): the first" in o["doc"]["text"]
    assert o["doc"]["text"].endswith("'(id, verbose=None)'")
    assert o["missing"]["isError"] and "TypeError: t.add(): missing a required argument: 'b'" in o["missing"]["text"]
    assert o["mistyped"]["isError"] and "argument 'a' must be integer, not str" in o["mistyped"]["text"]
    assert o["unknown_kw"]["isError"] and "unexpected keyword argument 'c'" in o["unknown_kw"]["text"]
    assert "nsbox.ToolError: t.echo(): an argument has no JSON form (a builtins.object)" in o["no_json"]["text"]
    assert "t.echo(): an argument has no JSON form (a set)" in o["no_json_set"]["text"]
    assert "(a dict whose keys are not all str)" in o["no_json_keys"]["text"]
    assert "t.echo(): an argument has no JSON form (bytes)" in o["no_json_bytes"]["text"]
    assert o["tool_error"] == {"text": "'caught: t.fail(): it failed on purpose'", "isError": False}
    # The server's environment is its own (the command line gives it the
    # secret); the sandbox sees neither the variable nor the server's process.
    assert o["env"] == {"text": "(None, False, 'hunter2')", "isError": False}
    assert o["calls"]["text"] == "'102'"  # executed by the server, on the host
    assert "no answer from the MCP server t in 2 s" in o["hang"]["text"]
    assert o["after_hang"] == {"text": "'5'", "isError": False}
    assert "rejected" in o["cancelled"]
    assert o["after_cancel"] == {"text": "'42'", "isError": False}
    assert o["time_limit"]["isError"] and "time limit" in o["time_limit"]["text"]
    assert o["after_time_limit"] == {"text": "'2'", "isError": False}
    assert o["in_session"] == {"text": "'10'", "isError": False}  # sessions from new_session have them too
    assert "t.die(): the MCP server t stopped during the call" in o["die"]["text"]
    assert "exited with status 3" in o["die"]["text"]
    assert o["after_die"] == {"text": "2", "isError": False}
    assert "t.add(): the MCP server t is not running" in o["dead"]["text"]
    assert _procs_with(tag) == []


def test_code_mode_server_stopped_at_exit(node):
    args, tag = _up(node, "calc")
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python",
                                               "arguments": {"code": "calc.add(a=1, b=2)"}})], *args)
    assert rc == 0, err
    assert out[0]["result"]["content"][0]["text"] == "'3'"
    assert "--mcp-server calc: 12 tools" in err
    assert _procs_with(tag) == []


def test_code_mode_start_failures(node):
    # A server that exits at once, one that never answers initialize (its
    # process group is killed: no sleep left behind), a bad NAME, a NAME
    # that a --tool has too: clear errors naming it, exit statuses of
    # nsbox(1), nothing on stdout.
    p = subprocess.run([NSBOX, "mcp", "--mcp-server", "bad=exit 7"], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    assert p.returncode == 125 and p.stdout == ""
    assert "--mcp-server bad: cannot start it: initialize:" in p.stderr and "status 7" in p.stderr, p.stderr
    tag = "nsbox-up-sleep-%d" % os.getpid()
    t = time.monotonic()
    p = subprocess.run([NSBOX, "mcp", "--mcp-timeout", "1", "--mcp-server",
                        "slow=sleep 30 # %s" % tag], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       timeout=30)
    assert p.returncode == 125 and "--mcp-server slow: cannot start it: initialize: no answer in time" in p.stderr
    assert time.monotonic() - t < 10
    assert _procs_with(tag) == []
    for bad, what in ((["--mcp-server", "1x=true"], "NAME must be a Python identifier"),
                      (["--mcp-server", "len=true"], "builtin"),
                      (["--mcp-server", "a.b=true"], "NAME must be a Python identifier"),
                      (["--mcp-server", "noequals"], "expected NAME=COMMAND"),
                      (["--mcp-server", "d=true", "--tool", "d=true"], "a --tool has that name"),
                      (["--mcp-server", "d=true", "--mcp-server", "d=true"], "given twice"),
                      (["--mcp-timeout", "0"], "--mcp-timeout")):
        p = subprocess.run([NSBOX, "mcp", *bad], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=30)
        assert p.returncode == 120 and what in p.stderr and p.stdout == "", (bad, p.stderr)


def test_code_mode_oversize_message(node):
    # A message over 8 MiB from the other server ends it (its answer could
    # never be read); the call is a ToolError and nsbox mcp carries on.
    args, tag = _up(node)
    rc, out, err = raw([
        req(1, "tools/call", {"name": "run_python", "arguments": {"code": "len(t.big(n=100000))"}}),
        req(2, "tools/call", {"name": "run_python", "arguments": {"code": "t.big(n=9000000)"}}),
        req(3, "tools/call", {"name": "run_python", "arguments": {"code": "6*7"}}),
    ], *args)
    assert rc == 0, err
    assert out[0]["result"]["content"][0]["text"] == "100000"
    assert out[1]["result"]["isError"] and "over 8388608 bytes" in out[1]["result"]["content"][0]["text"]
    assert out[2]["result"]["content"][0]["text"] == "42"
    assert _procs_with(tag) == []


# A raw MCP server in Python for what the SDK's server won't send: its
# tools/list is in the file argv[1] (JSON); tools/call answers argv[2][name]
# (a JSON-RPC response's members, JSON) or echoes the arguments.
RAW_UP = r'''
import json, os, socket, sys, threading, time
tools, answers = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
def flood(n):
    # answers["$flood"]: n responses nobody asked for, once listed
    line = json.dumps({"jsonrpc": "2.0", "id": 987654321, "result": {"pad": "x" * 1000}}) + "\n"
    for _ in range(n // 100):
        sys.stdout.write(line * 100)
        sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    r = {"result": {}}
    if m["method"] == "initialize":
        r = {"result": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                        "serverInfo": {"name": "raw", "version": "0"}}}
    elif m["method"] == "tools/list":
        r = {"result": {"tools": tools}}
    elif m["method"] == "tools/call" and m["params"]["name"] == answers.get("$deaf"):
        # answers["$deaf"]: a tool whose call is never answered, and after
        # which the server reads no more (writes to it fail) but lives on
        socket.socket(fileno=0).shutdown(socket.SHUT_RD)
        time.sleep(600)
    elif m["method"] == "tools/call" and m["params"]["name"] == answers.get("$busy"):
        time.sleep(answers["$busy_s"])  # answers["$busy"]: a call during which it reads nothing
        r = {"result": {"content": [{"type": "text", "text": "done"}]}}
    elif m["method"] == "tools/call":
        r = answers.get(m["params"]["name"]) or {"result": {"content": [
            {"type": "text", "text": json.dumps(m["params"].get("arguments"))}]}}
    print(json.dumps(dict(r, jsonrpc="2.0", id=m["id"])), flush=True)
    if m["method"] == "tools/list" and "$flood" in answers:
        threading.Thread(target=flood, args=(answers["$flood"],), daemon=True).start()
'''


def _raw_up(tmp_path, tools, answers=None, name="u"):
    script, listed = tmp_path / "raw_up.py", tmp_path / ("%s-tools.json" % name)
    script.write_text(RAW_UP)
    listed.write_text(json.dumps(tools))
    tag = "nsbox-rawup-%d-%d" % (os.getpid(), time.monotonic_ns())
    return ["--mcp-server", "%s=exec /usr/bin/python3.11 %s %s %s %s" % (
        name, script, listed, _sh(json.dumps(answers or {})), tag)], tag


def _sh(s):
    return "'" + s.replace("'", "'\\''") + "'"


def test_code_mode_text_cut_inside_a_character(tmp_path):
    # The other server's text is cut to a size on its way: a tool's first
    # description line to 200 bytes in run_python's description (tools/list
    # was never answered), its description to 2000 bytes, an error's text
    # to 1500 or 1792 bytes (the answer was refused and the sandbox's call
    # waited for the time limit).
    tools = [{"name": "short", "description": "a" * 199 + "é and more", "inputSchema": {"type": "object"}},
             {"name": "long", "description": "b" * 1999 + "é" * 10, "inputSchema": {"type": "object"}},
             {"name": "rpcerr", "inputSchema": {"type": "object"}},
             {"name": "iserr", "inputSchema": {"type": "object"}}]
    answers = {"rpcerr": {"error": {"code": 1, "message": "e" * 1499 + "é" * 9}},
               "iserr": {"result": {"content": [{"type": "text", "text": "c" * 1790 + "é" * 50}], "isError": True}}}
    args, tag = _raw_up(tmp_path, tools, answers)
    code = ("import nsbox\nout = []\nfor f in (u.rpcerr, u.iserr):\n    try:\n        f()\n"
            "    except nsbox.ToolError as e:\n        out.append(str(e)[-3:])\nout, len(u.long.__doc__) > 1900")
    rc, out, err = raw([req(1, "tools/list"),
                        req(2, "tools/call", {"name": "run_python", "arguments": {"code": code, "timeout_s": 20}})],
                       *args)
    assert rc == 0, err
    assert [m["id"] for m in out] == [1, 2], out
    desc = out[0]["result"]["tools"][0]["description"]
    assert "\n- u.short(**kwargs): " + "a" * 199 + "\n" in desc, desc
    assert out[1]["result"] == {"content": [{"type": "text", "text": "(['eee', 'ccc'], True)"}], "isError": False}
    assert _procs_with(tag) == []


def test_code_mode_calls_to_a_server_found_stopped_by_a_write_end_at_once(tmp_path):
    # A server found stopped by a write (here: it reads no more, the next
    # call's write fails) is not polled any more: the calls still waiting
    # for it were answered only at --mcp-timeout (30 s here), the code
    # held until then.  Now at once.
    tools = [{"name": "deaf", "inputSchema": {"type": "object"}},
             {"name": "echo", "inputSchema": {"type": "object"}}]
    args, tag = _raw_up(tmp_path, tools, {"$deaf": "deaf"})
    code = ("import threading, time\nr = {}\ndef a():\n    try:\n        u.deaf()\n"
            "    except Exception as e:\n        r['deaf'] = str(e)\n"
            "t = threading.Thread(target=a)\nt.start()\ntime.sleep(1)\n"
            "try:\n    u.echo()\nexcept Exception as e:\n    r['echo'] = str(e)\nt.join()\nr")
    t0 = time.time()
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": code, "timeout_s": 50}})],
                       "--mcp-timeout", "30", *args)
    took = time.time() - t0
    assert rc == 0, err
    text = out[0]["result"]["content"][0]["text"]
    assert "u.deaf(): the MCP server u stopped during the call" in text, text
    assert "u.echo(): the MCP server u is not running" in text, text
    assert took < 15, (took, text)
    assert _procs_with(tag) == []


def test_code_mode_a_busy_server_is_not_stopped_by_a_large_call(tmp_path):
    # A server busy with one call (reading nothing meanwhile, as a plain
    # sequential server does) and a second call with 8 MB of arguments: the
    # write waited on the loop's only thread (pings unanswered) and after
    # 10 s the server was killed as "stopped reading its input", for good.
    # Now calls are queued and written as it reads.
    tools = [{"name": "busy", "inputSchema": {"type": "object"}},
             {"name": "echo", "inputSchema": {"type": "object"}}]
    args, tag = _raw_up(tmp_path, tools, {"$busy": "busy", "$busy_s": 11})
    code = ("import threading, time\nr = {}\nt = threading.Thread(target=lambda: r.update(busy=u.busy()))\n"
            "t.start()\ntime.sleep(0.5)\nr['echo'] = len(u.echo(x='a' * 8_000_000))\nt.join()\nr")
    p = subprocess.Popen([NSBOX, "mcp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        t0 = time.time()
        p.stdin.write((req(1, "tools/call", {"name": "run_python", "arguments": {"code": code, "timeout_s": 50}})
                       + "\n").encode())
        p.stdin.flush()
        time.sleep(3)
        p.stdin.write((req(2, "ping") + "\n" + req(3, "tools/call", {
            "name": "run_python", "arguments": {"code": "u.echo(x='later')"}}) + "\n").encode())
        p.stdin.close()
        got = {}
        for line in p.stdout:
            m = json.loads(line)
            got[m["id"]] = (time.time() - t0, m)
        assert p.wait(timeout=30) == 0
    finally:
        reap(p)
    assert got[2][0] < 6, got[2]
    assert got[1][1]["result"]["content"][0]["text"] == "{'busy': 'done', 'echo': 8000009}", got[1]
    assert got[3][1]["result"]["content"][0]["text"] == "'{\"x\": \"later\"}'", got[3]
    assert _procs_with(tag) == []


def test_code_mode_many_tools_start_a_session_quickly(tmp_path):
    # Each tool went to the runner in a TOOLS message that carried the
    # whole list, and the runner made every tool of it again: a session
    # with a server's 256 tools (~2 KB each) took 4.7 s to start, the
    # server answering nothing meanwhile.  Now each TOOLS carries the new
    # tool alone.
    props = {"p%d" % i: {"type": "string", "description": "x" * 40} for i in range(20)}
    tools = [{"name": "t%d" % i, "description": "d" * 1999, "inputSchema": {"type": "object", "properties": props}}
             for i in range(256)]
    args, tag = _raw_up(tmp_path, tools)
    p = subprocess.Popen([NSBOX, "mcp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        took = []
        for i, (name, a) in enumerate((("run_python", {"code": "len(u.__all__), u.t255(p3='x')"}),
                                       ("new_session", {}))):
            t0 = time.monotonic()
            p.stdin.write(req(i, "tools/call", {"name": name, "arguments": a}) + "\n")
            p.stdin.flush()
            r = json.loads(p.stdout.readline())
            took.append(time.monotonic() - t0)
            assert r["id"] == i and not r["result"]["isError"], r
            if i == 0:
                assert r["result"]["content"][0]["text"] == "(256, '{\"p3\": \"x\"}')"
        p.stdin.close()
        assert p.wait(timeout=30) == 0
    finally:
        reap(p)
    assert max(took) < 1.5, took
    assert _procs_with(tag) == []


# ---- the stateless 2026-07-28 revision ----------------------------------------

CLIENT2 = os.path.join(MCPDIR, "client2.mjs")


def _node_major(node):
    return int(subprocess.run([node, "--version"], capture_output=True, text=True).stdout.lstrip("v").split(".")[0])


@pytest.fixture(scope="module")
def node20(node):
    # The v2 SDK packages and the Inspector need node >= 20 (Debian 12's
    # own nodejs is 18): said loudly, not a silent skip.
    if _node_major(node) < 20:
        pytest.skip("node %d: the SDK's v2 client and the MCP Inspector need node >= 20" % _node_major(node))
    return node


@pytest.mark.parametrize("mode", ["pin", "auto", "legacy"])
def test_modern_revision_sdk_v2(node20, mode):
    # The SDK's v2 client: pinned to 2026-07-28 (server/discover, then the
    # envelope on each request), auto (probes with server/discover, picks
    # the modern era), legacy (the 2025-11-25 initialize handshake).
    p = subprocess.run([node20, CLIENT2, NSBOX, mode], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    o = json.loads(p.stdout)
    assert "fatal" not in o, o.get("fatal")
    assert p.returncode == 0, p.stderr
    assert o["version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert o["server"]["name"] == "nsbox" and o["capabilities"]["tools"] is not None
    assert o["tools"][0] == "run_python"
    assert o["run"]["text"] == "42" and o["state"]["text"] == "43"  # the default session is kept
    if mode != "legacy":
        assert o["run"]["meta"] == {"io.modelcontextprotocol/serverInfo": {"name": "nsbox",
                                                                          "version": o["server"]["version"]}}
    else:
        assert o["run"]["meta"] is None and o["ping"] is True
    assert o["progress"]["n"] >= 1 and "tick 0" in o["progress"]["messages"][0]
    assert "rejected" in o["cancelled"] and o["after_cancel"] == {"text": "'alive'", "isError": False}


def test_modern_revision_raw():
    env = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
           "io.modelcontextprotocol/clientCapabilities": {}}

    def with_meta(meta, **params):
        return dict(params, _meta=meta)

    rc, out, err = raw([
        req(1, "server/discover", with_meta(env)),
        req(2, "tools/list", with_meta(env)),
        req(3, "tools/call", with_meta(env, name="run_python", arguments={"code": "6*7"})),
        req(4, "tools/call", with_meta(dict(env, **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"}),
                                       name="run_python", arguments={"code": "1"})),
        req(5, "tools/list", with_meta({"io.modelcontextprotocol/protocolVersion": "2026-07-28"})),
        req(6, "tools/list", with_meta(dict(env, **{"io.modelcontextprotocol/clientCapabilities": []}))),
        req(7, "initialize", with_meta(env, protocolVersion="2025-11-25", capabilities={},
                                       clientInfo={"name": "raw", "version": "0"})),
        req(8, "server/discover"),
        req(9, "tools/list"),  # no envelope: 2025 traffic, served as before
        req(10, "tools/call", with_meta(env, name="run_python", arguments={})),
    ])
    assert rc == 0, err
    by_id = {m.get("id"): m for m in out}
    d = by_id[1]["result"]
    assert d["supportedVersions"] == ["2026-07-28"]
    assert d["capabilities"] == {"tools": {"listChanged": False}, "resources": {"listChanged": False}}
    assert d["resultType"] == "complete" and "sandbox" in d["instructions"]
    assert d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "nsbox"
    assert by_id[2]["result"]["resultType"] == "complete" and by_id[2]["result"]["ttlMs"] == 0
    assert len(by_id[2]["result"]["tools"]) == 6
    assert by_id[3]["result"]["content"][0]["text"] == "42" and by_id[3]["result"]["resultType"] == "complete"
    e = by_id[4]["error"]
    assert e["code"] == -32022 and e["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}
    e = by_id[5]["error"]
    assert e["code"] == -32602 and e["data"]["envelope"] == {"key": "io.modelcontextprotocol/clientCapabilities",
                                                             "problem": "missing"}
    assert by_id[6]["error"]["code"] == -32602 and "expected an object" in by_id[6]["error"]["message"]
    assert by_id[7]["error"]["code"] == -32601 and "server/discover" in by_id[7]["error"]["message"]
    assert by_id[8]["error"]["code"] == -32602 and "envelope" in by_id[8]["error"]["message"]
    assert "resultType" not in by_id[9]["result"] and "_meta" not in by_id[9]["result"]
    assert by_id[10]["error"]["code"] == -32602 and "'code'" in by_id[10]["error"]["message"]


# ---- the MCP Inspector's CLI mode ---------------------------------------------

def inspector(node, *args, era=None, rc=0, timeout=120):
    """npx @modelcontextprotocol/inspector --cli, from tests/mcp's pinned
    install (npx --no-install: never the registry)."""
    npx = shutil.which("npx")
    if not npx:
        _need("npx is not installed")
    if not os.path.isdir(os.path.join(MCPDIR, "node_modules", "@modelcontextprotocol", "inspector")):
        _need("the MCP Inspector is not installed in tests/mcp (npm ci there)")
    cmd = [npx, "--no-install", "@modelcontextprotocol/inspector", "--cli", NSBOX, "mcp"]
    if era:
        cmd += ["--protocol-era", era]
    home = os.path.join("/tmp", "nsbox-test-inspector-%d" % os.getpid())
    os.makedirs(home, exist_ok=True)
    try:
        p = subprocess.run(cmd + list(args), cwd=MCPDIR, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL,
                           env=dict(os.environ, HOME=home, MCP_CATALOG_PATH=os.path.join(home, "mcp.json"),
                                    npm_config_update_notifier="false", npm_config_offline="true"))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert p.returncode == rc, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return json.loads(p.stdout)


@pytest.mark.parametrize("era", [None, "modern"])
def test_inspector_cli(node20, era):
    tools = inspector(node20, "--method", "tools/list", era=era)["tools"]
    assert [t["name"] for t in tools] == ["run_python", "new_session", "close_session", "read_file", "write_file",
                                          "list_files"]
    r = inspector(node20, "--method", "tools/call", "--tool-name", "run_python", "--tool-arg", "code=print(6*7)",
                  era=era)
    assert r["content"][0]["text"] == "[stdout]\n42" and r["isError"] is False
    if era == "modern":  # served as 2026-07-28: the result names its server
        assert r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "nsbox"
    # A tool result with isError is the Inspector's exit status 5 (TOOL_ERROR).
    r = inspector(node20, "--method", "tools/call", "--tool-name", "run_python", "--tool-arg", "code=1/0", era=era,
                  rc=5)
    assert r["isError"] is True and "ZeroDivisionError" in r["content"][0]["text"]


def test_sigterm_closes_everything(node):
    # SIGTERM is how a stdio client stops its server.  The default session
    # is this process's own sandbox (made in process): nsbox mcp closes it,
    # and its cgroup with it (host_intact checks), stops the code-mode
    # server, and dies of the signal.
    args, tag = _up(node)
    p = subprocess.Popen([NSBOX, "mcp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        p.stdin.write(req(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "0"}}) + "\n")
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["id"] == 1
        p.stdin.write(req(2, "tools/call", {"name": "run_python", "arguments": {
            "code": "import time\nprint(t.add(a=1, b=2), flush=True)\ntime.sleep(60)"}}) + "\n")
        p.stdin.flush()
        time.sleep(1.5)
        assert _procs_with(tag)
        t = time.monotonic()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == -signal.SIGTERM
        assert time.monotonic() - t < 10
        assert p.stdout.read() == ""  # no answer to the call cut short
    finally:
        reap(p)
    assert _procs_with(tag) == []


def test_sigterm_stops_a_server_whose_client_does_not_read():
    # A client that stopped reading stdout: the server waits to write (the
    # pipe is full), and SIGTERM must still end it.  The write was a
    # blocking write(2) that SA_RESTART restarted after the signal: the
    # server never ended, and the client's SIGKILL left the default
    # session's cgroup behind (host_intact checks).
    p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write((req(1, "tools/call", {"name": "run_python", "arguments": {"code": "1"}}) + "\n").encode())
        p.stdin.write(b"".join((req(100 + i, "tools/list") + "\n").encode() for i in range(100)))  # ~400 KiB
        p.stdin.flush()
        time.sleep(2)
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == -signal.SIGTERM
    finally:
        reap(p)


def test_a_client_that_never_reads_stderr_does_not_hold_the_server(tmp_path):
    """Warnings went to stderr with a blocking write: a session whose
    write-back fails says so at its end (and each start's cgroup fallback,
    without delegation), and a client that pipes stderr and never reads it
    (the TypeScript SDK's stderr: "pipe") had the server stop for good once
    the pipe was full, ~64 such ends here.  Now a warning that finds stderr
    full is left out and counted; every call is answered."""
    ws = tmp_path / "ws"
    ws.mkdir()
    ws.chmod(0o777)
    # A file the write-back can't read (mode 000, its copy has no
    # capability) under a ~1 KiB path: one ~1 KiB warning per session end.
    code = ("import os\nd = '/workspace/' + '/'.join(['d' * 250] * 4)\nos.makedirs(d, exist_ok=True)\n"
            "p = d + '/f'\nopen(p, 'w').close()\nos.chmod(p, 0)\nos._exit(1)")
    p = subprocess.Popen([NSBOX, "mcp", "--workspace", str(ws)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        answered = 0
        for i in range(120):
            p.stdin.write((req(i, "tools/call", {"name": "run_python", "arguments": {"code": code}}) + "\n").encode())
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], 30)
            assert ready, "no answer to call %d: the server is held" % i
            assert json.loads(p.stdout.readline())["id"] == i
            answered += 1
        assert answered == 120

        def drain():
            got = b""
            while select.select([p.stderr], [], [], 0.5)[0]:
                chunk = os.read(p.stderr.fileno(), 65536)
                if not chunk:
                    break
                got += chunk
            return got.decode(errors="replace")
        err = drain()
        assert err.count("copy /workspace/") >= 20, err[-500:]
        # Read now: the next warning fits, and says how many were left out.
        p.stdin.write((req(999, "tools/call", {"name": "run_python", "arguments": {"code": code}}) + "\n").encode())
        p.stdin.flush()
        assert select.select([p.stdout], [], [], 30)[0] and json.loads(p.stdout.readline())["id"] == 999
        time.sleep(0.5)
        err = drain()
        assert "warnings left out (stderr was full)" in err and "copy /workspace/" in err, err[-500:]
        p.stdin.close()
        assert p.wait(timeout=30) == 0
    finally:
        reap(p)


def _sleeps(tag):
    """The pids of `sleep TAG` processes."""
    return [pid for pid in _procs_with(tag) if _cmdline(pid) == b"sleep\0" + tag.encode() + b"\0"]


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_a_host_tool_command_ends_at_the_time_limit_and_on_sigterm():
    # A --tool command runs on the server's only thread: it ran to its own
    # end (30 s here) past run_python's timeout_s, and SIGTERM waited for
    # it.  Now its process group is killed at the limit, and on SIGTERM.
    tag = "33.%d" % os.getpid()
    tool = "slow=sleep %s; echo 1" % tag
    t0 = time.time()
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": "slow()",
                                                                               "timeout_s": 1}})],
                       "--tool", tool)
    assert rc == 0 and time.time() - t0 < 15, (rc, time.time() - t0, err)
    assert "time limit" in out[0]["result"]["content"][0]["text"], out
    assert not _sleeps(tag)
    p = subprocess.Popen([NSBOX, "mcp", "--tool", tool], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        p.stdin.write((req(1, "tools/call", {"name": "run_python", "arguments": {"code": "slow()"}}) + "\n").encode())
        p.stdin.flush()
        for _ in range(100):
            if _sleeps(tag):
                break
            time.sleep(0.1)
        assert _sleeps(tag)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == -signal.SIGTERM
        assert not _sleeps(tag)
    finally:
        reap(p)
        for pid in _sleeps(tag):
            os.kill(pid, 9)


def test_a_client_that_stops_reading_does_not_stretch_the_time_limit():
    # The time limit is enforced by the loop that advances the exec; while
    # the server waited to write to a client that stopped reading (pings
    # answered during the exec filled its pipe), code with timeout_s 2 ran
    # its 6 s to the end.  Now the sandbox is killed at the limit (and the
    # grace a cancel gets).
    p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        code = "import time\nfor _ in range(60):\n    time.sleep(0.1)\nprint('ran to the end')"
        p.stdin.write((req(1, "tools/call", {"name": "run_python", "arguments": {"code": code, "timeout_s": 2}})
                       + "\n").encode())
        p.stdin.flush()
        time.sleep(1)
        p.stdin.write(b"".join((req(1000 + i, "ping") + "\n").encode() for i in range(4000)))  # ~150 KiB of answers
        p.stdin.flush()
        time.sleep(6)
        p.stdin.close()
        out = {m["id"]: m for m in map(json.loads, p.stdout)}
        assert p.wait(timeout=30) == 0
    finally:
        reap(p)
    text = out[1]["result"]["content"][0]["text"]
    assert "ran to the end" not in text and "time limit" in text, text
    assert len(out) == 4001


def test_large_lines_in_pieces():
    # Lines longer than one read, one after another, each arriving in
    # pieces: the server's line buffer grows (and never shrinks under its
    # own record of its size) and both are answered.
    p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sizes = [200000, 300000, 700000, 1000000, 1400000, 100]
    data = b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping", "params": {"pad": "A" * n}}).encode()
                    + b"\n" for i, n in enumerate(sizes))
    for k in range(0, len(data), 65536):
        p.stdin.write(data[k:k + 65536])
        p.stdin.flush()
        time.sleep(0.001)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert [m["id"] for m in map(json.loads, out.splitlines())] == list(range(len(sizes)))


def test_code_mode_large_answers(node):
    # Answers from the other server of every size up to a few MiB, read in
    # pieces by nsbox mcp, each whole (a line finished by a later read was
    # copied past the buffer's end).
    args, tag = _up(node)
    sizes = [65536 * k + d for k in (1, 2, 4, 6, 7, 8, 16, 31) for d in (-200, 0, 30000)]
    code = "[len(t.echo(value='A' * n)) - n for n in %r]" % sizes
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": code}})], *args)
    assert rc == 0, err
    assert out[0]["result"]["content"][0]["text"] == repr([2] * len(sizes)), out[0]
    assert _procs_with(tag) == []


def test_client_closing_stdout_closes_everything():
    # A client that closes the server's stdout mid-call: the sessions are
    # closed (conftest checks no cgroup or process is left), then nsbox mcp
    # ends as SIGPIPE would end it.
    p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write((req(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "t", "version": "0"}}) + "\n").encode())
    p.stdin.flush()
    assert json.loads(p.stdout.readline())["id"] == 1
    p.stdin.write((req(2, "tools/call", {"name": "run_python", "arguments": {"code": "import time; time.sleep(1); 1"}})
                   + "\n").encode())
    p.stdin.flush()
    time.sleep(0.3)
    p.stdout.close()
    assert p.wait(timeout=30) == -signal.SIGPIPE, p.stderr.read()
    p.stdin.close()
    p.stderr.close()



def test_a_client_gone_mid_call_stops_the_call():
    # A client that goes away (both pipes closed) during a long call: it
    # was seen only when the answer was written, so the code ran on to its
    # end (up to --max-call-timeout) for nobody.  Its stdout's POLLERR
    # stops it now, as SIGPIPE would.
    p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write((req(1, "tools/call", {"name": "run_python", "arguments": {
            "code": "import time; time.sleep(30)"}}) + "\n").encode())
        p.stdin.flush()
        time.sleep(1.5)
        t = time.monotonic()
        p.stdin.close()
        p.stdout.close()
        assert p.wait(timeout=60) == -signal.SIGPIPE
        assert time.monotonic() - t < 5
    finally:
        reap(p)


def test_nul_in_output_and_values():
    # U+0000 is output and value like any character: shown as python shows
    # it, the session alive (it was a protocol error).
    code = "import sys; print('a' + chr(0) + 'b'); 'x' + chr(0)"
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": code}}),
                        req(2, "tools/call", {"name": "run_python", "arguments": {"code": "6*7"}})])
    assert rc == 0, err
    assert out[0]["result"]["content"][0]["text"] == "[stdout]\na\0b\n'x\\x00'", out
    assert out[1]["result"]["content"][0]["text"] == "42", out

def test_raw_nul_byte_is_a_parse_error():
    # jansson reads a raw NUL between tokens as a blank: this line was
    # answered as a ping.  RFC 8259 has no such blank, and a reader that
    # stops at the NUL would see another message than the server.
    rc, out, err = raw(['{"jsonrpc":"2.0","id":1\0,"method":"ping"}', req(2, "ping")])
    assert rc == 0, err
    assert out[0]["id"] is None and out[0]["error"]["code"] == -32700 and "NUL" in out[0]["error"]["message"], out
    assert out[1]["id"] == 2 and out[1]["result"] == {}, out


def test_escaped_nul_is_json():
    # RFC 8259 allows \u0000 in a string: such a request was a parse error
    # answered with id null, so the client never got an answer for its id.
    # Where a string is used as a C string (a method, code, a path) U+0000
    # is refused by name; write_file's text keeps it.
    rc, out, err = raw([
        req(1, "tools/call", {"name": "write_file", "arguments": {"path": "/tmp/n.txt", "text": "a\0b"}}),
        req(2, "tools/call", {"name": "run_python", "arguments": {
            "code": "open('/tmp/n.txt', 'rb').read()"}}),
        req(3, "tools/call", {"name": "run_python", "arguments": {"code": "1\0; import os"}}),
        req(4, "tools/call", {"name": "read_file", "arguments": {"path": "/tmp/n.txt\0.png"}}),
        req(5, "ping\0x"),
        req("6\0", "ping"),
        req(7, "tools/call", {"name": "run_python\0", "arguments": {"code": "1"}}),
    ])
    assert rc == 0, err
    by_id = {m["id"]: m for m in out}
    assert sorted(by_id, key=str) == [1, 2, 3, 4, 5, "6\0", 7], out
    assert by_id[1]["result"]["content"][0]["text"] == "wrote 3 bytes to /tmp/n.txt"
    assert by_id[2]["result"]["content"][0]["text"] == "b'a\\x00b'"
    for i, what in ((3, "'code' must not contain U+0000"), (4, "'path' must not contain U+0000"),
                    (7, "'name' (a string without U+0000)")):
        assert by_id[i]["error"]["code"] == -32602 and what in by_id[i]["error"]["message"], by_id[i]
    assert by_id[5]["error"]["code"] == -32600 and "U+0000" in by_id[5]["error"]["message"]
    assert by_id["6\0"]["result"] == {}


def test_duplicate_keys_are_a_parse_error():
    # jansson kept the last of two equal keys; a gateway that reads the
    # first would see list_files (or id 2) where this server ran code (and
    # answered id 3).  RFC 8259 leaves such a message's meaning open.
    rc, out, err = raw([
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_files","arguments":{}},'
        '"params":{"name":"run_python","arguments":{"code":"print(42)"}}}',
        '{"jsonrpc":"2.0","id":2,"id":3,"method":"ping"}',
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run_python","arguments":'
        '{"code":"1","code":"2"}}}',
        req(5, "ping")])
    assert rc == 0, err
    assert [(m["id"], m.get("error", {}).get("code")) for m in out] == [(None, -32700)] * 3 + [(5, None)], out
    assert all("duplicate" in m["error"]["message"] for m in out[:3])


def test_a_cancellation_with_an_id_is_a_request_and_answered():
    # notifications/cancelled was taken as the notification whatever it
    # carried: one with an id (a request, per JSON-RPC) was never answered.
    rc, out, err = raw([json.dumps({"jsonrpc": "2.0", "id": 7, "method": "notifications/cancelled",
                                    "params": {"requestId": 5}}),
                        json.dumps({"jsonrpc": "2.0", "id": 8, "method": "notifications/initialized"}),
                        req(9, "ping")])
    assert rc == 0, err
    assert [(m["id"], m.get("error", {}).get("code")) for m in out] == [(7, -32601), (8, -32601), (9, None)], out


def test_invalid_requests_are_invalid():
    rc, out, err = raw(["5", '"x"', json.dumps({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
                        json.dumps({"id": 2, "method": "ping"}), req(3, "ping")])
    assert rc == 0, err
    assert [m.get("error", {}).get("code") for m in out] == [-32600, -32600, -32600, -32600, None], out
    assert out[4]["id"] == 3 and out[4]["result"] == {}


def test_every_request_is_answered_when_its_error_quotes_a_cut_character():
    # An error message quotes the client's text cut to a size (%.200s, a
    # 1 KiB buffer); a cut inside a UTF-8 sequence made the message
    # invalid, json_pack refused it and the request was never answered.
    modern = {"io.modelcontextprotocol/protocolVersion": "x" * 199 + "é",
              "io.modelcontextprotocol/clientCapabilities": {}}
    rc, out, err = raw([req(1, "a" * 199 + "é"),
                        req(2, "tools/call", {"name": "x" * 199 + "é"}),
                        req(3, "tools/call", {"name": "é" * 600 + "x", "arguments": 5}),
                        req(4, "resources/read", {"uri": "nsbox://session/" + "é" * 200}),
                        req(5, "tools/list", {"_meta": modern}),
                        req(6, "ping")])
    assert rc == 0, err
    assert [m["id"] for m in out] == [1, 2, 3, 4, 5, 6], (out, err)
    assert [m["error"]["code"] for m in out[:5]] == [-32601, -32602, -32602, -32602, -32022]
    assert out[0]["error"]["message"] == "method not found: " + "a" * 199  # the cut character left out
    assert out[4]["error"]["data"]["requested"] == "x" * 199 + "é"


# For the tests that measure the server's peak memory: a sanitized build's
# ASan keeps 256 MiB of freed memory in quarantine by default.
LEAN = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=1")


def _hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([l for l in f if l.startswith("VmHWM:")][0].split()[1])


def test_what_a_client_sends_during_an_exec_is_bounded():
    # While an exec runs, stdin is read (ping and cancel are answered at
    # once) and the rest parsed and queued: without a bound, a client that
    # sends on grew the server by gigabytes (a jansson tree costs ~40 times
    # its line).  Now a line of more than 65536 values is refused before it
    # is parsed, and stdin waits while 1024 messages or 64 MiB wait.
    import threading
    p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=LEAN)
    try:
        p.stdin.write((req(1, "tools/call", {"name": "run_python", "arguments": {
            "code": "import time; time.sleep(5); 'slept'"}}) + "\n").encode())
        p.stdin.flush()
        time.sleep(1)
        wide = b"[" + b"[]," * (2500 * 1000) + b"[]]\n"                     # 7.5 MiB, 2.5 M values
        many = (json.dumps({"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": [[]] * 100}})
                + "\n").encode() * 50000                                   # 16 MiB, 5 M values

        def send():
            try:
                p.stdin.write(wide + many + (req(2, "ping") + "\n").encode())
                p.stdin.close()
            except BrokenPipeError:
                pass
        t = threading.Thread(target=send)
        t.start()
        time.sleep(3)
        hwm = _hwm_kib(p.pid)
        out = [json.loads(l) for l in p.stdout]
        t.join()
        assert p.wait(timeout=30) == 0
    finally:
        reap(p)
    assert hwm < 100 * 1024, hwm  # it was ~1 GB
    assert out[0]["id"] == 1 and out[0]["result"]["content"][0]["text"] == "'slept'", out[0]
    assert out[1]["id"] is None and out[1]["error"]["code"] == -32600 and "65536" in out[1]["error"]["message"]
    assert out[2] == {"jsonrpc": "2.0", "id": 2, "result": {}} and len(out) == 3, out[2:]


def test_what_a_code_mode_server_sends_unasked_is_not_kept(tmp_path):
    # Its responses were kept until the exec ended unless a call of the
    # sandbox's was in flight: 60 MiB of them grew the server by ~170 MB.
    # 60,000 responses of ~1 KiB with an id no call has (RAW_UP's $flood).
    args, _ = _raw_up(tmp_path, [{"name": "t", "inputSchema": {"type": "object"}}], {"$flood": 60000})
    p = subprocess.Popen([NSBOX, "mcp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=LEAN)
    try:
        p.stdin.write((req(1, "tools/call", {"name": "run_python", "arguments": {
            "code": "import time; time.sleep(4); 'slept'"}}) + "\n").encode())
        p.stdin.flush()
        out = [json.loads(p.stdout.readline())]
        hwm = _hwm_kib(p.pid)
        p.stdin.close()
        out += [json.loads(l) for l in p.stdout]
        assert p.wait(timeout=30) == 0
    finally:
        reap(p)
    assert out[0]["id"] == 1 and out[0]["result"]["content"][0]["text"] == "'slept'" and len(out) == 1, out
    assert hwm < 60 * 1024, hwm


def test_batches_in_the_revision_that_has_them():
    # 2025-03-26 allowed JSON-RPC batches: answered as one array (none for
    # notifications); later revisions removed them and they are refused.
    def init(v):
        return req(1, "initialize", {"protocolVersion": v, "capabilities": {},
                                     "clientInfo": {"name": "raw", "version": "0"}})
    batch = "[%s,%s,%s,%s]" % (req(2, "ping"), req(3, "tools/call", {"name": "run_python",
                                                                        "arguments": {"code": "6*7"}}),
                                json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                                req(4, "no/such"))
    rc, out, err = raw([init("2025-03-26"), batch, "[]", "[%s]" % json.dumps({"jsonrpc": "2.0",
                                                                             "method": "notifications/x"}),
                        req(5, "ping")])
    assert rc == 0, err
    assert out[0]["result"]["protocolVersion"] == "2025-03-26"
    assert isinstance(out[1], list) and [m["id"] for m in out[1]] == [2, 3, 4], out[1]
    assert out[1][0]["result"] == {} and out[1][1]["result"]["content"][0]["text"] == "42"
    assert out[1][2]["error"]["code"] == -32601
    assert out[2]["error"]["code"] == -32600 and "empty" in out[2]["error"]["message"]
    assert out[3]["id"] == 5 and len(out) == 4  # the batch of one notification has no answer
    rc, out, err = raw([init("2025-06-18"), batch])
    assert out[1]["error"]["code"] == -32600 and "batches" in out[1]["error"]["message"], out


def test_a_batch_answer_is_capped():
    # A batch's responses are sent as one array when its last member is
    # done: 1500 calls that each print 64 KiB were ~100 MB held whole (and
    # a line holds thousands more, a result up to 8 MiB of images).  Past
    # 64 MiB a response is left out and the members left are not run, each
    # answered with -32603 in its place.
    init = req(0, "initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                 "clientInfo": {"name": "raw", "version": "0"}})
    call = {"name": "run_python", "arguments": {"code": "print('payload' * 10000)"}}
    batch = "[%s]" % ",".join(req(i, "tools/call", call) for i in range(1, 1501))
    p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=LEAN)
    try:
        p.stdin.write((init + "\n" + batch + "\n").encode())
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["id"] == 0
        line = p.stdout.readline()
        hwm = _hwm_kib(p.pid)
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        reap(p)
    out = json.loads(line)
    assert [m["id"] for m in out] == list(range(1, 1501))
    ok = [m for m in out if "result" in m]
    assert 900 < len(ok) < 1100 and all(m["result"]["content"][0]["text"].startswith("[stdout]\npayloadpayload") for m in ok)
    assert out[:len(ok)] == ok  # the first ones, then errors
    errs = [m["error"] for m in out[len(ok):]]
    assert all(e["code"] == -32603 and "over 64 MiB" in e["message"] for e in errs)
    assert "left out" in errs[0]["message"] and "not run" in errs[-1]["message"]
    assert len(line) < 70 << 20 and hwm < 160 * 1024, (len(line), hwm)


class RawMcp:
    """`nsbox mcp` driven line by line, initialized: send() a request,
    wait_for() an answer by id (the others that came first are kept in
    got)."""

    # A thread of the session's own that holds its interpreter for ~20 s.
    HOG = ("import threading, time\ndef hog():\n    time.sleep(0.2)\n    sum(range(3 * 10**9))\n"
           "threading.Thread(target=hog, daemon=True).start()\n'started'")

    def __init__(self):
        self.p = subprocess.Popen([NSBOX, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        self.got = {}
        self.send(req(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "raw", "version": "0"}}))
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def wait_for(self, i):
        while i not in self.got:
            m = json.loads(self.p.stdout.readline())
            self.got[m.get("id")] = m
        return self.got[i]

    def stop(self):
        """SIGTERM, the stdio transport's "stop now": the exec is cancelled
        and its sandbox, where the cancel can't run (a hog holds the
        interpreter), killed after a second."""
        self.p.terminate()
        rc = self.p.wait(timeout=15)
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            f.close()
        assert rc == -signal.SIGTERM


def test_a_cancelled_file_tool_is_not_answered():
    # notifications/cancelled of a read_file (waiting in open() of a fifo
    # with no writer): no response, as for run_python; it answered
    # "cancelled" (isError).
    m = RawMcp()
    try:
        m.send(req(2, "tools/call", {"name": "run_python", "arguments": {"code": "import os; os.mkfifo('/tmp/f')"}}))
        assert not m.wait_for(2)["result"]["isError"]
        m.send(req(3, "tools/call", {"name": "read_file", "arguments": {"path": "/tmp/f"}}))
        time.sleep(0.5)
        m.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}))
        m.send(req(4, "tools/call", {"name": "run_python", "arguments": {"code": "'after'"}}))
        assert m.wait_for(4)["result"]["content"][0]["text"] == "'after'"
        assert 3 not in m.got, m.got[3]
    finally:
        m.stop()


def test_resource_read_on_a_held_runner_does_not_hold_the_server():
    """resources/read of an /out file on a session whose own thread holds
    its interpreter: nsbox_read_file waited on the server's only thread, so
    a ping sent after it was answered when the hog ended or the control
    timeout killed the sandbox (28 s in the red team's run, pass 4).  It is
    an exec now, driven like run_python's."""
    m = RawMcp()
    try:
        m.send(req(2, "tools/call", {"name": "run_python", "arguments": {"code": "open('/out/a.txt', 'w').write('hi')"}}))
        (link,) = [c for c in m.wait_for(2)["result"]["content"] if c["type"] == "resource_link"]
        m.send(req(3, "resources/read", {"uri": link["uri"]}))
        assert m.wait_for(3)["result"]["contents"] == [{"uri": link["uri"], "mimeType": "text/plain", "text": "hi"}]
        m.send(req(4, "tools/call", {"name": "run_python", "arguments": {"code": RawMcp.HOG}}))
        m.wait_for(4)
        time.sleep(0.5)                     # the hog holds the runner
        m.send(req(5, "resources/read", {"uri": link["uri"]}))
        time.sleep(0.2)                     # resources/read waits on the runner
        t0 = time.monotonic()
        m.send(req(6, "ping"))
        m.wait_for(6)
        waited = time.monotonic() - t0
        assert 5 not in m.got and waited < 10, (sorted(m.got, key=str), waited)
    finally:
        m.stop()


def test_close_session_of_a_held_runner_does_not_hold_the_server():
    """close_session freed the session with its goodbye (BYE up to 1 s, the
    exit up to 2 s) on the server's only thread: a session whose own thread
    held its interpreter kept a ping waiting 3 s (red team 4).  Without a
    workspace or binds it is killed first."""
    m = RawMcp()
    try:
        m.send(req(2, "tools/call", {"name": "new_session", "arguments": {}}))
        h = json.loads(m.wait_for(2)["result"]["content"][0]["text"].split("\n")[0])["session"]
        m.send(req(3, "tools/call", {"name": "run_python", "arguments": {"code": RawMcp.HOG, "session": h}}))
        m.wait_for(3)
        time.sleep(0.6)                     # the hog holds the runner
        t0 = time.monotonic()
        m.send(req(4, "tools/call", {"name": "close_session", "arguments": {"session": h}}))
        m.send(req(5, "ping"))
        m.wait_for(5)
        waited = time.monotonic() - t0
        assert not m.wait_for(4)["result"]["isError"] and waited < 1.0, (m.got[4], waited)
    finally:
        m.p.stdin.close()
        m.p.wait(timeout=30)


def test_file_tool_on_a_held_runner_does_not_hold_the_server():
    """read_file on a session whose own thread holds its interpreter (a C
    loop that never lets go, ~20 s) waits as run_python would, serving the
    client meanwhile: a ping sent after it is answered, at once, while
    read_file still waits.  Its arguments went in with a set_var that
    waited on the server's only thread, and the ping waited for the hog
    (red team, pass 2)."""
    m = RawMcp()
    try:
        m.send(req(2, "tools/call", {"name": "run_python", "arguments": {"code": RawMcp.HOG}}))
        m.wait_for(2)
        time.sleep(0.5)                     # the hog holds the runner
        m.send(req(3, "tools/call", {"name": "read_file", "arguments": {"path": "/etc/passwd"}}))
        time.sleep(0.2)                     # read_file waits on the runner
        t0 = time.monotonic()
        m.send(req(4, "ping"))
        m.wait_for(4)
        waited = time.monotonic() - t0
        # Not a speed check: the hog has ~20 s left; a server held by it
        # answers after that, a free one in milliseconds.
        assert 3 not in m.got and waited < 10, (sorted(m.got, key=str), waited)
    finally:
        # At EOF the server would finish read_file first (a piped batch gets
        # its answers); SIGTERM stops it now, not at read_file's 30 s
        # timeout.
        m.stop()
