"""The egress audit delivered to the host program (libnsbox's net_audit
callback and net_log_fd, the SDK's allow_net= and on_net_request=), against
test_egress.py's upstream on this machine's loopback (127.0.0.2, named by an
explicit rule).  Each case runs the SDK in a child Python (sdk_env) that
checks its own descriptors and processes after close(); host_intact checks
ours, and that the child left nothing running."""
import errno
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
from conftest import BUILD, sdk_env
from test_egress import UP, _servers_settled, holding_server, upstream  # noqa: F401 (fixtures)

PYDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")

# The child's frame: the helper started and warmed by a first sandbox (its
# control socket is then already open; the SDK's SIGINT thread too, so not
# for an in_process session, which wants a single-threaded caller), no spares (NSBOX_SPARE=0: a spare's
# processes would be the helper's children too), then the case's BODY; after
# it, the descriptors must be as before and the helper the only child left.
CHILD = r'''
import asyncio, json, os, socket, sys, time
import nsbox
from nsbox import _lib

def fds():
    return sorted(os.listdir("/proc/self/fd"))

def children():
    me = str(os.getpid())
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[1] == me:
                    out.append(int(p))
            except OSError:
                pass
    return out

A = json.loads(sys.argv[1])
if A.get("warm", True):
    with nsbox.Sandbox(timeout=30) as warm:
        warm.execute("1")
fds0, kids0 = fds(), children()
OUT = {}
%(body)s
OUT["fds_same"] = fds() == fds0 or [fds0, fds()]
OUT["kids_same"] = children() == kids0 or [kids0, children()]
print(json.dumps(OUT))
'''


