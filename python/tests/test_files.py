"""Session file operations: write_file, read_file, list_files, make_dir,
upload_dir, download_dir (nsbox-protocol(7), FILES).

The security claim under test: the file work is done inside the sandbox, so
whatever the sandbox plants (symlinks, fifos, names swapped under the
call) changes only its own view, and download_dir writes on the host only
beneath the directory it was given."""

import asyncio
import errno
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

import nsbox
from nsbox._files import SandboxFileError


def test_write_read_list_round_trip(sb):
    sb.write_file("/tmp/a.txt", "héllo")
    assert sb.read_file("/tmp/a.txt") == "héllo".encode()
    assert sb.execute("open('/tmp/a.txt', encoding='utf-8').read()") == "héllo"
    sb.write_file("/tmp/e", b"")
    assert sb.read_file("/tmp/e") == b""
    sb.make_dir("/tmp/d/e/f")
    sb.execute("import os; os.symlink('/etc/passwd', '/tmp/link'); os.mkfifo('/tmp/fifo')")
    ents = {e["name"]: e for e in sb.list_files("/tmp")}
    assert ents["a.txt"] == {"name": "a.txt", "type": "file", "size": 6}
    assert ents["d"]["type"] == "dir"
    assert ents["link"]["type"] == "symlink"
    assert ents["fifo"]["type"] == "fifo"


def test_large_file_crosses_chunks(sb):
    data = os.urandom(9 << 20)
    sb.write_file("/tmp/big", data, mode=0o600)
    assert sb.execute("import os; oct(os.stat('/tmp/big').st_mode & 0o777)") == "0o600"
    assert hashlib.sha256(sb.read_file("/tmp/big")).digest() == hashlib.sha256(data).digest()


@pytest.mark.parametrize("path,code", [("/nope", errno.ENOENT), ("/tmp", errno.EISDIR),
                                       ("/tmp/fifo", errno.EINVAL), ("/dev/null", errno.EINVAL)])
def test_read_errors(sb, path, code):
    sb.execute("import os; os.mkfifo('/tmp/fifo')")
    t0 = time.monotonic()
    with pytest.raises(SandboxFileError) as ei:
        sb.read_file(path)
    assert ei.value.errno == code, ei.value
    assert isinstance(ei.value, OSError)
    assert time.monotonic() - t0 < 10  # a fifo does not hang the runner
    assert sb.execute("1 + 1") == 2


def test_write_errors_and_caps(sb):
    sb.execute("import os; os.mkfifo('/tmp/fifo')")
    with pytest.raises(SandboxFileError) as ei:
        sb.write_file("/tmp/fifo", b"x")
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(SandboxFileError) as ei:
        sb.write_file("/tmp", b"x")
    assert ei.value.errno == errno.EISDIR
    with pytest.raises(SandboxFileError) as ei:
        sb.write_file("/nodir/x", b"x")
    assert ei.value.errno == errno.ENOENT
    sb.write_file("/tmp/f", b"x" * 5000)
    with pytest.raises(SandboxFileError) as ei:
        sb.read_file("/tmp/f", max_bytes=4999)
    assert ei.value.errno == errno.EFBIG
    assert len(sb.read_file("/tmp/f", max_bytes=5000)) == 5000
    with pytest.raises(SandboxFileError) as ei:
        sb.write_file("/tmp/huge", bytes((64 << 20) + 1))
    assert ei.value.errno == errno.EFBIG
    with pytest.raises(SandboxFileError) as ei:
        sb.list_files("/tmp/f")
    assert ei.value.errno == errno.ENOTDIR


