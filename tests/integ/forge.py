"""Sandboxed code that writes protocol frames by hand on the runner's
socket, as nsbox-protocol(7) lays them out: what the hostile-frame tests put
before their own code.  Inside, frame(type, id, payload) sends one frame
(payload: text, or bytes) and fd is the socket (the runner inherits it)."""

PRELUDE = r'''
import os, struct, time
def _sock():
    for f in range(3, 256):
        try:
            if os.readlink("/proc/self/fd/%d" % f).startswith("socket:"):
                return f
        except OSError:
            pass
fd = _sock()
def frame(t, i, payload):
    b = payload.encode() if isinstance(payload, str) else payload
    os.write(fd, struct.pack("<IIHHI", 0x4e534258, len(b), t, 0, i) + b)
def result(i, fields):
    """A forged RESULT of exec i (an SDK's first after its own "1": 2; the
    CLI's: 1) with fields (JSON text) after empty error/stdout/stderr; then
    waits for the host's verdict."""
    frame(3, i, '{"error":null,"stdout":"","stderr":""' + (',' + fields if fields else '') + '}')
    time.sleep(5)
'''
