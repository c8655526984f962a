#!/bin/sh
# make bench: whole-process timings of nsbox beside bubblewrap and the bare
# command, measured in the same run, interleaved.  Not a test: it prints.
set -eu
B=${NSBOX_BUILD:-$(pwd)/build}
RUNS=${RUNS:-60}
cc -O2 -o "$B/spawn-times" bench/spawn-times.c
BWRAP="/usr/bin/bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib
 --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin --proc /proc --dev /dev --tmpfs /tmp"
PY=/usr/bin/python3.11
out=$(mktemp -d /tmp/nsbox-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$B/spawn-times" "$RUNS" /usr/bin/true :: $BWRAP /usr/bin/true :: "$B/nsbox" run -- /usr/bin/true > "$out/a"
"$B/spawn-times" "$RUNS" $PY -S -c pass :: $BWRAP $PY -S -c pass :: "$B/nsbox" run -- $PY -S -c pass > "$out/b"
{
	printf 'bare /usr/bin/true\t'; sed -n 1p "$out/a"
	printf '*bwrap (unshare-all, ro /usr, proc, dev, tmpfs) true\t'; sed -n 2p "$out/a"
	printf 'nsbox run -- /usr/bin/true\t'; sed -n 3p "$out/a"
	echo
	printf 'bare python3.11 -S -c pass\t'; sed -n 1p "$out/b"
	printf '*bwrap ... python3.11 -S -c pass\t'; sed -n 2p "$out/b"
	printf 'nsbox run -- python3.11 -S -c pass\t'; sed -n 3p "$out/b"
	echo
} > "$out/table"
if [ "${NSBOX_BENCH_RUNNER:-1}" != 0 ] && [ -x "$B/nsbox-runner" ] && [ -x bench/runner.sh ]; then
	bench/runner.sh "$B" "$RUNS" >> "$out/table"
fi
bench/report.py < "$out/table"
