"""The calls a sandbox could make that have the kernel run modprobe, as
root on the host, for a module (request_module), and the ones that must
keep working: one line per call, "KIND ARGS... OUTCOME" (ok, or the errno's
name), then "done".  Run inside a sandbox by test_jail.py (every call but
TCP's, UDP's and a unix pair must be EPERM), and inside and outside one by
check-vm (tests/vm/inside.sh), whose kernel has the modules and whose
modprobe only logs what it is asked."""
import errno
import fcntl
import os
import socket


def outcome(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]


S, D, SEQ, RAW = socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_RAW
# (family, type, protocol): TCP and UDP by number or 0; then SCTP, its
# SEQPACKET form, MPTCP, UDP-Lite, L2TP/IP, SMC, DCCP (type 6), TCP's and
# UDP's numbers on the other type, raw; netlink protocols but ROUTE, AF_ALG,
# AF_VSOCK.
ALLOWED = [(f, t, p) for f in (2, 10) for t, p in ((S, 0), (S, 6), (D, 0), (D, 17))]
REFUSED = [(f, t, p) for f in (2, 10) for t, p in ((S, 132), (SEQ, 0), (S, 262), (D, 136), (D, 115), (S, 256),
                                                   (6, 0), (6, 33), (D, 6), (S, 17), (RAW, 1))]
REFUSED += [(16, RAW, 9), (16, RAW, 31), (38, SEQ, 0), (40, S, 0)]
for fam, t, p in ALLOWED + REFUSED:
    print("socket", fam, t, p, outcome(lambda: socket.socket(fam, t | socket.SOCK_CLOEXEC, p).close()))
# socketpair() creates both sockets (loading their module) before the
# family says it makes no pairs.
for fam, t, p in REFUSED:
    print("socketpair", fam, t, p, outcome(lambda: socket.socketpair(fam, t, p)))
print("socketpair unix", outcome(lambda: socket.socketpair()))
# Bridge, VLAN and DLCI ioctls load their module before anything else.
u = socket.socket(socket.AF_INET, D)
for cmd in (0x8940, 0x8941, 0x89a0, 0x89a1, 0x8982, 0x8983, 0x8980, 0x8981):
    print("ioctl", hex(cmd), outcome(lambda: fcntl.ioctl(u, cmd, bytearray(64))))
# fs-verity and fscrypt (crypto modules), kernel TLS's keys (ciphers).
with open("/tmp/nsbox-kernel-asks", "wb") as f:
    for cmd in (0x40806685, 0xc0506617, 0x800c6613):
        print("ioctl", hex(cmd), outcome(lambda: fcntl.ioctl(f, cmd, bytearray(256))))
os.unlink("/tmp/nsbox-kernel-asks")
t = socket.socket(socket.AF_INET, S)
print("setsockopt SOL_TLS", outcome(lambda: t.setsockopt(282, 1, bytes(56))))
# What getaddrinfo hands create_connection (protocol 6) still connects.
srv = socket.create_server(("127.0.0.1", 0))
c = socket.create_connection(srv.getsockname())
print("create_connection", c.proto)
print("done")
