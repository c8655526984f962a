"""Built root trees (rootfs/, `nsbox rootfs`, --rootfs NAME).

The `datascience` tree is built once per machine by scripts/run-integ.sh
before the root pass (into /var/cache/nsbox/rootfs, which the unprivileged
passes find as root's trees); a test here builds it when it is missing, and
every build is cached by the hash of its definition, so a second run is a
cache hit.  As an unprivileged user a small tree (tests/integ/rootfs/) is
built in the user's own cache: mmdebstrap's fakechroot mode there.

Run: NSBOX_BUILD=$PWD/build /usr/bin/python3.11 -m pytest tests/integ/test_rootfs.py
"""
import fcntl
import json
import os
import pathlib
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import sdk_env

BUILD = os.path.abspath(os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "..", "build"))
NSBOX = os.path.join(BUILD, "nsbox")
HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "rootfs", "nsbox-test-tiny.tree")
MODE = os.environ.get("NSBOX_TEST_MODE", "root" if os.geteuid() == 0 else "nodeleg")
SYSTEM_CACHE = "/var/cache/nsbox/rootfs"
BUILD_TIMEOUT = 1800

# A sanitized runner needs the host's libasan, which a tree doesn't carry.
no_sanitizer = pytest.mark.skipif(bool(os.environ.get("NSBOX_SANITIZE")),
                                  reason="under SANITIZE the runner needs the host's libasan, which the tree "
                                         "has not (the unsanitized make check runs these)")


def nsbox(*args, timeout=120, env=None):
    return subprocess.run([NSBOX, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=env)


def no_warnings(text):
    return "".join(l for l in text.splitlines(True) if not l.startswith("nsbox: warning:"))


def cache_dir():
    if os.geteuid() == 0:
        return SYSTEM_CACHE
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "nsbox", "rootfs")
    return os.path.join(os.environ["HOME"], ".cache", "nsbox", "rootfs")


def tree_dir(name):
    """The built tree's directory, as the library resolves it."""
    for c in [cache_dir()] + ([SYSTEM_CACHE] if os.geteuid() != 0 else []):
        link = os.path.join(c, name)
        if os.path.isfile(os.path.join(link, "info")):
            return os.path.join(os.path.realpath(link), "tree")
    return None


@pytest.fixture(scope="module")
def datascience():
    """The datascience tree: built here if run-integ.sh did not."""
    d = tree_dir("datascience")
    if d is None:
        p = nsbox("rootfs", "build", "datascience", timeout=BUILD_TIMEOUT)
        assert p.returncode == 0, p.stderr
        d = tree_dir("datascience")
    assert d and os.path.isdir(d), "datascience was built but is not found"
    return d


