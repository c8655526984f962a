#!/bin/sh
# Session benchmarks (issue 3): called by bench/run.sh as
# `bench/runner.sh BUILD RUNS`; prints "label<TAB>us ..." groups for
# bench/report.py on stdout and the memory/rate table on stderr.
# Also whole-process `nsbox python -c 'print(1)'` beside bubblewrap
# running python3.11 -S, in the same run, interleaved.
set -eu
B=${1:-build}
RUNS=${2:-60}
top=$(cd "$(dirname "$0")/.." && pwd)
cc -O2 -std=gnu11 -Wall -Wextra -Werror -I"$top/include" -o "$B/session-bench" "$top/bench/session-bench.c" \
	-L"$B" -lnsbox -Wl,-rpath,"$(cd "$B" && pwd)"
[ -x "$B/spawn-times" ] || cc -O2 -o "$B/spawn-times" "$top/bench/spawn-times.c"
cc -O2 -std=gnu11 -Wall -Wextra -Werror -o "$B/pingpong" "$top/bench/pingpong.c"
env -u NSBOX_SPARE "$B/session-bench" "$RUNS"
env -u NSBOX_SPARE "$B/session-bench" "$RUNS" spare
BWRAP="/usr/bin/bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib
 --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin --proc /proc --dev /dev --tmpfs /tmp"
PY=/usr/bin/python3.11
out=$(mktemp /tmp/nsbox-bench-runner.XXXXXX)
trap 'rm -f "$out"' EXIT
"$B/spawn-times" "$RUNS" $PY -S -c 'print(1)' :: $BWRAP $PY -S -c 'print(1)' :: "$B/nsbox" python -c 'print(1)' > "$out"
printf 'bare python3.11 -S -c print(1)\t'; sed -n 1p "$out"
printf '*bwrap ... python3.11 -S -c print(1)\t'; sed -n 2p "$out"
printf 'nsbox python -c print(1) (whole process)\t'; sed -n 3p "$out"
echo
# The Python SDK's overhead over the C API, both from one Python process.
NSBOX_LIB="$B/libnsbox.so.0" /usr/bin/python3.11 "$top/python/bench_sdk.py" 2000 --tsv