def test_works_without_workspace_and_with_one(libnsbox, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    # A plain bind (WorkspaceSize=infinity): writes are live both ways.
    with nsbox.Sandbox(workspace=str(ws), timeout=30, workspace_size="infinity") as sb:
        sb.write_file("/workspace/w.txt", "from host")
        assert (ws / "w.txt").read_text() == "from host"
        (ws / "h.txt").write_text("host file")
        assert sb.read_file("/workspace/h.txt") == b"host file"
    # Bounded (the default): the host directory is the overlay's lower
    # layer; the sandbox's changes reach it when the sandbox ends.
    with nsbox.Sandbox(workspace=str(ws), timeout=30, workspace_size="8M") as sb:
        sb.write_file("/workspace/w.txt", "changed")
        assert sb.read_file("/workspace/h.txt") == b"host file"
        assert (ws / "w.txt").read_text() == "from host"
        sb.execute("import os; os.unlink('/workspace/h.txt')")
        with pytest.raises(SandboxFileError) as ei:
            sb.write_file("/workspace/big", bytes(9 << 20))
        assert ei.value.errno == errno.ENOSPC
        sb.restart()  # the old sandbox's changes are written back first
        assert sb.read_file("/workspace/w.txt") == b"changed"
        sb.write_file("/workspace/after", "restart")
    assert (ws / "w.txt").read_text() == "changed"
    assert (ws / "after").read_text() == "restart"
    assert not (ws / "h.txt").exists()
    assert (ws / "big").stat().st_size <= 8 << 20


SWAPPER = r"""
import os, threading
stop = False
def swap(name, targets):
    i = 0
    while not stop:
        t = targets[i % len(targets)]
        tmp = name + ".new"
        try:
            if t is None:
                with open(tmp, 'w') as f:
                    f.write('inside')
            else:
                os.symlink(t, tmp)
            os.rename(tmp, name)
        except OSError:
            pass
        i += 1
th = threading.Thread(target=swap, args=(NAME, TARGETS), daemon=True)
th.start()
"""


def test_racing_symlink_swaps_stay_inside(libnsbox, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    canary = tmp_path / "canary"
    canary.write_text("host secret")
    before = canary.stat()
    host_passwd = open("/etc/passwd", "rb").read()
    targets = [None, "/etc/passwd", str(canary), "../canary", "/proc/self/fd/3"]
    with nsbox.Sandbox(workspace=str(ws), timeout=60) as sb:
        sb.execute(SWAPPER.replace("NAME", repr("/workspace/x")).replace("TARGETS", repr(targets)))
        seen = set()
        deadline = time.monotonic() + 4
        n = 0
        while time.monotonic() < deadline:
            n += 1
            try:
                data = sb.read_file("/workspace/x")
                seen.add(data[:20])
                assert b"host secret" not in data
            except SandboxFileError as e:
                seen.add(e.errno)
            try:
                sb.write_file("/workspace/x", b"written by host call %d" % n)
            except SandboxFileError as e:
                seen.add(e.errno)
        sb.execute("stop = True; th.join()")
        assert sb.execute("1 + 1") == 2  # the protocol socket was never written to
        # download_dir while names keep changing.
        sb.execute("stop = False; th = threading.Thread(target=swap, args=('/workspace/x', %r), daemon=True); "
                   "th.start()" % (targets,))
        out = tmp_path / "out"
        for _ in range(20):
            if out.exists():
                for p in sorted(out.rglob("*"), reverse=True):
                    p.unlink() if not p.is_dir() else p.rmdir()
            sb.download_dir("/workspace", out)
            for p in out.rglob("*"):
                assert not p.is_symlink()
                assert os.path.realpath(p).startswith(str(out) + "/")
        sb.execute("stop = True; th.join()")
    assert canary.read_text() == "host secret"
    assert canary.stat().st_mtime_ns == before.st_mtime_ns
    assert open("/etc/passwd", "rb").read() == host_passwd
    assert sorted(os.listdir(tmp_path)) == ["canary", "out", "ws"]
    assert n > 20, "too few round trips to have raced: %d" % n


def test_tree_roots_follow_no_link_the_sandbox_planted(sb, tmp_path):
    """download_dir's and upload_dir's local roots may sit in a workspace
    an earlier session wrote back, links included: a planted link had the
    sandbox's files created where it pointed (a cron directory as root) or
    a host tree it named uploaded.  No link in the root's path is followed
    (base/hostpath.h): refused, and nothing written or read."""
    target = tmp_path / "target"
    (target / "inner").mkdir(parents=True)
    (target / "secret").write_text("s")
    os.symlink(target, tmp_path / "results")
    sb.execute("import os; os.makedirs('/tmp/o', exist_ok=True); open('/tmp/o/x', 'w').write('planted')")
    for local in (tmp_path / "results", tmp_path / "results" / "inner" / "new"):
        with pytest.raises(OSError, match="a symbolic link in the path") as e:
            sb.download_dir("/tmp/o", local)
        assert e.value.errno == errno.ELOOP
    assert sorted(os.listdir(target)) == ["inner", "secret"] and os.listdir(target / "inner") == []
    with pytest.raises(OSError, match="a symbolic link in the path") as e:
        sb.upload_dir(tmp_path / "results", "/tmp/in")
    assert e.value.errno == errno.ELOOP
    assert sb.execute("import os; os.path.exists('/tmp/in/secret')") is False


def test_upload_and_download_dir(sb, tmp_path):
    src = tmp_path / "src"
    (src / "sub" / "deep").mkdir(parents=True)
    (src / "a.csv").write_text("x,y\n1,2\n")
    (src / "sub" / "b.bin").write_bytes(os.urandom(70000))
    (src / "sub" / "deep" / "c").write_text("c")
    os.symlink("/etc/passwd", src / "link")  # not followed, not copied
    assert sb.upload_dir(src, "/tmp/up") == 3
    assert sb.execute("import os; sorted(os.listdir('/tmp/up'))") == ["a.csv", "sub"]
    sb.execute("import os; os.symlink('/etc/shadow', '/tmp/up/evil'); os.mkfifo('/tmp/up/sub/ff')")
    dst = tmp_path / "dst"
    assert sb.download_dir("/tmp/up", dst) == 3
    assert (dst / "a.csv").read_text() == "x,y\n1,2\n"
    assert (dst / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert (dst / "sub" / "deep" / "c").read_text() == "c"
    assert not os.path.lexists(dst / "evil") and not os.path.lexists(dst / "sub" / "ff")
    with pytest.raises(FileExistsError):  # never overwrites on the host
        sb.download_dir("/tmp/up", dst)


def test_download_rejects_hostile_names(sb, tmp_path):
    """A runner that lies in its listing (names with '/', '..', control
    characters) gets nothing written outside the target, nor any such name
    made on the host."""
    sb.make_dir("/tmp/h")
    sb.write_file("/tmp/h/ok", b"ok")
    sb.execute(r"""
import sys
R = sys.modules["_nsbox_runner"]
real = R._file_list
def lying(msg):
    v = real(msg)
    v["entries"] += [{"name": n, "type": t, "size": 2} for n, t in
                     [("../escape", "file"), ("a/../../escape", "file"), ("/tmp/abs", "file"), ("..", "file"),
                      (".", "file"), ("", "file"), ("x\x1b[2Jy", "file"), ("nl\nname", "file"), ("..", "dir"),
                      ("del\x7f", "file"), ("c1\x9b", "file"), ("bidi\u202egnp.exe", "file")]]
    v["entries"].append({"name": "bad", "name_hex": "ff", "type": "file", "size": 1})
    return v
R._file_list = lying
""")
    dst = tmp_path / "t" / "dst"
    assert sb.download_dir("/tmp/h", dst) == 1
    assert os.listdir(dst) == ["ok"]
    assert sorted(os.listdir(tmp_path)) == ["t"] and os.listdir(tmp_path / "t") == ["dst"]
    # U+0000 in a name or type (which the host reads as C strings): the
    # listing is malformed, and nothing is made.
    for ent in ('{"name": "nul\\x00../../x", "type": "file", "size": 1}', '{"name": "ok2", "type": "dir\\x00", "size": 0}'):
        sb.execute("R._file_list = lambda msg: {'entries': [%s], 'truncated': False}" % ent)
        with pytest.raises(SandboxFileError) as ei:
            sb.download_dir("/tmp/h", tmp_path / "n")
        assert "malformed" in str(ei.value), ei.value
        assert os.listdir(tmp_path / "n") == []


def test_download_caps_count_directories_and_listings(tmp_path):
    # /tmp's files go with its size (one per 4 KiB: 16,384 in the default
    # 64M); this test makes 50,001 empty ones.
    pol = tmp_path / "big-tmp.policy"
    pol.write_text("[Limits]\nTmpSize=256M\n")
    with nsbox.Sandbox(policy=str(pol), timeout=30) as sb:
        _download_caps(sb, tmp_path)


def _download_caps(sb, tmp_path):
    # Empty directories are entries: 30 of them don't fit in max_files=10.
    sb.execute("import os\nfor i in range(30): os.makedirs('/tmp/dirs/%d' % i)")
    with pytest.raises(SandboxFileError) as ei:
        sb.download_dir("/tmp/dirs", tmp_path / "d", max_files=10)
    assert ei.value.errno == errno.EFBIG and "more than 10 entries" in str(ei.value)
    assert len(os.listdir(tmp_path / "d")) == 10  # what was copied stays
    # One directory of more entries than a listing holds: flagged, and
    # download_dir refuses it rather than copy a part silently.
    sb.execute("os.mkdir('/tmp/many')\nfor i in range(50001): open('/tmp/many/%x' % i, 'w').close()")
    ents = sb.list_files("/tmp/many")
    assert len(ents) == 50000 and ents.truncated
    assert not sb.list_files("/tmp/dirs").truncated
    with pytest.raises(SandboxFileError) as ei:
        sb.download_dir("/tmp/many", tmp_path / "m")
    assert ei.value.errno == errno.EFBIG and "in one directory" in str(ei.value)
    assert os.listdir(tmp_path / "m") == []
    assert sb.execute("1 + 1") == 2


HELD_HOST = r"""
import json, os, sys, tempfile
sys.path.insert(0, %(pydir)r)
import nsbox

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

with nsbox.Sandbox(timeout=60) as sb:
    sb.execute('''
import sys
R = sys.modules["_nsbox_runner"]
rest = [{"name": "e%%05d" %% i + "x" * 240, "type": %(type)r, "size": 0} for i in range(49999)]
R._file_list = lambda msg: {"entries": [{"name": "d", "type": "dir", "size": 0}] + rest, "truncated": False}
''')
    before = hwm()
    try:
        sb.download_dir("/tmp/x", os.path.join(tempfile.mkdtemp(), "out"))
        err = None
    except nsbox.SandboxError as e:
        err = [e.errno, str(e)]
    print(json.dumps({"grew": hwm() - before, "err": err}))
"""


@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_download_holds_no_listing_past_the_caps(libnsbox, kind):
    """download_dir waits, at every level on the way down, to copy the
    entries after the subdirectory it is in.  A runner whose every
    listing names a subdirectory first and 49,999 other entries (250-byte
    names) made the host hold 64 parsed listings (the depth cap) while
    counting 64 entries: 2.8 GiB.  Now a listing is parsed, reduced to the
    entries to copy and freed before anything below it is listed, and
    those entries count against max_files as they are listed (skipped
    kinds are not kept at all)."""
    src = HELD_HOST % {"pydir": os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "type": kind}
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    m = json.loads(p.stdout.strip().splitlines()[-1])
    assert m["err"] and m["err"][0] in (errno.ELOOP, errno.EFBIG), m
    # One listing's parse (~45 MB at 50,000 entries) and, for "file",
    # max_files (100,000) names: well under 2.8 GiB.
    assert m["grew"] < 300 << 20, m


def test_download_counts_every_entry_it_parses(sb, tmp_path):
    """Entries download_dir skips (fifos here) cost the host their parse
    as much as those it copies: counted only as directories and files,
    listings of ten subdirectories and 49,990 fifos each made the host
    parse 50,000 entries for every ten counted (~10 listings under
    max_files=100; five billion entries under the default caps).  Every
    entry listed counts now: one listing's worth, then EFBIG."""
    sb.execute(r"""
import sys
R = sys.modules["_nsbox_runner"]
R.n_lists = 0
fifos = [{"name": "f%05d" % i, "type": "fifo", "size": 0} for i in range(49990)]
def wide(msg):
    R.n_lists += 1
    return {"entries": [{"name": "d%d" % i, "type": "dir", "size": 0} for i in range(10)] + fifos,
            "truncated": False}
R._file_list = wide
""")
    with pytest.raises(SandboxFileError) as ei:
        sb.download_dir("/tmp/w", tmp_path / "w", max_files=100)
    assert ei.value.errno == errno.EFBIG and "more than 100 entries" in str(ei.value), ei.value
    # The top listing, then d0's, in which nothing fits: EFBIG there.
    assert sb.execute("R.n_lists") == 2, sb.execute("R.n_lists")
    assert os.listdir(tmp_path / "w") == ["d0"]


def test_runner_error_text_is_quoted_inert(sb):
    """A file operation's and get_variable's error message carry the
    runner's text, which sandboxed code chooses (it can replace the
    runner's handlers): an OSC that retitles the host's terminal, a
    screen clear and a bidi override reached the host's SandboxFileError
    and SandboxError messages raw.  Quoted as \\xNN / \\uNNNN now, as
    jansson's quotes of a bad frame are."""
    sb.execute(r"""
import sys
R = sys.modules["_nsbox_runner"]
def bad(msg):
    raise OSError(2, "gone\x1b]0;owned\x07\x1b[2J\u202etxt.exe")
R._file_list = bad
R._file_read = bad
R.do_var = lambda typ, msg: {"error": {"type": "Name\x1b[31mError", "message": "x\x1b[2J\u202e", "traceback": None}}
""")
    msgs = []
    for f in (lambda: sb.list_files("/tmp"), lambda: sb.read_file("/tmp/x"), lambda: sb.get_variable("v"),
              lambda: sb.set_variable("v", 1)):
        with pytest.raises(nsbox.SandboxError) as ei:
            f()
        msgs.append(str(ei.value))
    assert all("\\x1b]0;owned\\x07" in m or "\\x1b[" in m for m in msgs), msgs
    assert not [m for m in msgs if any(c < " " or c in "\x7f\u202e" for c in m)], msgs
    assert msgs[0].startswith("list_files: list /tmp (gone\\x1b]0;owned\\x07\\x1b[2J\\u202etxt.exe)"), msgs


BAD_NAME = "\x1b]0;owned\x07\x1b[2J\u202etxt.exe"


def test_names_in_file_call_messages_are_quoted_inert(libnsbox, tmp_path, monkeypatch):
    """A file call's message quotes paths, and a path may hold names the
    sandbox chose: upload_dir of a host tree an earlier session wrote back
    (here: a file over the cap) put the name's OSC, screen clear and bidi
    override in the host's SandboxFileError raw; so did a read of such a
    name inside.  Every file call's message is quoted inert (libnsbox's one
    exit for them)."""
    monkeypatch.setenv("NSBOX_FILE_MAX", "1K")
    ws = tmp_path / "ws"
    ws.mkdir()
    with nsbox.Sandbox(workspace=str(ws), timeout=30) as sb:
        sb.execute("import os; os.makedirs('/workspace/data')\n"
                   "open('/workspace/data/' + %r, 'wb').write(b'x' * 4096)" % BAD_NAME)
    assert os.listdir(ws / "data") == [BAD_NAME]
    msgs = []
    with nsbox.Sandbox(timeout=30) as sb:
        sb.execute("import os; os.mkdir('/tmp/' + %r)" % BAD_NAME)
        for f in (lambda: sb.upload_dir(str(ws / "data"), "/tmp/in"),
                  lambda: sb.read_file("/tmp/" + BAD_NAME),
                  lambda: sb.download_dir("/tmp/" + BAD_NAME + "/nope", str(tmp_path / "out"))):
            with pytest.raises(nsbox.SandboxError) as ei:
                f()
            msgs.append(str(ei.value))
    assert all("\\x1b]0;owned\\x07\\x1b[2J\\u202etxt.exe" in m for m in msgs), msgs
    assert not [m for m in msgs if any(c < " " or c in "\x7f\u202e" for c in m)], msgs
    assert "larger than the cap" in msgs[0], msgs


def test_bad_arguments(sb):
    with pytest.raises(ValueError):
        sb.read_file("/etc/hostname", max_bytes=0)
    with pytest.raises(ValueError):
        sb.download_dir("/tmp", "/nonexistent-nsbox", max_files=0)
    with pytest.raises(ValueError):
        sb.write_file("", b"x")
    with pytest.raises(ValueError):
        sb.read_file("a\0b")


# Code in the sandbox runs in the runner's own interpreter, so it can
# replace the runner's file functions and answer the host anything: the
# host must hold its caps whatever comes back (nsbox-protocol(7), FILES).
LIAR = r"""
import sys, os
R = sys.modules["_nsbox_runner"]
def lying_read(msg):
    fd = R._nsbox.take_fd()
    os.write(fd, b"x" * SIZE)  # into the host's memfd, whatever was asked
    os.close(fd)
    return {"length": CLAIM, "size": SIZE, "eof": True}
R._file_read = lying_read
"""


@pytest.mark.parametrize("size,claim,code", [(10 << 20, 10, errno.EFBIG), (100, 10, errno.EIO),
                                             (100, 5000, errno.EFBIG)])
def test_lying_runner_read_is_bounded(sb, size, claim, code):
    sb.write_file("/tmp/f", b"ok")
    sb.execute(LIAR.replace("SIZE", str(size)).replace("CLAIM", str(claim)))
    with pytest.raises(SandboxFileError) as ei:
        sb.read_file("/tmp/f", max_bytes=1000)
    assert ei.value.errno == code, ei.value
    assert sb.execute("1 + 1") == 2


def test_unasked_data_is_a_protocol_error(sb):
    sb.execute("import sys; R = sys.modules['_nsbox_runner']; "
               "R._file_write = lambda msg, raw=None: {'$data': b'z' * 100}")
    with pytest.raises(nsbox.SandboxError) as ei:
        sb.write_file("/tmp/f", b"small")  # a data frame; its VALUE may carry none
    assert "protocol error" in str(ei.value) and "asked for none" in str(ei.value), ei.value


def test_memfd_is_sealed_against_the_sandbox(sb):
    """The host's memfd for a large write comes sealed: the runner copies
    exactly what the host wrote and can't change or grow it."""
    sb.execute("import sys, os, errno; R = sys.modules['_nsbox_runner']; seen = []\n"
               "orig = R._passed_fd\n"
               "def spy(msg):\n"
               "    fd, n = orig(msg)\n"
               "    for f in () if 'truncate' not in msg else (lambda: os.pwrite(fd, b'evil', 0), lambda: os.ftruncate(fd, 1 << 30)):\n"
               "        try:\n"
               "            f(); seen.append('changed')\n"
               "        except OSError as e:\n"
               "            seen.append(errno.errorcode[e.errno])\n"
               "    return fd, n\n"
               "R._passed_fd = spy")
    data = os.urandom(1 << 20)
    sb.write_file("/tmp/big", data)
    assert sb.execute("seen") == ["EPERM", "EPERM"]
    assert sb.read_file("/tmp/big") == data


def test_a_kept_memfd_holds_none_of_the_hosts_memory(sb):
    """The sandbox's code can keep a copy of the host's memfd of a large
    write; its pages are the host's (charged to the host, not the sandbox),
    so the host empties it once the request is over.  Before, 40 writes of
    50 MiB kept 2 GiB of the host's memory beside a 128M sandbox."""
    sb.execute("import sys, os; R = sys.modules['_nsbox_runner']; kept = []\n"
               "orig = R._passed_fd\n"
               "def keep(msg):\n"
               "    fd, n = orig(msg)\n"
               "    if msg.get('truncate'):  # a write's (a read's memfd holds the sandbox's pages)\n"
               "        kept.append(os.dup(fd))\n"
               "    return fd, n\n"
               "R._passed_fd = keep")
    data = os.urandom(1 << 20)
    for _ in range(3):
        sb.write_file("/tmp/big", data)
    assert sb.read_file("/tmp/big") == data
    assert sb.execute("[(os.fstat(f).st_size, os.fstat(f).st_blocks) for f in kept]") == [(0, 0)] * 3
    # and it can't be grown again into the host's memory
    assert sb.execute("import errno\n"
                      "try:\n"
                      "    os.ftruncate(kept[0], 1 << 20); r = 'grown'\n"
                      "except OSError as e:\n"
                      "    r = errno.errorcode[e.errno]\n"
                      "r") == "EPERM"


def test_failed_write_back_is_a_warning(libnsbox, tmp_path):
    """The write-back runs with the sandbox's own rights: what the host
    directory does not let that user write is not written, and the session's
    on_warning hears which entry (the rest is still copied)."""
    ws = tmp_path / "ws"
    (ws / "ro").mkdir(parents=True)
    (ws / "ro").chmod(0o555)
    warnings = []
    with nsbox.Sandbox(workspace=str(ws), timeout=30, on_warning=warnings.append) as sb:
        sb.execute("import os; os.chmod('ro', 0o755); open('ro/new', 'w').write('z'); open('top', 'w').write('t')")
    assert (ws / "top").read_text() == "t"
    assert not (ws / "ro" / "new").exists()
    assert any("/workspace/ro/new" in w and "Permission denied" in w for w in warnings), warnings


def test_async_sandbox_files(libnsbox, tmp_path):
    # The same operations, as coroutines; the loop runs other work meanwhile.
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "x.txt").write_text("x")

    async def main():
        async with nsbox.AsyncSandbox(timeout=30) as sb:
            await sb.write_file("/tmp/a", "héllo")
            assert await sb.read_file("/tmp/a") == "héllo".encode()
            await sb.make_dir("/tmp/m/n")
            ticks = []

            async def ticker():
                for _ in range(3):
                    ticks.append(1)
                    await asyncio.sleep(0)
            t = asyncio.ensure_future(ticker())
            assert await sb.upload_dir(src, "/tmp/up") == 1
            await t
            names = [e["name"] for e in await sb.list_files("/tmp")]
            assert {"a", "m", "up"} <= set(names)
            assert await sb.download_dir("/tmp/up", tmp_path / "dst") == 1
            with pytest.raises(FileExistsError):
                await sb.download_dir("/tmp/up", tmp_path / "dst")
            with pytest.raises(SandboxFileError) as ei:
                await sb.read_file("/nonexistent")
            assert ei.value.errno == errno.ENOENT
            assert await sb.execute("open('/tmp/up/d/x.txt').read()") == "x"
            return ticks
    assert asyncio.run(main()) == [1, 1, 1]
    assert (tmp_path / "dst" / "d" / "x.txt").read_text() == "x"


def test_async_file_call_cancelled_midway_ends_with_its_session(libnsbox, tmp_path):
    # A file call can't be interrupted inside: a cancelled task ends it
    # with nsbox_cancel, which ends the session, and waits for the call to
    # return before it lets the sandbox go, so aclose() never frees the
    # session under the call (the library would use freed memory).  It
    # ran the download to its end before (all 6000 files).
    async def main():
        sb = nsbox.AsyncSandbox(timeout=60)
        await sb.start()
        await sb.execute("import os\nos.makedirs('/tmp/d')\nfor i in range(6000): open('/tmp/d/f%d' % i, 'wb')"
                         ".write(b'y' * 1000)\nimport sys, time\nr = sys.modules['_nsbox_runner']\n"
                         "orig = r.do_file\nr.do_file = lambda *a: (time.sleep(0.002), orig(*a))[1]")
        task = asyncio.ensure_future(sb.download_dir("/tmp/d", tmp_path / "dst"))
        end = time.monotonic() + 20
        while not (tmp_path / "dst").is_dir() or not os.listdir(tmp_path / "dst"):
            assert time.monotonic() < end and not task.done()
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        n = len(os.listdir(tmp_path / "dst"))
        # The session ended with the call: the next exec has a fresh one.
        assert await sb.execute("'d' in __import__('os').listdir('/tmp')") is False
        await sb.aclose()
        return n
    n = asyncio.run(main())
    assert 0 < n < 6000, n


HOLD_FILES = ("import sys, time\nr = sys.modules['_nsbox_runner']\norig = r.do_file\n"
              "r.do_file = lambda *a: (time.sleep(25), orig(*a))[1]")


def test_close_ends_a_file_call_the_sandbox_holds(libnsbox):
    """A runner that answers each file request just inside the control
    timeout (30 s) held close() from another thread that long, behind the
    call's lock (nsbox_cancel reached execs only): the call ends now, and
    so does the session (ENOTCONN, saying it was cancelled)."""
    sb = nsbox.Sandbox(timeout=60)
    sb.execute(HOLD_FILES)
    closed_under(sb, lambda: sb.read_file("/etc/hostname"))


def closed_under(sb, call):
    """close() from another thread 0.5 s into call(), which the sandbox
    holds for 25 s: close and the call end at once, the call with ENOTCONN
    saying it was cancelled."""
    import threading
    errs = []

    def run():
        try:
            call()
        except nsbox.SandboxError as e:
            errs.append(e)
    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    sb.close()
    t.join(30)
    took = time.monotonic() - t0
    assert not t.is_alive() and took < 15, took      # 25 s before
    assert len(errs) == 1 and errs[0].errno == errno.ENOTCONN and "cancelled (nsbox_cancel)" in str(errs[0]), errs


# The runner stops reading its socket (for 25 s) once it has answered the
# next request (the exec's own loop is in C): a request bigger than the
# socket's buffer (set_variable's value: one frame; a file goes through a
# descriptor) then waits for room to send.
HOLD_READS = ("import sys, time\nr = sys.modules['_nsbox_runner']\n"
              "class Slow:\n"
              "    def __init__(self, m): self.m = m\n"
              "    def __getattr__(self, n): return getattr(self.m, n)\n"
              "    def recv(self): time.sleep(25); return self.m.recv()\n"
              "r._nsbox = Slow(r._nsbox)")


def test_close_ends_a_call_the_runner_does_not_read(libnsbox):
    """nsbox_cancel reached the waits for an answer, not a send waiting for
    room: close() from another thread waited out a runner that stopped
    reading (25 s here, up to the control timeout).  The send ends now,
    and the session with it."""
    sb = nsbox.Sandbox(timeout=60)
    sb.execute(HOLD_READS)
    sb.write_file("/tmp/small", b"x")
    closed_under(sb, lambda: sb.set_variable("big", "y" * (8 << 20)))


def test_async_send_timeout_frees_its_worker(libnsbox):
    async def main():
        async with nsbox.AsyncSandbox(timeout=60) as sb:
            await sb.execute(HOLD_READS)
            await sb.write_file("/tmp/small", b"x")
            t0 = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sb.set_variable("big", "y" * (8 << 20)), 1)
            took = time.monotonic() - t0
            assert await sb.execute("1 + 1") == 2     # a fresh session
            return took
    took = asyncio.run(main())
    assert took < 15, took


def test_a_cancel_from_before_a_call_is_not_for_it(libnsbox):
    """nsbox_cancel with nothing running (a timer that fired late, a
    Ctrl-C between calls) must not end the next file or state call, which
    now end on a cancel: it is dropped when the call begins, as an exec
    drops it."""
    with nsbox.Sandbox(timeout=30) as sb:
        sb.execute("x = 1")
        sb._lib.nsbox_cancel(sb._sess)
        sb.write_file("/tmp/a", b"y" * (3 << 20))      # more than one chunk
        sb._lib.nsbox_cancel(sb._sess)
        assert sb.read_file("/tmp/a") == b"y" * (3 << 20)
        sb._lib.nsbox_cancel(sb._sess)
        assert sb.get_variable("x") == 1
        sb._lib.nsbox_cancel(sb._sess)
        sb.set_variable("z", 2)
        sb._lib.nsbox_cancel(sb._sess)
        assert sb.execute("x + z") == 3


def test_async_file_call_timeout_frees_its_worker(libnsbox):
    """asyncio.wait_for around a file call the sandbox holds: it gave up
    on the caller's side, but the call ran on in an executor worker for the
    control timeout (six such sessions held every worker of the loop's
    default executor).  Now the call ends with the wait."""
    async def main():
        async with nsbox.AsyncSandbox(timeout=60) as sb:
            await sb.execute(HOLD_FILES)
            t0 = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sb.read_file("/etc/hostname"), 1)
            took = time.monotonic() - t0
            # A fresh session serves the next call (the held one ended).
            assert await sb.execute("1 + 1") == 2
            await sb.write_file("/tmp/x", b"y")
            assert await sb.read_file("/tmp/x") == b"y"
            return took
    took = asyncio.run(main())
    assert took < 15, took