def test_build_is_cached(datascience):
    info = os.path.join(os.path.dirname(datascience), "info")
    before = os.stat(os.path.dirname(datascience))
    if tree_dir("datascience") and cache_dir() != os.path.dirname(os.path.dirname(datascience)):
        # Root's tree, found by an unprivileged user: its own build is the
        # small tree's (test_unprivileged_build).
        p = nsbox("rootfs", "list")
        assert p.returncode == 0, p.stderr
        assert "datascience" in p.stdout and SYSTEM_CACHE in p.stdout
        return
    p = nsbox("rootfs", "build", "datascience", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "cached" in p.stdout, p.stdout
    after = os.stat(os.path.dirname(datascience))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "a cache hit rebuilt the tree"
    text = open(info).read()
    want = [l for l in open(os.path.join(HERE, "..", "..", "rootfs", "datascience.tree")) if l.startswith("Preload=")]
    assert "name=datascience\n" in text and "preload=%s" % want[-1][8:] in text, text
    p = nsbox("rootfs", "list")
    assert p.returncode == 0, p.stderr
    h = [l for l in text.splitlines() if l.startswith("hash=")][0][5:]
    assert any(l.split()[:2] == ["datascience", h] for l in p.stdout.splitlines()), p.stdout
    assert "minimal" in p.stdout


def test_unknown_tree_is_a_usage_error():
    for args in (["python", "--rootfs", "nosuchtree", "-c", "1"], ["run", "--rootfs", "nosuchtree", "--", "true"]):
        p = nsbox(*args)
        assert p.returncode == 120, (args, p.returncode, p.stderr)
        assert "nsbox rootfs build nosuchtree" in p.stderr, p.stderr
    p = nsbox("python", "--rootfs", "Bad:Name", "-c", "1")
    assert p.returncode == 120 and "tree name" in p.stderr, p.stderr
    p = nsbox("rootfs", "build", "nosuchtree")
    assert p.returncode == 120 and "no tree definition" in p.stderr, p.stderr
    # Each usage error says what was wrong before the usage lines.
    for args, want in ((["frobnicate"], "unknown command 'frobnicate'"), ([], "no command given"),
                       (["build"], "build takes one NAME"), (["build", "--force"], "build takes one NAME"),
                       (["build", "--bogus"], "build: unknown option '--bogus'"),
                       (["list", "extra"], "list takes no argument (got 'extra')"),
                       (["list", "--bogus"], "list takes no argument"), (["remove"], "remove needs a NAME"),
                       (["remove", "--stale", "x"], "remove --stale takes no NAME (got 'x')")):
        p = nsbox("rootfs", *args)
        assert p.returncode == 120 and p.stderr.startswith("nsbox rootfs: " + want) and "usage:" in p.stderr, (
            args, p.returncode, p.stderr)


def test_minimal_is_the_hosts_usr():
    p = nsbox("python", "--rootfs", "minimal", "-c",
              "import os; s = os.stat('/usr/lib/python3.11/os.py'); print(s.st_dev, s.st_ino)")
    assert p.returncode == 0, p.stderr
    s = os.stat("/usr/lib/python3.11/os.py")
    assert p.stdout.split() == [str(s.st_dev), str(s.st_ino)]


@no_sanitizer
def test_numpy_pandas_on_the_tree(datascience):
    code = r"""
import json, os, sys
import numpy, pandas, scipy.linalg
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
df = pandas.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]})
g = df.groupby("k")["v"].sum().to_dict()
a = numpy.arange(9.0).reshape(3, 3)
plt.plot([1, 2, 3]); plt.savefig("/tmp/f.png")
st = {m: [os.stat(f).st_dev, os.stat(f).st_ino] for m, f in
      (("os", "/usr/lib/python3.11/os.py"), ("json", json.__file__), ("numpy", numpy.__file__))}
print(json.dumps({"g": g, "det": float(numpy.linalg.det(a + numpy.eye(3))), "prefix": sys.prefix,
                  "png": open("/tmp/f.png", "rb").read(8).hex(), "stat": st, "json": json.__file__,
                  "threads": os.environ.get("OPENBLAS_NUM_THREADS")}))
"""
    p = nsbox("python", "--rootfs", "datascience", "--cpus", "1", "-c", code)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["g"] == {"a": 4, "b": 2}
    assert out["png"] == "89504e470d0a1a0a"
    assert out["prefix"] == "/usr" and out["threads"] == "1"
    # The runner's stdlib and numpy are the tree's files, not the host's.
    for m, rel in (("os", "usr/lib/python3.11/os.py"), ("json", out["json"].lstrip("/"))):
        s = os.stat(os.path.join(datascience, rel))
        assert out["stat"][m] == [s.st_dev, s.st_ino], m
        h = os.stat("/" + rel)
        assert out["stat"][m] != [h.st_dev, h.st_ino], m
    s = os.stat(os.path.join(datascience, "usr/lib/python3/dist-packages/numpy/__init__.py"))
    assert out["stat"]["numpy"] == [s.st_dev, s.st_ino]


@no_sanitizer
def test_tree_is_read_only_inside(datascience):
    target = "usr/lib/python3/dist-packages/numpy/__init__.py"
    before = open(os.path.join(datascience, target), "rb").read()
    code = r"""
import errno, os
res = []
for path in ("/usr/lib/python3/dist-packages/numpy/__init__.py", "/usr/lib/python3/dist-packages/evil.py",
             "/usr/bin/evil"):
    try:
        with open(path, "a") as f:
            f.write("x")
        res.append("wrote")
    except OSError as e:
        res.append(errno.errorcode[e.errno])
print(" ".join(res))
"""
    for uid in ("1000", "0"):
        p = nsbox("python", "--rootfs", "datascience", "--uid", uid, "--gid", uid, "-c", code)
        assert p.returncode == 0, p.stderr
        assert all(r in ("EROFS", "EACCES") for r in p.stdout.split()), p.stdout
    assert open(os.path.join(datascience, target), "rb").read() == before
    assert not os.path.exists(os.path.join(datascience, "usr/lib/python3/dist-packages/evil.py"))


@no_sanitizer
def test_preloaded_at_session_start(datascience):
    # The CLI's cold start and the SDK's (helper, with a warm spare).
    p = nsbox("python", "--rootfs", "datascience", "-c",
              "import sys; print('numpy' in sys.modules, 'pandas' in sys.modules)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True"]
    p = nsbox("python", "--rootfs", "datascience", "--preload", "", "-c",
              "import sys; print('pandas' in sys.modules)")
    assert p.returncode == 0 and p.stdout.split() == ["False"], p.stderr
    p = nsbox("python", "--rootfs", "datascience", "--preload", "no_such_module_x", "-c", "1")
    assert p.returncode != 0 and "no_such_module_x" in p.stderr, p.stderr
    sdk = r"""
import sys, nsbox
out = []
for i in range(3):
    with nsbox.Sandbox(rootfs="datascience", timeout=60) as sb:
        out.append(sb.run("import sys; ('numpy' in sys.modules, 'pandas' in sys.modules, sys.prefix)").value)
print(out)
"""
    env = sdk_env(NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"),
                  PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
    env.pop("NSBOX_SPARE", None)
    r = subprocess.run([sys.executable, "-c", sdk], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([(True, True, "/usr")] * 3), r.stdout


def test_list_packages(datascience):
    ver = open(os.path.join(BUILD, "rootfs", "python.version")).read().strip()
    p = nsbox("python", "--rootfs", "datascience", "--list-packages")
    assert p.returncode == 0, p.stderr
    pk = dict(l.split(" ", 1) for l in p.stdout.splitlines())
    assert pk["libpython3.11-stdlib"] == ver and pk["python3.11"] == ver
    for name in ("python3-numpy", "python3-pandas", "python3-matplotlib", "python3-scipy"):
        assert name in pk
    p = nsbox("python", "--rootfs", "datascience", "--list-packages", "--json")
    assert p.returncode == 0, p.stderr
    assert {"name": "python3-numpy", "version": pk["python3-numpy"]} in json.loads(p.stdout)
    p = nsbox("python", "--rootfs", "nosuchtree", "--list-packages")
    assert p.returncode == 120
    sdk = ("import nsbox; p = nsbox.list_packages(rootfs='datascience'); print(len(p));"
           "print([x['version'] for x in p if x['name'] == 'python3-pandas'][0])")
    env = sdk_env(NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"),
                  PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
    r = subprocess.run([sys.executable, "-c", sdk], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(len(pk)), pk["python3-pandas"]]


@no_sanitizer
def test_numpy_under_limits(datascience):
    """Thread counts follow the CPU limit; a memory bomb in numpy ends in a
    MemoryError (RLIMIT_AS fallback) or the memory limit's kill, in time."""
    code = r"""
import os, numpy
a = numpy.random.rand(400, 400)
print(os.environ["OPENBLAS_NUM_THREADS"], os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"],
      (a @ a).shape, flush=True)
l = []
try:
    while True:
        l.append(numpy.ones(32 << 20, dtype=numpy.uint8))
except MemoryError:
    print("MemoryError", len(l), flush=True)
"""
    p = nsbox("python", "--rootfs", "datascience", "--memory", "512M", "--cpus", "1.5", "-c", code, timeout=120)
    first = p.stdout.splitlines()[0] if p.stdout else ""
    assert first == "2 2 2 (400, 400)", (p.returncode, p.stdout, p.stderr)
    if p.returncode == 0:
        assert p.stdout.splitlines()[1].startswith("MemoryError"), p.stdout
    else:
        assert p.returncode == 123, (p.returncode, p.stderr)
        assert MODE != "nodeleg", "no cgroup: RLIMIT_AS should have given a MemoryError"
    if MODE == "nodeleg":
        assert "RLIMIT_AS" in p.stderr
    p = nsbox("python", "--rootfs", "datascience", "--cpus", "1", "--setenv", "OPENBLAS_NUM_THREADS=3", "-c",
              "import os; print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'])")
    assert p.returncode == 0 and p.stdout.split() == ["3", "1"], p.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root builds datascience (run-integ.sh, the fixture)")
def test_unprivileged_build(tmp_path):
    """A user without subordinate ids builds into their own cache
    (mmdebstrap's fakechroot mode), and the runner runs on the result."""
    # A build an older nsbox left in this user's cache has no lock file,
    # and a cache hit keeps it so (by design): start from one that has.
    old = tree_dir("nsbox-test-tiny")
    if old and old.startswith(cache_dir()) and not os.path.exists(os.path.join(os.path.dirname(old), "lock")):
        r = nsbox("rootfs", "remove", "--force", "nsbox-test-tiny")
        assert r.returncode == 0, r.stderr
    p = nsbox("rootfs", "build", TINY, timeout=BUILD_TIMEOUT)
    assert p.returncode == 0, p.stderr[-3000:]
    d = tree_dir("nsbox-test-tiny")
    assert d and d.startswith(cache_dir()), d
    assert os.stat(d).st_uid == os.geteuid()
    # fakechroot's absolute links were made the tree's own again.
    for dirpath, dirnames, files in os.walk(d):
        for f in dirnames + files:
            q = os.path.join(dirpath, f)
            if os.path.islink(q):
                assert not os.readlink(q).startswith(cache_dir()), q
    p2 = nsbox("rootfs", "build", TINY)
    assert p2.returncode == 0 and "cached" in p2.stdout, p2.stdout
    # Preload= changes no file of the tree: a cache hit that takes it in.
    info = os.path.join(os.path.dirname(d), "info")
    other = tmp_path / "nsbox-test-tiny.tree"
    other.write_text(open(TINY).read().replace("Preload=json", "Preload=json csv"))
    for defn, want in ((other, "json csv"), (TINY, "json")):
        p2 = nsbox("rootfs", "build", str(defn))
        assert p2.returncode == 0 and "cached" in p2.stdout and "preload is now '%s'" % want in p2.stdout, p2.stdout
        assert "preload=%s\n" % want in open(info).read()
        assert tree_dir("nsbox-test-tiny") == d
    if os.environ.get("NSBOX_SANITIZE"):
        return
    p = nsbox("python", "--rootfs", "nsbox-test-tiny", "-c",
              "import sys, os, json; s = os.stat('/usr/lib/python3.11/os.py');"
              "print('json' in sys.modules, s.st_dev, s.st_ino, os.path.exists('/usr/lib/python3/dist-packages/numpy'))")
    assert p.returncode == 0, p.stderr
    s = os.stat(os.path.join(d, "usr/lib/python3.11/os.py"))
    assert p.stdout.split() == ["True", str(s.st_dev), str(s.st_ino), "False"]
    # The build's lock file: the cache owner's, readable by all, unlocked.
    st = os.lstat(os.path.join(os.path.dirname(d), "lock"))
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == os.geteuid()


def _fake_cache(tmp_path, python, mode=0o755, preload=""):
    cache = tmp_path / "cache"
    d = cache / "fake-0123456789abcdef"
    (d / "tree" / "usr").mkdir(parents=True)
    (d / "info").write_text("name=fake\nhash=0123456789abcdef\npreload=%s\npython=%s\n" % (preload, python))
    (cache / "fake").symlink_to("fake-0123456789abcdef")
    os.chmod(d, mode)
    return str(cache)


def test_tree_for_another_python_is_refused(tmp_path):
    env = dict(os.environ, NSBOX_ROOTFS_CACHE=_fake_cache(tmp_path, "0.0-not-this-one"))
    p = nsbox("python", "--rootfs", "fake", "-c", "1", env=env)
    assert p.returncode == 120, p.stderr
    assert "carries python3.11 0.0-not-this-one" in p.stderr and "nsbox rootfs build fake" in p.stderr, p.stderr


def test_tree_writable_by_others_is_not_trusted(tmp_path):
    ver = open(os.path.join(BUILD, "rootfs", "python.version")).read().strip()
    env = dict(os.environ, NSBOX_ROOTFS_CACHE=_fake_cache(tmp_path, ver, 0o777))
    p = nsbox("python", "--rootfs", "fake", "-c", "1", env=env)
    assert p.returncode == 120 and "is not built" in p.stderr, p.stderr


def test_preload_on_the_hosts_usr(tmp_path):
    """Preload= without a tree: the helper's template (a fork), its spare,
    a cold start and the CLI all import the modules before the session."""
    pol = tmp_path / "p.policy"
    pol.write_text("[Python]\nPreload=csv, wave\n")
    sdk = r"""
import sys, nsbox
code = "import sys; ('csv' in sys.modules, 'wave' in sys.modules)"
out = []
for kw in ({}, {}, {"cold": True}):
    with nsbox.Sandbox(policy=sys.argv[1], **kw) as sb:
        out.append(sb.run(code).value)
with nsbox.Sandbox() as sb:
    out.append(sb.run(code).value)
print(out)
"""
    env = sdk_env(NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"),
                  PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
    r = subprocess.run([sys.executable, "-c", sdk, str(pol)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([(True, True)] * 3 + [(False, False)]), r.stdout
    p = nsbox("python", "--preload", "csv wave", "-c", "import sys; print('csv' in sys.modules, 'wave' in sys.modules)")
    assert p.returncode == 0 and p.stdout.split() == ["True", "True"], p.stderr


@pytest.mark.parametrize("text,want", [
    ("Name=BAD\n", "not a tree name"),
    ("Name=ok\nPackages=numpy;rm\n", "not a Debian package name"),
    ("Name=ok\nPackages=--option\n", "not a Debian package name"),
    ("Name=ok\nVariant=custom\n", "Variant=custom"),
    ("Name=ok\nPreload=a-b\n", "not a module name"),
])
def test_bad_definition(tmp_path, text, want):
    d = tmp_path / "bad.tree"
    d.write_text(text)
    env = dict(os.environ, NSBOX_ROOTFS_CACHE=str(tmp_path / "cache"))
    p = nsbox("rootfs", "build", str(d), env=env)
    assert p.returncode == 120 and want in p.stderr, (p.returncode, p.stderr)
    assert not (tmp_path / "cache").exists() or not os.listdir(tmp_path / "cache")


def test_bad_preload_in_info_is_refused(tmp_path):
    ver = open(os.path.join(BUILD, "rootfs", "python.version")).read().strip()
    env = dict(os.environ, NSBOX_ROOTFS_CACHE=_fake_cache(tmp_path, ver, preload="os; import evil"))
    p = nsbox("python", "--rootfs", "fake", "-c", "1", env=env)
    assert p.returncode == 120 and "not a module name" in p.stderr and "info file" in p.stderr, p.stderr


# ---- nsbox rootfs remove: a small runnable tree in a private cache ----

def _runnable_build(cache, name, h, lock=True):
    """CACHE/NAME-H with a tree that runs dash, sleep and true (the host's
    binaries and their libc: a few MB, copied in milliseconds), and its lock
    file unless lock is false (a build made before lock files)."""
    ver = open(os.path.join(BUILD, "rootfs", "python.version")).read().strip()
    d = cache / ("%s-%s" % (name, h))
    tree = d / "tree"
    for sub in ("usr/bin", "usr/lib/x86_64-linux-gnu", "usr/lib64"):
        (tree / sub).mkdir(parents=True)
    for prog in ("dash", "sleep", "true"):
        shutil.copy2("/usr/bin/" + prog, tree / "usr/bin" / prog)
    (tree / "usr/bin/sh").symlink_to("dash")
    shutil.copy2("/lib/x86_64-linux-gnu/libc.so.6", tree / "usr/lib/x86_64-linux-gnu/libc.so.6")
    shutil.copy2("/lib64/ld-linux-x86-64.so.2", tree / "usr/lib64/ld-linux-x86-64.so.2")
    for l in ("bin", "lib", "lib64"):
        (tree / l).symlink_to("usr/" + l)
    (d / "info").write_text("name=%s\nhash=%s\npreload=\npython=%s\nsize=3000K\n" % (name, h, ver))
    if lock:
        (d / "lock").touch(0o644)
    return d


def _make_current(cache, name, d):
    link = cache / name
    if link.is_symlink():
        link.unlink()
    link.symlink_to(d.name)


needs_x86_64 = pytest.mark.skipif(not os.path.exists("/lib64/ld-linux-x86-64.so.2") or
                                  not os.path.exists("/lib/x86_64-linux-gnu/libc.so.6"),
                                  reason="the small test tree copies x86-64 Debian's libc")


def _rm_env(cache):
    return dict(os.environ, NSBOX_ROOTFS_CACHE=str(cache))


def _ofd_lock(fd, kind):
    """An OFD lock (F_OFD_SETLK) on the whole file, without waiting."""
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, os.SEEK_SET, 0, 0, 0))


@needs_x86_64
def test_remove_and_stale(tmp_path):
    cache = tmp_path / "cache"
    old = _runnable_build(cache, "small", "00000000000000aa")
    cur = _runnable_build(cache, "small", "00000000000000bb")
    forced = _runnable_build(cache, "small", "00000000000000bb.1700000000")
    other = _runnable_build(cache, "other", "00000000000000cc")
    _make_current(cache, "small", cur)
    _make_current(cache, "other", other)
    env = _rm_env(cache)
    p = nsbox("run", "--rootfs", "small", "--", "true", env=env)
    assert p.returncode == 0, p.stderr
    p = nsbox("rootfs", "remove", "--stale", env=env)
    assert p.returncode == 0, p.stderr
    assert "removed %s" % old in p.stdout and "removed %s" % forced in p.stdout, p.stdout
    assert not old.exists() and not forced.exists() and cur.is_dir() and other.is_dir()
    p = nsbox("rootfs", "remove", "--stale", env=env)
    assert p.returncode == 0 and "nothing to remove" in p.stdout, (p.stdout, p.stderr)
    p = nsbox("run", "--rootfs", "small", "--", "true", env=env)
    assert p.returncode == 0, p.stderr
    # One build by its directory's name, then a tree by its name.
    p = nsbox("rootfs", "remove", other.name, env=env)
    assert p.returncode == 0 and "removed %s" % other in p.stdout, p.stderr
    assert not other.exists() and not (cache / "other").is_symlink()
    p = nsbox("rootfs", "remove", "small", env=env)
    assert p.returncode == 0, p.stderr
    assert "removed %s" % cur in p.stdout and "removed the link" in p.stdout, p.stdout
    assert sorted(os.listdir(cache)) == []
    # Root's cache is every user's (0755); a user's is theirs (0711: not
    # listed by others, passable by mmdebstrap's unshared root).
    assert stat.S_IMODE(os.stat(cache).st_mode) == (0o755 if os.geteuid() == 0 else 0o711)
    p = nsbox("run", "--rootfs", "small", "--", "true", env=env)
    assert p.returncode == 120 and "is not built" in p.stderr, p.stderr
    p = nsbox("rootfs", "remove", "small", env=env)
    assert p.returncode == 120 and "no build of 'small'" in p.stderr, p.stderr
    for bad in (["remove"], ["remove", "../x"], ["remove", "--stale", "x"], ["remove", "Bad Name"]):
        p = nsbox("rootfs", *bad, env=env)
        assert p.returncode == 120, (bad, p.returncode, p.stderr)


@needs_x86_64
def test_remove_refuses_a_tree_in_use(tmp_path):
    cache = tmp_path / "cache"
    cur = _runnable_build(cache, "small", "00000000000000bb")
    _make_current(cache, "small", cur)
    env = _rm_env(cache)
    sb = subprocess.Popen([NSBOX, "run", "--rootfs", "small", "--", "sh", "-c", "echo ready; exec sleep 60"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert sb.stdout.readline() == "ready\n", sb.stderr.read()
        for args in (["small"], ["--stale"], [cur.name]):
            p = nsbox("rootfs", "remove", *args, env=env)
            if args == ["--stale"]:  # the current build is not stale
                assert p.returncode == 0 and "nothing to remove" in p.stdout, p.stderr
                continue
            assert p.returncode == 122, (args, p.returncode, p.stdout, p.stderr)
            assert "in use by a running sandbox" in p.stderr, p.stderr
            assert (cur / "tree/usr/bin/dash").is_file() and (cache / "small").is_symlink()
        # An old build in use is kept by --stale too, and said so.
        _make_current(cache, "small", _runnable_build(cache, "small", "00000000000000dd"))
        p = nsbox("rootfs", "remove", "--stale", env=env)
        assert p.returncode == 0 and "in use" in p.stderr and cur.is_dir(), (p.stdout, p.stderr)
    finally:
        sb.terminate()  # nsbox forwards it, then removes its cgroup
        sb.wait(timeout=30)
    # The sandbox is gone (its pid 1 held the lock): now it goes.
    p = nsbox("rootfs", "remove", "--stale", env=env)
    assert p.returncode == 0 and "removed %s" % cur in p.stdout, (p.stdout, p.stderr)
    assert not cur.exists()
    assert [n for n in os.listdir(cache) if n.startswith(".")] == []


def _in_use(env, d):
    """The IN USE column of `nsbox rootfs list` for the build directory d."""
    p = nsbox("rootfs", "list", env=env)
    assert p.returncode == 0, p.stderr
    head = p.stdout.splitlines()[0]
    assert head.split() == ["NAME", "HASH", "SIZE", "BUILT", "IN", "USE", "DIRECTORY"], head
    rows = [l.split() for l in p.stdout.splitlines() if str(d) in l.split()]
    assert len(rows) == 1, p.stdout
    return rows[0][4]


@needs_x86_64
def test_list_shows_builds_in_use(tmp_path):
    """list probes each build's lock file (F_OFD_GETLK, no lock taken): a
    running sandbox's read lock is "yes", remove's write lock "removing",
    none "no"; a build without a lock file can't be told ("unknown")."""
    cache = tmp_path / "cache"
    cur = _runnable_build(cache, "small", "00000000000000bb")
    old = _runnable_build(cache, "small", "00000000000000aa", lock=False)
    _make_current(cache, "small", cur)
    env = _rm_env(cache)
    assert _in_use(env, cur) == "no" and _in_use(env, old) == "unknown"
    sb = subprocess.Popen([NSBOX, "run", "--rootfs", "small", "--", "sh", "-c", "echo ready; read x"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert sb.stdout.readline() == "ready\n", sb.stderr.read()
        assert _in_use(env, cur) == "yes"
        # The probe took no lock: remove still sees only the sandbox's.
        p = nsbox("rootfs", "remove", cur.name, env=env)
        assert p.returncode == 122 and "in use by a running sandbox" in p.stderr, (p.returncode, p.stderr)
    finally:
        sb.communicate("\n", timeout=30)
    assert sb.returncode == 0
    assert _in_use(env, cur) == "no"
    fd = os.open(cur / "lock", os.O_RDWR)
    try:
        _ofd_lock(fd, fcntl.F_WRLCK)  # what remove holds
        assert _in_use(env, cur) == "removing"
    finally:
        os.close(fd)
    assert _in_use(env, cur) == "no"


@needs_x86_64
def test_sandbox_refuses_a_tree_being_removed(tmp_path):
    cache = tmp_path / "cache"
    cur = _runnable_build(cache, "small", "00000000000000bb")
    _make_current(cache, "small", cur)
    fd = os.open(cur / "lock", os.O_RDWR)
    try:
        _ofd_lock(fd, fcntl.F_WRLCK)  # what remove holds
        p = nsbox("run", "--rootfs", "small", "--", "true", env=_rm_env(cache))
        assert p.returncode == 125 and "is being removed" in p.stderr, (p.returncode, p.stderr)
    finally:
        os.close(fd)
    p = nsbox("run", "--rootfs", "small", "--", "true", env=_rm_env(cache))
    assert p.returncode == 0, p.stderr


@needs_x86_64
def test_remove_follows_no_symlink(tmp_path):
    """Trees hold absolute symlinks (/usr/..., /etc/alternatives/...), and a
    link planted in the cache may name a host directory: remove deletes
    links, never what they point at."""
    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "keep").write_text("host data")
    (host / "sub" / "keep2").write_text("more")
    cache = tmp_path / "cache"
    cur = _runnable_build(cache, "small", "00000000000000bb")
    _make_current(cache, "small", cur)
    tree = cur / "tree"
    (tree / "usr/abs").symlink_to(host)
    (tree / "usr/rel").symlink_to("../../../../host")
    (tree / "usr/file").symlink_to(host / "keep")
    ro = tree / "usr/share/ro"
    ro.mkdir(parents=True)
    (ro / "f").write_text("x")
    os.chmod(ro, 0o555)  # fakechroot builds leave such directories
    # Links planted in the cache: a build and a tree name leading to host.
    (cache / "evil-00000000000000ee").symlink_to(host)
    (cache / "evil").symlink_to(host)
    (cache / "small-00000000000000ff").symlink_to(host)
    env = _rm_env(cache)
    p = nsbox("rootfs", "remove", "--stale", env=env)
    assert p.returncode == 0, (p.stdout, p.stderr)
    p = nsbox("rootfs", "remove", "evil-00000000000000ee", env=env)
    assert p.returncode == 125 and "left alone" in p.stderr, (p.returncode, p.stdout, p.stderr)
    p = nsbox("rootfs", "remove", "evil", env=env)
    assert p.returncode == 125 and "left alone" in p.stderr, (p.returncode, p.stdout, p.stderr)
    p = nsbox("rootfs", "remove", "small", env=env)
    assert p.returncode == 125 and "removed %s" % cur in p.stdout, (p.stdout, p.stderr)
    assert "small-00000000000000ff is not a build directory" in p.stderr, p.stderr
    assert not cur.exists()
    assert (host / "keep").read_text() == "host data" and (host / "sub" / "keep2").read_text() == "more"
    assert sorted(os.listdir(host)) == ["keep", "sub"]
    for n in ("evil", "evil-00000000000000ee", "small-00000000000000ff"):
        assert (cache / n).is_symlink(), n


# What another user can do to a build's lock file: open it read-only (it is
# 0644), then take every lock that allows.  As root the test runs it as uid
# 65534; unprivileged, as a child of the same uid with a read-only
# descriptor (what any other user has).  It prints what it got.
HOSTILE = r"""
import fcntl, os, struct, sys
got = []
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    for kind, name in ((fcntl.F_WRLCK, "wrlck"), (fcntl.F_RDLCK, "rdlck")):
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, 0, 0, 0, 0))
            got.append(name)
            break
        except OSError:
            pass
    fd2 = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.flock(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
        got.append("flock")
    except OSError:
        pass
print(" ".join(got), flush=True)
sys.stdin.read()
"""


def _shared_cache():
    """A cache another uid can reach: in /tmp (sticky), 0755."""
    top = tempfile.mkdtemp(prefix="nsbox-rootlock-", dir="/tmp")
    os.chmod(top, 0o755)
    return top


@needs_x86_64
def test_another_users_locks_stop_no_sandbox():
    """flock(2) needs only a descriptor, and trees are world-readable: any
    user could once lock a tree exclusively and fail every sandbox on it.
    Now the strongest locks another user gets (a read lock on the lock
    file, flock on anything) delay a removal at most."""
    top = _shared_cache()
    try:
        cache = pathlib.Path(top) / "cache"
        cur = _runnable_build(cache, "small", "00000000000000bb")
        _make_current(cache, "small", cur)
        os.chmod(cache, 0o755)
        env = _rm_env(cache)
        who = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        hostile = subprocess.Popen(who + ["/usr/bin/python3.11", "-c", HOSTILE, str(cur / "lock"), str(cur / "tree"),
                                          str(cur)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        sb = None
        try:
            # A write lock needs the file open for writing: refused to it.
            got = hostile.stdout.readline().split()
            assert got[:2] == ["rdlck", "flock"] and "wrlck" not in got and got.count("flock") == 3, got
            p = nsbox("run", "--rootfs", "small", "--", "true", env=env)
            assert p.returncode == 0, p.stderr
            sb = subprocess.Popen([NSBOX, "run", "--rootfs", "small", "--", "sh", "-c", "echo ready; exec sleep 60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            assert sb.stdout.readline() == "ready\n", sb.stderr.read()
            # Its read lock holds a removal back, as a sandbox's does.
            p = nsbox("rootfs", "remove", "small", env=env)
            assert p.returncode == 122 and "in use by a running sandbox" in p.stderr, (p.returncode, p.stderr)
            hostile.stdin.close()
            hostile.wait(timeout=30)
            # The sandbox alone still does.
            p = nsbox("rootfs", "remove", "small", env=env)
            assert p.returncode == 122 and (cur / "tree/usr/bin/dash").is_file(), (p.returncode, p.stderr)
        finally:
            if not hostile.stdin.closed:
                hostile.stdin.close()
            hostile.wait(timeout=30)
            hostile.stdout.close()
            if sb:
                sb.terminate()
                sb.communicate(timeout=30)
        p = nsbox("rootfs", "remove", "small", env=env)
        assert p.returncode == 0 and "removed %s" % cur in p.stdout, (p.stdout, p.stderr)
        assert os.listdir(cache) == []
    finally:
        shutil.rmtree(top)


@needs_x86_64
def test_remove_follows_no_lock_link(tmp_path):
    """remove opens the lock file without following a link and without
    creating anything: a link planted there is refused, its target not made."""
    cache = tmp_path / "cache"
    cur = _runnable_build(cache, "small", "00000000000000bb")
    _make_current(cache, "small", cur)
    target = tmp_path / "nologin"
    (cur / "lock").unlink()
    (cur / "lock").symlink_to(target)
    env = _rm_env(cache)
    for args in (["small"], ["--force", "small"]):
        p = nsbox("rootfs", "remove", *args, env=env)
        assert p.returncode == 125, (args, p.returncode, p.stdout, p.stderr)
        assert "%s/lock: a symbolic link: left alone" % cur in p.stderr, p.stderr
        assert not os.path.lexists(target) and (cur / "tree/usr/bin/dash").is_file()
    # A build under way's lock, planted the same way.
    b = cache / ".build-small.aaaaaa"
    b.mkdir()
    (b / "lock").symlink_to(target)
    os.utime(b, (time.time() - 3600,) * 2)
    p = nsbox("rootfs", "remove", "--stale", env=env)
    assert p.returncode == 125 and "a symbolic link: left alone" in p.stderr, (p.returncode, p.stderr)
    assert not os.path.lexists(target) and b.is_dir()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_unsafe_cache_is_refused(tmp_path, mode):
    """A cache another user can write (or a directory on its way) is
    refused by name before anything is opened or made in it."""
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, mode)
    for args in (["remove", "--stale"], ["remove", "small"], ["build", TINY]):
        p = nsbox("rootfs", *args, env=_rm_env(cache))
        assert p.returncode == 125, (args, p.returncode, p.stderr)
        assert "the cache %s is not safe: %s is writable by others (mode %04o)" % (cache, cache, mode) in p.stderr, \
            p.stderr
    assert os.listdir(cache) == []
    # A directory on the way, writable by others without the sticky bit.
    os.chmod(cache, 0o755)
    os.chmod(tmp_path, 0o777)
    try:
        p = nsbox("rootfs", "remove", "--stale", env=_rm_env(cache / "sub"))
        assert p.returncode == 125 and "%s is writable by others (mode 0777)" % tmp_path in p.stderr, p.stderr
    finally:
        os.chmod(tmp_path, 0o700)
    p = nsbox("rootfs", "remove", "--stale", env=_rm_env(cache))
    assert p.returncode == 0 and "nothing to remove" in p.stdout, p.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="a cache owned by another user: root's pass")
def test_cache_of_another_user_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chown(cache, 65534, 65534)
    p = nsbox("rootfs", "remove", "--stale", env=_rm_env(cache))
    assert p.returncode == 125 and "%s is owned by uid 65534, not by you" % cache in p.stderr, p.stderr


@needs_x86_64
def test_library_refuses_an_unsafe_cache_on_the_way(tmp_path):
    """--rootfs NAME (libnsbox) checks the user's cache as build and remove
    do, with the same words: a build in a cache below a directory anyone
    can write (not sticky), or one another uid owns, would be another
    user's to swap under the sandbox.  Each case runs with the check's
    directory put right first, so the refusal is the check's alone."""
    top = tmp_path / "top"
    cache = top / "cache"
    cur = _runnable_build(cache, "small", "00000000000000bb")
    _make_current(cache, "small", cur)
    env = _rm_env(cache)
    p = nsbox("run", "--rootfs", "small", "--", "true", env=env)
    assert p.returncode == 0, p.stderr
    cases = [("writable", lambda: os.chmod(top, 0o777), lambda: os.chmod(top, 0o755),
              "%s is writable by others (mode 0777)" % top)]
    if os.geteuid() == 0:
        cases.append(("owner", lambda: os.chown(top, 65534, 65534), lambda: os.chown(top, 0, 0),
                      "%s is owned by uid 65534, not by you" % top))
    for what, spoil, mend, why in cases:
        spoil()
        try:
            want = "the cache %s is not safe: %s (NSBOX_ROOTFS_CACHE, nsbox(1) ROOT TREES)" % (cache, why)
            for args in (["run", "--rootfs", "small", "--", "true"], ["python", "--rootfs", "small", "-c", "1"]):
                p = nsbox(*args, env=env)
                assert p.returncode == 120 and want in p.stderr, (what, args, p.returncode, p.stderr)
            # the script says the same (status 125: it would write there)
            p = nsbox("rootfs", "remove", "--stale", env=env)
            assert p.returncode == 125 and "nsbox rootfs: " + want in p.stderr, (what, p.stderr)
            code = ("import nsbox\ntry:\n    nsbox.Sandbox(rootfs='small').close()\nexcept nsbox.PolicyError as e:\n"
                    "    print(e)\n")
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                               env=sdk_env(PYTHONPATH=os.path.join(HERE, "..", "..", "python"),
                                           NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"), NSBOX_ROOTFS_CACHE=str(cache)))
            assert r.returncode == 0 and want in r.stdout, (what, r.stdout, r.stderr)
        finally:
            mend()
        p = nsbox("run", "--rootfs", "small", "--", "true", env=env)
        assert p.returncode == 0, (what, p.stderr)
    # A symlink on the way is followed once, to the real path checked.
    os.symlink(top, tmp_path / "link")
    os.chmod(cache, 0o777)
    try:
        p = nsbox("run", "--rootfs", "small", "--", "true", env=_rm_env(tmp_path / "link" / "cache"))
        assert p.returncode == 120, p.stderr
        assert "the cache %s is not safe: %s is writable by others (mode 0777)" % (tmp_path / "link" / "cache", cache) \
            in p.stderr, p.stderr
    finally:
        os.chmod(cache, 0o755)


@needs_x86_64
def test_build_without_lock_file(tmp_path):
    """A build made before lock files: its sandboxes take no lock, so remove
    can't tell whether one runs on it: kept, unless --force."""
    cache = tmp_path / "cache"
    old = _runnable_build(cache, "small", "00000000000000aa", lock=False)
    cur = _runnable_build(cache, "small", "00000000000000bb", lock=False)
    _make_current(cache, "small", cur)
    env = _rm_env(cache)
    p = nsbox("run", "--rootfs", "small", "--", "true", env=env)
    assert p.returncode == 0, p.stderr
    p = nsbox("rootfs", "remove", "--stale", env=env)
    assert p.returncode == 0 and "has no lock file" in p.stderr and old.is_dir(), (p.stdout, p.stderr)
    p = nsbox("rootfs", "remove", "small", env=env)
    assert p.returncode == 125 and "remove --force %s" % cur.name in p.stderr and cur.is_dir(), p.stderr
    # --force still honours the directory lock such builds' sandboxes took.
    fd = os.open(cur / "tree", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        p = nsbox("rootfs", "remove", "--force", cur.name, env=env)
        assert p.returncode == 122 and cur.is_dir(), p.stderr
    finally:
        os.close(fd)
    p = nsbox("rootfs", "remove", "--force", "--stale", env=env)
    assert p.returncode == 0 and "removed %s" % old in p.stdout, p.stderr
    p = nsbox("rootfs", "remove", "--force", "small", env=env)
    assert p.returncode == 0 and "removed %s" % cur in p.stdout, p.stderr
    assert os.listdir(cache) == []


HOST_MPL = os.path.isdir("/usr/lib/python3/dist-packages/matplotlib")

MPL_CODE = r"""
import errno, os, subprocess
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot(range(100)); plt.title("fonts"); plt.savefig("/tmp/f.png")
try:
    open("/etc/fonts/fonts.conf", "a")
    w = "wrote"
except OSError as e:
    w = errno.errorcode[e.errno]
fc = subprocess.run(["fc-list"], capture_output=True, text=True) if os.path.exists("/usr/bin/fc-list") else None
print(w, open("/tmp/f.png", "rb").read(4).hex(), fc and len(fc.stdout.splitlines()) > 0, fc and fc.stderr)
"""


@pytest.mark.skipif(not HOST_MPL, reason="no python3-matplotlib on the host (CI installs it: install-deps.sh)")
def test_matplotlib_is_quiet_on_the_hosts_usr():
    """The generated /etc gives fontconfig the root's /etc/fonts (read-only):
    matplotlib's first font scan runs fc-list, which otherwise printed
    "Fontconfig error: Cannot load default config file"."""
    before = {n: os.lstat(os.path.join("/etc/fonts", n)).st_mtime_ns for n in os.listdir("/etc/fonts")}
    p = nsbox("python", "--dist-packages", "-c", MPL_CODE)
    assert p.returncode == 0, p.stderr
    assert no_warnings(p.stderr) == "", p.stderr
    w, png, listed, fcerr = p.stdout.split(" ", 3)
    assert w in ("EROFS", "EACCES") and png == "89504e47", p.stdout
    if os.path.exists("/usr/bin/fc-list"):
        assert listed == "True" and fcerr.strip() == "", p.stdout
    after = {n: os.lstat(os.path.join("/etc/fonts", n)).st_mtime_ns for n in os.listdir("/etc/fonts")}
    assert after == before


@no_sanitizer
def test_matplotlib_is_quiet_on_the_tree(datascience):
    p = nsbox("python", "--rootfs", "datascience", "-c",
              MPL_CODE + "print(os.stat('/etc/fonts/fonts.conf').st_ino)")
    assert p.returncode == 0, p.stderr
    assert no_warnings(p.stderr) == "", p.stderr
    first, ino = p.stdout.splitlines()
    assert first.split()[:2] in (["EROFS", "89504e47"], ["EACCES", "89504e47"]), p.stdout
    # The tree's own fontconfig configuration, not the host's.
    assert int(ino) == os.stat(os.path.join(datascience, "etc/fonts/fonts.conf")).st_ino


@no_sanitizer
def test_font_list_made_before_the_session(datascience, tmp_path):
    """datascience preloads matplotlib.font_manager: matplotlib's font list
    (its scan of /usr/share/fonts, ~0.3 s at a first plot) is made before
    the session starts, in the spare for the SDK; a first plot then finds it."""
    want = [l for l in open(os.path.join(HERE, "..", "..", "rootfs", "datascience.tree")) if l.startswith("Preload=")]
    assert "matplotlib.font_manager" in want[-1].split()
    code = ("import os, sys; d = os.path.expanduser('~/.cache/matplotlib');"
            "print('matplotlib.font_manager' in sys.modules, sorted(os.listdir(d)) if os.path.isdir(d) else [])")
    p = nsbox("python", "--rootfs", "datascience", "--preload", "numpy pandas matplotlib.font_manager", "-c",
              code + "\nimport matplotlib.pyplot as plt; plt.plot([1, 2]); plt.savefig('/tmp/f.png')")
    assert p.returncode == 0, p.stderr
    assert no_warnings(p.stderr) == "", p.stderr
    loaded, files = p.stdout.split(" ", 1)
    assert loaded == "True" and "fontlist-v" in files, p.stdout
    sdk = ("import nsbox, sys\n"
           "with nsbox.Sandbox(rootfs='datascience', policy=sys.argv[1], timeout=60) as sb:\n"
           "    print(sb.run(%r).stdout.strip())\n" % code)
    pol = tmp_path / "fontlist.policy"
    pol.write_text("[Python]\nPreload=numpy pandas matplotlib.font_manager\n")
    env = sdk_env(NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"), PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
    r = subprocess.run([sys.executable, "-c", sdk, str(pol)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("True ") and "fontlist-v" in r.stdout, r.stdout


def test_stale_takes_a_killed_build_not_one_under_way(tmp_path):
    """A build holds a write lock on its .build-NAME.<random>/lock while it
    runs; --stale removes one nobody holds (a killed build's)."""
    cache = tmp_path / "cache"
    dead = cache / ".build-small.aaaaaa"
    running = cache / ".build-small.bbbbbb"
    for d in (dead, running):
        (d / "tree" / "usr").mkdir(parents=True)
        (d / "tree" / "usr" / "abs").symlink_to(tmp_path)
        os.utime(d, (time.time() - 3600,) * 2)  # one made within the minute may be a build's start
    young = cache / ".build-small.cccccc"
    young.mkdir()
    # A build under way: its lock file write-locked (this build), or, by
    # an nsbox before lock files, its directory flocked.
    (running / "lock").touch(0o644)
    old = cache / ".build-small.dddddd"
    (old / "tree").mkdir(parents=True)
    os.utime(running, (time.time() - 3600,) * 2)
    os.utime(old, (time.time() - 3600,) * 2)
    fd = os.open(running / "lock", os.O_RDWR)
    fd2 = os.open(old, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _ofd_lock(fd, fcntl.F_WRLCK)
        fcntl.flock(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = nsbox("rootfs", "remove", "--stale", env=_rm_env(cache))
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert "removed %s" % dead in p.stdout and "a build under way: kept" in p.stderr, (p.stdout, p.stderr)
        assert not dead.exists() and (running / "tree" / "usr" / "abs").is_symlink() and young.is_dir()
        assert p.stderr.count("a build under way: kept") == 3 and old.is_dir(), p.stderr
    finally:
        os.close(fd)
        os.close(fd2)
    os.utime(young, (time.time() - 3600,) * 2)
    p = nsbox("rootfs", "remove", "--stale", env=_rm_env(cache))
    assert p.returncode == 0 and "removed %s" % running in p.stdout and "removed %s" % young in p.stdout, p.stdout
    assert "removed %s" % old in p.stdout, p.stdout
    assert os.listdir(cache) == [] and (tmp_path / "cache").is_dir()


def test_remove_checks_the_whole_name(tmp_path):
    # The names were checked with echo | grep -E '^...$', which grep applies
    # line by line (and dash's echo makes "\n" a newline): "a<newline>b" and
    # "a\nb" passed the check as tree names.
    cache = tmp_path / "cache"
    cache.mkdir()
    for arg in ("a\nb", "a\\nb", "small\n..", "a\\c"):
        p = nsbox("rootfs", "remove", arg, env=_rm_env(cache))
        assert p.returncode == 120 and "is not a tree name nor a build" in p.stderr, (arg, p.returncode, p.stderr)
