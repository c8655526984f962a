#!/usr/bin/python3.11
"""make bench: the egress allowlist ([Network] Allow=) against --share-net,
measured in the same run, interleaved.  Not a test: it prints.

  - HTTPS fetch of 1 MiB from a TLS server on the host's 127.0.0.1
    (a self-signed certificate made by openssl(1)), a new connection per
    fetch, from python3.11 inside the sandbox: directly (--share-net) and
    through the proxy (CONNECT, SNI checked).  Throughput ratio of the p50s,
    and the same for the transfer alone (request to last byte).
  - Connect latency: TCP connect (and for the proxy CONNECT and its 200)
    up to an established TLS session, p50 each and the difference.
  - Sandbox start (and end: the whole process): nsbox run -- /usr/bin/true
    with and without an Allow= rule (bench/spawn-times, interleaved), p50
    each, their difference and the median of the per-run differences.
Usage: bench/egress.py BUILD RUNS"""
import http.server
import json
import os
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading

B = sys.argv[1] if len(sys.argv) > 1 else "build"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 60
NSBOX = os.path.join(B, "nsbox")
PY = "/usr/bin/python3.11"
BIG = b"x" * (1 << 20)
FETCHES = int(os.environ.get("NSBOX_BENCH_EGRESS_FETCHES", "20"))   # per sandbox run
ROUNDS = int(os.environ.get("NSBOX_BENCH_EGRESS_ROUNDS", "5"))       # sandbox runs per way, alternated


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BIG)))
        self.end_headers()
        self.wfile.write(BIG)

    def log_message(self, *a):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


CLIENT = r'''
import json, socket, ssl, sys, time
via, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
conn, xfer, total = [], [], []
for _ in range(n):
    t0 = time.perf_counter()
    if via == "proxy":
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % port)
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
    else:
        s = socket.create_connection(("127.0.0.1", port))
    s = ctx.wrap_socket(s, server_hostname="localhost")
    t1 = time.perf_counter()
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    got, want = 0, None
    buf = b""
    while want is None or got < want:
        b = s.recv(262144)
        if not b:
            break
        if want is None:
            buf += b
            if b"\r\n\r\n" in buf:
                h, rest = buf.split(b"\r\n\r\n", 1)
                want = int([l for l in h.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
                got = len(rest)
        else:
            got += len(b)
    t2 = time.perf_counter()
    assert got == want == 1 << 20
    s.close()
    conn.append(t1 - t0); xfer.append(t2 - t1); total.append(t2 - t0)
print(json.dumps({"conn": conn, "xfer": xfer, "total": total}))
'''


def p50(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    d = tempfile.mkdtemp(prefix="nsbox-bench-egress.")
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.pem"],
                       check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(f"{d}/cert.pem", f"{d}/key.pem")
        srv = Server(("127.0.0.1", 0), Handler)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        port = srv.server_address[1]
        with open(f"{d}/client.py", "w") as f:
            f.write(CLIENT)
        ways = {
            "direct": ["--share-net"],
            "proxy": ["--allow-net", f"localhost:{port}", "--allow-net", f"127.0.0.1:{port}"],
        }
        res = {w: {"conn": [], "xfer": [], "total": []} for w in ways}
        for _ in range(ROUNDS):
            for w, args in ways.items():
                p = subprocess.run([NSBOX, "run", "--ro-bind", f"{d}/client.py:/client.py"] + args +
                                   ["--", PY, "/client.py", w, str(port), str(FETCHES)],
                                   capture_output=True, timeout=300)
                if p.returncode != 0:
                    sys.exit(f"bench/egress.py: {w}: {p.stderr.decode(errors='replace')}")
                r = json.loads(p.stdout)
                for k in r:
                    res[w][k] += r[k][2:]   # the first fetches warm up
        srv.shutdown()
        mib = 1.0
        dt, pt = p50(res["direct"]["total"]), p50(res["proxy"]["total"])
        dx, px = p50(res["direct"]["xfer"]), p50(res["proxy"]["xfer"])
        dc, pc = p50(res["direct"]["conn"]), p50(res["proxy"]["conn"])
        n = len(res["direct"]["total"])
        print(f"egress: HTTPS fetch of 1 MiB, new connection each ({n} fetches a way): "
              f"--share-net p50 {dt * 1e3:.2f} ms ({mib / dt:.0f} MiB/s), through the proxy p50 {pt * 1e3:.2f} ms "
              f"({mib / pt:.0f} MiB/s): throughput ratio {dt / pt:.2f} (target >= 0.8)")
        print(f"egress: transfer alone (request to last byte): --share-net p50 {dx * 1e3:.2f} ms, "
              f"proxy p50 {px * 1e3:.2f} ms: ratio {dx / px:.2f}")
        print(f"egress: connect to an established TLS session: --share-net p50 {dc * 1e3:.2f} ms, "
              f"proxy p50 {pc * 1e3:.2f} ms: added {(pc - dc) * 1e3:.2f} ms")

        st = subprocess.run([os.path.join(B, "spawn-times"), str(RUNS), NSBOX, "run", "--", "/usr/bin/true", "::",
                             NSBOX, "run", "--allow-net", "example.com", "--", "/usr/bin/true"],
                            capture_output=True, check=True, text=True).stdout.splitlines()
        t = [[float(x) for x in line.split()] for line in st]
        a, b = p50(t[0]), p50(t[1])
        paired = p50([y - x for x, y in zip(t[0], t[1])])
        print(f"egress: sandbox start and end (nsbox run -- /usr/bin/true, {RUNS} runs, interleaved): no Allow= p50 "
              f"{a / 1e3:.2f} ms, with --allow-net example.com p50 {b / 1e3:.2f} ms: added {(b - a) / 1e3:.2f} ms, "
              f"median of the paired differences {paired / 1e3:.2f} ms (target < 0.5 ms)")
    finally:
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
