"""Isolation properties of `nsbox run`, checked from inside with the probe."""
import os
import re
import subprocess
import pytest
from conftest import run, run_status, probe, MODE, NSBOX

ERRNO_BLOCKED = {
    # syscall probe -> documented errno (nsbox(1), SECCOMP)
    "unshare_user": "EPERM", "unshare_ns": "EPERM", "clone_newuser": "EPERM", "clone3": "ENOSYS",
    "setns": "EPERM", "mount": "EPERM", "umount": "EPERM", "pivot_root": "EPERM", "chroot": "EPERM",
    "ptrace": "EPERM", "process_vm_readv": "EPERM", "bpf": "EPERM", "perf_event_open": "EPERM",
    "keyctl": "EPERM", "add_key": "EPERM", "request_key": "EPERM", "userfaultfd": "EPERM",
    "io_uring_setup": "ENOSYS", "init_module": "EPERM", "finit_module": "EPERM", "kexec_load": "EPERM",
    "reboot": "EPERM", "swapon": "EPERM", "acct": "EPERM", "open_by_handle_at": "EPERM",
    "ioctl_tiocsti": "EPERM", "ioctl_tiocsti_high": "EPERM", "ioctl_tioclinux": "EPERM",
    "ioctl_tiocsetd": "EPERM", "ioctl_tioccons": "EPERM",
    "unknown_syscall": "ENOSYS", "sethostname": "EPERM", "mknod": "EPERM",
}


@pytest.fixture(scope="module")
def facts():
    return probe()


def status_field(facts, name):
    m = re.search(r"^%s:\s*(.*)$" % name, facts["status"], re.M)
    return m.group(1).strip()


def test_ids_and_maps(facts):
    assert facts["uid"] == 1000 and facts["gid"] == 1000
    inside, outside, count = facts["uid_map"].split()
    assert (int(inside), int(outside), int(count)) == (1000, os.geteuid(), 1)
    inside, outside, count = facts["gid_map"].split()
    assert (int(inside), int(outside), int(count)) == (1000, os.getegid(), 1)
    if os.geteuid() != 0:
        assert facts["setgroups"].strip() == "deny"


def test_custom_ids():
    f = probe(["--uid", "0", "--gid", "0"])
    assert f["uid"] == 0 and f["gid"] == 0
    assert status_field(f, "CapEff") == "0000000000000000"


def test_no_capabilities_nnp_seccomp(facts):
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status_field(facts, cap) == "0000000000000000", cap
    assert status_field(facts, "NoNewPrivs") == "1"
    assert status_field(facts, "Seccomp") == "2"


def test_pid_namespace_and_session(facts):
    # pid 1 is nsbox's init; pid 2 was its network-namespace thread
    # (jail/net.c), so the command is pid 3, or 2 where pid 1 made the
    # namespace itself (no other CPU idle) and with --share-net.
    assert facts["pid"] in (2, 3) and facts["ppid"] == 1
    assert facts["sid"] == facts["pid"]  # setsid: no controlling terminal


def test_hostname_and_network(facts):
    assert facts["hostname"] == "nsbox"
    assert facts["interfaces"] == ["lo"]


def test_loopback_is_up_and_works():
    # lo is brought up by one rtnetlink request from pid 1: a TCP round
    # trip over 127.0.0.1 inside proves it (connect fails on a down lo).
    code = ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
            "c = socket.create_connection(s.getsockname(), timeout=5); a, _ = s.accept(); "
            "c.sendall(b'ping'); print(a.recv(4).decode())")
    rc, out, err = run(["run", "--", "/usr/bin/python3.11", "-S", "-c", code])
    assert rc == 0 and out.strip() == "ping", err


def test_share_net():
    f = probe(["--share-net"])
    assert f["pid"] == 2 and f["ppid"] == 1  # no network-namespace thread
    assert len(f["interfaces"]) >= 1 and set(f["interfaces"]) != {"lo"} or os.path.exists("/sys/class/net") \
        and sorted(os.listdir("/sys/class/net")) == sorted(f["interfaces"])