def test_file_arguments_are_checked_not_wrapped(sb, tmp_path):
    """ctypes kept an int's low bits and bytes() took an int as a length:
    write_file(p, 5) wrote five NUL bytes, mode=2**40 made a file with mode
    0, mode="644" was int("644") (0o1204), max_bytes=2**64+1 a 1-byte cap."""
    with pytest.raises(TypeError, match="data must be str or bytes"):
        sb.write_file("/tmp/a", 5)
    with pytest.raises(TypeError, match="data must be str or bytes"):
        sb.write_file("/tmp/a", [1, 2])
    for bad in (2 ** 40, 2 ** 32 + 0o644, -2, 0o10000):
        with pytest.raises(ValueError, match="write_file: mode must be between"):
            sb.write_file("/tmp/a", b"x", mode=bad)
        with pytest.raises(ValueError, match="make_dir: mode must be between"):
            sb.make_dir("/tmp/d", mode=bad)
    with pytest.raises(TypeError, match="mode must be an int"):
        sb.write_file("/tmp/a", b"x", mode="644")
    assert sb.execute("import os; os.path.exists('/tmp/a') or os.path.exists('/tmp/d')") is False
    sb.write_file("/tmp/a", memoryview(b"hello"), mode=0o600)
    assert sb.execute("oct(os.stat('/tmp/a').st_mode & 0o7777)") == "0o600"
    with pytest.raises(ValueError, match="max_bytes must be between"):
        sb.read_file("/tmp/a", max_bytes=2 ** 64 + 1)
    with pytest.raises(TypeError, match="max_bytes must be an int"):
        sb.read_file("/tmp/a", max_bytes="10")
    assert sb.read_file("/tmp/a", max_bytes=5.0) == b"hello"
    with pytest.raises(ValueError, match="max_files must be between"):
        sb.download_dir("/tmp", tmp_path / "x", max_files=2 ** 64)
    with pytest.raises(ValueError, match="max_bytes must be between"):
        sb.download_dir("/tmp", tmp_path / "y", max_bytes=2 ** 70)


