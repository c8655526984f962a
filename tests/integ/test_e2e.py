"""An end-to-end analysis as an agent would do it (issue 16, Tests): upload a
CSV, pandas groupby, a matplotlib bar chart, the PNG back and decoded, the
summary table back as HTML, under a 512M memory limit and one CPU.

Through the SDK on the `datascience` root tree and on the host's own tree
(DistPackages=yes), and once through the CLI (`nsbox python --rootfs
datascience --json --display-dir`).  It lives in tests/integ so that
scripts/run-integ.sh runs it in all three passes (root, uid 65534 with a
delegated cgroup, uid 65534 without); the SDK runs in a child Python
(sdk_env: under SANITIZE the ASan runtime is preloaded there, never into
pytest), and the autouse host_intact fixture checks that nothing leaked.

The numbers the sandbox reports are checked against the same aggregation
done here in plain Python from the same CSV.

Run: NSBOX_BUILD=$PWD/build /usr/bin/python3.11 -m pytest tests/integ/test_e2e.py
"""
import base64
import csv
import json
import os
import random
import struct
import subprocess
import sys
import zlib

import pytest

from conftest import sdk_env

BUILD = os.path.abspath(os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "..", "build"))
NSBOX = os.path.join(BUILD, "nsbox")
HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
SYSTEM_CACHE = "/var/cache/nsbox/rootfs"
BUILD_CMD = "nsbox rootfs build datascience"

REGIONS = ["north", "south", "east", "west", "central"]
ROWS = 4000
# The figure the analysis draws: its PNG is FIGSIZE * DPI pixels.
FIGSIZE = (6, 4)
DPI = 80

ANALYSIS = """
import os
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv(%(csv)r)
summary = df.groupby("region").agg(rows=("units", "size"), units=("units", "sum"),
                                   max_units=("units", "max"), cents=("cents", "sum"))
plt.figure(figsize=%(figsize)r, dpi=%(dpi)d)
plt.bar(summary.index, summary["units"])
plt.title("units by region")
print("threads", os.environ.get("OPENBLAS_NUM_THREADS"))
summary
"""
# A second exec in the same session: the numbers as plain Python values.
VALUE = "{r: [int(v) for v in row] for r, row in summary.iterrows()}"


def make_csv(path):
    """A CSV of ROWS sales over the REGIONS and its aggregation in plain
    Python: {region: [rows, sum(units), max(units), sum(cents)]}."""
    rnd = random.Random(16)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["region", "units", "cents"])
        for _ in range(ROWS):
            w.writerow([rnd.choice(REGIONS), rnd.randint(1, 500), rnd.randint(0, 99999)])
    want = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            a = want.setdefault(row["region"], [0, 0, 0, 0])
            u, c = int(row["units"]), int(row["cents"])
            a[0] += 1
            a[1] += u
            a[2] = max(a[2], u)
            a[3] += c
    assert sorted(want) == sorted(REGIONS)
    return want


