"""A minimal client of nsboxd's service protocol (nsbox-protocol(7), THE
SERVICE PROTOCOL) and of the runner protocol, for tests: raw sockets, so
tests can also send what libnsbox never would."""
import array
import json
import os
import socket
import struct

SVC_MAGIC = 0x4442534E
RUN_MAGIC = 0x4E534258
T = {"HELLO": 1, "OPEN": 2, "OPENED": 3, "KILL": 4, "CLOSE": 5, "CLOSED": 6, "INFO": 7, "EXITED": 8, "OK": 9,
     "ERROR": 10}
NAMES = {v: k for k, v in T.items()}


class Client:
    def __init__(self, path, hello=True, timeout=30):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.next_id = 1
        if hello:
            t, m, _ = self.request("HELLO", {"version": 1})
            assert t == "HELLO", m

    def send(self, type_, msg, fds=(), id_=None):
        payload = json.dumps(msg).encode()
        if id_ is None:
            id_ = self.next_id
            self.next_id += 1
        hdr = struct.pack("<IIHHI", SVC_MAGIC, len(payload), T[type_], 0, id_)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.s.sendmsg([hdr + payload], anc)
        return id_

    def recv(self):
        data, fds, _, _ = socket.recv_fds(self.s, 65536, 4)
        if not data:
            raise EOFError("connection closed")
        magic, ln, typ, flags, id_ = struct.unpack("<IIHHI", data[:16])
        assert magic == SVC_MAGIC and ln == len(data) - 16
        return NAMES[typ], json.loads(data[16:]), id_, fds

    def request(self, type_, msg, fds=()):
        id_ = self.send(type_, msg, fds)
        while True:
            t, m, rid, rfds = self.recv()
            if t == "EXITED":
                continue
            assert rid == id_, (t, m, rid, id_)
            return t, m, rfds

    def open(self, **opts):
        fds = opts.pop("fds", ())
        t, m, fds = self.request("OPEN", opts, fds)
        if t != "OPENED":
            return None, m
        return Sandbox(self, m, fds), m

    def close(self):
        self.s.close()


class Sandbox:
    """One session: the runner socket straight to the sandbox."""

    def __init__(self, client, opened, fds):
        self.client, self.handle, self.pid = client, opened["handle"], opened["pid"]
        self.opened = opened
        self.sock = socket.socket(fileno=fds[0])
        self.pidfd = fds[1]
        self.sock.settimeout(60)
        self.id = 100

    def _send(self, typ, id_, msg):
        p = json.dumps(msg).encode()
        self.sock.sendall(struct.pack("<IIHHI", RUN_MAGIC, len(p), typ, 0, id_) + p)

    def _recv(self):
        def exact(n):
            b = b""
            while len(b) < n:
                c = self.sock.recv(n - len(b))
                if not c:
                    raise EOFError("runner socket closed")
                b += c
            return b
        magic, ln, typ, flags, id_ = struct.unpack("<IIHHI", exact(16))
        assert magic == RUN_MAGIC
        return typ, id_, json.loads(exact(ln))

    def exec(self, code, tools=None, want_value=True):
        """EXEC code; answer CALLs with tools[name](*args); return RESULT."""
        self.id += 1
        self._send(2, self.id, {"code": code, "want_value": want_value, "stream": False})
        while True:
            typ, id_, m = self._recv()
            if typ == 5:      # CALL
                v = tools[m["name"]](*m["args"], **m["kwargs"])
                self._send(6, id_, {"value": v})
            elif typ == 3 and id_ == self.id:
                return m

    def add_tools(self, names):
        self.id += 1
        self._send(17, self.id, {"tools": [{"name": n} for n in names]})
        typ, id_, m = self._recv()
        assert typ == 10, (typ, m)

    def close(self):
        t, m, _ = self.client.request("CLOSE", {"handle": self.handle})
        self.sock.close()
        os.close(self.pidfd)
        return t, m