def test_interrupted_read_file_frees_its_buffer(sb):
    """A KeyboardInterrupt handled as nsbox_read_file returns never resumed
    the operation, whose buffer (up to 64 MiB) was then never freed."""
    import gc
    from conftest import ctrl_c_after
    sb.write_file("/tmp/r", b"z" * 100000)
    with ctrl_c_after(sb._lib, "nsbox_read_file") as freed:
        with pytest.raises(KeyboardInterrupt):
            sb.read_file("/tmp/r")
        gc.collect()
    assert len(freed) == 1 and freed[0]
    assert sb.read_file("/tmp/r") == b"z" * 100000


INFLIGHT_HOST = r"""
import errno, json, os, resource, sys
sys.path.insert(0, %(pydir)r)
import nsbox
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
# A host process of the sandbox's user with Debian's default soft limit
# (1024) or less: here 512.
resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
b = nsbox.Sandbox(timeout=30)
a = nsbox.Sandbox(timeout=30)
held = a.execute('''
import os, socket
s1, s2 = socket.socketpair()
s1.setblocking(False)
fd = os.open("/dev/null", os.O_RDONLY)
n = 0
try:
    while True:
        socket.send_fds(s1, [b"x"], [fd] * 253)
        n += 253
except OSError as e:
    why = e.errno
n
''')
R = {"held": held}
try:
    b.write_file("/tmp/big", b"x" * (300 << 10))    # its memfd goes with the request
    R["write"] = "ok"
except OSError as e:
    R["write"] = [e.errno, str(e)]
R["after"] = b.execute("1+1")
# A new sandbox meanwhile: the helper's answer carries its pidfd and
# socket, and a helper refused there exited, ending b with it.
try:
    c = nsbox.Sandbox(timeout=30)
    R["meanwhile"] = c.execute("3+3")
    c.close()
except nsbox.SandboxError as e:
    R["meanwhile"] = str(e)
R["after_new"] = b.execute("1+1")
a.close()
b.write_file("/tmp/big", b"x" * (300 << 10))
R["after_close"] = b.execute("len(open('/tmp/big', 'rb').read())")
c = nsbox.Sandbox(timeout=30)
R["new"] = c.execute("2+2")
c.close()
b.close()
print(json.dumps(R))
"""