def test_only_stdio_fds(facts):
    assert facts["fds"] == [0, 1, 2]


def test_mounts(facts):
    mounts = {}
    for line in facts["mountinfo"].splitlines():
        parts = line.split()
        mounts[parts[4]] = parts[5].split(",")
    masked = {p for p in mounts if p.startswith("/proc/")}
    assert {"/proc/keys", "/proc/key-users"} <= masked  # masked like runc does
    if os.geteuid() == 0:  # the sandbox user is host root: root-only files are masked too
        assert {"/proc/kpageflags", "/proc/slabinfo", "/proc/vmallocinfo"} <= masked
    for p in masked:
        assert "nodev" in mounts[p] and "ro" in mounts[p], p
        del mounts[p]
    rc, out, err = run(["run", "--", "/bin/sh", "-c", "cat /proc/keys /proc/key-users | wc -c"])
    assert out.strip() == "0" and "Permission denied" in err
    # /etc/matplotlibrc: the one file of the root's /etc shown, when it has
    # one (Debian's matplotlib reads only that; jail/rootfs-table.c).
    # /etc/services and /etc/protocols: public tables, when the host has them.
    # /etc/fonts: fontconfig's configuration, a directory, when it has one.
    optional = {p for p in ("/etc/matplotlibrc", "/etc/services", "/etc/protocols", "/etc/fonts")
                if os.path.exists(p)}
    assert set(mounts) == {"/", "/usr", "/proc", "/dev", "/dev/null", "/dev/zero", "/dev/full",
                           "/dev/random", "/dev/urandom", "/dev/shm", "/dev/pts", "/tmp", "/out", "/etc/ld.so.cache",
                           "/etc/alternatives", "/probe"} | optional
    for point, opts in mounts.items():
        assert "nosuid" in opts, point
        if not point.startswith("/dev/") or point == "/dev/shm":
            assert "nodev" in opts, point
        if point not in ("/tmp", "/out", "/dev/shm") and not point.startswith("/dev/"):
            assert "ro" in opts, point


def test_secrets_absent(facts):
    assert facts["shadow"].startswith("ERR")
    assert "sandbox:x:1000:1000" in facts["passwd"]
    rc, out, err = run(["run", "--", "/bin/sh", "-c", "ls /home /root /etc/shadow /sys 2>&1; ls /etc"])
    assert "No such file" in out and "shadow" not in out.splitlines()[-1]


@pytest.mark.parametrize("name,errno", sorted(ERRNO_BLOCKED.items()))
def test_blocked_syscalls(facts, name, errno):
    assert facts[name] == errno


def test_filesystem_writes(facts):
    assert facts["write_usr"] == "EROFS"
    assert facts["write_root"] == "EROFS"
    assert facts["write_proc_sys"] in ("EROFS", "EACCES")
    assert facts["write_tmp"] == "ok"
    assert facts["write_devnull"] == "ok"


def test_environment():
    rc, out, err = run(["run", "--setenv", "FOO=bar", "--", "/usr/bin/env"], check_rc=0)
    env = dict(line.split("=", 1) for line in out.splitlines())
    assert env.pop("FOO") == "bar"
    assert env.pop("PATH") and env.pop("HOME") == "/tmp" and env.pop("LANG") == "C.UTF-8"
    env.pop("TERM", None)
    env.pop("PWD", None)
    # BLAS thread counts follow the CPU limit (the default policy's 1 CPU).
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        assert env.pop(v) == "1", v
    assert env == {}


