"""Integration tests of `nsbox mcp`, driven by the official MCP TypeScript
SDK (tests/mcp/client.mjs: Client + StdioClientTransport), plus raw lines
written straight to the server's stdin for what an SDK never sends.

Needs node and tests/mcp/node_modules (`npm ci` there; done here when
missing and the registry is reachable).  Without node the tests skip with
the reason, and fail under NSBOX_MUST_WORK=1.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import NSBOX, MODE

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
    if not os.path.isdir(os.path.join(MCPDIR, "node_modules", "@modelcontextprotocol", "sdk")):
        npm = shutil.which("npm")
        if not npm or not os.access(MCPDIR, os.W_OK):
            _need("tests/mcp/node_modules is missing and cannot be installed here (run scripts/install-deps.sh)")
        p = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=MCPDIR, capture_output=True, text=True,
                           timeout=600)
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
    assert by_id[1]["result"]["capabilities"] == {"tools": {"listChanged": False}}
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
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()


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
    p = subprocess.run([NSBOX, "mcp", "--max-sessions", "0"], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    assert p.returncode == 120 and "--max-sessions" in p.stderr and p.stdout == ""


@pytest.mark.parametrize("code", ["{1: 2}", "{1, 2}", "set()", "frozenset({3})", "frozenset()",
                                  r"b'a\x00\'\\\n\t'", "b'\\x00\\xff\"'", "bytearray(b'xy')",
                                  "(1, {(2,): [b'']})", "{'$k': {1}}"])
def test_values_show_as_python_shows_them(code):
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": code}})])
    assert rc == 0, err
    want = subprocess.run([sys.executable, "-c", "print(repr(%s))" % code], capture_output=True, text=True).stdout
    assert out[0]["result"]["content"][0]["text"] == want.strip(), (code, out)


def test_complex_values_show_readably():
    rc, out, err = raw([req(1, "tools/call", {"name": "run_python", "arguments": {"code": "1+2j"}})])
    assert rc == 0, err
    assert out[0]["result"]["content"][0]["text"] == "complex(1.0, 2.0)"
