#!/usr/bin/python3.11
"""Reads "label<TAB>times" lines and prints p50/p99 with two ratios: against
the group's first line (the bare command) and against the line whose label
starts with "*" (the reference peer, bubblewrap), the latter also as the
median of the per-run ratios ("pairs": the runs are interleaved, so run i
of each line saw the same moment of a noisy host).  Groups are separated by
blank lines; a line starting with "#" is a heading, printed as is above the
groups that follow it."""
import sys


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def main():
    groups, cur = [], []
    for line in sys.stdin:
        line = line.rstrip("\n")
        if line.startswith("#"):
            if cur:
                groups.append(cur)
            cur = []
            groups.append(line[1:].strip())
            continue
        if not line:
            if cur:
                groups.append(cur)
            cur = []
            continue
        label, times = line.split("\t")
        cur.append((label, [float(x) for x in times.split()]))
    if cur:
        groups.append(cur)
    w = max([58] + [len(label.lstrip("*")) for g in groups if not isinstance(g, str) for label, _ in g])
    print(f"{'what':{w}} {'n':>4} {'p50':>10} {'p99':>10} {'x bare':>7} {'x ref':>7} {'pairs':>7}")
    for g in groups:
        if isinstance(g, str):
            print(g)
            continue
        base = pct(g[0][1], 50)
        refs = [xs for label, xs in g if label.startswith("*")]
        ref = pct(refs[0], 50) if refs else None
        ref_xs = refs[0] if refs else None
        for label, xs in g:
            p50, p99 = pct(xs, 50), pct(xs, 99)
            unit = "us" if p50 < 10000 else "ms"
            f = (lambda v: f"{v:8.0f}us") if unit == "us" else (lambda v: f"{v/1000:8.2f}ms")
            r = f"{p50 / ref:7.2f}" if ref else "      -"
            pr = (f"{pct([a / b for a, b in zip(xs, ref_xs)], 50):7.2f}"
                  if ref_xs and len(ref_xs) == len(xs) else "      -")
            print(f"{label.lstrip('*'):{w}} {len(xs):4} {f(p50):>10} {f(p99):>10} {p50 / base:7.2f} {r} {pr}")
        print()


main()
