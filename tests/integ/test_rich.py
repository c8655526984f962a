"""Rich results through `nsbox python`: matplotlib figures, display(), a
DataFrame as the last expression, /out files, the caps, --display-dir, and
hostile RESULT frames written by sandboxed code (nsbox-protocol(7), RICH
RESULTS).  Runs in every pass of scripts/run-integ.sh (root, delegated,
nodeleg); matplotlib and pandas come from Debian (scripts/install-deps.sh)
through --dist-packages.

Run: NSBOX_BUILD=$PWD/build /usr/bin/python3.11 -m pytest tests/integ/test_rich.py
"""
import base64
import json
import os
import struct
import subprocess

import pytest

from forge import PRELUDE

BUILD = os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "..", "build")
NSBOX = os.path.join(BUILD, "nsbox")


def run(*args, env=None, timeout=120):
    e = dict(os.environ)
    e.pop("NSBOX_RUNNER", None)
    if env:
        e.update(env)
    return subprocess.run([NSBOX, "python", "--dist-packages", *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def run_json(*args, **kw):
    p = run("--json", *args, **kw)
    try:
        return p, json.loads(p.stdout)
    except ValueError:
        raise AssertionError("not JSON: rc=%d out=%r err=%r" % (p.returncode, p.stdout[:2000], p.stderr[-3000:]))


def png_size(data):
    """(width, height) from a PNG's IHDR, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module", autouse=True)
def libs():
    for m in ("matplotlib", "pandas"):
        p = subprocess.run(["/usr/bin/python3.11", "-c", "import " + m], capture_output=True)
        if p.returncode:
            pytest.fail("%s is not installed on the host (scripts/install-deps.sh installs it)" % m)


BAR = """
import matplotlib.pyplot as plt
fig = plt.figure(figsize=(4, 3), dpi=50)
plt.bar(["a", "b", "c"], [3, 1, 2])
"""


def test_bar_chart_left_open_comes_back_as_png():
    p, r = run_json("-c", BAR + "import matplotlib; print(matplotlib.get_backend())")
    assert p.returncode == 0, p.stderr
    assert r["stdout"] == "module://nsbox.mpl\n"
    assert len(r["displays"]) == 1, r["displays"]
    d = r["displays"][0]
    assert set(d) == {"image/png", "text/plain"}
    assert png_size(base64.b64decode(d["image/png"], validate=True)) == (200, 150)
    assert d["text/plain"] == "<Figure size 200x150 with 1 Axes>"
    # The same keys whatever the result (nsbox(1)): none, not cut.
    assert r["displays_truncated"] is False and r["files"] == [] and r["files_truncated"] is False


def test_show_keeps_order_and_closes_figures():
    code = (BAR + "display('before')\nplt.show()\ndisplay('after')\n"
            "fig2 = plt.figure(figsize=(2, 1), dpi=100)\nplt.plot([1, 2])\n"
            "print(len(plt.get_fignums()))\n")
    p, r = run_json("-c", code)
    assert p.returncode == 0, p.stderr
    kinds = [d.get("text/plain") for d in r["displays"]]
    assert kinds == ["'before'", "<Figure size 200x150 with 1 Axes>", "'after'",
                     "<Figure size 200x100 with 1 Axes>"], kinds
    assert png_size(base64.b64decode(r["displays"][3]["image/png"])) == (200, 100)
    # plt.show() closed the first figure: only the second was open.
    assert r["stdout"] == "1\n"
    assert "FigureCanvasAgg is non-interactive" not in r["stderr"]


REPRS = r'''
class Rich:
    def _repr_png_(self): return b"\x89PNG\r\n\x1a\nnot really"
    def _repr_jpeg_(self): return None
    def _repr_svg_(self): return "<svg xmlns='http://www.w3.org/2000/svg'/>"
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_markdown_(self): return "**rich**", {"meta": 1}
    def _repr_latex_(self): return "$x^2$"
    def _repr_json_(self): return {"k": [1, 2, None]}
    def __repr__(self): return "Rich()"

class Broken:
    def _repr_html_(self): raise RuntimeError("nope")
    def __repr__(self): return "Broken()"

display(Rich(), Broken())
display({"text/csv": "a,b\n1,2\n", "bad mime": "x"}, raw=True)
'''


def test_display_of_several_reprs():
    p, r = run_json("-c", REPRS)
    assert p.returncode == 0, p.stderr
    rich, broken, raw = r["displays"]
    assert set(rich) == {"image/png", "image/svg+xml", "text/html", "text/markdown", "text/latex",
                         "application/json", "text/plain"}
    assert base64.b64decode(rich["image/png"]) == b"\x89PNG\r\n\x1a\nnot really"
    assert rich["text/markdown"] == "**rich**" and rich["text/latex"] == "$x^2$"
    assert json.loads(rich["application/json"]) == {"k": [1, 2, None]}
    assert rich["text/plain"] == "Rich()"
    # A failing repr is left out and said on stderr; text/plain remains.
    assert broken == {"text/plain": "Broken()"}
    assert "Broken._repr_html_ failed: RuntimeError: nope" in r["stderr"]
    # An invalid MIME type name is left out, and the result says so.
    assert raw == {"text/csv": "a,b\n1,2\n"} and r["displays_truncated"] is True


def test_dataframe_last_expression_html_and_text():
    code = ("import pandas as pd\n"
            "df = pd.DataFrame({'city': ['a', 'b', 'a'], 'n': [1, 2, 3]})\n"
            "df.groupby('city').sum()\n")
    p, r = run_json("-c", code)
    assert p.returncode == 0, p.stderr
    assert len(r["displays"]) == 1
    d = r["displays"][0]
    assert "<table" in d["text/html"] and "<th>a</th>" in d["text/html"]
    assert d["text/plain"].split() == ["n", "city", "a", "4", "b", "2"]
    # The value keeps its own encoding (a repr for a DataFrame).
    assert r["value"]["$type"] == "pandas.core.frame.DataFrame"
    # Plain values bring no bundle.
    p, r = run_json("-c", "[1, 2]")
    assert r["displays"] == []


def test_out_files_come_back():
    code = ("open('/out/report.csv', 'w').write('a,b\\n1,2\\n')\n"
            "open('/out/blob.bin', 'wb').write(bytes(range(256)) * 4)\n"
            "import os; os.mkdir('/out/sub'); os.symlink('/etc/passwd', '/out/link')\n"
            "open('/tmp/elsewhere', 'w').write('x')\n"
            "print(os.statvfs('/out').f_blocks * os.statvfs('/out').f_frsize)\n")
    p, r = run_json("--tmp-size", "32M", "-c", code)
    assert p.returncode == 0, p.stderr
    files = {f["name"]: f for f in r["files"]}
    assert set(files) == {"report.csv", "blob.bin"}, files    # no dirs, no symlinks
    assert base64.b64decode(files["report.csv"]["data"]) == b"a,b\n1,2\n"
    assert files["blob.bin"]["size"] == 1024 and base64.b64decode(files["blob.bin"]["data"]) == bytes(range(256)) * 4
    assert r["files_truncated"] is False
    # /out is capped as /tmp is (--tmp-size).
    assert int(r["stdout"]) == 32 << 20


def test_out_is_capped_inside():
    code = ("import errno\ntry:\n    open('/out/fill', 'wb').write(b'x' * (40 << 20))\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno])\n")
    p, r = run_json("--tmp-size", "16M", "--memory", "256M", "-c", code)
    assert p.returncode == 0, p.stderr
    assert r["stdout"] == "ENOSPC\n"
    # The partial file is listed, too large to come with the result.
    assert r["files"][0]["name"] == "fill" and "data" not in r["files"][0] and r["files_truncated"] is True


def test_caps_and_truncation_flags():
    code = ("for i in range(70): display(i)\n"
            "open('/out/big', 'wb').write(b'y' * (9 << 20))\n"
            "open('/out/bad\\x01name', 'w').write('x')\n")
    p, r = run_json("--memory", "512M", "-c", code)
    assert p.returncode == 0, p.stderr
    assert len(r["displays"]) == 64 and r["displays_truncated"] is True
    assert [d["text/plain"] for d in r["displays"][:3]] == ["0", "1", "2"]
    # A name with a control character is left out; big comes without data.
    assert [f["name"] for f in r["files"]] == ["big"]
    assert r["files"][0]["size"] == 9 << 20 and "data" not in r["files"][0]
    assert r["files_truncated"] is True


def test_display_dir_writes_host_named_files(tmp_path):
    d = tmp_path / "disp"
    code = (BAR + "plt.show()\ndisplay('x')\nopen('/out/..x', 'w').write('dots')\n"
            "open('/out/r.txt', 'w').write('hello')\n")
    p = run("--display-dir", str(d), "-c", code)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(d)) == ["display-001.png", "display-001.txt", "display-002.txt", "out"]
    assert png_size((d / "display-001.png").read_bytes()) == (200, 150)
    assert (d / "display-002.txt").read_text() == "'x'"
    assert sorted(os.listdir(d / "out")) == ["..x", "r.txt"]
    assert (d / "out" / "r.txt").read_text() == "hello"
    # Again into the same directory: nothing is overwritten (O_EXCL), the
    # failure is named, the status is 1.
    p = run("--display-dir", str(d), "-c", "display('y')")
    assert p.returncode == 1, p.stderr
    assert "cannot create %s/display-001.txt: File exists" % d in p.stderr
    assert (d / "display-001.txt").read_text() == "<Figure size 200x150 with 1 Axes>"


def test_display_dir_does_not_follow_links(tmp_path):
    d = tmp_path / "disp"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, d / "display-001.txt")
    os.symlink(tmp_path, d / "out")
    p = run("--display-dir", str(d), "-c", "display('z')\nopen('/out/victim', 'w').write('owned')")
    assert p.returncode == 1, p.stderr
    assert "display-001.txt: File exists" in p.stderr
    assert "cannot open %s/out" % d in p.stderr
    assert victim.read_text() == "keep"


def test_display_dir_bad_argument(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    p = run("--display-dir", str(f), "-c", "1")
    assert p.returncode == 120 and "--display-dir %s: Not a directory" % f in p.stderr
    p = run("--display-dir", "", "-c", "1")
    assert p.returncode == 120


# Sandboxed code writes RESULT frames by hand on the runner's socket: the
# host must refuse each with a protocol error naming the offence.


@pytest.mark.parametrize("fields,text", [
    ('"displays":[{"image/png":"not base64!"}]', "is not valid base64"),
    ('"displays":[{"../../etc":"x"}]', "invalid MIME type name"),
    ('"displays":[{"text/plain":"x","IMAGE/PNG":"AAAA"}]', "invalid MIME type name"),
    ('"displays":[' + ",".join(['{"text/plain":"x"}'] * 65) + "]", "65 displays, over the cap of 64"),
    ('"displays":"x"', "displays has the wrong type"),
    ('"files":[{"name":"../../../tmp/x","size":1,"data":"eA=="}]', "has an invalid name"),
    ('"files":[{"name":"a/b","size":1,"data":"eA=="}]', "has an invalid name"),
    ('"files":[{"name":"--checkpoint-action=exec=sh x","size":1,"data":"eA=="}]', "has an invalid name"),
    ('"files":[{"name":"report\\u200b.pdf","size":1,"data":"eA=="}]', "has an invalid name"),
    ('"files":[{"name":"ok","size":100,"data":"eA=="}]', "its size says 100"),
    ('"files":[{"name":"x","size":0},{"name":"x","size":0}]', "repeats the name"),
    ('"displays_truncated":"no"', "displays_truncated is not a boolean"),
])
def test_hostile_result_frames(tmp_path, fields, text):
    d = tmp_path / "disp"
    p = run("--display-dir", str(d), "-c", PRELUDE + "result(1, %r)\n" % fields)
    assert p.returncode == 121, p.stderr
    assert "protocol error: RESULT: " in p.stderr and text in p.stderr, p.stderr
    assert os.listdir(d) == []


def test_out_names_the_host_would_misread_are_left_out(tmp_path):
    """/out names that become host files (--display-dir DIR/out,
    download_dir): a leading '-' is an option to the host user's later
    `tar cf x.tar *` or `rm *` in that directory, and invisible characters
    (zero widths, LRM/RLM, line separators, U+FEFF) make a name show as
    another.  The runner leaves them out (files_truncated, as for other
    names the host refuses) and the host refuses them if sent anyway
    (above); the sandbox's other files still come."""
    d = tmp_path / "disp"
    code = ("for n in ['-rf', '--checkpoint=1', 'a\\u200bb', 'c\\u2028d', '\\ufeffe', 'f\\u200eg', 'ok-1.txt']:\n"
            "    open('/out/' + n, 'w').write('x')\n")
    p, r = run_json("--display-dir", str(d), "-c", code)
    assert p.returncode == 0, p.stderr
    assert [f["name"] for f in r["files"]] == ["ok-1.txt"] and r["files_truncated"] is True, r["files"]
    assert os.listdir(d / "out") == ["ok-1.txt"]


def test_hostile_bytes_over_the_cap():
    # Built inside: 8 MiB of valid base64 and one byte more of text.
    code = PRELUDE + "result(1, '\"displays\":[{\"image/png\":\"' + 'A' * (8 << 20) + '\"},{\"text/plain\":\"x\"}]')\n"
    p = run("--json", "-c", code)
    assert p.returncode == 121, p.stderr
    r = json.loads(p.stdout)
    assert "bytes of displays and files, over the cap" in r["message"], r["message"]
    assert r["displays"] == []     # nothing of the refused frame


@pytest.mark.parametrize("payload", [r"'{\x1b]0;pwned\x07\x1b[31m'", r"'[\x1b[2J]'",
                                     r"'{\"a\":1,\"\u202egnp.exe\":2,\"\u202egnp.exe\":3}'.encode()"])
def test_protocol_errors_quote_no_terminal_controls(payload):
    """A frame that is not JSON: jansson's message quotes the input where it
    stopped, and nsbox python printed the sandbox's raw ESC (or a bidi
    override from a repeated key) on the host's stderr (red team 4)."""
    p = subprocess.run([NSBOX, "python", "-c", PRELUDE + "frame(3, 1, %s)\ntime.sleep(3)\n" % payload],
                       capture_output=True, timeout=60)
    err = p.stderr.decode("utf-8", "surrogateescape")
    assert p.returncode == 121 and "not valid JSON" in err, err
    assert not any(c < " " and c != "\n" or c in "\x7f\u202e" for c in err), repr(err)