def child(body, timeout=120, spares=False, **args):
    env = sdk_env(NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"), PYTHONPATH=os.path.abspath(PYDIR),
                  NSBOX_SPARE="1" if spares else "0")
    p = subprocess.run([sys.executable, "-c", CHILD.replace("%(body)s", body), json.dumps(args)], capture_output=True,
                       text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["fds_same"] is True, out["fds_same"]
    assert out["kids_same"] is True, out["kids_same"]
    return out


# Inside: a fetch through the proxy HTTP_PROXY names, read to its end (the
# proxy passes the server's end on only once its side of the tunnel is
# done: the record is whole before the sandbox ends, however late the
# server's thread closes; urllib closed at the body's last byte, and under
# load the record said "the sandbox ended"), a name off the list at the DNS
# responder and at the proxy, and the descriptors the sandbox's process holds.
FETCH = r'''
import json, os, socket, urllib.parse
px = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
s = socket.create_connection((px.hostname, px.port), timeout=10)
s.sendall(b"GET http://%(up)s:%(port)d/ HTTP/1.1\r\nHost: %(up)s:%(port)d\r\nConnection: close\r\n\r\n")
got = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    got += b
s.close()
R = {"body": got.split(b"\r\n\r\n", 1)[1].decode()}
try:
    socket.getaddrinfo("denied.example", 80)
    R["dns"] = "resolved"
except socket.gaierror as e:
    R["dns"] = e.errno
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://denied.example/ HTTP/1.1\r\nHost: denied.example\r\n\r\n")
R["proxy"] = s.recv(100).decode().split("\r\n")[0]
s.close()
R["fds"] = sorted(os.listdir("/proc/self/fd"))
R
'''

SYNC_FETCH = r'''
recs = []
with nsbox.Sandbox(timeout=30, allow_net=A["rules"], net_log=A["log"], on_net_request=recs.append) as sb:
    OUT["inside"] = sb.execute(A["code"])
OUT["recs"] = recs
with nsbox.Sandbox(timeout=30, allow_net=A["rules"]) as sb:
    OUT["fds_without"] = sb.execute("import os; sorted(os.listdir('/proc/self/fd'))")
'''

ASYNC_FETCH = r'''
recs = []
async def main():
    import threading
    loop_thread = threading.get_ident()
    def on_rec(r):
        r["on_loop"] = threading.get_ident() == loop_thread
        recs.append(r)
    async with nsbox.AsyncSandbox(timeout=30, allow_net=A["rules"], net_log=A["log"],
                                  on_net_request=on_rec) as sb:
        OUT["inside"] = await sb.execute(A["code"])
    async with nsbox.AsyncSandbox(timeout=30, allow_net=A["rules"]) as sb:
        OUT["fds_without"] = await sb.execute("import os; sorted(os.listdir('/proc/self/fd'))")
asyncio.run(main())
OUT["recs"] = recs
'''


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_records_reach_the_callback_and_the_log(upstream, tmp_path, kind):  # noqa: F811
    log = str(tmp_path / "net.jsonl")
    out = child(SYNC_FETCH if kind == "sync" else ASYNC_FETCH, rules=[f"{UP}:{upstream}"], log=log,
                code=FETCH % {"up": UP, "port": upstream})
    inside = out["inside"]
    assert inside["body"] == "hello from upstream\n"
    assert inside["dns"] == socket.EAI_NONAME and inside["proxy"].startswith("HTTP/1.1 403")
    # The sandbox holds no descriptor more than without the callback: the
    # audit pipe is the proxy's and the library's only.
    assert inside["fds"] == out["fds_without"]
    recs = out["recs"]
    if kind == "async":
        assert all(r.pop("on_loop") for r in recs)
    got = [(r["kind"], r["host"], r["decision"], r["reason"]) for r in recs]
    assert ("dns", "denied.example", "deny", "name not on the allowlist") in got
    assert ("http", "denied.example", "deny", "name not on the allowlist") in got
    allow = [r for r in recs if r["kind"] == "http" and r["decision"] == "allow"]
    assert len(allow) == 1, recs
    a = allow[0]
    assert a["host"] == UP and a["port"] == upstream and a["addr"] == UP and a["reason"] == ""
    assert a["bytes_out"] > 20 and a["bytes_in"] > len("hello from upstream\n")
    assert set(a) == {"time", "kind", "host", "port", "addr", "sni", "decision", "reason", "bytes_out",
                      "bytes_in"}
    # The callback got what the log file got, in the same order.
    with open(log) as f:
        assert [json.loads(line) for line in f] == recs


RAISING = r'''
calls = []
def on_rec(r):
    calls.append(r["host"])
    if len(calls) == 1:
        raise ValueError("audit consumer failed")
QUERY = """
import socket, time
try:
    socket.getaddrinfo(%r, 80)
except socket.gaierror:
    pass
time.sleep(0.3)
"""
def run(execute):
    try:
        execute(QUERY % "first.denied")
        OUT["first"] = "returned"
    except ValueError as e:
        OUT["first"] = str(e)
    OUT["second"] = execute(QUERY % "second.denied" + "\n40 + 2")
if A["kind"] == "sync":
    with nsbox.Sandbox(timeout=30, allow_net=A["rules"], on_net_request=on_rec) as sb:
        run(sb.execute)
else:
    async def main():
        async with nsbox.AsyncSandbox(timeout=30, allow_net=A["rules"], on_net_request=on_rec) as sb:
            try:
                await sb.execute(QUERY % "first.denied")
                OUT["first"] = "returned"
            except ValueError as e:
                OUT["first"] = str(e)
            OUT["second"] = await sb.execute(QUERY % "second.denied" + "\n40 + 2")
    asyncio.run(main())
OUT["calls"] = calls
'''


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_callback_raising_leaves_the_session_working(kind):
    out = child(RAISING, rules=["allowed.test"], kind=kind)
    # Raised by the call during which the record came (the query ended 0.3 s
    # before the exec did), not into C; the session lives on.
    assert out["first"] == "audit consumer failed"
    assert out["second"] == 42
    # getaddrinfo asks for A and AAAA: each query is a record.
    assert out["calls"][0] == "first.denied" and "second.denied" in out["calls"]
    assert set(out["calls"]) == {"first.denied", "second.denied"}


# A background thread inside sends N DNS queries for unlisted names, one at
# a time, each waiting for its answer; between execs nobody reads the audit
# pipe, so the proxy waits once it is full, and the queries with it.
MANY = r'''
import shutil, tempfile
warned = []
recs = []
N = A["n"]
# The sandbox's progress, read from the host without an exec (any exec
# drains the audit pipe, and the sandbox's queries go on meanwhile).
wsd = tempfile.mkdtemp(prefix="nsbox-test-many-")
with nsbox.Sandbox(timeout=60, allow_net=A["rules"], on_net_request=recs.append,
                   on_warning=warned.append, workspace=wsd, workspace_size="infinity") as sb:
    sb.execute("""
import os, socket, struct, threading, time
done = 0
progress = os.open("/workspace/progress", os.O_WRONLY | os.O_CREAT, 0o644)
def query(name):
    q = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\\0" + struct.pack(">HH", 1, 1)
def work():
    global done
    # Not before the exec has returned: the host reads the pipe while it
    # waits for an exec, and under load this exec's result came after all
    # the queries had been answered (CI run67, run68: 3000 < 3000).
    while not os.path.exists("/workspace/go"):
        time.sleep(0.001)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(60)
    for i in range(%d):
        s.sendto(query("q%%05d.denied.test" %% i), ("127.0.0.1", 53))
        s.recv(512)
        done += 1
        os.pwrite(progress, b"%%08d" %% done, 0)
t = threading.Thread(target=work)
t.start()
""" % N)
    open(os.path.join(wsd, "go"), "w").close()
    time.sleep(A["pause"])
    with open(os.path.join(wsd, "progress")) as f:
        OUT["between"] = int(f.read() or 0)
    # nsbox_net_audit_drain: what waits, now, between execs.
    OUT["before_drain"] = len(recs)
    OUT["drained"] = _lib.lib.nsbox_net_audit_drain(sb._sess, None)
    OUT["after_drain"] = len(recs)
    OUT["after"] = sb.execute("t.join(60); done")
    OUT["delivered_before_close"] = len(recs)
shutil.rmtree(wsd)
OUT["names"] = [r["host"] for r in recs if r["kind"] == "dns"]
OUT["denied"] = all(r["decision"] == "deny" and r["reason"] == "name not on the allowlist" for r in recs)
OUT["warned"] = warned
'''


def test_many_records_wait_for_the_host_and_none_is_lost():
    n = 3000
    out = child(MANY, rules=["allowed.test"], n=n, pause=2.0)
    # More records than the pipe holds (256 KiB, ~170 bytes each): the
    # sandbox's queries stopped while the host did not read...
    assert 0 < out["between"] < n, out["between"]
    assert out["drained"] > 0 and out["after_drain"] == out["before_drain"] + out["drained"], out
    # ...and went on once it did, during the next exec.
    assert out["after"] == n
    assert out["names"] == ["q%05d.denied.test" % i for i in range(n)]
    # No record dropped by the reader (the jail's own warnings about the
    # host's cgroups may be there in the unprivileged passes).
    assert out["denied"] and [w for w in out["warned"] if "network audit" in w] == []



# A sandbox that never stops querying, and a host slower than the flood (a
# callback that takes half a millisecond): the proxy refills the pipe as
# fast as the host reads it.
FLOOD = r'''
recs = []
def slow(r):
    recs.append(r)
    time.sleep(0.0005)
with nsbox.Sandbox(timeout=60, allow_net=A["rules"], on_net_request=slow) as sb:
    sb.execute("""
import socket, struct, threading
def work(k):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(60)
    i = 0
    while True:
        q = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\\x02q%d\\x06denied\\x04test\\0" % k
        s.sendto(q + struct.pack(">HH", 1, 1), ("127.0.0.1", 53))
        s.recv(512)
for k in range(4):
    threading.Thread(target=work, args=(k,), daemon=True).start()
""")
    time.sleep(1.0)
    OUT["drained"] = _lib.lib.nsbox_net_audit_drain(sb._sess, None)
    OUT["value"] = sb.execute("1 + 1")
    OUT["during"] = len(recs)
OUT["closed"] = True
'''


def test_a_flood_of_records_does_not_hold_the_host():
    """netaudit_drain reads one pipe's worth at most: a proxy refilling the
    pipe as fast as the host reads kept nsbox_net_audit_drain, the exec
    and close in the drain for as long as the sandbox went on (they never
    returned)."""
    out = child(FLOOD, rules=["allowed.test"])
    # 256 KiB of records at ~150 bytes or more each.
    assert 0 < out["drained"] <= 256 * 1024 // 100, out["drained"]
    assert out["value"] == 2 and out["closed"] is True


TAIL = r'''
recs = []
sb = nsbox.Sandbox(timeout=30, allow_net=A["rules"], on_net_request=recs.append)
sb.execute("""
import socket
c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
c.sendall(b"CONNECT %s:%d HTTP/1.1\\r\\n\\r\\nhello")
head = c.recv(100).decode()
""" % (A["up"], A["port"]))
OUT["head"] = sb.get_variable("head")
OUT["before_close"] = [r for r in recs if r["kind"] == "connect"]
sb.close()
OUT["recs"] = recs
'''


def test_free_delivers_the_tail():
    # A tunnel still open when the session is freed: its record is written
    # as the proxy stops, and nsbox_session_free hands it over.
    with holding_server() as port:
        out = child(TAIL, rules=[f"{UP}:{port}"], up=UP, port=port)
    assert out["head"].startswith("HTTP/1.1 200") and out["before_close"] == []
    tun = [r for r in out["recs"] if r["kind"] == "connect"]
    assert len(tun) == 1 and tun[0]["reason"] == "the sandbox ended" and tun[0]["bytes_out"] == 5, out["recs"]


# The C API's descriptor form, through ctypes: a pipe whose write end the
# proxy gets (net_log_fd), in-process (the local backend) and through the
# helper.  The caller closes its own copy after nsbox_session_new; the
# proxy's goes when the session is freed, so the reader sees EOF then.
FD_FORM = r'''
import ctypes, threading
from ctypes import byref, c_void_p, sizeof
lib = _lib.load()
err = c_void_p()
p = c_void_p()
assert lib.nsbox_policy_new(b"default", byref(p), byref(err)) == 0
for rule in A["rules"]:
    assert lib.nsbox_policy_set(p, b"Network", b"Allow", rule.encode(), byref(err)) == 0
r, w = os.pipe2(os.O_CLOEXEC)
lines = []
def reader():
    with os.fdopen(r, "rb") as f:
        for line in f:
            lines.append(json.loads(line))
opts = _lib.SessionOpts(struct_size=sizeof(_lib.SessionOpts), net_log_fd=w, in_process=A["in_process"])
h = c_void_p()
rc = lib.nsbox_session_new(p, byref(opts), byref(h), byref(err))
os.close(w)
assert rc == 0, (rc, lib.nsbox_error_message(err))
# After the start: in_process wants a single-threaded caller.
rt = threading.Thread(target=reader)
rt.start()
res = c_void_p()
code = b"import urllib.request; urllib.request.urlopen('http://%s:%d/', timeout=10).read()" % (
    A["up"].encode(), A["port"])
assert lib.nsbox_exec(h, code, None, byref(res), byref(err)) == 0
OUT["status"] = lib.nsbox_result_status(res)
lib.nsbox_result_free(res)
lib.nsbox_session_free(h)
lib.nsbox_policy_free(p)
rt.join(10)
OUT["eof"] = not rt.is_alive()
OUT["lines"] = lines
# A descriptor that isn't open: -EBADF, as nsbox_run says (it was ignored).
opts.net_log_fd = 987
assert lib.nsbox_policy_new(b"default", byref(p), byref(err)) == 0
assert lib.nsbox_policy_set(p, b"Network", b"Allow", b"allowed.test", byref(err)) == 0
OUT["bad"] = lib.nsbox_session_new(p, byref(opts), byref(h), None)
lib.nsbox_policy_free(p)
'''


@pytest.mark.parametrize("in_process", [False, True], ids=["helper", "in_process"])
def test_net_log_fd(upstream, in_process):  # noqa: F811
    out = child(FD_FORM, rules=[f"{UP}:{upstream}"], up=UP, port=upstream, in_process=in_process,
                warm=not in_process)
    assert out["status"] == 0 and out["eof"] and out["bad"] == -errno.EBADF, out
    allow = [r for r in out["lines"] if r["kind"] == "http" and r["decision"] == "allow"]
    assert len(allow) == 1 and allow[0]["bytes_in"] > 20, out["lines"]


# A warm spare is made in advance, without the audit pipe: a session with
# on_net_request must not take the one an identical policy left, and the
# spare stays for a session without it.  The helper's children are its
# sandboxes' pid 1s and their proxies.
SPARE = r'''
def helper_kids():
    (helper,) = [k for k in children() if b"--helper" in open("/proc/%d/cmdline" % k, "rb").read()]
    return set(int(x) for x in open("/proc/%d/task/%d/children" % (helper, helper)).read().split())
def settle():
    # The helper makes its spare when idle: until its children stop changing.
    last, same = None, 0
    for _ in range(200):
        k = helper_kids()
        same = same + 1 if k == last else 0
        if same >= 5:
            return k
        last = k
        time.sleep(0.02)
    return k
with nsbox.Sandbox(timeout=30, allow_net=A["rules"], spare=True) as sb:
    sb.execute("1")
spare = settle()
recs = []
with nsbox.Sandbox(timeout=30, allow_net=A["rules"], spare=True, on_net_request=recs.append) as sb:
    OUT["pid"] = sb.info()["pid"]
    sb.execute("""
import socket
try:
    socket.getaddrinfo("spare.denied", 80)
except socket.gaierror:
    pass
""")
OUT["spare"] = sorted(spare)
OUT["after"] = sorted(settle())
OUT["hosts"] = sorted(set(r["host"] for r in recs))
'''


def test_no_spare_with_an_audit():
    out = child(SPARE, spares=True, rules=["allowed.test"])
    assert len(out["spare"]) == 2, out        # the spare's pid 1 and its proxy
    assert out["pid"] not in out["spare"] and out["after"] == out["spare"], out
    assert out["hosts"] == ["spare.denied"]


# nsbox_run's descriptor form (nsbox_run_opts.net_log_fd, a pointer to
# the fd), in-process and through the helper's RUN.
RUN_FD = r'''
import ctypes, threading
from ctypes import POINTER, byref, c_char_p, c_int, c_void_p, sizeof
lib = _lib.load()
err = c_void_p()
p = c_void_p()
assert lib.nsbox_policy_new(b"default", byref(p), byref(err)) == 0
for rule in A["rules"]:
    assert lib.nsbox_policy_set(p, b"Network", b"Allow", rule.encode(), byref(err)) == 0
RunOpts = _lib.RunOpts
r, w = os.pipe2(os.O_CLOEXEC)
null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
stdio = (c_int * 3)(null, null, null)
wfd = c_int(w)
o = RunOpts(struct_size=sizeof(RunOpts), stdio=stdio, in_process=A["in_process"], net_log_fd=ctypes.pointer(wfd))
st = _lib.RunStatus(struct_size=sizeof(_lib.RunStatus))
code = "import urllib.request; urllib.request.urlopen('http://%s:%d/', timeout=10).read()" % (A["up"], A["port"])
argv = (c_char_p * 4)(b"/usr/bin/python3.11", b"-c", code.encode(), None)
rc = lib.nsbox_run(p, argv, byref(o), byref(st), byref(err))
os.close(w)
os.close(null)
assert rc == 0, (rc, lib.nsbox_error_message(err))
OUT["exit"] = st.exit_code
bad = c_int(987)
o.net_log_fd = ctypes.pointer(bad)
OUT["bad"] = lib.nsbox_run(p, argv, byref(o), byref(st), None)
with os.fdopen(r, "rb") as f:
    OUT["lines"] = [json.loads(line) for line in f]
lib.nsbox_policy_free(p)
'''


@pytest.mark.parametrize("in_process", [False, True], ids=["helper", "in_process"])
def test_run_net_log_fd(upstream, in_process):  # noqa: F811
    out = child(RUN_FD, rules=[f"{UP}:{upstream}"], up=UP, port=upstream, in_process=in_process,
                warm=not in_process)
    assert out["exit"] == 0 and out["bad"] == -errno.EBADF
    allow = [r for r in out["lines"] if r["kind"] == "http" and r["decision"] == "allow"]
    assert len(allow) == 1 and allow[0]["bytes_in"] > 20, out["lines"]


# nsbox.run()'s on_net_request (nsbox_run_opts.net_audit, through the
# helper): an allowed fetch, a name off the list at the DNS responder and at the
# proxy, and a tunnel still open when the command ends, whose record is
# written as the proxy stops: all delivered before run() returns, on the
# calling thread, and the same as the net_log file's lines.
RUN_CB = r"""
import threading
recs = []
me = threading.get_ident()
def on_rec(r):
    r["same_thread"] = threading.get_ident() == me
    recs.append(r)
code = '''
import socket, sys, urllib.request, urllib.error
assert urllib.request.urlopen("http://%(up)s:%(port)d/", timeout=10).read() == b"hello from upstream\\n"
try:
    socket.getaddrinfo("denied.example", 80)
    sys.exit(3)
except socket.gaierror:
    pass
try:
    urllib.request.urlopen("http://denied.example/", timeout=10)
    sys.exit(4)
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code
    print(e.headers.get("X-Nsbox-Deny", ""))
c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
c.sendall(b"CONNECT %(up)s:%(hold)d HTTP/1.1\\r\\n\\r\\nhello")
assert c.recv(100).startswith(b"HTTP/1.1 200")
''' % A
r, w = os.pipe()
res = nsbox.run(["/usr/bin/python3.11", "-c", code], allow_net=A["rules"], net_log=A["log"],
                on_net_request=on_rec, stdout=w, timeout=60)
os.close(w)
with os.fdopen(r) as f:
    OUT["stdout"] = f.read()
OUT["exit"] = res.exit_code
OUT["recs"] = recs
def boom(r):
    raise ValueError("audit consumer failed")
try:
    nsbox.run(["/usr/bin/python3.11", "-c", "import socket\ntry:\n socket.getaddrinfo('x.denied', 80)\nexcept OSError:\n pass"],
              allow_net=A["rules"], on_net_request=boom)
    OUT["raised"] = "returned"
except ValueError as e:
    OUT["raised"] = str(e)
for bad in ("x", 1):
    try:
        nsbox.run(["/bin/true"], allow_net=A["rules"], on_net_request=bad)
        OUT.setdefault("bad", []).append("accepted")
    except TypeError as e:
        OUT.setdefault("bad", []).append(str(e))
"""


def test_sdk_run_on_net_request(upstream, tmp_path):  # noqa: F811
    log = str(tmp_path / "run.jsonl")
    with holding_server() as hold:
        out = child(RUN_CB, rules=[f"{UP}:{upstream}", f"{UP}:{hold}"], log=log, up=UP, port=upstream,
                    hold=hold)
    assert out["exit"] == 0, out
    assert out["stdout"] == "name not on the allowlist\n", out["stdout"]
    recs = out["recs"]
    assert all(r.pop("same_thread") for r in recs), recs
    got = [(r["kind"], r["host"], r["decision"], r["reason"]) for r in recs]
    assert ("dns", "denied.example", "deny", "name not on the allowlist") in got
    assert ("http", "denied.example", "deny", "name not on the allowlist") in got
    allow = [r for r in recs if r["kind"] == "http" and r["decision"] == "allow"]
    assert len(allow) == 1 and allow[0]["port"] == upstream and allow[0]["bytes_in"] > 20, recs
    # Written as the proxy stopped, after the command's end: still delivered.
    tun = [r for r in recs if r["kind"] == "connect"]
    assert len(tun) == 1 and tun[0]["reason"] == "the sandbox ended" and tun[0]["bytes_out"] == 5, recs
    with open(log) as f:
        assert [json.loads(line) for line in f] == recs
    assert out["raised"] == "audit consumer failed"
    assert [b.startswith("on_net_request must be callable") for b in out["bad"]] == [True, True], out["bad"]


BAD = r'''
for rules in (["exa mple.com"], ["*.*.example.com"], "pypi.org"):
    try:
        nsbox.Sandbox(allow_net=rules)
        OUT.setdefault("bad", []).append("accepted %r" % (rules,))
    except (nsbox.PolicyError, TypeError) as e:
        OUT.setdefault("bad", []).append(type(e).__name__ + ": " + str(e))
'''


def test_bad_rules_are_refused():
    out = child(BAD)
    a, b, c = out["bad"]
    assert a.startswith("PolicyError: [Network] Allow=exa mple.com: not a host name"), a
    assert b.startswith("PolicyError: [Network] Allow=*.*.example.com: "), b
    assert c.startswith("TypeError: allow_net must be a list"), c


# A file call the sandbox holds, cancelled (asyncio.wait_for): the call
# ends the session on the executor's thread, where it is freed; the
# sandbox's last records must still reach on_net_request on the loop's
# thread, as AsyncSandbox documents.
CANCELLED_FILE = r'''
import asyncio, threading
threads = []
async def main():
    loop_thread = threading.get_ident()
    async with nsbox.AsyncSandbox(timeout=60, allow_net=A["rules"],
                                  on_net_request=lambda r: threads.append((threading.get_ident(), r["host"]))) as sb:
        await sb.execute("""
import socket, struct, sys, threading, time
def work():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    for i in range(1000000):
        s.sendto(struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\\x06q%05d\\x06denied\\x04test\\0" % (i % 100000)
                 + struct.pack(">HH", 1, 1), ("127.0.0.1", 53))
        try:
            s.recv(512)
        except OSError:
            pass
threading.Thread(target=work, daemon=True).start()
r = sys.modules["_nsbox_runner"]
orig = r.do_file
r.do_file = lambda *a: (time.sleep(25), orig(*a))[1]
""")
        try:
            await asyncio.wait_for(sb.read_file("/etc/hostname"), 1)
        except asyncio.TimeoutError:
            OUT["timed_out"] = True
        await asyncio.sleep(0.5)
        OUT["after"] = await sb.execute("1 + 1")
    OUT["n"] = len(threads)
    OUT["off_loop"] = sorted({h for t, h in threads if t != loop_thread})[:5]
asyncio.run(main())
'''


def test_records_of_a_session_a_cancelled_call_ended_reach_the_loop():
    out = child(CANCELLED_FILE, rules=["allowed.test"])
    assert out["timed_out"] is True and out["after"] == 2, out
    assert out["n"] > 0 and out["off_loop"] == [], out
