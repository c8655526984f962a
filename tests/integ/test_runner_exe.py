"""runc CVE-2019-5736 (issue 5): code in the sandbox must not be able to
rewrite the binary the host executes, even when the sandbox's user owns
it on the host.  The runner (and nsbox itself) are copied into a temp dir
owned by the sandbox's host uid (the invoking user: the jail maps the
sandbox's uid to it), sessions run from those copies (NSBOX_RUNNER), and
code inside opens /proc/self/exe, /proc/1/exe and every /proc/self/fd/*
naming a regular file for writing.  The files on the host must not change.
Each way a session starts: `nsbox python` (in-process), libnsbox's
template and libnsbox's cold start (helper process)."""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

BUILD = os.path.abspath(os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "..", "build"))

ATTACK = r'''
import os, stat, json
res = {}
paths = ["/proc/self/exe", "/proc/1/exe"] + ["/proc/self/fd/" + f for f in os.listdir("/proc/self/fd")]
for p in paths:
    try:
        st = os.stat(p)
    except OSError as e:
        res[p] = "stat: " + e.__class__.__name__
        continue
    if not stat.S_ISREG(st.st_mode):
        continue
    for flags in (os.O_WRONLY | os.O_APPEND, os.O_RDWR):
        try:
            fd = os.open(p, flags)
        except OSError as e:
            res[p] = "refused: errno %d" % e.errno
            continue
        try:
            os.write(fd, b"PWNED")
            res[p] = "WROTE"
        except OSError as e:
            res[p] = "opened, write refused: errno %d" % e.errno
        finally:
            os.close(fd)
print("ATTACK " + json.dumps(res))
'''


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def copies(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    out = {}
    for name in ("nsbox", "nsbox-runner"):
        dst = d / name
        shutil.copy2(os.path.join(BUILD, name), dst)
        # Owned by us, the sandbox's host uid, and writable by its owner.
        os.chmod(dst, 0o755)
        assert os.stat(dst).st_uid == os.geteuid()
        out[name] = str(dst)
    return out


def _check(p, copies, before):
    assert p.returncode == 0, p.stdout + p.stderr
    line = [l for l in p.stdout.splitlines() if l.startswith("ATTACK ")]
    assert line, p.stdout + p.stderr
    res = json.loads(line[0][len("ATTACK "):])
    assert "/proc/self/exe" in res, res
    assert "WROTE" not in res.values(), res
    for name, path in copies.items():
        assert _sha(path) == before[name], "%s was changed from inside the sandbox: %s" % (name, res)


@pytest.mark.parametrize("how", ["nsbox-python", "libnsbox-template", "libnsbox-cold"])
def test_runner_binary_cannot_be_rewritten(copies, how):
    before = {n: _sha(p) for n, p in copies.items()}
    env = dict(os.environ, NSBOX_RUNNER=copies["nsbox-runner"])
    if how == "nsbox-python":
        cmd = [copies["nsbox"], "python", "-c", ATTACK]
    else:
        cmd = [os.path.join(BUILD, "tests", "test-api"), "--run", ATTACK] + (["--cold"] if how.endswith("cold") else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    _check(p, copies, before)
