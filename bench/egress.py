#!/usr/bin/python3.11
"""make bench: the egress allowlist ([Network] Allow=) against --share-net,
measured in the same run, interleaved.  Not a test: it prints.

  - HTTPS fetch of 1 MiB from a TLS server on the host's 127.0.0.1
    (a self-signed certificate made by openssl(1)), a new connection per
    fetch, from python3.11 inside the sandbox: directly (--share-net) and
    through the proxy (CONNECT, SNI checked).  Throughput ratio of the p50s,
    and the same for the transfer alone (request to last byte).  The same
    client, server, file contents and TLS setup in both ways; only the path
    differs.  A 1 MiB fetch takes ~4 ms, a third of it connection set-up,
    so the same for 16 MiB beside it: the relay's streaming rate.
  - Time to first byte: request sent to the first response bytes.
  - Connect latency: TCP connect (and for the proxy CONNECT and its 200)
    up to an established TLS session, p50 each and the difference.
  - Sandbox start (and end: the whole process): nsbox run -- /usr/bin/true
    with and without an Allow= rule (bench/spawn-times, interleaved), p50
    each, their difference and the median of the per-run differences.
Usage: bench/egress.py BUILD RUNS
NSBOX_BENCH_EGRESS_BASELINE=OTHER_BUILD adds a third way, OTHER_BUILD's
proxy, interleaved with the others (to compare two proxies in one run)."""
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
SIZES = {"/1": 1, "/16": 16}   # MiB
BODY = {k: b"x" * (v << 20) for k, v in SIZES.items()}
FETCHES = int(os.environ.get("NSBOX_BENCH_EGRESS_FETCHES", "20"))   # of 1 MiB per sandbox run
FETCHES_BIG = int(os.environ.get("NSBOX_BENCH_EGRESS_FETCHES_BIG", "6"))   # of 16 MiB
BASELINE = os.environ.get("NSBOX_BENCH_EGRESS_BASELINE")
ROUNDS = int(os.environ.get("NSBOX_BENCH_EGRESS_ROUNDS", "5"))       # sandbox runs per way, alternated
# NSBOX_BENCH_EGRESS_START=0 leaves out the sandbox start line (needs BUILD/spawn-times).


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = BODY.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


CLIENT = r'''
import json, socket, ssl, sys, time
via, port, n, path, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
conn, xfer, total, ttfb = [], [], [], []
for _ in range(n):
    t0 = time.perf_counter()
    if via != "direct":
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
    s.sendall(b"GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % path.encode())
    got, want = 0, None
    buf = b""
    while want is None or got < want:
        b = s.recv(262144)
        if not b:
            break
        if want is None:
            if not buf:
                ttfb.append(time.perf_counter() - t1)
            buf += b
            if b"\r\n\r\n" in buf:
                h, rest = buf.split(b"\r\n\r\n", 1)
                want = int([l for l in h.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
                got = len(rest)
        else:
            got += len(b)
    t2 = time.perf_counter()
    assert got == want == size
    s.close()
    conn.append(t1 - t0); xfer.append(t2 - t1); total.append(t2 - t0)
print(json.dumps({"conn": conn, "xfer": xfer, "total": total, "ttfb": ttfb}))
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
        allow = ["--allow-net", f"localhost:{port}", "--allow-net", f"127.0.0.1:{port}"]
        ways = {"direct": (NSBOX, ["--share-net"]), "proxy": (NSBOX, allow)}
        if BASELINE:
            ways["baseline proxy"] = (os.path.join(BASELINE, "nsbox"), allow)
        fetches = {"/1": FETCHES, "/16": FETCHES_BIG}
        res = {(w, f): {"conn": [], "xfer": [], "total": [], "ttfb": []} for w in ways for f in SIZES}
        for _ in range(ROUNDS):
            for f in SIZES:
                for w, (nsbox, args) in ways.items():
                    p = subprocess.run([nsbox, "run", "--ro-bind", f"{d}/client.py:/client.py"] + args +
                                       ["--", PY, "/client.py", w, str(port), str(fetches[f]), f,
                                        str(len(BODY[f]))], capture_output=True, timeout=300)
                    if p.returncode != 0:
                        sys.exit(f"bench/egress.py: {w}: {p.stderr.decode(errors='replace')}")
                    r = json.loads(p.stdout)
                    for k in r:
                        res[w, f][k] += r[k][1 if f == "/16" else 2:]   # the first fetches warm up
        srv.shutdown()

        def m(w, f, k):
            return p50(res[w, f][k])

        for f, mib in SIZES.items():
            n = len(res["direct", f]["total"])
            dt, pt = m("direct", f, "total"), m("proxy", f, "total")
            line = (f"egress: HTTPS fetch of {mib} MiB, new connection each ({n} fetches a way): "
                    f"--share-net p50 {dt * 1e3:.2f} ms ({mib / dt:.0f} MiB/s), through the proxy p50 "
                    f"{pt * 1e3:.2f} ms ({mib / pt:.0f} MiB/s): throughput ratio {dt / pt:.2f} (target >= 0.8)")
            if BASELINE:
                bt = m("baseline proxy", f, "total")
                line += f"; baseline proxy p50 {bt * 1e3:.2f} ms: ratio {dt / bt:.2f}"
            print(line)
            dx, px = m("direct", f, "xfer"), m("proxy", f, "xfer")
            print(f"egress: {mib} MiB, transfer alone (request to last byte): --share-net p50 {dx * 1e3:.2f} ms, "
                  f"proxy p50 {px * 1e3:.2f} ms: ratio {dx / px:.2f}" +
                  (f"; baseline proxy ratio {dx / m('baseline proxy', f, 'xfer'):.2f}" if BASELINE else ""))
        f = "/1"
        dc, pc = m("direct", f, "conn"), m("proxy", f, "conn")
        print(f"egress: connect to an established TLS session: --share-net p50 {dc * 1e3:.2f} ms, "
              f"proxy p50 {pc * 1e3:.2f} ms: added {(pc - dc) * 1e3:.2f} ms" +
              (f" (baseline proxy added {(m('baseline proxy', f, 'conn') - dc) * 1e3:.2f} ms)" if BASELINE else ""))
        df, pf = m("direct", f, "ttfb"), m("proxy", f, "ttfb")
        print(f"egress: time to first byte of the response: --share-net p50 {df * 1e3:.2f} ms, "
              f"proxy p50 {pf * 1e3:.2f} ms: added {(pf - df) * 1e3:.2f} ms" +
              (f" (baseline proxy added {(m('baseline proxy', f, 'ttfb') - df) * 1e3:.2f} ms)" if BASELINE else ""))
        if os.environ.get("NSBOX_BENCH_EGRESS_START", "1") == "0":
            return

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