def test_workspace_and_binds(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "in.txt").write_text("hello\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "data").write_text("ro-data")
    rc, out, err = run(["run", "--workspace", str(ws), "--ro-bind", f"{ro}:/data", "--", "/bin/sh", "-c",
                        "pwd; cat in.txt; echo out > out.txt; cat /data/data; echo x > /data/y"])
    assert out.splitlines()[:3] == ["/workspace", "hello", "ro-data"]
    assert (ws / "out.txt").read_text() == "out\n"
    assert not (ro / "y").exists() and "Read-only" in err


@pytest.mark.parametrize("src,dst,says", [
    ("/etc", "/usr/nsbox-no-such-dir", "/usr/nsbox-no-such-dir does not exist in the sandbox and can't be made"
     " there: its directory is read-only"),
    ("/etc", "/usr/bin/python3.11", "/usr/bin/python3.11 is a file in the sandbox and the source is a directory"),
    ("/etc/hostname", "/tmp", "/tmp is a directory in the sandbox and the source is not"),
])
def test_a_bind_that_cant_go_where_asked_says_why_in_the_sandboxs_terms(src, dst, says):
    rc, out, err = run(["run", "--bind", f"{src}:{dst}", "--", "/bin/true"])
    assert rc == 125 and says in err, err
    assert "/proc/" not in err and "Invalid argument" not in err


def test_exit_status_and_signal():
    assert run(["run", "--", "/bin/sh", "-c", "exit 42"])[0] == 42
    assert run(["run", "--", "/bin/sh", "-c", "kill -TERM $$"])[0] == 128 + 15
    rc, out, err = run(["run", "--", "/no/such/command"])
    assert rc == 127 and "/no/such/command" in err
    rc, out, err = run(["run", "--", "/etc/passwd"])
    assert rc == 126


def test_json_status():
    rc, out, err, st = run_status(["--", "/bin/sh", "-c", "exit 3"])
    assert rc == 3 and st["exit_code"] == 3 and st["signal"] is None
    assert st["time_limit"] is False and st["oom_killed"] is False
    assert st["wall"] > 0 and st["peak_memory"] > 0 and "cpu_user" in st


def test_bad_flags():
    rc, out, err = run(["run", "--memory", "12Q", "--", "true"])
    assert rc == 120 and "Memory" in err
    rc, out, err = run(["run", "--frobnicate", "--", "true"])
    assert rc == 120 and "frobnicate" in err
    rc, out, err = run(["run"])
    assert rc == 120
    rc, out, err = run(["run", "--bind", "/does/not/exist:/x", "--", "true"])
    assert rc == 120 and "/does/not/exist" in err
    # A destination inside a writable mount would be resolved through
    # whatever symlinks an earlier sandbox left there.
    rc, out, err = run(["run", "--bind", "/tmp:/data", "--ro-bind", "/usr:/data/usr", "--", "true"])
    assert rc == 120 and "inside the writable Bind= /data" in err
    rc, out, err = run(["run", "--workspace", "/tmp", "--ro-bind", "/usr:/workspace/usr", "--", "true"])
    assert rc == 120 and "inside Workspace=" in err


def test_setup_failure_names_step(tmp_path):
    # A bind onto a path under the read-only /usr can't create its mount point.
    d = tmp_path / "d"
    d.mkdir()
    rc, out, err = run(["run", "--bind", f"{d}:/usr/share/nsbox-nope", "--", "true"])
    assert rc == 125 and "mount" in err and "/usr/share/nsbox-nope" in err


def test_info():
    rc, out, err = run(["info"], check_rc=0)
    assert "user namespaces" in out and "cgroups: mode" in out and "landlock" in out and "seccomp" in out


def test_policy_show_and_check(tmp_path):
    rc, out, err = run(["policy", "show", "--policy", "strict", "--memory", "100M"], check_rc=0)
    assert "Memory=100M" in out and "Cgroups=require" in out
    good = tmp_path / "good.policy"
    good.write_text(out)
    assert run(["policy", "check", str(good)])[0] == 0
    bad = tmp_path / "bad.policy"
    bad.write_text("[Limits]\nMemory=1G\nBogus=1\n")
    rc, out, err = run(["policy", "check", str(bad)])
    assert rc == 120 and f"{bad}:3" in err


def test_policy_file_applies(tmp_path):
    pol = tmp_path / "p.policy"
    pol.write_text("[Sandbox]\nHostname=polhost\nUid=4242\n")
    f = probe(["--policy", str(pol)])
    assert f["hostname"] == "polhost" and f["uid"] == 4242
    f = probe(["--policy", str(pol), "--uid", "7"])  # flags override the file
    assert f["uid"] == 7


def test_landlock_blocks_writes_to_rw_bind_only_where_allowed(tmp_path):
    # /tmp is writable; the probe's ro bind is not; Landlock is a second layer
    # over the read-only mounts, proved by writing through /proc/self/root.
    rc, out, err = run(["run", "--landlock", "require", "--", "/bin/sh", "-c",
                        "echo a > /tmp/a && cat /tmp/a && (echo b > /proc/self/root/tmp/../b) 2>&1"])
    assert out.startswith("a\n")


def test_seccomp_log_mode_runs():
    rc, out, err = run(["run", "--seccomp-log", "--", "/bin/true"])
    assert rc == 0


def test_signals_are_forwarded():
    import signal
    import subprocess
    import time
    from conftest import NSBOX
    p = subprocess.Popen([NSBOX, "run", "--", "/bin/sleep", "30"], stdin=subprocess.DEVNULL)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 128 + signal.SIGTERM


@pytest.mark.parametrize("delay", [0, 0.005, 0.05])
def test_signals_while_starting_are_forwarded(delay):
    # SIGINT DELAY s after nsbox has cloned the sandbox's pid 1 (its first
    # child), i.e. while the root is being built: it must end the command
    # as soon as it exists, not after sleep 30.  SIGINT at its default in
    # nsbox, whatever ours is (a shell's background job ignores it).
    import signal
    import subprocess
    import time
    from conftest import NSBOX
    p = subprocess.Popen([NSBOX, "run", "--", "/bin/sleep", "30"], stdin=subprocess.DEVNULL,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    children = "/proc/%d/task/%d/children" % (p.pid, p.pid)
    t0 = time.monotonic()
    try:
        while p.poll() is None and time.monotonic() - t0 < 20:
            with open(children) as f:
                if f.read().strip():
                    break
            time.sleep(0.0002)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=20) == 128 + signal.SIGINT
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_host_death_kills_sandbox(tmp_path):
    import signal
    import subprocess
    import time
    from conftest import NSBOX
    marker = "nsbox-orphan-%d" % os.getpid()
    p = subprocess.Popen([NSBOX, "run", "--", "/bin/sh", "-c", f"exec -a {marker} sleep 30"],
                         stdin=subprocess.DEVNULL)
    time.sleep(0.5)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    for _ in range(50):
        alive = subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout.strip()
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, "sandbox outlived its launcher"
    # SIGKILL gave the launcher no chance to remove its cgroups: the next
    # launch removes them (the autouse fixture checks none are left).
    assert run(["run", "--", "/bin/true"])[0] == 0


def test_doctor():
    rc, out, err = run(["doctor"])
    assert rc == 0, out + err
    assert "FIT" in out and "FAIL" not in out
    assert out.count("\nok   ") >= 17  # every self-test probe ran and was blocked


def test_rootfs(tmp_path):
    import shutil
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "home").mkdir()  # skipped: never bound
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    os.symlink("busybox", root / "bin" / "sh")
    os.chmod(tmp_path, 0o755)
    rc, out, err = run(["run", "--rootfs", str(root), "--", "/bin/sh", "-c",
                        "echo in-rootfs; ls /; test -e /usr/bin/python3.11 && echo host-usr-visible; id -u"])
    assert rc == 0, err
    lines = out.split()
    assert lines[0] == "in-rootfs" and "host-usr-visible" not in lines and lines[-1] == "1000"
    assert "bin" in lines and "home" not in lines


