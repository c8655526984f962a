"""make bench: session file round trips (write_file, read_file) beside cp of
the same file on the host.  Not a test: it prints.  Sizes in MiB as
arguments (default 1 100); files past 64 MiB raise NSBOX_FILE_MAX."""
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("NSBOX_FILE_MAX", str(256 << 20))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import nsbox  # noqa: E402


def best(fn, n):
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1, 100]
    with tempfile.TemporaryDirectory(prefix="nsbox-bench-files.") as d, \
            nsbox.Sandbox(memory="2G", timeout=120, policy="permissive") as sb:  # TmpSize 512M
        for mib in sizes:
            data = os.urandom(mib << 20)
            src = os.path.join(d, "src")
            with open(src, "wb") as f:
                f.write(data)
            n = 5 if mib <= 8 else 2
            w = best(lambda: sb.write_file("/tmp/bench", data), n)
            r = best(lambda: sb.read_file("/tmp/bench", max_bytes=len(data)), n)
            c = best(lambda: subprocess.run(["cp", src, os.path.join(d, "dst")], check=True), n)
            print("files %4d MiB\twrite_file %8.1f ms (%6.0f MiB/s)\tread_file %8.1f ms (%6.0f MiB/s)\t"
                  "cp %6.1f ms" % (mib, w * 1e3, mib / w, r * 1e3, mib / r, c * 1e3))
            sb.execute("import os; os.unlink('/tmp/bench')")


if __name__ == "__main__":
    main()
