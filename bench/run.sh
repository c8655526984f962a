#!/bin/sh
# make bench: whole-process timings of nsbox beside bubblewrap and the bare
# command, measured in the same run, interleaved.  Not a test: it prints.
#
# On a hybrid host each nsbox start moves pid 1 into v1 cgroups, which waits
# for an RCU grace period unless a cgroup mount has favordynmods (`nsbox
# info`, "cgroup migration").  The first table is always the host as found.
# As root on such a host without favordynmods, a second block is measured
# with favordynmods switched on for its duration only (with its own bwrap
# baseline); the original mount options are put back on any exit.  Then a
# block with one CPU kept busy by a spinner (NSBOX_BENCH_BUSY=0: not).
set -eu
B=${NSBOX_BUILD:-$(pwd)/build}
RUNS=${RUNS:-60}
PY=/usr/bin/python3.11
cc -O2 -o "$B/spawn-times" bench/spawn-times.c
BWRAP="/usr/bin/bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib
 --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin --proc /proc --dev /dev --tmpfs /tmp"
out=$(mktemp -d /tmp/nsbox-bench.XXXXXX)

# favordynmods on the cgroup2 mount, set and restored with mount(2) from the
# options in /proc/self/mountinfo: the per-mount flags as MS_* flags, the
# superblock's own options (nsdelegate, memory_recursiveprot...) as data, so
# a restore gives back exactly what was there.  mount(8) is not used to
# restore: it re-adds favordynmods from its utab.
fdm() {
	$PY - "$@" <<'EOF'
import ctypes, os, sys
what, mnt = sys.argv[1], sys.argv[2]
def info():
    for l in open("/proc/self/mountinfo"):
        f = l.split()
        sep = f.index("-")
        if f[4] == mnt and f[sep + 1] == "cgroup2":
            return f[5], f[sep + 3]
    sys.exit(f"fdm: no cgroup2 mount at {mnt}")
MS = {"ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
      "relatime": 1 << 21, "strictatime": 1 << 24}
MS_REMOUNT = 32
if what == "show":
    print(" ".join(info()))
    sys.exit(0)
mnt_opts, sb_opts = info()
if what == "on":
    flags = sum(MS.get(o, 0) for o in mnt_opts.split(","))
    data = ",".join([o for o in sb_opts.split(",") if o not in ("rw", "ro", "favordynmods")] + ["favordynmods"])
else:  # restore SAVED_MNT_OPTS SAVED_SB_OPTS
    mnt_opts, sb_opts = sys.argv[3], sys.argv[4]
    flags = sum(MS.get(o, 0) for o in mnt_opts.split(","))
    data = ",".join(o for o in sb_opts.split(",") if o not in ("rw", "ro"))
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"cgroup2", mnt.encode(), b"cgroup2", MS_REMOUNT | flags, data.encode()) != 0:
    sys.exit(f"fdm: remount {mnt} ({data}): {os.strerror(ctypes.get_errno())}")
EOF
}