def test_device_nodes_cannot_be_changed():
    # As root the sandbox's user owns the host's device inodes; the binds are
    # read-only so chmod/chown fail while reads and writes still work.
    before = os.stat("/dev/null")
    rc, out, err = run(["run", "--", "/bin/sh", "-c",
                        "echo x > /dev/null && echo write-ok; chmod 000 /dev/null; chmod 000 /dev/urandom; "
                        "head -c 4 /dev/urandom | wc -c"])
    assert out.split() == ["write-ok", "4"]
    assert "Read-only file system" in err or "Operation not permitted" in err
    after = os.stat("/dev/null")
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)


def test_rootfs_symlinks_stay_inside(tmp_path):
    import shutil
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    os.symlink("busybox", root / "bin" / "sh")
    os.symlink("/", root / "etc" / "alternatives")        # would bind the host's / into the sandbox
    os.symlink("/etc/shadow", root / "etc" / "ld.so.cache")
    os.symlink("/", root / "etc" / "fonts")
    os.chmod(tmp_path, 0o755)
    rc, out, err = run(["run", "--rootfs", str(root), "--", "/bin/sh", "-c",
                        "ls /etc/alternatives/ 2>&1 | head -3; ls /etc/fonts/ 2>&1 | head -3;"
                        "cat /etc/ld.so.cache 2>&1 | head -c 80; echo; echo done"])
    assert rc == 0, err
    assert "root:" not in out and "home" not in out.split() and "usr" not in out.split()
    assert out.strip().endswith("done")