@pytest.mark.skipif(os.geteuid() == 0, reason="root passes descriptors whatever its user holds in flight "
                    "(CAP_SYS_RESOURCE): the unprivileged passes run this")
def test_descriptors_a_sandbox_holds_in_flight_end_no_other_session(libnsbox):
    """The kernel counts descriptors in flight over unix sockets per host
    user and refuses a sender of that user whose soft RLIMIT_NOFILE is
    lower (ETOOMANYREFS).  A sandbox holds its OpenFiles + 253 by sending
    one descriptor over a socket pair it never reads (1265 at the default
    1024).  A host file op that passes a memfd on another session of the
    user then ended that session ("session ended"); now it fails alone
    (ETOOMANYREFS, saying why) and the session goes on, and once the
    holder is gone the same op works.  The helper, whose answers carry
    descriptors, takes its hard limit (util.h, nofile_raise)."""
    src = INFLIGHT_HOST % {"pydir": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["held"] > 512, r
    assert "too many in flight" in r["write"][1], r
    assert r["write"][0] == errno.ETOOMANYREFS, r
    assert r["after"] == 2 and r["after_new"] == 2 and r["after_close"] == 300 << 10 and r["new"] == 4, r
    # The library's own request to the helper carries descriptors too: from
    # this process (soft limit 512) it fails, saying why; the helper lives.
    assert r["meanwhile"] == 6 or "descriptors in flight" in r["meanwhile"], r