def decode_png(data):
    """Decode a PNG far enough to trust it: the signature, every chunk's
    CRC, IHDR, and the IDAT stream inflating to exactly height scanlines of
    width pixels.  Returns (width, height)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    pos, chunks = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) == crc, "bad CRC in chunk %r" % kind
        chunks.append((kind, body))
        pos += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", [c[0] for c in chunks]
    w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert depth == 8 and interlace == 0, (depth, interlace)
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == h * (1 + w * channels), (len(raw), w, h, channels)
    # Each scanline starts with a filter type 0..4.
    assert all(raw[i * (1 + w * channels)] <= 4 for i in range(h))
    return w, h


def check_html(html, want):
    assert "<table" in html and "</table>" in html, html[:200]
    for region, (rows, units, max_units, cents) in want.items():
        assert "<th>%s</th>" % region in html, (region, html)
        # The row of this region: its cells in order.
        row = html.split("<th>%s</th>" % region, 1)[1].split("</tr>", 1)[0]
        cells = [c.split("</td>", 1)[0] for c in row.split("<td>")[1:]]
        assert cells == [str(rows), str(units), str(max_units), str(cents)], (region, cells)


def check_png(png):
    assert decode_png(png) == (FIGSIZE[0] * DPI, FIGSIZE[1] * DPI)


def tree_built():
    """Whether the datascience tree is built, where the library finds it
    (the user's cache, then root's)."""
    caches = [SYSTEM_CACHE]
    if os.geteuid() != 0:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", "/"), ".cache")
        caches.insert(0, os.path.join(base, "nsbox", "rootfs"))
    return any(os.path.isfile(os.path.join(c, "datascience", "info")) for c in caches)


@pytest.fixture
def datascience():
    if os.environ.get("NSBOX_SANITIZE"):
        pytest.skip("under SANITIZE the runner needs the host's libasan, which the tree has not "
                    "(the unsanitized make check runs this)")
    if not tree_built():
        reason = "the datascience tree is not built: run `%s` (as root for every user)" % BUILD_CMD
        if os.environ.get("NSBOX_MUST_WORK") == "1":
            pytest.fail(reason + " (NSBOX_MUST_WORK=1)")
        pytest.skip(reason)
    return "datascience"


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    return str(d), make_csv(str(d / "sales.csv"))


SDK_CHILD = r"""
import base64, json, os, sys
import nsbox
args = json.loads(sys.argv[1])
kw = dict(memory="512M", cpus=1, timeout=120)
if args["rootfs"]:
    kw["rootfs"] = args["rootfs"]
else:
    kw["policy"] = args["policy"]
out = {}
with nsbox.Sandbox(**kw) as sb:
    out["info"] = {k: v for k, v in sb.info().items() if k in ("memory_limit", "cpus_limit", "python")}
    sb.make_dir("/tmp/in")
    sb.upload_dir(args["dir"], "/tmp/in/data")
    sb.write_file("/tmp/in/notes.txt", "uploaded with write_file\n")
    out["listing"] = sorted(e["name"] for e in sb.list_files("/tmp/in/data"))
    r = sb.run(args["code"])
    out["ok"], out["error"] = r.ok, str(r.error) if r.error else None
    out["stdout"], out["stderr"] = r.stdout, r.stderr
    out["peak_memory"] = r.peak_memory
    out["truncated"] = r.displays_truncated
    out["displays"] = [{k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v) for k, v in d.items()}
                       for d in r.displays]
    out["repr"] = [type(r.value).__name__, str(r.value)]
    out["value"] = sb.run(args["value"]).value
    out["notes"] = sb.read_file("/tmp/in/notes.txt").decode()
    out["figs"] = sb.run("len(plt.get_fignums())").value
