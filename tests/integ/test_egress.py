"""The egress allowlist ([Network] Allow=, --allow-net): a host-side proxy and
DNS stub on the sandbox's loopback.  Upstream servers run on this machine's
own loopback only (127.0.0.2, so NO_PROXY's 127.0.0.1 doesn't bypass the
proxy); loopback is refused unless a rule names it, which these rules do."""
import http.server
import json
import os
import socket
import socketserver
import tempfile
import threading

import pytest
from conftest import run

UP = "127.0.0.2"
PY = "/usr/bin/python3.11"


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


@pytest.fixture(scope="module")
def upstream():
    srv = _Server((UP, 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def echo():
    """A raw TCP server that records what it receives (TLS ClientHellos)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    seen = []

    def loop():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            c.settimeout(2)
            try:
                seen.append(c.recv(65536))
            except OSError:
                seen.append(b"")
            c.close()
    threading.Thread(target=loop, daemon=True).start()
    yield s.getsockname()[1], seen
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


def test_connect_checks_sni(echo):
    port, seen = echo
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
    got = [b for b in seen if b]
    assert len(got) == 1 and got[0][:1] == b"\x16" and b"localhost" in got[0]
    d = [e for e in log if e["kind"] == "connect"]
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
R["ifs"] = [n for _, n in socket.if_nameindex()]
print(json.dumps(R))
''')
    assert out["direct"] == "ECONNREFUSED"      # 127.0.0.2 is the sandbox's own loopback
    assert out["outside"] == "ENETUNREACH" and out["udp53"] == "ENETUNREACH"
    assert out["raw"] in ("EPERM", "EACCES")
    assert out["ifs"] == ["lo"]


def test_dns_answers_allowed_names_locally(upstream):
    # An allowed name that resolves to loopback gets no address (the proxy
    # would refuse it); an unlisted one NXDOMAIN; both answered by the stub.
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


def test_policy_checks():
    rc, _, err = run(["run", "--share-net", "--allow-net", "example.com", "--", "/bin/true"])
    assert rc != 0 and "Network=none" in err
    for bad in ["*.com", "exa mple.com", "10.0.0.0/33", "example.com:0", "::1"]:
        rc, _, err = run(["run", "--allow-net", bad, "--", "/bin/true"])
        assert rc != 0 and "--allow-net" in err, bad
    rc, out, _ = run(["policy", "show", "--allow-net", "*.example.com:8443", "--net-log", "/tmp/x.jsonl"])
    if rc == 0:
        assert "Allow=*.example.com:8443" in out and "Log=/tmp/x.jsonl" in out