def test_no_setuid_files(tmp_path):
    # As root the sandbox user is host uid 0: a setuid file left in a
    # writable bind would be setuid-root on the host.  Every way to set the
    # bits fails; plain files and modes still work.
    ws = tmp_path / "ws"
    ws.mkdir()
    code = ("import os\n"
            "open('plain', 'w').write('x'); os.chmod('plain', 0o755); print('plain ok')\n"
            "for name, fn in [('chmod', lambda: os.chmod('plain', 0o4755)),\n"
            "                 ('chmod-g', lambda: os.chmod('plain', 0o2755)),\n"
            "                 ('open', lambda: os.open('s1', os.O_CREAT | os.O_WRONLY, 0o4755)),\n"
            "                 ('mknod', lambda: os.mknod('s2', 0o104755))]:\n"
            "    try:\n"
            "        fn(); print(name, 'ALLOWED')\n"
            "    except PermissionError:\n"
            "        print(name, 'denied')\n")
    rc, out, err = run(["run", "--workspace", str(ws), "--", "/usr/bin/python3.11", "-S", "-c", code])
    assert rc == 0, err
    assert out.split("\n")[:5] == ["plain ok", "chmod denied", "chmod-g denied", "open denied", "mknod denied"]
    for f in ws.iterdir():
        assert not (f.stat().st_mode & 0o6000), f


def test_script_without_shebang_and_many_args(tmp_path):
    # execvpe runs a script without #! through /bin/sh with a copy of argv
    # on the stack; the command is started on a stack of its own
    # (CLONE_VM | CLONE_VFORK), which must have room for it.
    f = tmp_path / "noshebang.sh"
    f.write_text('echo "args: $#"\n')
    f.chmod(0o755)
    rc, out, err = run(["run", "--ro-bind", f"{f}:/opt/noshebang.sh", "--", "/opt/noshebang.sh"] +
                       [str(i) for i in range(40000)])
    assert rc == 0, err
    assert out == "args: 40000\n"