FDM_MNT=""
FDM_SAVED=""
# Put the saved options back; clears FDM_SAVED only once /proc agrees.
restore_fdm() {
	[ -n "$FDM_SAVED" ] || return 0
	# shellcheck disable=SC2086
	if fdm restore "$FDM_MNT" $FDM_SAVED && [ "$(fdm show "$FDM_MNT")" = "$FDM_SAVED" ]; then
		echo "bench: restored $FDM_MNT to its options as found ($FDM_SAVED)" >&2
		FDM_SAVED=""
		return 0
	fi
	echo "bench: WARNING: could not restore $FDM_MNT to '$FDM_SAVED'; now: $(grep " $FDM_MNT " /proc/self/mounts)" >&2
	return 1
}
# The spinner of the busy-CPU block, killed on any exit.
SPIN=""
spin_stop() {
	[ -n "$SPIN" ] || return 0
	kill "$SPIN" 2>/dev/null || true
	wait "$SPIN" 2>/dev/null || true
	SPIN=""
}
cleanup() {
	spin_stop
	restore_fdm || true
	rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# One block: bare, bwrap and nsbox for /usr/bin/true and python3.11 -S,
# interleaved.  $1 = label prefix ("" for the host as found).
block() {
	pre=$1
	"$B/spawn-times" "$RUNS" /usr/bin/true :: $BWRAP /usr/bin/true :: "$B/nsbox" run -- /usr/bin/true > "$out/a"
	"$B/spawn-times" "$RUNS" $PY -S -c pass :: $BWRAP $PY -S -c pass :: "$B/nsbox" run -- $PY -S -c pass > "$out/b"
	printf '%sbare /usr/bin/true\t' "$pre"; sed -n 1p "$out/a"
	printf '*%sbwrap (unshare-all, ro /usr, proc, dev, tmpfs) true\t' "$pre"; sed -n 2p "$out/a"
	printf '%snsbox run -- /usr/bin/true\t' "$pre"; sed -n 3p "$out/a"
	echo
	printf '%sbare python3.11 -S -c pass\t' "$pre"; sed -n 1p "$out/b"
	printf '*%sbwrap ... python3.11 -S -c pass\t' "$pre"; sed -n 2p "$out/b"
	printf '%snsbox run -- python3.11 -S -c pass\t' "$pre"; sed -n 3p "$out/b"
	echo
}

# With one CPU kept busy by a spinning process at normal priority (as on
# a host running other work): a start must not lean on a second idle CPU
# (pid 1's network thread, spinning waits).  The same comparisons, with
# bwrap measured beside them under the same load, interleaved.
busy_block() {
	sh -c 'while :; do :; done' &
	SPIN=$!
	"$B/spawn-times" "$RUNS" $PY -S -c 'print(1)' :: $BWRAP $PY -S -c 'print(1)' :: \
		"$B/nsbox" run -- $PY -S -c 'print(1)' :: "$B/nsbox" python -c 'print(1)' > "$out/busy"
	spin_stop
	echo "# with one CPU kept busy by a spinning process for this block only (sh -c 'while :; do :; done')"
	printf '[busy CPU] bare python3.11 -S -c print(1)\t'; sed -n 1p "$out/busy"
	printf '*[busy CPU] bwrap ... python3.11 -S -c print(1)\t'; sed -n 2p "$out/busy"
	printf '[busy CPU] nsbox run -- python3.11 -S -c print(1)\t'; sed -n 3p "$out/busy"
	printf '[busy CPU] nsbox python -c print(1) (whole process)\t'; sed -n 4p "$out/busy"
	echo
}

migration=$("$B/nsbox" info | sed -n 's/^cgroup migration: \([a-z]*\).*/\1/p')
FDM_MNT=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
case $migration in
none) mode="no task is moved between cgroups (cgroup v2: CLONE_INTO_CGROUP, or no cgroup used)" ;;
fast) mode="sandbox limits through cgroup v1 controllers, a cgroup mount has favordynmods: migration is fast" ;;
slow) mode="sandbox limits through cgroup v1 controllers, no cgroup mount has favordynmods: a start can wait for an RCU grace period" ;;
*) mode="unknown (nsbox info printed no 'cgroup migration' line)" ;;
esac

{
	echo "# host as found: $mode"
	block ""
} > "$out/table"
if [ "$migration" = slow ] && [ "$(id -u)" = 0 ] && [ -n "$FDM_MNT" ] && [ "${NSBOX_BENCH_FDM:-1}" != 0 ]; then
	FDM_SAVED=$(fdm show "$FDM_MNT")	# from here on the EXIT trap restores it
	fdm on "$FDM_MNT"
	{
		echo "# with favordynmods switched on for this block only (remount,favordynmods $FDM_MNT; restored after)"
		block "[favordynmods] "
	} >> "$out/table"
	restore_fdm || exit 1
fi
# The seccomp filter's load, the kernel's part of every start.
if [ -x "$B/seccomp-load" ]; then
	{
		echo "# loading the seccomp filter (seccomp(2) in a fresh child; the kernel converts and JITs it)"
		"$B/seccomp-load" "$RUNS"
		echo
	} >> "$out/table"
fi
if [ "${NSBOX_BENCH_BUSY:-1}" != 0 ] && [ -x "$B/nsbox-runner" ]; then
	if [ "$(nproc)" -ge 2 ]; then
		busy_block >> "$out/table"
	else
		echo "# busy-CPU block skipped: one CPU available (nproc)" >> "$out/table"
	fi
fi
if [ "${NSBOX_BENCH_RUNNER:-1}" != 0 ] && [ -x "$B/nsbox-runner" ] && [ -x bench/runner.sh ]; then
	bench/runner.sh "$B" "$RUNS" >> "$out/table"
fi
# Printing: 2M prints to a file, nsbox python against python3.11 under
# nsbox run (the reference, "*": x ref and pairs are the ratio; the bound
# is 1.5), NSBOX_BENCH_PRINT_RUNS interleaved runs of each (default 5).
if [ "${NSBOX_BENCH_PRINT:-1}" != 0 ]; then
	pc='for i in range(2_000_000): print(i)'
	ta="" tb=""
	us() { $PY -c 'import sys; print("%.1f" % ((int(sys.argv[2]) - int(sys.argv[1])) / 1000))' "$@"; }
	for _ in $(seq "${NSBOX_BENCH_PRINT_RUNS:-5}"); do
		t0=$(date +%s%N); "$B/nsbox" run -- $PY -c "$pc" > "$out/print.b"
		t1=$(date +%s%N); "$B/nsbox" python -c "$pc" > "$out/print.a"
		t2=$(date +%s%N)
		cmp -s "$out/print.a" "$out/print.b" || { echo "bench: nsbox python printed otherwise" >&2; exit 1; }
		tb="$tb $(us "$t0" "$t1")" ta="$ta $(us "$t1" "$t2")"
	done
	{
		echo "# 2M prints to a file (for i in range(2_000_000): print(i) > FILE), whole process"
		printf '*nsbox run -- python3.11 -c <2M prints>\t%s\n' "${tb# }"
		printf 'nsbox python -c <2M prints>\t%s\n' "${ta# }"
		echo
	} >> "$out/table"
	rm -f "$out/print.a" "$out/print.b"
