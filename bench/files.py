"""make bench: session file round trips (write_file, read_file) beside cp of
the same file on the host, interleaved in the same run: p50, p99, MiB/s and
the ratio of the p50s.  Not a test: it prints.  Sizes in MiB as arguments
(default 1 100); files past 64 MiB raise NSBOX_FILE_MAX.  cp copies within
the host's temp dir; the sandbox's file is on its /tmp (a tmpfs)."""
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("NSBOX_FILE_MAX", str(256 << 20))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import nsbox  # noqa: E402


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1, 100]
    with tempfile.TemporaryDirectory(prefix="nsbox-bench-files.") as d, \
            nsbox.Sandbox(memory="2G", timeout=120, policy="permissive") as sb:  # TmpSize 512M
        for mib in sizes:
            data = os.urandom(mib << 20)
            src = os.path.join(d, "src")
            with open(src, "wb") as f:
                f.write(data)
            n = 21 if mib <= 8 else 5
            # cp of the same file on the same host, interleaved with the
            # file calls so that both see the same machine.
            w, r, c = [], [], []
            for _ in range(n):
                for out, fn in ((w, lambda: sb.write_file("/tmp/bench", data)),
                                (r, lambda: sb.read_file("/tmp/bench", max_bytes=len(data))),
                                (c, lambda: subprocess.run(["cp", src, os.path.join(d, "dst")], check=True))):
                    t0 = time.perf_counter()
                    fn()
                    out.append(time.perf_counter() - t0)
            for t in (w, r, c):
                t.sort()
            p50 = lambda t: t[len(t) // 2]  # noqa: E731
            p99 = lambda t: t[min(len(t) - 1, (len(t) * 99) // 100)]  # noqa: E731
            for name, t in (("write_file", w), ("read_file", r)):
                print("files %3d MiB %-10s p50 %8.2f ms (%5.0f MiB/s) p99 %8.2f ms  vs cp p50 %7.2f ms: %.2fx"
                      % (mib, name, p50(t) * 1e3, mib / p50(t), p99(t) * 1e3, p50(c) * 1e3, p50(t) / p50(c)))
            sb.execute("import os; os.unlink('/tmp/bench')")


def workspace():
    """nsbox run with a workspace: a plain bind (infinity) beside the
    bounded overlay, empty and writing 64 MiB (written back at the end)."""
    nsbox_bin = os.path.join(os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "build"),
                             "nsbox")
    with tempfile.TemporaryDirectory(prefix="nsbox-bench-ws.") as d:
        for what, cmd, n in (("true", ["/usr/bin/true"], 21),
                             ("write 64 MiB", ["/bin/sh", "-c", "head -c 67108864 /dev/zero > f"], 7)):
            res = {}
            for _ in range(n):
                for mode in ("infinity", "256M"):
                    t0 = time.perf_counter()
                    subprocess.run([nsbox_bin, "run", "--workspace", d, "--workspace-size", mode, "--"] + cmd,
                                   check=True)
                    res.setdefault(mode, []).append(time.perf_counter() - t0)
            for t in res.values():
                t.sort()
            a, b = res["infinity"][n // 2], res["256M"][n // 2]
            print("workspace: nsbox run %-13s p50 bind %7.2f ms, bounded overlay + write-back %7.2f ms: %.2fx"
                  % (what, a * 1e3, b * 1e3, b / a))


if __name__ == "__main__":
    main()
    workspace()
