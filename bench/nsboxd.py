#!/usr/bin/python3.11
"""nsboxd's numbers (make bench): session open from the warm pool, the exec
round trip through a handed-over sandbox vs a sandbox libnsbox made itself,
sessions opened+used+closed per second with several clients, and
`nsbox python --connect SOCK -c 'print(1)'` vs `python3.11 -c 'print(1)'`.
usage: bench/nsboxd.py BUILD RUNS"""
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

B, RUNS = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 50
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integ"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
os.environ["NSBOX_LIB"] = os.path.join(B, "libnsbox.so.0")
import svcclient  # noqa: E402
import nsbox  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def line(what, xs, unit="ms", scale=1e3):
    print(f"{what}\t{pct(xs, 50) * scale:.3g} {unit}\t{pct(xs, 99) * scale:.3g} {unit}")


d = tempfile.mkdtemp(prefix="nsbxd-bench-")
sock = os.path.join(d, "s.sock")
conf = os.path.join(d, "c.conf")
with open(conf, "w") as f:
    f.write(f"[Service]\nPoolSize=4\n[Default]\nMaxSessions=1000\n")
p = subprocess.Popen([os.path.join(B, "nsboxd"), "--listen", sock, "--config", conf], stderr=subprocess.DEVNULL)
while not os.path.exists(sock):
    time.sleep(0.01)
time.sleep(0.5)
try:
    print("# nsboxd (bench/nsboxd.py): p50\tp99")
    c = svcclient.Client(sock)
    opens = []
    for _ in range(RUNS):
        time.sleep(0.05)        # the pool refills while the loop is idle
        t0 = time.perf_counter()
        sb, m = c.open()
        opens.append(time.perf_counter() - t0)
        assert m["pooled"], m
        sb.close()
    line("nsboxd: session open from the warm pool (OPEN -> OPENED with fds)", opens)
    for label, kw in (("direct (libnsbox's own sandbox)", {}), ("through nsboxd (handed over)", {"connect": sock})):
        with nsbox.Sandbox(**kw) as s:
            for _ in range(50):
                s.execute("1+1")
            ts = []
            for _ in range(RUNS * 20):
                t0 = time.perf_counter()
                s.execute("1+1")
                ts.append(time.perf_counter() - t0)
        line(f"exec round trip of 1+1, SDK, {label}", ts, "us", 1e6)
    nthreads, per = 4, max(10, RUNS // 2)
    done = []

    def worker():
        cc = svcclient.Client(sock)
        for _ in range(per):
            s2, _ = cc.open()
            assert s2.exec("1+1")["value"] == 2
            s2.close()
        cc.close()
        done.append(per)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(nthreads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    el = time.perf_counter() - t0
    print(f"nsboxd: sessions opened+exec+closed per second, {nthreads} clients\t{sum(done) / el:.0f}/s\t")
    for label, cmd in (("nsbox python --connect SOCK -c 'print(1)'", [os.path.join(B, "nsbox"), "python", "--connect",
                                                                     sock, "-c", "print(1)"]),
                       ("python3.11 -c 'print(1)' (no sandbox)", ["/usr/bin/python3.11", "-c", "print(1)"])):
        xs = []
        for _ in range(RUNS):
            time.sleep(0.03)
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
            xs.append(time.perf_counter() - t0)
        line(f"whole process: {label}", xs)
    c.close()
finally:
    p.terminate()
    p.wait()
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)