fi
if [ "${NSBOX_BENCH_NSBOXD:-1}" != 0 ] && [ -x "$B/nsboxd" ]; then
	/usr/bin/python3.11 bench/nsboxd.py "$B" "$RUNS" > "$out/nsboxd" || exit 1
fi
bench/report.py < "$out/table"
[ -f "$out/nsboxd" ] && cat "$out/nsboxd"
# nsbox mcp through the official TypeScript SDK client: a run_python of 1+1
# round trip (p50/p90/p99 of NSBOX_MCP_BENCH_N calls on a warm default
# session), a new server's first call (process start to the first result),
# and code mode: run_python calling one tool of another MCP server
# (tests/mcp/server.mjs) through the host, against 1+1 in the same run.
if [ "${NSBOX_BENCH_MCP:-1}" != 0 ] && command -v node >/dev/null 2>&1 &&
	[ -d tests/mcp/node_modules/@modelcontextprotocol/sdk ]; then
	node tests/mcp/client.mjs "$B/nsbox" bench | node -e '
		let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
			const o = JSON.parse(s);
			console.log(`nsbox mcp: run_python 1+1 round trip p50 ${o.p50_ms.toFixed(3)} ms, p90 ${o.p90_ms.toFixed(3)} ms, p99 ${o.p99_ms.toFixed(3)} ms (${o.n} calls); ` +
				`first call of a new server ${o.first_call_ms.toFixed(0)} ms, process start to first result ${o.start_to_first_result_ms.toFixed(0)} ms`);
		});'
	NSBOX_MCP_BENCH_SERVER=$PWD/tests/mcp/server.mjs \
	node tests/mcp/client.mjs "$B/nsbox" bench --mcp-server "t=exec node $PWD/tests/mcp/server.mjs" | node -e '
		let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
			const o = JSON.parse(s);
			console.log(`nsbox mcp code mode: run_python calling t.add() once p50 ${o.codemode_p50_ms.toFixed(3)} ms, p99 ${o.codemode_p99_ms.toFixed(3)} ms ` +
				`(run_python 1+1 in the same run p50 ${o.p50_ms.toFixed(3)} ms: +${(o.codemode_p50_ms - o.p50_ms).toFixed(3)} ms per tool call); ` +
				`100 calls in one run_python ${o.codemode_loop100_ms.toFixed(1)} ms (${(o.codemode_loop100_ms / 100).toFixed(3)} ms each; ` +
				`the SDK client calling the same tool straight p50 ${o.direct_p50_ms.toFixed(3)} ms); ` +
				`process start to first result with the server ${o.start_to_first_result_ms.toFixed(0)} ms`);
		});'
fi

# The egress allowlist against --share-net (bench/egress.py): HTTPS
# throughput ratio, added connect latency, added start time.
if [ "${NSBOX_BENCH_EGRESS:-1}" != 0 ] && command -v openssl >/dev/null 2>&1; then
	$PY bench/egress.py "$B" "$RUNS"
fi

# Session files: write_file/read_file of 1 and 100 MiB beside cp (bench/files.py).
if [ "${NSBOX_BENCH_FILES:-1}" != 0 ]; then
	NSBOX_LIB="$B/libnsbox.so.0" $PY bench/files.py
fi

# A matplotlib figure's round trip (plot 1,000 points, the PNG back) beside
# savefig in plain python3.11 on the host (bench/figure.py).
if [ "${NSBOX_BENCH_FIGURE:-1}" != 0 ] && $PY -c 'import matplotlib' 2>/dev/null; then
	NSBOX_LIB="$B/libnsbox.so.0" $PY bench/figure.py "$RUNS"
fi
# Root trees: the datascience tree's build (first, cached) and a session on
# it from the warm spare with numpy and pandas preloaded, beside a cold
# import and an empty session (bench/rootfs.py).  Builds the tree if missing.
if [ "${NSBOX_BENCH_ROOTFS:-1}" != 0 ] && [ -x "$B/nsbox-runner" ]; then
	$PY bench/rootfs.py "$B"
fi