print(json.dumps(out))
"""


def run_sdk(data_dir, rootfs=None, policy=None):
    code = ANALYSIS % {"csv": "/tmp/in/data/sales.csv", "figsize": FIGSIZE, "dpi": DPI}
    args = json.dumps({"rootfs": rootfs, "policy": policy, "dir": data_dir, "code": code, "value": VALUE})
    env = sdk_env(NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"), PYTHONPATH=PYDIR)
    p = subprocess.run([sys.executable, "-c", SDK_CHILD, args], capture_output=True, text=True, timeout=300,
                       env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    return json.loads(p.stdout)


def check_sdk(out, want):
    assert out["ok"], (out["error"], out["stderr"][-3000:])
    # The limits as the session reports them, and as the code inside sees
    # the CPU limit (one BLAS thread).
    assert out["info"]["memory_limit"] == 512 << 20 and out["info"]["cpus_limit"] == 1, out["info"]
    assert out["stdout"].split() == ["threads", "1"], out["stdout"]
    assert 0 < out["peak_memory"] <= 512 << 20, out["peak_memory"]
    assert out["listing"] == ["sales.csv"] and out["notes"] == "uploaded with write_file\n"
    assert not out["truncated"]
    # The figure left open, then the DataFrame: in that order.
    assert len(out["displays"]) == 2, [sorted(d) for d in out["displays"]]
    fig, table = out["displays"]
    assert sorted(fig) == ["image/png", "text/plain"], sorted(fig)
    check_png(base64.b64decode(fig["image/png"]))
    assert "Figure" in fig["text/plain"], fig["text/plain"]
    assert sorted(table) == ["text/html", "text/plain"], sorted(table)
    check_html(table["text/html"], want)
    for region in REGIONS:
        assert region in table["text/plain"]
    # The last expression's value is the DataFrame's repr; the numbers
    # themselves come back as plain values from a second exec.
    assert out["repr"][0] == "ReprValue" and out["repr"][1] == table["text/plain"], out["repr"]
    assert out["value"] == want, (out["value"], want)
    # The figure was collected: none is left open for the next exec.
    assert out["figs"] == 0


def test_sdk_datascience(datascience, data):
    data_dir, want = data
    check_sdk(run_sdk(data_dir, rootfs=datascience), want)


def test_sdk_host_tree(data, tmp_path):
    """The same on the host's own /usr (python3-pandas and
    python3-matplotlib from Debian, DistPackages=yes)."""
    for mod in ("pandas", "matplotlib"):
        if not os.path.isdir("/usr/lib/python3/dist-packages/" + mod):
            reason = "the host lacks python3-%s (apt-get install python3-%s)" % (mod, mod)
            if os.environ.get("NSBOX_MUST_WORK") == "1":
                pytest.fail(reason + " (NSBOX_MUST_WORK=1)")
            pytest.skip(reason)
    pol = tmp_path / "dp.policy"
    pol.write_text("[Python]\nDistPackages=yes\n")
    data_dir, want = data
    check_sdk(run_sdk(data_dir, policy=str(pol)), want)


def test_cli_datascience(datascience, data, tmp_path):
    data_dir, want = data
    script = tmp_path / "analysis.py"
    # A script file runs as __main__, as `python script.py` would: its last
    # expression is not a result, so the table is shown with display().
    code = ANALYSIS % {"csv": "/workspace/sales.csv", "figsize": FIGSIZE, "dpi": DPI}
    script.write_text(code.rstrip().rsplit("\n", 1)[0] + "\ndisplay(summary)\n")
    shown = tmp_path / "shown"
    shown.mkdir()
    csv_bytes = open(os.path.join(data_dir, "sales.csv"), "rb").read()
    p = subprocess.run([NSBOX, "python", "--rootfs", datascience, "--memory", "512M", "--cpus", "1", "--json",
                        "--display-dir", str(shown), "--workspace", data_dir, str(script)],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    res = json.loads(p.stdout)
    assert res["error"] is None, res["error"]
    assert res["stdout"].split() == ["threads", "1"], res["stdout"]
    assert not res["displays_truncated"] and res["files"] == []
    assert len(res["displays"]) == 2, res["displays"]
    # The PNG saved in the display directory is the one in the JSON.
    pngs = sorted(f for f in os.listdir(shown) if f.endswith(".png"))
    assert len(pngs) == 1, os.listdir(shown)
    png = open(os.path.join(shown, pngs[0]), "rb").read()
    check_png(png)
    # display(summary) first, then the figure still open at the end.
    table, fig = res["displays"]
    assert sorted(fig) == ["image/png", "text/plain"] and sorted(table) == ["text/html", "text/plain"]
    assert base64.b64decode(fig["image/png"]) == png
    html = [f for f in os.listdir(shown) if f.endswith(".html")]
    assert len(html) == 1, os.listdir(shown)
    assert open(os.path.join(shown, html[0])).read() == table["text/html"]
    check_html(table["text/html"], want)
    assert res["value"] is None
    # The workspace is HOME inside: matplotlib's caches are all it adds; the
    # data is untouched.
    assert set(os.listdir(data_dir)) - {".cache", ".config"} == {"sales.csv"}, os.listdir(data_dir)
    assert open(os.path.join(data_dir, "sales.csv"), "rb").read() == csv_bytes
