"""Rich results in the SDK: ExecResult.displays (MIME bundles: str for text
types, bytes for binary ones), ExecResult.files (/out), the truncation
flags, across execs of one session, through Sandbox and AsyncSandbox, and
hostile RESULT frames (python/README.md, Rich results)."""

import asyncio
import struct

import pytest

import nsbox
from forge import PRELUDE  # tests/integ, on the path from conftest

BAR = """
import matplotlib.pyplot as plt
plt.figure(figsize=(3, 2), dpi=100)
plt.bar(["x", "y"], [1, 2])
"""


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def policy(tmp_path):
    p = tmp_path / "dp.policy"
    p.write_text("[Python]\nDistPackages=yes\n")
    return str(p)


@pytest.fixture
def rsb(libnsbox, policy):
    s = nsbox.Sandbox(policy=policy, timeout=60)
    yield s
    s.close()


def test_figure_and_types(rsb):
    r = rsb.run(BAR)
    assert r.ok, r.error
    assert len(r.displays) == 1
    d = r.displays[0]
    assert isinstance(d["image/png"], bytes) and isinstance(d["text/plain"], str)
    assert png_size(d["image/png"]) == (300, 200)
    assert not r.displays_truncated and r.files == [] and not r.files_truncated
    # The figure was closed once collected: the next exec has none.
    r = rsb.run("len(plt.get_fignums())")
    assert r.value == 0 and r.displays == []


def test_display_and_dataframe_value(rsb):
    r = rsb.run("import pandas as pd\n"
                "display(pd.Series([1, 2], name='s'))\n"
                "class S:\n    def _repr_svg_(self): return '<svg/>'\n"
                "display(S())\n"
                "pd.DataFrame({'a': [1, 2]})\n")
    assert r.ok, r.error
    series, svg, df = r.displays
    assert set(series) == {"text/plain"}
    assert svg["image/svg+xml"] == "<svg/>"
    assert "<table" in df["text/html"] and df["text/plain"].split() == ["a", "0", "1", "1", "2"]
    # execute() still returns the value (a repr for a DataFrame).
    assert isinstance(rsb.execute("pd.DataFrame({'a': [1]})"), nsbox.ReprValue)


def test_out_files_across_execs(rsb):
    r = rsb.run("open('/out/a.txt', 'w').write('one')")
    assert r.files == [nsbox.OutFile("a.txt", 3, b"one")]
    # Unchanged files are not sent again; changed and new ones are, a
    # rewrite in place of the same size too (mtime).
    assert rsb.run("1").files == []
    assert rsb.run("open('/out/a.txt', 'r+').write('ONE')").files == [nsbox.OutFile("a.txt", 3, b"ONE")]
    assert rsb.run("2").files == []
    r = rsb.run("open('/out/a.txt', 'w').write('two!')\nopen('/out/b.bin', 'wb').write(b'\\0' * 5)")
    assert sorted(r.files) == [nsbox.OutFile("a.txt", 4, b"two!"), nsbox.OutFile("b.bin", 5, b"\0" * 5)]
    # A file too large to come with the result: named, sized, read it with
    # read_file.
    r = rsb.run("open('/out/big', 'wb').write(b'z' * (9 << 20))")
    assert r.files == [nsbox.OutFile("big", 9 << 20, None)] and r.files_truncated
    assert rsb.read_file("/out/big") == b"z" * (9 << 20)


def test_async(libnsbox, policy):
    async def main():
        async with nsbox.AsyncSandbox(policy=policy, timeout=60) as sb:
            r = await sb.run(BAR + "display('after')")
            return r
    r = asyncio.run(main())
    assert r.ok, r.error
    assert [d["text/plain"] for d in r.displays] == ["'after'", "<Figure size 300x200 with 1 Axes>"]




@pytest.mark.parametrize("bad,text", [
    ('"displays":[{"image/png":"%%%%"}]', "not valid base64"),
    ('"displays":[{"x/y z":"a"}]', "invalid MIME type name"),
    ('"files":[{"name":"..","size":0}]', "invalid name"),
])
def test_hostile_result_is_a_protocol_error(libnsbox, bad, text):
    with nsbox.Sandbox(timeout=30) as sb:
        sb.execute("1")
        r = sb.run(PRELUDE + "result(2, %r)\n" % bad)
        assert isinstance(r.error, nsbox.ProtocolError), r
        assert text in str(r.error)
        assert r.displays == [] and r.files == []


@pytest.mark.parametrize("run", [True, False])
def test_time_limit_inside_a_repr_keeps_the_session(libnsbox, run):
    # A value's _repr_html_ is the user's code: the time limit interrupts it
    # as it does the exec, and the session (its state) lives on.
    with nsbox.Sandbox(timeout=1) as s:
        s.execute("kept = 41")
        code = "class H:\n    def _repr_html_(self):\n        while True: pass\nH()"
        if run:
            r = s.run(code)
            assert isinstance(r.error, nsbox.TimeLimitExceeded) and r.displays_truncated, r
            assert "TimeLimitExceeded" in r.stderr
        else:
            s.execute(code)  # the value is sent, its reprs are not looked for
        assert s.execute("kept + 1") == 42


def test_execute_asks_for_no_rich_results(rsb):
    # execute() drops rich results, so the runner doesn't make them: no
    # _repr_*_ runs, display()s and figures of the exec are dropped, not
    # carried into the next run().
    rsb.execute("class R:\n    n = 0\n    def _repr_html_(self):\n        R.n += 1\n        return '<b>'\n")
    rsb.execute("R()")
    rsb.execute("display(R())\n" + BAR)
    assert rsb.execute("R.n") == 1  # display()'s own call only
    r = rsb.run("R()")
    assert [d["text/html"] for d in r.displays] == ["<b>"] and rsb.execute("R.n") == 2
    assert rsb.execute("import matplotlib.pyplot as plt\nlen(plt.get_fignums())") == 0


def test_forged_call_with_a_name_that_is_not_utf8(libnsbox):
    # A protocol error that says what is wrong, not "Cannot allocate memory".
    with nsbox.Sandbox(timeout=30) as sb:
        r = sb.run(PRELUDE + "frame(5, 77, b'{\"name\":\"\\xff\\xfe\",\"args\":[],\"kwargs\":{}}')\ntime.sleep(5)\n")
        assert isinstance(r.error, nsbox.ProtocolError), r
        assert "CALL payload is not valid JSON" in str(r.error) and "allocate" not in str(r.error), r.error


def test_a_flag_set_during_execute_does_not_reach_the_next_run(rsb):
    # display() of a non-bundle with raw=True flags the exec's displays as
    # truncated; execute() drops that with the rest, run() starts clean.
    rsb.execute("display(5, raw=True)")
    r = rsb.run("1")
    assert not r.displays_truncated and r.displays == [], r
    assert rsb.run("display(5, raw=True)").displays_truncated
