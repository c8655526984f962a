"""What the sandbox learns about the host (README, "What the sandbox sees"):
kernel version and CPU count yes; host identities and host paths the user
did not choose to share, no."""
import os
import time
from conftest import BUILD, run


def test_boot_id_is_the_sandboxes_own():
    host = open("/proc/sys/kernel/random/boot_id").read().strip()
    ids = []
    for _ in range(2):
        rc, out, err = run(["run", "--", "/bin/cat", "/proc/sys/kernel/random/boot_id"])
        assert rc == 0, err
        ids.append(out.strip())
    assert host not in ids and ids[0] != ids[1], (host, ids)
    assert len(ids[0]) == 36 and ids[0][14] == "4", ids  # a random (v4) UUID, as the kernel's


BOOT_CLOCKS = ("import os, time\n"
               "print(open('/proc/uptime').read().split()[0])\n"
               "print([l.split()[1] for l in open('/proc/stat') if l.startswith('btime ')][0])\n"
               "print(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])\n"
               "print(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])\n"
               "print(time.monotonic(), time.clock_gettime(time.CLOCK_BOOTTIME))\n")


def _check_boot_clocks(argv, t0, t1, out):
    # The sandbox "booted" when it started: its uptime, monotonic and boot
    # clocks count from then (a time namespace), so /proc/stat's btime is
    # the sandbox's start, not the host's boot (which the host's clocks say).
    hz = os.sysconf("SC_CLK_TCK")
    uptime, btime, start, start1, clocks = out.split("\n")[:5]
    mono, boot = map(float, clocks.split())
    span = t1 - t0 + 1
    assert float(uptime) <= span and mono <= span and boot <= span, (argv, out)
    # pid 1 started first, at zero: not before it (shown wrapped, as a
    # start 58 million years away), and the payload after it.
    assert 0 <= int(start1) <= int(start) and int(start) / hz <= span, (argv, out)
    assert int(t0) - 1 <= int(btime) <= t1 + 1, (argv, out, t0, t1)


def test_boot_time_is_the_sandboxes_own():
    host_btime = [int(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime ")][0]
    host_up = float(open("/proc/uptime").read().split()[0])
    # --seccomp-log too: there every namespace budget is lowered, time's to
    # 0, and the time namespace must be made before that.
    for argv in (["python", "-c", BOOT_CLOCKS],
                 ["run", "--", "/usr/bin/python3.11", "-c", BOOT_CLOCKS],
                 ["run", "--seccomp-log", "--", "/usr/bin/python3.11", "-c", BOOT_CLOCKS]):
        t0 = time.time()
        rc, out, err = run(argv)
        t1 = time.time()
        assert rc == 0, err
        _check_boot_clocks(argv, t0, t1, out)
    # ...and the host's own view is untouched (this is what leaked: unless
    # the host booted a moment ago, its btime lies well before t0).
    assert [int(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime ")][0] == host_btime
    assert float(open("/proc/uptime").read().split()[0]) >= host_up


def test_kernel_command_line_hidden():
    rc, out, err = run(["run", "--", "/bin/sh", "-c", "cat /proc/cmdline 2>/dev/null; true"])
    assert rc == 0 and out == "", out


def test_runner_path_not_in_mountinfo():
    # The runner of a build tree lives in the user's checkout: its host
    # path must not show in the sandbox's mount table, nor as its exe.
    rc, out, err = run(["python", "-c", "import os, sys; sys.stdout.write(open('/proc/self/mountinfo').read()); "
                        "print(os.readlink('/proc/self/exe')); print(open('/proc/self/maps').read())"])
    assert rc == 0, err
    build = os.path.realpath(BUILD)
    assert build not in out and "nsbox-runner" not in out, out
    # ...and it still can't be rewritten through /proc/self/exe
    # (CVE-2019-5736): its mount is read-only, whatever the busy text says.
    rc, out, err = run(["python", "-c", "import os\n"
                        "fd = os.open('/proc/self/exe', os.O_PATH)\n"
                        "try:\n    os.chmod(f'/proc/self/fd/{fd}', 0o777)\nexcept OSError as e:\n    print(e.errno)"])
    assert rc == 0 and out.strip() in ("30", "1"), (out, err)  # EROFS (or EPERM: not its owner)


def test_kernel_version_and_cpus_visible():
    rc, out, err = run(["run", "--", "/bin/sh", "-c", "uname -r; nproc"])
    assert rc == 0 and out.split()[0] == os.uname().release and int(out.split()[1]) >= 1


CGROUP_VIEW = ("import ctypes, os\n"
               "for p in ('/proc/self/cgroup', '/proc/1/cgroup'):\n"
               "    print(open(p).read().strip().replace(chr(10), ' '))\n"
               "libc = ctypes.CDLL(None, use_errno=True)\n"
               "print(libc.unshare(0x02000000), ctypes.get_errno())\n")


def test_cgroup_paths_name_nothing_of_the_host():
    """/proc/self/cgroup and pid 1's show every hierarchy at its root: the
    sandbox's cgroup is the root of its cgroup namespace.  Where the
    launcher moves pid 1 in after the clone (cgroup v1, as on this hybrid
    host), pid 1 makes that namespace again once moved; before, the v1
    lines read nsbox-PID-N, the launcher's host pid.  The payload itself
    may not make one (EPERM: no CAP_SYS_ADMIN)."""
    for argv in (["run", "--", "/usr/bin/python3.11", "-c", CGROUP_VIEW], ["python", "-c", CGROUP_VIEW]):
        rc, out, err = run(argv)
        assert rc == 0, err
        lines = out.strip().split("\n")
        assert len(lines) == 3, out
        for line in lines[:2]:
            paths = [entry.split(":", 2)[2] for entry in line.split()]
            assert paths and all(p == "/" for p in paths), (argv, line)
        assert "nsbox-" not in out and str(os.getpid()) not in out, out
        assert lines[2] == "-1 1", (argv, lines[2])  # EPERM
