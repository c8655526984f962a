"""A bounded workspace (--workspace-size, [Limits] WorkspaceSize=): an
overlay over the host directory with a tmpfs upper layer of that size,
copied back into the host directory when the sandbox ends (nsbox(1),
--workspace-size; jail/wsync.c).

Checked from inside (the write that crosses the limit fails with ENOSPC,
df shows the limit) and from the host (statvfs of the host's filesystem:
the sandbox's writes cost at most the limit; the write-back follows no
symlink the sandbox planted or the host directory holds)."""
import os

import pytest

from conftest import run

FILL = r"""
import errno, os
os.write(1, b"before\n")
n = 0
try:
    with open("/workspace/big", "wb", buffering=0) as f:
        while n < (256 << 20):
            n += f.write(b"\0" * (1 << 20))
    print("no error after", n)
except OSError as e:
    print("stopped", errno.errorcode[e.errno], n >> 20)
st = os.statvfs("/workspace")
print("size", st.f_blocks * st.f_frsize >> 20)
"""


def kernel():
    return tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_fill_stops_at_the_limit_and_host_space_is_bounded(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "old").write_bytes(b"x" * (1 << 20))
    free0 = free_bytes(ws)
    rc, out, err = run(["run", "--workspace", str(ws), "--workspace-size", "16M", "--", "/usr/bin/python3.11",
                        "-S", "-c", FILL])
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "before"
    what, code, mib = lines[1].split()
    assert (what, code) == ("stopped", "ENOSPC"), out
    assert 12 <= int(mib) <= 16, out
    assert lines[2] == "size 16", out
    # The host: what the sandbox wrote arrived when it ended, and cost at
    # most the limit (plus a little metadata) of the host's filesystem.
    assert (ws / "big").stat().st_size <= 16 << 20
    assert (ws / "old").read_bytes() == b"x" * (1 << 20)
    # The sandbox tried 256 MiB; 4 MiB of slack for metadata and whatever
    # else writes to a shared /tmp meanwhile (a private tmpfs here).
    used = free0 - free_bytes(ws)
    assert used <= (16 << 20) + (4 << 20), used


INFLATE = r"""
import os
for i in range(3):
    with open("/workspace/sparse%d" % i, "wb") as f:
        f.truncate(512 << 20)  # no blocks in the upper layer
with open("/workspace/eight", "wb") as f:
    f.write(os.urandom(8 << 20))
for i in range(20):
    os.link("/workspace/eight", "/workspace/link%d" % i)  # no data either
st = os.statvfs("/workspace")
print("free", st.f_bavail * st.f_frsize >> 20)
"""


def test_write_back_is_held_to_the_limit(tmp_path):
    # Sparse files and hard links cost the upper layer almost nothing but
    # were written back whole: 16M of workspace put 1.7G on the host.
    ws = tmp_path / "ws"
    ws.mkdir()
    free0 = free_bytes(ws)
    rc, out, err = run(["run", "--workspace", str(ws), "--workspace-size", "16M", "--", "/usr/bin/python3.11",
                        "-S", "-c", INFLATE])
    assert rc == 0 and int(out.split()[1]) >= 4, (out, err)
    assert "exceed the workspace's limit" in err, err
    # From the host: at most the limit arrived.
    written = sum(f.stat().st_size for f in ws.iterdir())
    assert written <= 16 << 20, sorted((f.name, f.stat().st_size) for f in ws.iterdir())
    assert free0 - free_bytes(ws) <= (16 << 20) + (4 << 20)


