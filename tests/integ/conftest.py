"""Shared fixtures for nsbox's integration tests.

Every test runs real sandboxes through build/nsbox and, through the autouse
`host_intact` fixture, checks from the host that nothing leaked: processes,
cgroups, mounts, file descriptors and temp dirs.
"""
import json
import os
import subprocess
import tempfile
import time
import pytest

BUILD = os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "..", "build")
BUILD = os.path.abspath(BUILD)
NSBOX = os.path.join(BUILD, "nsbox")
PROBE_DIR = os.path.join(BUILD, "tests", "probe")
# Set by scripts/run-integ.sh: "root", "delegated" (unprivileged with a
# delegated cgroup) or "nodeleg" (unprivileged, no cgroup).
MODE = os.environ.get("NSBOX_TEST_MODE", "root" if os.geteuid() == 0 else "nodeleg")
CG_ROOTS = ["/sys/fs/cgroup"]


def run(args, timeout=60, input=None, check_rc=None):
    p = subprocess.run([NSBOX] + args, capture_output=True, timeout=timeout, input=input,
                       stdin=None if input is not None else subprocess.DEVNULL)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    if check_rc is not None:
        assert p.returncode == check_rc, f"rc={p.returncode} stdout={out!r} stderr={err!r}"
    return p.returncode, out, err


def run_status(args, **kw):
    """Run with --json-status to a pipe-free file and return (rc, out, err, status)."""
    import tempfile
    with tempfile.NamedTemporaryFile(prefix="nsbox-test-status-", suffix=".json") as f:
        rc, out, err = run(["run", "--json-status", f.name] + args, **kw)
        data = open(f.name).read()
    return rc, out, err, json.loads(data) if data else None


def probe(extra=None):
    rc, out, err = run(["run", "--ro-bind", f"{PROBE_DIR}:/probe"] + (extra or []) + ["--", "/probe/probe"])
    assert rc == 0, err
    return json.loads(out)


def reap(p):
    """Kill a spawned process that still runs, and close its pipes."""
    if p.poll() is None:
        p.kill()
        p.wait()
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            f.close()


def _nsbox_cgroups():
    """Sandbox cgroups (nsbox-PID-N) this pass could have made: as root,
    none under the unprivileged passes' delegated cgroups (run-integ.sh's
    nsbox-test-deleg-PID, which .ci/run's user passes fill while the root
    passes run); unprivileged, only those this uid owns."""
    found = []
    me = os.geteuid()
    for root in CG_ROOTS:
        for dirpath, dirnames, _ in os.walk(root):
            if dirpath.count("/") > 9:
                dirnames[:] = []
                continue
            if me == 0:
                dirnames[:] = [d for d in dirnames if not d.startswith("nsbox-test-deleg-")]
            for d in dirnames:
                if d.startswith("nsbox-") and not d.startswith("nsbox-test"):
                    path = os.path.join(dirpath, d)
                    try:
                        if me == 0 or os.stat(path).st_uid == me:
                            found.append(path)
                    except FileNotFoundError:
                        pass
    return sorted(found)


def _descendants():
    me = os.getpid()
    kids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me:
            kids.append(int(pid))
    return kids


def _mounts():
    with open("/proc/self/mountinfo") as f:
        return sorted(line.split()[4] for line in f)


def _tmp_entries():
    # Canaries are per test process (checked on their own), and other
    # launchers' live temp files are not ours.
    return sorted(e for e in os.listdir("/tmp")
                  if e.startswith("nsbox") and not e.startswith(("nsbox-canary-", "nsbox-test-status-")))


def _launcher_pid(path):
    try:
        return int(os.path.basename(path).split("-")[1])
    except (IndexError, ValueError):
        return 0


def _pid_alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(autouse=True)
def host_intact():
    before = (_nsbox_cgroups(), _mounts(), sorted(os.listdir("/proc/self/fd")), _tmp_entries())
    # A name of its own (O_EXCL): a canary another user left in /tmp under
    # the same pid must not stop this run.
    fd, canary = tempfile.mkstemp(prefix="nsbox-canary-", dir="/tmp")
    with os.fdopen(fd, "w") as f:
        f.write("canary")
    yield
    assert open(canary).read() == "canary", "the host canary file changed"
    os.unlink(canary)
    assert _descendants() == [], "processes left behind"
    after = (_nsbox_cgroups(), _mounts(), sorted(os.listdir("/proc/self/fd")), _tmp_entries())
    # Only cgroups whose launcher (nsbox-PID-N) is gone count: a launcher
    # still running belongs to someone else on this machine.
    for _ in range(20):
        left = [d for d in set(after[0]) - set(before[0]) if not _pid_alive(_launcher_pid(d))]
        if not left:
            break
        time.sleep(0.05)
        after = (_nsbox_cgroups(),) + after[1:]
    assert not left, f"cgroups left behind: {left}"
    assert after[1] == before[1], "host mounts changed"
    assert after[2] == before[2], "file descriptors leaked"
    assert after[3] == before[3], f"temp files left: {set(after[3]) - set(before[3])}"


def sdk_env(**extra):
    """The environment for a child Python that loads libnsbox: under
    `make check SANITIZE=...` the ASan runtime must be preloaded into it
    (scripts/run-integ.sh), and never into pytest itself."""
    env = dict(os.environ, **extra)
    if os.environ.get("NSBOX_ASAN_PRELOAD"):
        env.update(LD_PRELOAD=os.environ["NSBOX_ASAN_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
    return env


def kernel_refuses_fds():
    """Linux 6.16's SO_PASSRIGHTS: a socket can refuse descriptors."""
    import socket
    a, b = socket.socketpair()
    try:
        b.setsockopt(socket.SOL_SOCKET, 83, 0)
        return True
    except OSError:
        return False
    finally:
        a.close()
        b.close()


# Sandboxed code passing its host a descriptor on its runner socket (fd 3):
# a TCP socket with unsent data and a linger of an hour, which the sender
# closes at once, so that the copy in flight is the last one (as a rule:
# the host may read first).  A host that drops it unread closes it itself,
# and that close waits out the linger (54181ca's nsbox python: 31 s of a
# 30 s linger, in read()).  The child's status comes through a pipe, not
# waitpid: a child whose close is the last one waits out the linger itself.
# Prints the send's errno name, or "sent".
MAKE_LINGERING = r'''
import socket, struct
def make_lingering(lst, linger):
    """A TCP socket to lst (which never reads) with unsent data and
    SO_LINGER: its last close waits up to linger seconds for it to go."""
    t = socket.socket()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    t.connect(lst.getsockname())
    t.setblocking(False)
    try:
        while True:
            t.send(b"x" * 65536)
    except BlockingIOError:
        pass
    t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, linger))
    return t
'''
SEND_TO_HOST = MAKE_LINGERING + r'''
import errno, os, socket, struct, array
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # the unsent data stays unsent
lst.bind(("127.0.0.1", 0))
lst.listen(1)
r, w = os.pipe()
if os.fork() == 0:
    t = make_lingering(lst, 3600)
    try:
        socket.socket(fileno=3).sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                    array.array("i", [t.fileno()]))])
        code = 0
    except OSError as e:
        code = e.errno
    t.setblocking(True)
    os.write(w, bytes([code]))
    t.close()
    os._exit(0)
code = os.read(r, 1)[0]
print("send:", errno.errorcode.get(code, "sent"), flush=True)
'''
