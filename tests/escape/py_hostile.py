# Hostile Python for `nsbox python` (and python3.11 under `nsbox run`).
# The test prepends ATTACK = "<name>" and ARGS = {...}; each attack prints
# one final line, "ESCAPED: ..." or "BLOCKED: ...".
import ctypes
import os
import signal
import socket


def read_canary():
    for p in (ARGS["canary"], "/proc/1/root" + ARGS["canary"], "/proc/self/root/../.." + ARGS["canary"]):
        try:
            with open(p) as f:
                return "ESCAPED: read %s: %s" % (p, f.read(16))
        except OSError:
            pass
    return "BLOCKED: the canary is out of reach"


def host_tcp():
    try:
        socket.create_connection(("127.0.0.1", int(ARGS["tcp_port"])), timeout=1)
        return "ESCAPED: connected to the host's port"
    except OSError as e:
        return "BLOCKED: %s" % e


def kill_host():
    pid = int(ARGS["sleeper_pid"])
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as e:
        return "BLOCKED: kill(%d): %s" % (pid, e)
    try:
        cmd = open("/proc/%d/cmdline" % pid).read()
    except OSError:
        cmd = ""
    return "ESCAPED: killed host pid %d" % pid if "sleep" in cmd else "BLOCKED: pid %d is not the host's" % pid


def unshare_user():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) == 0:
        return "ESCAPED: unshare(CLONE_NEWUSER)"
    return "BLOCKED: unshare: %s" % os.strerror(ctypes.get_errno())


def subprocess_su():
    import subprocess
    try:
        out = subprocess.run(["/usr/bin/su", "root", "-c", "id -u"], capture_output=True, timeout=5,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return "BLOCKED: su: %s" % e
    return "ESCAPED: su gave uid 0" if out.strip() == b"0" else "BLOCKED: su did not give uid 0"


def fds():
    leaked = [fd for fd in range(3, 1024) if _is_open(fd)]
    if not leaked:
        return "BLOCKED: no fds past 2"
    # The runner's own protocol socket is expected; anything else is a leak.
    targets = {fd: os.readlink("/proc/self/fd/%d" % fd) for fd in leaked}
    bad = {fd: t for fd, t in targets.items() if not t.startswith(("socket:", "pipe:", "anon_inode:", "/dev/null"))}
    return "ESCAPED: host fds %s" % bad if bad else "BLOCKED: only the runner's own fds %s" % targets


def _is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


print({"read_canary": read_canary, "host_tcp": host_tcp, "kill_host": kill_host, "unshare_user": unshare_user,
       "subprocess_su": subprocess_su, "fds": fds}[ATTACK]())