def test_write_back_warnings_quote_the_names_inert(tmp_path):
    """A name the write-back fails on is the sandbox's choice, and its
    warning reaches the host's terminal or log: C1 controls (a raw 0x9b, or
    U+009B: CSI), bidi overrides and bytes that are not UTF-8 went through
    as they were (only C0 and DEL were replaced).  Now quoted as \\xNN and
    \\uNNNN (proto_text_inert, as every other message quoting the sandbox)."""
    import subprocess
    from conftest import NSBOX
    ws = tmp_path / "ws"
    ws.mkdir()
    code = ("import os; p = b'/workspace/a\\x9b2J\\xc2\\x9b31m\\xe2\\x80\\xaetxt\\x1b[0m';"
            "open(p, 'w').write('x'); os.chmod(p, 0)")
    p = subprocess.run([NSBOX, "run", "--workspace", str(ws), "--", "/usr/bin/python3.11", "-S", "-c", code],
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    err = p.stderr
    assert p.returncode == 0 and b"copy /workspace/a" in err and b"back:" in err, (p.returncode, err)
    for raw in (b"\x9b", b"\xc2\x9b", b"\xe2\x80\xae", b"\x1b"):
        assert raw not in err, (raw, err)
    assert b"a\\x9b2J\\u009b31m\\u202etxt\\x1b[0m back" in err, err


def test_write_back_charges_directories_and_blocks(tmp_path):
    """Only file data was charged: directories (a block each on ext4, none
    in the sandbox's tmpfs) were free, so a 64M workspace of 16,000 empty
    directories and 64 MiB of data grew the host directory by 127 MiB.
    Now every directory and symlink made costs a block of the host's file
    system and every file its size in whole blocks."""
    ws = tmp_path / "ws"
    ws.mkdir()
    block = os.statvfs(ws).f_bsize
    script = ("import os\n"
              "for i in range(3000):\n    os.mkdir(f'/workspace/d{i}')\n"
              "for i in range(200):\n    os.symlink('x' * 100, f'/workspace/l{i}')\n"
              "open('/workspace/data', 'wb').write(b'x' * (8 << 20))\n"
              "for i in range(300):\n    open(f'/workspace/f{i}', 'wb').write(b'y')\n")
    rc, out, err = run(["run", "--workspace", str(ws), "--workspace-size", "16M", "--", "/usr/bin/python3.11",
                        "-S", "-c", script])
    assert rc == 0, err
    assert "exceed the workspace's limit" in err, err
    # From the host: what arrived costs at most the limit, in the
    # host's blocks.
    cost = 0
    for root, dirs, files in os.walk(ws):
        cost += len(dirs) * block
        for f in files:
            st = os.lstat(os.path.join(root, f))
            cost += block if os.path.islink(os.path.join(root, f)) else -(-st.st_size // block) * block
    assert cost <= 16 << 20, cost


def test_write_back_changes_deletions_and_new_dirs(tmp_path):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "keep").write_text("a\n")
    (ws / "gone").write_text("x")
    (ws / "sub" / "old").write_text("o")
    script = ("echo b >> keep; rm gone; rm -r sub; mkdir sub; echo n > sub/new; mkdir -p d/e; echo f > d/e/f; "
              "chmod 600 d/e/f; ln -s /etc/passwd link; ls /workspace")
    rc, out, err = run(["run", "--workspace", str(ws), "--", "/bin/sh", "-c", script])
    assert rc == 0, err
    assert (ws / "keep").read_text() == "a\nb\n"
    assert not (ws / "gone").exists()
    assert sorted(os.listdir(ws / "sub")) == ["new"]
    assert (ws / "d" / "e" / "f").read_text() == "f\n"
    assert (ws / "d" / "e" / "f").stat().st_mode & 0o777 == 0o600
    assert os.readlink(ws / "link") == "/etc/passwd"  # recreated, not followed
    assert not [n for n in os.listdir(ws) if n.startswith(".nsbox")]


def test_empty_files_count_against_the_limit(tmp_path):
    """An empty file costs the tmpfs no page but the copy an entry: each
    counts as a block of the host's file system, so the limit bounds how
    many the write-back makes (400,000 free ones took it past a minute)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    block = os.statvfs(ws).f_bsize
    rc, out, err = run(["run", "--workspace", str(ws), "--workspace-size", "1M", "--", "/usr/bin/python3.11", "-S",
                        "-c", "for i in range(1000): open('/workspace/e%d' % i, 'w').close()"])
    assert rc == 0, err
    n = len(os.listdir(ws))
    assert 0 < n <= (1 << 20) // block, n
    assert "exceed the workspace's limit" in err and "an empty file as one" in err, err


def test_write_back_never_opens_the_tree_to_others(tmp_path):
    """A new entry comes back without write for group or others and without
    a set-id bit; an entry the host had gets no more read or write for group
    and others, nor a set-id bit, than it had (a file's chmod +x stands),
    and keeps its mode when the sandbox did not change it (overlayfs copies
    up every parent of a changed file: a shared 2775 directory stays so).
    A sandbox's chmod 777 of .git/hooks, or 666 of the owner's 0600 notes,
    let any local user in after the session."""
    ws = tmp_path / "ws"
    (ws / "private").mkdir(parents=True)
    os.chmod(ws / "private", 0o700)
    (ws / "notes").write_text("mine")
    os.chmod(ws / "notes", 0o600)
    (ws / "script").write_text("#!/bin/sh\n")
    os.chmod(ws / "script", 0o644)
    (ws / "team").mkdir()
    os.chmod(ws / "team", 0o2775)
    script = ("chmod 666 notes; chmod 755 script; mkdir -p .git/hooks; chmod 777 .git .git/hooks; "
              "echo x > .git/hooks/pre-commit; chmod 777 .git/hooks/pre-commit; chmod 755 private; "
              "echo y > private/f; chmod 644 private/f; echo z > shared; chmod 664 shared; echo t > team/f")
    old = os.umask(0o002)
    try:
        rc, out, err = run(["run", "--workspace", str(ws), "--", "/bin/sh", "-c", script])
    finally:
        os.umask(old)
    assert rc == 0, err
    mode = lambda *p: os.stat(ws.joinpath(*p)).st_mode & 0o7777
    assert mode("notes") == 0o600
    assert mode("script") == 0o755
    assert mode(".git") == mode(".git", "hooks") == mode(".git", "hooks", "pre-commit") == 0o755
    assert mode("private") == 0o700 and mode("private", "f") == 0o644
    assert mode("shared") == 0o644
    assert mode("team") == 0o2775, oct(mode("team"))


def test_write_back_follows_no_symlink(tmp_path):
    """The host directory holds symlinks out of it (a host user's, or one a
    sandbox left before): replacing them from inside replaces the link on
    the host, and nothing is written where they point."""
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("host")
    os.symlink(outside, ws / "dirlink")
    os.symlink(outside / "f", ws / "filelink")
    script = ("rm dirlink; if mkdir dirlink; then echo evil > dirlink/f; echo MKDIR=ok; else echo MKDIR=failed; fi; "
              "rm filelink; echo evil > filelink; echo evil > filelink2 && ln -sf /workspace/filelink2 /workspace/x")
    rc, out, err = run(["run", "--workspace", str(ws), "--", "/bin/sh", "-c", script])
    assert rc == 0, err
    assert (outside / "f").read_text() == "host"
    assert sorted(os.listdir(outside)) == ["f"]
    if "MKDIR=failed" in out:
        # nsbox(1): before Linux 6.6 tmpfs has no user xattrs, so the
        # overlay can't mark a directory opaque and a new directory where
        # the host directory had an entry fails with EIO.
        assert "Input/output error" in err and kernel() < (6, 6), (out, err)
        assert not os.path.lexists(ws / "dirlink")  # the removal was still written back
    else:
        assert "MKDIR=ok" in out, (out, err)
        assert not (ws / "dirlink").is_symlink() and (ws / "dirlink" / "f").read_text() == "evil\n"
    assert not (ws / "filelink").is_symlink() and (ws / "filelink").read_text() == "evil\n"
    assert os.readlink(ws / "x") == "/workspace/filelink2"


def test_written_back_after_a_time_limit_kill(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    rc, out, err = run(["run", "--workspace", str(ws), "--time-limit", "1", "--", "/bin/sh", "-c",
                        "echo done > f; exec sleep 30"])
    assert rc == 124, err
    assert (ws / "f").read_text() == "done\n"


def test_infinity_binds_the_directory_live(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    rc, out, err = run(["run", "--workspace", str(ws), "--workspace-size", "infinity", "--", "/bin/sh", "-c",
                        "grep -c ' /workspace .* - overlay ' /proc/self/mountinfo; echo x > f"])
    assert out.strip() == "0" and (ws / "f").read_text() == "x\n"
    rc, out, err = run(["run", "--workspace", str(ws), "--", "/bin/sh", "-c",
                        "grep -c ' /workspace .* - overlay ' /proc/self/mountinfo"])
    assert out.strip() == "1", err


@pytest.mark.parametrize("value,msg", [("0", "too small"), ("12", "too small"), ("lots", "not a size")])
def test_bad_sizes_are_refused(tmp_path, value, msg):
    rc, out, err = run(["run", "--workspace", str(tmp_path), "--workspace-size", value, "--", "true"])
    assert rc == 120 and "WorkspaceSize" in err and msg in err, (rc, err)


RACER = r"""
import os, sys
out = sys.argv[1]
os.makedirs("real/sub", exist_ok=True)
i = 0
while True:
    i += 1
    for name, targets in (("x", [None, out, out + "/f", "/etc/passwd"]), ("d", ["DIR", out])):
        t = targets[i % len(targets)]
        tmp = name + ".new"
        try:
            if t is None:
                with open(tmp, "w") as f:
                    f.write("inside %d" % i)
            elif t == "DIR":
                os.mkdir(tmp)
                with open(tmp + "/f", "w") as f:
                    f.write("evil")
            else:
                os.symlink(t, tmp)
            try:
                os.rename(tmp, name)
            except OSError:  # a dir over a non-empty dir, a file over a dir
                os.system("rm -rf %s; mv %s %s" % (name, tmp, name))
        except OSError:
            pass
"""


@pytest.mark.parametrize("attempt", range(4))
def test_write_back_of_a_sandbox_killed_mid_swap(tmp_path, attempt):
    """A sandbox swapping names between files, directories and symlinks out
    of the workspace (to a host directory, a host file) is killed at a
    moment it does not choose: the write-back copies whatever the upper
    layer holds then and follows none of it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("host")
    before = sorted(os.listdir(outside)), (outside / "f").stat().st_mtime_ns
    rc, out, err = run(["run", "--workspace", str(ws), "--time-limit", str(0.3 + 0.15 * attempt), "--",
                        "/usr/bin/python3.11", "-S", "-c", RACER, str(outside)])
    assert rc == 124, err
    assert (sorted(os.listdir(outside)), (outside / "f").stat().st_mtime_ns) == before
    assert (outside / "f").read_text() == "host"
    assert not [n for n in os.listdir(ws) if n.startswith(".nsbox")]
    for name in ("x", "d"):
        p = ws / name
        if os.path.islink(p):
            assert os.readlink(p) in (str(outside), str(outside / "f"), "/etc/passwd")
    if (ws / "d").is_dir() and not (ws / "d").is_symlink():
        assert os.listdir(ws / "d") in ([], ["f"])


def test_the_copy_dies_with_its_launcher(tmp_path):
    """The write-back runs in a child of the launcher that asks to be killed
    when the launcher dies (PR_SET_PDEATHSIG), but a change of ids clears
    that: as root (and under nsboxd) a killed launcher left its copy writing
    into the host directory, out of reach of whoever killed it.  Asked after
    the change now."""
    import signal
    import subprocess
    import time
    from conftest import NSBOX, _launcher_pid, _nsbox_cgroups
    ws = tmp_path / "ws"
    ws.mkdir()
    code = "import os\nfor i in range(600):\n    open(f'/workspace/f{i}', 'wb').write(os.urandom(1 << 20))\n"
    p = subprocess.Popen([NSBOX, "run", "--workspace", str(ws), "--workspace-size", "1G", "--memory", "2G", "--",
                          "/usr/bin/python3.11", "-S", "-c", code])
    seen, copy = set(), None
    try:
        end = time.time() + 60
        while copy is None and p.poll() is None and time.time() < end:
            try:
                kids = [int(k) for t in os.listdir(f"/proc/{p.pid}/task")
                        for k in open(f"/proc/{p.pid}/task/{t}/children").read().split()]
            except OSError:
                continue
            if seen and kids and not seen & set(kids):
                copy = kids[0]      # pid 1 is gone: the copy
            seen |= set(kids)
        assert copy is not None, "never saw the copy"
        p.kill()
        p.wait()
        # The copy follows its launcher at once; it had ~600 MiB to write.
        for _ in range(100):
            if not os.path.exists(f"/proc/{copy}"):
                break
            time.sleep(0.01)
        time.sleep(0.5)
        n = len(os.listdir(ws))
        assert n < 600, f"the copy ran on after its launcher was killed: {n} files written"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        # A killed launcher leaves its (empty) cgroups to the next launch.
        for d in sorted(_nsbox_cgroups(), key=len, reverse=True):
            if _launcher_pid(d) == p.pid:
                try:
                    os.rmdir(d)
                except OSError:
                    pass