def test_pid1_is_not_reachable_through_proc(tmp_path):
    """pid 1 is a clone of the launcher: /proc/1/exe is the host's nsbox
    binary and /proc/1/fd/0-2 the caller's stdio, on the host's mounts.
    pid 1 is non-dumpable once its id maps are written, so the command
    can't open them, even with Landlock off.  The command itself stays
    dumpable (it reads its own /proc/self)."""
    out_file = tmp_path / "stdout"
    script = ("for f in /proc/1/exe /proc/1/fd/0 /proc/1/fd/1 /proc/1/root; do "
              "readlink $f >/dev/null 2>&1 && echo \"$f readable\" || echo \"$f refused\"; done; "
              "(echo PWNED >> /proc/1/fd/1) 2>/dev/null && echo wrote || echo write-refused; "
              "readlink /proc/self/exe")
    with open(out_file, "wb") as f:
        p = subprocess.run([NSBOX, "run", "--landlock", "off", "--", "/bin/sh", "-c", script],
                           stdout=f, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
    out = out_file.read_text()
    assert p.returncode == 0, p.stderr
    assert out.splitlines() == ["/proc/1/exe refused", "/proc/1/fd/0 refused", "/proc/1/fd/1 refused",
                                "/proc/1/root refused", "write-refused", "/usr/bin/readlink"], out
    assert "PWNED" not in out


def test_payload_runs_on_the_callers_cpus():
    """The launcher moves pid 1 off its own CPU for the setup (launch.c,
    spread_child); pid 1 takes the caller's CPUs back before anything
    inherits them: the command runs where its caller may, on all of them
    or on the one taskset gave it."""
    cpus = sorted(os.sched_getaffinity(0))
    rc, out, err = run(["run", "--", "grep", "^Cpus_allowed_list", "/proc/self/status", "/proc/1/status"])
    assert rc == 0, err
    mine = open("/proc/self/status").read().split("Cpus_allowed_list:")[1].split()[0]
    assert [l.split()[-1] for l in out.splitlines()] == [mine, mine], (out, mine)
    one = str(cpus[-1])
    p = subprocess.run(["taskset", "-c", one, NSBOX, "run", "--", "grep", "^Cpus_allowed_list", "/proc/self/status"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.split()[-1] == one, (p.stdout, p.stderr)


WATCH_SHARED = r"""
import ctypes, fcntl, os, select, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
got = []
fd = libc.inotify_init1(os.O_NONBLOCK)
if fd < 0:
    print("inotify", os.strerror(ctypes.get_errno()))
else:
    for p in (b"/usr/bin", b"/etc/ld.so.cache", b"/dev/null"):
        if libc.inotify_add_watch(fd, p, 0xfff) < 0:
            print("watch", p, os.strerror(ctypes.get_errno()))
n = [0]
signal.signal(signal.SIGRTMIN + 1, lambda *a: n.__setitem__(0, n[0] + 1))
d = os.open("/usr/bin", os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.fcntl(d, fcntl.F_SETSIG, signal.SIGRTMIN + 1)
    fcntl.fcntl(d, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MODIFY | fcntl.DN_MULTISHOT)
except OSError as e:
    print("dnotify", e.strerror)
print("ready", flush=True)
sys.stdin.readline()
time.sleep(0.3)
if fd >= 0 and select.select([fd], [], [], 0)[0]:
    got.append(len(os.read(fd, 65536)))
print("inotify-bytes", sum(got), "dnotify-signals", n[0], flush=True)
"""


def test_host_accesses_to_shared_inodes_cannot_be_watched(tmp_path):
    # /usr, the /etc binds and the device nodes are the host's own inodes,
    # shared with every sandbox: inotify and dnotify on them reported each
    # program the host ran (IN_OPEN on /usr/bin/NAME, /etc/ld.so.cache) and
    # its writes to /dev/null, and let two sandboxes signal each other.
    script = tmp_path / "watch.py"
    script.write_text(WATCH_SHARED)
    p = subprocess.Popen([NSBOX, "run", "--ro-bind", f"{tmp_path}:/t", "--", "/usr/bin/python3", "/t/watch.py"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = []
        while not first or first[-1] not in ("ready\n", ""):
            first.append(p.stdout.readline())
        for _ in range(3):
            subprocess.run(["/usr/bin/true"], check=True)
            with open("/usr/bin/true", "rb") as f:
                f.read(1)
            with open("/dev/null", "w") as f:
                f.write("x")
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=60)
        out = "".join(first) + out
    finally:
        p.kill()
    assert "inotify Operation not permitted" in out, (out, err)
    assert "dnotify Operation not permitted" in out, (out, err)
    assert "inotify-bytes 0 dnotify-signals 0" in out, (out, err)


def test_locks_of_the_host_and_other_sandboxes_are_not_listed(tmp_path):
    # /proc/locks lists every OFD lock on the host whatever the reader's pid
    # namespace: the device, inode and range of a host file no path inside
    # names, and, through the ranges of a lock on a file of its own, a
    # channel from one sandbox to every other.
    import fcntl
    import struct
    path = tmp_path / "held"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 4242, 17, 0))
        ino = os.stat(path).st_ino
        rc, out, err = run(["run", "--", "/bin/sh", "-c", "cat /proc/locks; echo end"])
    finally:
        os.close(fd)
    assert rc == 0 and out.endswith("end\n"), (rc, out, err)
    assert f":{ino} " not in out and "OFDLCK" not in out, out


NETLINK_PROTOCOLS = r"""
import errno, socket
opened, other = [], set()
for proto in range(32):
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto).close()
        opened.append(proto)
    except OSError as e:
        if proto:
            other.add(errno.errorcode[e.errno])
print("opened", opened, "refused", sorted(other))
print("interfaces", [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]])
"""


KERNEL_ASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_asks.py")


def _loaded_modules():
    try:
        with open("/proc/modules") as f:
            return sorted(line.split()[0] for line in f)
    except FileNotFoundError:
        return None     # a kernel without modules (this CI's)


def test_inet_sockets_are_tcp_udp_and_ping_only():
    # Any other (type, protocol) pair makes inet_create() ask modprobe, as
    # root on the host, for the module serving it (SCTP, DCCP, L2TP, SMC),
    # and built-in ones (MPTCP, UDP-Lite) are kernel code nothing needs.
    # socketpair() and the bridge, VLAN and DLCI ioctls ask the same way;
    # fs-verity, fscrypt and kernel TLS's keys load crypto modules.  The
    # calls are kernel_asks.py's, which check-vm also makes with modprobe
    # logging.
    before = _loaded_modules()
    with open(KERNEL_ASKS) as f:
        rc, out, err = run(["python", "-c", f.read()])
    assert rc == 0 and out.endswith("done\n"), (rc, out, err)
    lines = out.splitlines()[:-2]
    allowed = [l for l in lines if l.startswith("socket ") and l.split()[1] in ("2", "10") and
               (l.split()[2:4] in (["1", "0"], ["1", "6"], ["2", "0"], ["2", "17"]))]
    assert len(allowed) == 8 and all(l.endswith(" ok") for l in allowed), out
    assert "socketpair unix ok" in lines, out
    refused = [l for l in lines if l not in allowed and l != "socketpair unix ok"]
    # 26 sockets, their 26 pairs, 11 ioctls, SOL_TLS
    assert len(refused) == 64 and all(l.endswith(" EPERM") for l in refused), out
    assert out.splitlines()[-2] == "create_connection 6", out
    # From the host: no module came in meanwhile.
    assert _loaded_modules() == before


def test_only_netlink_route_opens():
    # Any other netlink protocol, and a generic netlink or sock_diag family
    # named on one, makes the kernel load the module that serves it, as root
    # on the host (net-pf-16-proto-N: scsi_transport_iscsi, CVE-2021-27365).
    # In a network namespace of its own, none at all: every refused
    # rtnetlink request is acked with a copy of itself, in memory no
    # cgroup is charged for (2 GiB from a 32M sandbox, red team 12); the
    # namespace shows only lo, which /proc/net/dev says as well.
    rc, out, err = run(["python", "-c", NETLINK_PROTOCOLS])
    assert rc == 0, err
    assert "opened [] refused ['EPERM']" in out, out
    assert "interfaces ['lo']" in out, out
    # Sharing the host's network (and so its interfaces), NETLINK_ROUTE only.
    rc, out, err = run(["python", "--share-net", "-c", NETLINK_PROTOCOLS])
    assert rc == 0, err
    assert "opened [0] refused ['EPERM']" in out, out


KERNEL_QUEUES = r"""
import errno, socket, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.IPPROTO_IP, 11, 1)      # IP_RECVERR: succeeds, and does nothing
for _ in range(100):
    u.sendto(b"x" * 1000, ("127.0.0.1", 9))               # a closed port: ICMP each
time.sleep(0.2)
try:
    u.recvmsg(2000, 1000, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
    print("errqueue filled")
except OSError as e:
    print("errqueue", errno.errorcode[e.errno])
try:
    u.setsockopt(socket.SOL_SOCKET, 37, 1)                  # SO_TIMESTAMPING
    print("timestamping allowed")
except OSError as e:
    print("timestamping", errno.errorcode[e.errno])
print("resolves", socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4][0])
"""


@pytest.mark.parametrize("net", ["own", "shared"])
def test_no_socket_queue_outside_the_memory_cgroup(net):
    """Queues the kernel fills on a socket, charged to no memory cgroup:
    IP_RECVERR queued an ICMP error per datagram sent to a closed loopback
    port (255 MiB of host memory from a 32M sandbox), SO_TIMESTAMPING a
    copy of each packet sent.  IP_RECVERR now succeeds without effect
    (glibc's resolver needs it to), SO_TIMESTAMPING fails."""
    rc, out, err = run(["python"] + (["--share-net"] if net == "shared" else []) + ["-c", KERNEL_QUEUES])
    assert rc == 0, err
    assert "errqueue EAGAIN" in out and "timestamping EPERM" in out and "resolves 127.0.0.1" in out, out


# Host-wide files: the pty and cgroup counts, kernel addresses, swap, disks,
# devices; the open file, inode and dentry counts any sandbox moves and
# another reads (a channel between them), interrupts and softirqs per
# device (the host's network and disk activity).
MASKED_FILES = ("sys/kernel/pty/nr", "cgroups", "kallsyms", "swaps", "diskstats", "partitions", "iomem", "ioports",
                "sys/fs/file-nr", "sys/fs/inode-nr", "sys/fs/inode-state", "sys/fs/dentry-state", "sys/fs/aio-nr",
                "interrupts", "softirqs")
HOST_ACTIVITY = "MASKED_FILES = %r\n" % (MASKED_FILES,) + r"""
import ctypes, errno, mmap, os
def readable(p):
    try:
        with open(p, "rb") as f:
            return len(f.read(1 << 16))
    except OSError as e:
        return errno.errorcode[e.errno]
for p in MASKED_FILES:
    print("file", p, readable("/proc/" + p))
for d in ("fs", "bus", "irq", "pressure"):
    try:
        names = os.listdir("/proc/" + d)
    except OSError as e:
        names = errno.errorcode[e.errno]
    try:
        open("/proc/%s/x" % d, "w")
        made = "made"
    except OSError as e:
        made = errno.errorcode[e.errno]
    print("dir", d, names, made)
fd = os.open("/usr/bin/sh", os.O_RDONLY)
try:
    os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT)
    print("nowait allowed")
except OSError as e:
    print("nowait", errno.errorcode[e.errno])
print("plain", os.preadv(fd, [bytearray(16)], 0))
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
a = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
vec = ctypes.create_string_buffer(1)
r = libc.mincore(ctypes.c_void_p(a), ctypes.c_size_t(4096), vec)
print("mincore", errno.errorcode[ctypes.get_errno()] if r else "allowed")
print("comm", open("/proc/1/comm").read().strip(), open("/proc/self/comm").read().strip())
"""


def test_host_activity_files_are_masked_and_page_cache_is_not_told(tmp_path):
    # The host's live pty and cgroup counts, disks, swap, kernel addresses,
    # device and file-system internals, and the page cache's residency of
    # the host's files (preadv2 RWF_NOWAIT), each readable before
    # (audit-infoleak); and pid 1 wore the launcher's name.
    script = tmp_path / "probe.py"
    script.write_text(HOST_ACTIVITY)
    rc, out, err = run(["run", "--ro-bind", f"{tmp_path}:/probe", "--", "/usr/bin/python3.11", "/probe/probe.py"])
    assert rc == 0, (rc, out, err)
    got = {}
    for line in out.splitlines():
        kind, name, *rest = line.split(" ", 2)
        got[(kind, name)] = rest[0] if rest else ""
    for p in MASKED_FILES:
        # Masked: EACCES (a nodev /dev/null); a kernel without it: ENOENT.
        assert got[("file", p)] in ("EACCES", "ENOENT"), (p, out)
    for d in ("fs", "bus", "irq", "pressure"):
        names, made = got[("dir", d)].rsplit(" ", 1)
        assert names in ("[]", "ENOENT") and made in ("EROFS", "ENOENT"), (d, out)
    assert ("nowait", "EPERM") in got and ("plain", "16") in got and ("mincore", "EPERM") in got, out
    assert got[("comm", "nsbox-pid1")] == "python3.11", out
