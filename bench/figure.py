"""make bench: a matplotlib figure's round trip through a session (plot
1,000 points, the PNG back in ExecResult.displays) beside the same plot
saved with savefig in plain python3.11 on the host, measured in the same
run (the host's in two halves, before and after).  Not a test: it prints.
Argument: the number of runs (default 60)."""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import nsbox  # noqa: E402

SETUP = """
import random
import matplotlib.pyplot as plt
random.seed(1)
xs = list(range(1000))
ys = [random.random() for _ in xs]
"""
PLOT = "plt.figure()\nplt.plot(xs, ys)\n"

HOST = SETUP + """
import io, json, sys, time
def once():
    fig = plt.figure()
    plt.plot(xs, ys)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
once()
t = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    png = once()
    t.append(time.perf_counter() - t0)
print(json.dumps({"t": t, "size": len(png)}))
"""


def pct(t, p):
    t = sorted(t)
    return t[min(len(t) - 1, int(round(p / 100 * (len(t) - 1))))]


def host(n):
    p = subprocess.run(["/usr/bin/python3.11", "-c", HOST, str(n)], capture_output=True, text=True,
                       env=dict(os.environ, MPLBACKEND="Agg"), check=True)
    return json.loads(p.stdout)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    base = host(runs // 2)
    with tempfile.NamedTemporaryFile("w", suffix=".policy") as pol:
        pol.write("[Python]\nDistPackages=yes\n")
        pol.flush()
        with nsbox.Sandbox(policy=pol.name, timeout=60) as sb:
            sb.execute(SETUP)
            sb.run(PLOT)
            t = []
            size = 0
            for _ in range(runs):
                t0 = time.perf_counter()
                r = sb.run(PLOT)
                png = r.displays[0]["image/png"] if r.displays else b""
                t.append(time.perf_counter() - t0)
                if not png.startswith(b"\x89PNG"):
                    sys.exit("bench/figure.py: no PNG came back: %r" % (r,))
                size = len(png)
    base2 = host(runs - runs // 2)
    h = base["t"] + base2["t"]
    print("matplotlib figure round trip (1,000 points, %d KiB PNG): p50 %.1f ms, p99 %.1f ms; plain python3.11 "
          "savefig on the host p50 %.1f ms, p99 %.1f ms (%d KiB); ratio %.2f (p50)"
          % (size >> 10, pct(t, 50) * 1e3, pct(t, 99) * 1e3, pct(h, 50) * 1e3, pct(h, 99) * 1e3,
             base["size"] >> 10, pct(t, 50) / pct(h, 50)))


if __name__ == "__main__":
    main()
