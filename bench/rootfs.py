"""make bench: root trees (rootfs/).  Not a test: it prints.

- The datascience tree's build: the first build's time as recorded in its
  info file (or measured here when the tree is missing; NSBOX_BENCH_ROOTFS_FIRST=1
  builds it afresh into a temporary cache to measure it), and a cached build
  (a cache hit), p50 of a few.
- A session ready (Sandbox() returns, the runner's handshake done) from the
  warm spare: on datascience with numpy and pandas preloaded; the same tree
  with no preload, then `import numpy, pandas` (what the preload saves); and
  an empty session on the host's /usr, the baseline; and a first plot
  (matplotlib, 1,000 points, savefig) in a session on datascience with its
  Preload= (matplotlib's font list made in the spare) beside Preload=numpy
  pandas (the font list made at the plot).  One process (and so
  one helper and warm spare) per case, interleaved, with a pause before
  each session so that the helpers have made their next spares.
Usage: bench/rootfs.py BUILD_DIR [N]
"""
import os
import subprocess
import sys
import tempfile
import time

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
N = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("NSBOX_BENCH_ROOTFS_N", "20"))
NSBOX = os.path.join(B, "nsbox")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
os.environ.setdefault("NSBOX_LIB", os.path.join(B, "libnsbox.so.0"))
import nsbox  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def ms(xs):
    return "p50 %7.2f ms  p99 %7.2f ms  (n=%d)" % (pct(xs, 50) * 1e3, pct(xs, 99) * 1e3, len(xs))


def build(env=None):
    t0 = time.perf_counter()
    p = subprocess.run([NSBOX, "rootfs", "build", "datascience"], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("bench: nsbox rootfs build datascience failed:\n" + p.stderr)
    return time.perf_counter() - t0, p.stdout


def info_of(out):
    d = out.strip().rsplit("(", 1)[-1].rstrip(")")
    return dict(l.split("=", 1) for l in open(os.path.join(d, "info")).read().splitlines() if "=" in l)


def main():
    if os.environ.get("NSBOX_BENCH_ROOTFS_FIRST") == "1":
        with tempfile.TemporaryDirectory(prefix="nsbox-bench-rootfs.") as c:
            first, _ = build(dict(os.environ, NSBOX_ROOTFS_CACHE=c))
            subprocess.run(["chmod", "-R", "u+w", c])
        note = "measured now, into a temporary cache"
    else:
        first, out = build()
        if "cached" in out:
            i = info_of(out)
            first = float(i.get("seconds", "nan"))
            note = "recorded when built, %s" % i.get("built", "?")
        else:
            note = "measured now"
    cached = []
    for _ in range(5):
        t, out = build()
        assert "cached" in out, out
        cached.append(t)
    print("rootfs datascience: build, first %.0f s (%s); cached %s" % (first, note, ms(cached)))

    with tempfile.NamedTemporaryFile("w", suffix=".policy", delete=False) as f:
        f.write("[Filesystem]\nRootFS=datascience\n[Python]\nPreload=\n")
        nopre = f.name
    with tempfile.NamedTemporaryFile("w", suffix=".policy", delete=False) as f:
        f.write("[Filesystem]\nRootFS=datascience\n[Python]\nPreload=numpy pandas\n")
        nofont = f.name
    plot = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "plt.plot(range(1000))\nplt.savefig('/tmp/f.png')\nplt.close('all')\n")
    cases = [
        ("datascience, numpy+pandas preloaded, from the warm spare", dict(rootfs="datascience"), None),
        ("datascience, no preload, from the warm spare, + exec 'import numpy, pandas'", dict(policy=nopre),
         "import numpy, pandas"),
        ("host /usr, empty session from the warm spare (baseline)", dict(), None),
        ("datascience (Preload= with matplotlib.font_manager), + exec a first plot", dict(rootfs="datascience"),
         plot),
        ("datascience, Preload=numpy pandas, + exec a first plot", dict(policy=nofont), plot),
    ]
    # One process per case, each with its own helper and so its own warm
    # spare (a helper keeps one, the last policy's), driven in turn so that
    # the cases are interleaved under the same load.
    child = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import nsbox
kw = json.loads(sys.argv[2]); code = sys.argv[3] or "import sys; 'numpy' in sys.modules"
nsbox.Sandbox(spare=True, timeout=120, **kw).close()
for line in sys.stdin:
    t0 = time.perf_counter()
    sb = nsbox.Sandbox(spare=True, timeout=120, **kw)
    t1 = time.perf_counter()
    r = sb.run(code)
    t2 = time.perf_counter()
    sb.close()
    print(json.dumps([t1 - t0, t2 - t0, r.error is None, r.value]), flush=True)
"""
    pydir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
    procs = [subprocess.Popen([sys.executable, "-c", child, pydir, __import__("json").dumps(kw), code or ""],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _, kw, code in cases]
    ready = {c[0]: [] for c in cases}
    total = {c[0]: [] for c in cases}
    pause = float(os.environ.get("NSBOX_BENCH_ROOTFS_PAUSE", "1.0"))
    try:
        for _ in range(N):
            for (label, kw, code), p in zip(cases, procs):
                time.sleep(pause)  # the helpers make their next spares meanwhile
                p.stdin.write("go\n")
                p.stdin.flush()
                t_ready, t_total, ok, value = __import__("json").loads(p.stdout.readline())
                assert ok, label
                if label.startswith("datascience, numpy"):
                    assert value is True, "numpy was not preloaded"
                ready[label].append(t_ready)
                total[label].append(t_total)
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()
        os.unlink(nopre)
        os.unlink(nofont)
    print("# session ready = Sandbox() returned (handshake done); + first exec = ready and the first run() "
          "(machine shared with other work: noisy)")
    base = pct(ready[cases[2][0]], 50)
    for label, _, _ in cases:
        print("rootfs session ready: %s\t%s\t(%.1fx the baseline's p50)" % (label, ms(ready[label]),
                                                                            pct(ready[label], 50) / base))
        print("rootfs session ready + first exec: %s\t%s" % (label, ms(total[label])))


if __name__ == "__main__":
    main()
