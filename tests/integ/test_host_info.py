"""What the sandbox learns about the host (README, "What the sandbox sees"):
kernel version and CPU count yes; host identities and host paths the user
did not choose to share, no."""
import os
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
