#!/usr/bin/python3.11
"""No file includes from a layer above its own (README, "Layout").

The layers, lowest first: base, proto, policy, egress, jail, runner, helper, host,
lib.  A file may include its own directory's headers and those of the
layers below it.  The front ends (cli/, service/) and examples/ include
nothing of the tree but include/nsbox.h (and their own headers); service/
may also include proto/'s headers: the service protocol (proto/svc.h) is a
wire contract that nsboxd and libnsbox's service client both compile, like
the runner protocol (STYLE 6), and defining it twice would let the two ends
drift; cli/ may include base/hostpath.h, the one rule for opening a host
path without following links, for the same reason.  Exits 1 naming every upward or sideways include."""
import os
import re
import sys

LAYERS = ["base", "proto", "policy", "egress", "jail", "runner", "helper", "host", "lib"]
FRONT = ["cli", "service", "examples"]
# What a front end may include beyond nsbox.h and its own headers (why: above).
FRONT_ALLOWED = {"service": {"proto"}}
# Single headers a front end may include: the CLI opens the host files it
# writes itself (--json-status, --display-dir) by the same no-link rule as
# the core's (base/hostpath.h); written twice, the two would drift.
FRONT_ALLOWED_HEADERS = {"cli": {"hostpath.h"}}
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
where = {}
own = {}
for d in LAYERS + FRONT + ["include"]:
    for f in os.listdir(os.path.join(root, d)) if os.path.isdir(os.path.join(root, d)) else []:
        if f.endswith(".h"):
            where.setdefault(f, d)
            own.setdefault(d, set()).add(f)
bad = []
for d in LAYERS + FRONT:
    top = os.path.join(root, d)
    if not os.path.isdir(top):
        continue
    for f in sorted(os.listdir(top)):
        if not f.endswith((".c", ".h")):
            continue
        for n, line in enumerate(open(os.path.join(top, f), encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            h = os.path.basename(m.group(1))
            hd = d if h in own.get(d, ()) else where.get(h)
            if hd is None or hd == d or hd == "include":
                continue        # generated (build/gen), own, or the public header
            if d in FRONT and hd in FRONT_ALLOWED.get(d, ()):
                continue
            if d in FRONT and h in FRONT_ALLOWED_HEADERS.get(d, ()):
                continue
            if d in FRONT:
                bad.append(f"{d}/{f}:{n}: a front end includes {hd}/{h} (only nsbox.h)")
            elif hd in FRONT or LAYERS.index(hd) > LAYERS.index(d):
                bad.append(f"{d}/{f}:{n}: {d} includes {hd}/{h}, a layer above it")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
