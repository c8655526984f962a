#!/bin/sh
# The nsbox test plan run inside the VM (pure cgroup v2, Debian's 6.1 kernel)
# by tests/vm/init, once per role:
#
#   inside.sh ROLE [plan|unit|integ]   (plan: the checks below; unit: the
#   unit test binaries; integ: tests/integ with pytest)
#
#   root      uid 0 in a session leaf (/user.slice/user-0.slice/session-1.scope)
#   deleg     uid 1000 in /deleg.slice/session.scope, deleg.slice delegated
#   nodeleg   uid 1001 in /user.slice/user-1001.slice/session-2.scope, nothing delegated
#
# Prints TAP-like "ok N - ..." / "not ok N - ..." lines with the evidence
# under failures, then one "NSBOX-VM-RESULT: PASS|FAIL passed/total ROLE"
# line.  Exit status 0 only when nothing failed.  A check that can't run
# (nsbox not built, kernel feature absent) is a SKIP with its reason; the
# host harness treats skips as failures unless told otherwise.
role=${1:?usage: inside.sh root|deleg|nodeleg [plan|unit|integ]}
part=${2:-plan}
NSBOX_VM_INTEG_TESTS= NSBOX_VM_UNIT= NSBOX_VM_DEADLINE=160
[ -r /etc/nsbox-vm.conf ] && . /etc/nsbox-vm.conf
NSBOX=${NSBOX:-/usr/local/bin/nsbox}
PY=/usr/bin/python3.11
CG=/sys/fs/cgroup
DELEG=$CG/deleg.slice
T=$(mktemp -d /tmp/nsbox-vm-$role.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1

n=0 pass=0 fail=0 skip=0
why=

# show FILE NAME: a failed check's output, indented; long output (a TAP
# stream) is cut to its "not ok" lines and its end.
show() {
	[ -s "$1" ] || return 0
	size=$(wc -c <"$1")
	if [ "$size" -le 3000 ]; then
		echo "#   $2:"
		sed 's/^/#     /' "$1"
	else
		echo "#   $2 ($size bytes; its 'not ok' lines, then the last 1500 bytes):"
		grep '^not ok' "$1" | head -n 20 | sed 's/^/#     /'
		echo "#     ..."
		tail -c 1500 "$1" | sed 's/^/#     /'
	fi
	echo
}

# check NAME FUNC [ARGS]: run FUNC in this shell; it returns 0 (pass),
# 1 (fail; $why and the last nsbox output explain) or 77 (skip; $why).
check() {
	name=$1
	shift
	why=
	: >"$T/out"
	: >"$T/err"
	t0=$(cut -d' ' -f1 /proc/uptime)
	"$@"
	r=$?
	took=$(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')
	n=$((n + 1))
	if [ $r -eq 0 ]; then
		pass=$((pass + 1))
		echo "ok $n - $role: $name (${took} s)"
	elif [ $r -eq 77 ]; then
		skip=$((skip + 1))
		echo "ok $n - $role: $name # SKIP $why"
	else
		fail=$((fail + 1))
		echo "not ok $n - $role: $name (${took} s)"
		[ -z "$why" ] || echo "#   $why"
		show "$T/out" stdout
		show "$T/err" stderr
	fi
}

# Seconds until the VM's deadline (guest uptime), less a margin to report.
time_left() {
	awk -v d="$NSBOX_VM_DEADLINE" -v u="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%d", d - u - 3 }'
}

have_nsbox() {
	[ -x "$NSBOX" ] && return 0
	why="nsbox not built (no $NSBOX in the image)"
	return 77
}

# nsbox run ARGS... with stdout/stderr in $T/out, $T/err and the status in
# $rc.  The VM has its own time limit, but a hung sandbox must fail one
# check, not the run: busybox timeout sends TERM, then the check fails.
nsbox_run() {
	timeout 60 "$NSBOX" run "$@" >"$T/out" 2>"$T/err"
	rc=$?
}

# json FILE EXPR: evaluate a Python expression over the status object "j".
json() {
	$PY -c 'import json, sys
j = json.load(open(sys.argv[1]))
v = eval(sys.argv[2], {"j": j})
print(str(v).lower() if isinstance(v, bool) else v)' "$1" "$2" 2>>"$T/err"
}

expect_rc() {
	[ "$rc" -eq "$1" ] && return 0
	why="${why:+$why; }exit status $rc, expected $1"
	return 1
}

# ---------------------------------------------------------------- the host

t_cgroup2_alone() {
	mounts=$(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 " " $3 }' /proc/mounts)
	[ "$mounts" = "$CG cgroup2" ] && return 0
	why="cgroup mounts: $(echo $mounts)"
	return 1
}

t_controllers() {
	c=$(cat $CG/cgroup.controllers)
	for want in cpu memory pids io; do
		echo " $c " | grep -q " $want " || { why="cgroup.controllers: $c (no $want)"; return 1; }
	done
	s=$(cat $CG/cgroup.subtree_control)
	for want in cpu memory pids; do
		echo " $s " | grep -q " $want " || { why="root subtree_control: $s (no $want)"; return 1; }
	done
}

t_v2_features() {
	# The v2 interfaces nsbox uses where present: cgroup.kill (5.14),
	# memory.peak (5.19), memory.events (4.19).  6.1 has them all.
	for f in cgroup.kill memory.peak memory.events memory.max pids.max cpu.max; do
		[ -e "$CG/user.slice/$f" ] || { why="no $f in a v2 cgroup"; return 1; }
	done
}

t_my_cgroup() {
	mine=$(cat /proc/self/cgroup)
	case $role in
	root) want=0::/user.slice/user-0.slice/session-1.scope ;;
	deleg) want=0::/deleg.slice/session.scope ;;
	nodeleg) want=0::/user.slice/user-1001.slice/session-2.scope ;;
	esac
	[ "$mine" = "$want" ] || { why="/proc/self/cgroup: $mine, expected $want"; return 1; }
}

t_ids() {
	want_uid=0
	case $role in deleg) want_uid=1000 ;; nodeleg) want_uid=1001 ;; esac
	got="$(id -u) $(id -g) $(id -G)"
	[ "$got" = "$want_uid $want_uid $want_uid" ] || { why="uid gid groups: $got"; return 1; }
	[ "$role" = root ] && return 0
	eff=$(awk '/^CapEff/ { print $2 }' /proc/self/status)
	[ "$eff" = 0000000000000000 ] || { why="CapEff $eff"; return 1; }
}

t_userns() {
	max=$(cat /proc/sys/user/max_user_namespaces)
	[ "$max" -gt 0 ] || { why="user.max_user_namespaces=$max"; return 1; }
	if [ -e /proc/sys/kernel/unprivileged_userns_clone ]; then
		u=$(cat /proc/sys/kernel/unprivileged_userns_clone)
		[ "$u" = 1 ] || { why="kernel.unprivileged_userns_clone=$u"; return 1; }
	fi
	# And it works for this uid: map ourselves to root in a new userns.
	got=$(unshare -r -U id -u 2>&1)
	[ "$got" = 0 ] || { why="unshare -rU id -u: $got"; return 1; }
}

t_python() {
	got=$($PY -c 'import json, ctypes, hashlib, sqlite3, ssl, subprocess; print(6*7)' 2>&1)
	[ "$got" = 42 ] || { why="python3.11: $got"; return 1; }
}

# The kernel's Landlock ABI, asked directly: landlock_create_ruleset(NULL,
# 0, LANDLOCK_CREATE_RULESET_VERSION) (landlock(7)).
kernel_landlock_abi() {
	if [ -n "${landlock_abi:-}" ]; then
		echo "$landlock_abi"
		return
	fi
	$PY -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
r = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
print(r if r >= 0 else -ctypes.get_errno())'
}

t_landlock_kernel() {
	landlock_abi=$(kernel_landlock_abi)
	abi=$landlock_abi
	[ "$abi" -ge 1 ] 2>/dev/null || { why="landlock_create_ruleset version: $abi"; return 1; }
	echo "# kernel Landlock ABI $abi"
}

# Delegation as the kernel sees it, before nsbox: the user can make a child
# cgroup, enable controllers, set limits and remove it.
t_delegation_works() {
	d=$DELEG/vmcheck.$$
	mkdir "$d" || { why="mkdir $d"; return 1; }
	echo 33554432 >"$d/memory.max" && echo 8 >"$d/pids.max" && echo "50000 100000" >"$d/cpu.max"
	r=$?
	m=$(cat "$d/memory.max" 2>&1)
	rmdir "$d"
	[ $r -eq 0 ] && [ "$m" = 33554432 ] || { why="limits in a delegated child: memory.max=$m"; return 1; }
}

t_no_delegation() {
	d=$CG/user.slice/user-1001.slice/session-2.scope/vmcheck.$$
	if mkdir "$d" 2>/dev/null; then
		rmdir "$d"
		why="uid $(id -u) could create $d"
		return 1
	fi
}

# --------------------------------------------------------------- nsbox runs

t_info() {
	have_nsbox || return
	timeout 30 "$NSBOX" info >"$T/info" 2>"$T/err"
	rc=$?
	sed 's/^/# info: /' "$T/info"
	cp "$T/info" "$T/out"
	expect_rc 0
}

# These read the report t_info saved.
t_info_landlock() {
	have_nsbox || return
	abi=$(kernel_landlock_abi)
	cp "$T/info" "$T/out"
	line=$(grep -i '^landlock' "$T/info" | head -n 1)
	[ -n "$line" ] || { why="no Landlock line in nsbox info"; return 1; }
	echo "$line" | grep -Eq "(abi|ABI|version)[^0-9]*$abi([^0-9]|\$)" && return 0
	why="kernel ABI is $abi; nsbox info says: $line"
	return 1
}

t_info_cgroup() {
	have_nsbox || return
	cp "$T/info" "$T/out"
	grep -iq '^cgroups*: .*v2' "$T/info" && return 0
	why="nsbox info does not report cgroup v2"
	return 1
}

t_true() {
	have_nsbox || return
	nsbox_run -- /bin/true
	expect_rc 0
}

t_false() {
	have_nsbox || return
	nsbox_run -- /bin/sh -c 'exit 7'
	expect_rc 7
}

t_uid() {
	have_nsbox || return
	nsbox_run -- id -u
	expect_rc 0 || return 1
	# The sandbox's default uid is 1000 whoever starts it.
	got=$(cat "$T/out")
	[ "$got" = 1000 ] || { why="id -u inside printed '$got', expected 1000"; return 1; }
}

t_json_basic() {
	have_nsbox || return
	nsbox_run --json-status "$T/st.json" -- /bin/true
	expect_rc 0 || return 1
	echo "# status: $(cat "$T/st.json")"
	got=$(json "$T/st.json" '(j["exit_code"], bool(j["signal"]), j["time_limit"], j["oom_killed"],
		all(j[k] >= 0 for k in ("peak_memory", "cpu_user", "cpu_system", "wall")))')
	[ "$got" = "(0, False, False, False, True)" ] ||
		{ why="exit_code, signal, time_limit, oom_killed, numbers>=0: $got"; return 1; }
	[ "$role" = nodeleg ] && return 0
	# Where cgroups are usable nsbox must say v2 and enforce the controllers
	# the limits need ("enforced": {"memory": true, ...}).
	got=$(json "$T/st.json" '(j["cgroup"]["mode"], [c for c in ("cpu", "memory", "pids")
		if not j["cgroup"].get("enforced", {}).get(c)])')
	[ "$got" = "('v2', [])" ] || { why="cgroup mode, controllers not enforced: $got"; return 1; }
}

t_strict_runs() {
	have_nsbox || return
	nsbox_run --policy strict -- /bin/true
	expect_rc 0
}

t_no_units() {
	why="no build/tests/test-* in the image"
	return 77
}

# The project's unit tests, built on the host, run on this kernel too, in
# the time the VM has left.
t_unit() {
	left=$(time_left)
	[ "$left" -ge 5 ] || { why="only $left s left before the VM deadline; raise NSBOX_VM_TIMEOUT"; return 1; }
	[ "$left" -le 120 ] || left=120
	(cd /usr/local/lib/nsbox/src && timeout -k 2 "$left" "$1") >"$T/out" 2>"$T/err"
	rc=$?
	expect_rc 0
}

t_memory_hog() {
	have_nsbox || return
	nsbox_run --memory 64M --json-status "$T/st.json" -- $PY -c 'b = bytearray(200 << 20); print(len(b))'
	expect_rc 123 || return 1
	# memory.events (oom_kill) says it was the limit; memory.peak of the
	# sandbox's cgroup is at the limit, not at the 200 MiB asked for.
	got=$(json "$T/st.json" '(j["oom_killed"], j["peak_memory"] >> 20)')
	case $got in
	"(True, "*)
		mib=${got#(True, }
		mib=${mib%)}
		[ "$mib" -ge 16 ] && [ "$mib" -le 72 ] && return 0 ;;
	esac
	why="oom_killed, peak MiB: $got; expected True, 16..72"
	return 1
}

# A root launcher with HostUid= clones with that uid as its effective uid
# (the user namespace's owner, who the kernel charges its per-user counters
# to), keeping its capabilities for the cgroup it clones into: on pure v2
# that is CLONE_INTO_CGROUP into a root-owned cgroup.  The limit holds and
# the namespace is the host uid's.
t_host_uid_owner() {
	have_nsbox || return
	printf '[Sandbox]\nHostUid=4321\nHostGid=4321\n' > "$T/hu.policy"
	nsbox_run --policy "$T/hu.policy" --memory 64M --json-status "$T/st.json" -- $PY -c '
import fcntl, os, struct
fd = os.open("/proc/self/ns/user", os.O_RDONLY)
print(struct.unpack("I", fcntl.ioctl(fd, 0xb704, b"\0" * 4))[0], os.getuid(), flush=True)
b = bytearray(200 << 20)'
	expect_rc 123 || return 1
	# Inside, NS_GET_OWNER_UID names the owner as the sandbox sees it:
	# host 4321 is the sandbox's 1000.
	[ "$(cat "$T/out")" = "1000 1000" ] || { why="owner and uid inside: $(cat "$T/out")"; return 1; }
	got=$(json "$T/st.json" 'j["oom_killed"]')
	[ "$got" = true ] || { why="oom_killed: $got"; return 1; }
}

t_memory_ok() {
	have_nsbox || return
	nsbox_run --memory 64M -- $PY -c 'b = bytearray(16 << 20); print(len(b))'
	expect_rc 0 || return 1
	[ "$(cat "$T/out")" = 16777216 ] || { why="unexpected output"; return 1; }
}

# Fork until the kernel says no; print how many children were made.
FORKS='import os, time, errno
n = 0
err = "none"
for i in range(64):
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    n += 1
print(n, err)
'

t_fork_bomb() {
	have_nsbox || return
	nsbox_run --pids 16 -- $PY -c "$FORKS"
	expect_rc 0 || return 1
	set -- $(cat "$T/out")
	[ "${2:-}" = EAGAIN ] && [ "$1" -ge 1 ] && [ "$1" -lt 16 ] ||
		{ why="forks made: ${1:-?}, failure: ${2:-?} (expected 1..15 then EAGAIN)"; return 1; }
	# The host is fine: it still forks, and the sandbox left no processes.
	sh -c 'exit 3'
	[ $? -eq 3 ] || { why="host can't fork after the bomb"; return 1; }
	echo "# fork bomb stopped after $1 children"
}

t_fork_bomb_sh() {
	have_nsbox || return
	# The shell variant: each (sleep) is a fork; a failed fork ends ash, so
	# the count printed so far is what got through.
	nsbox_run --pids 16 -- sh -c 'i=0; while [ $i -lt 40 ]; do sleep 3 & i=$((i+1)); echo $i; done'
	last=$(tail -n 1 "$T/out")
	[ -n "$last" ] && [ "$last" -lt 16 ] || { why="sh spawned ${last:-?} sleeps under --pids 16"; return 1; }
	[ -d /proc/1 ] || { why="host lost"; return 1; }
	echo "# sh fork loop stopped after $last sleeps, exit $rc"
}

# A busy loop for 2 s of wall time under --cpus 0.5 gets about 1 s of CPU.
# Measured inside (the loop alone, process_time) and from the status
# (cgroup cpu.stat: the whole run, interpreter start included, so its CPU
# must stay near half its wall time).
t_cpu_quota() {
	have_nsbox || return
	nsbox_run --cpus 0.5 --json-status "$T/st.json" -- $PY -c 'import time
t = time.monotonic()
c = time.process_time()
while time.monotonic() - t < 2.0:
    pass
print(round(time.process_time() - c, 3))'
	expect_rc 0 || return 1
	inner=$(cat "$T/out")
	got=$(json "$T/st.json" '(round(j["cpu_user"] + j["cpu_system"], 2), round(j["wall"], 2))')
	echo "# --cpus 0.5, 2 s busy loop: $inner s CPU inside; status cpu, wall: $got"
	ok=$(json "$T/st.json" "0.6 <= $inner <= 1.4 and 0.6 <= j['cpu_user'] + j['cpu_system'] <= 0.5 * j['wall'] * 1.25 + 0.1")
	[ "$ok" = true ] || { why="loop CPU $inner s (want 0.6..1.4), status cpu, wall $got (want cpu <= ~wall/2)"; return 1; }
}

t_time_limit() {
	have_nsbox || return
	nsbox_run --time-limit 1 --json-status "$T/st.json" -- sleep 30
	expect_rc 124 || return 1
	got=$(json "$T/st.json" '(j["time_limit"], 0.9 < j["wall"] < 10)')
	[ "$got" = "(True, True)" ] || { why="time_limit, 0.9<wall<10: $got"; return 1; }
}

t_signal() {
	have_nsbox || return
	nsbox_run -- /bin/sh -c 'kill -KILL $$'
	expect_rc 137
}

t_notfound() {
	have_nsbox || return
	nsbox_run -- /nonexistent/command
	expect_rc 127
}

# The sandbox's own cgroup while it runs: where it is, its limits, and that
# it is gone afterwards.  Found from the host side through /proc/PID/cgroup
# of the one process running "sleep 2.37".
t_cgroup_lifecycle() {
	have_nsbox || return
	timeout 60 "$NSBOX" run --memory 64M --pids 32 -- sleep 2.37 >"$T/out" 2>"$T/err" &
	bg=$!
	path=
	i=0
	while [ $i -lt 100 ] && [ -z "$path" ]; do
		# One grep over all cmdlines; then only the few hits (nsbox's
		# and timeout's own command lines match too) are looked at.
		for c in $(grep -l 2.37 /proc/[0-9]*/cmdline 2>/dev/null); do
			[ "$({ tr '\0' ' ' <"$c"; } 2>/dev/null)" = "sleep 2.37 " ] || continue
			path=$(sed -n 's/^0:://p' "${c%/cmdline}/cgroup" 2>/dev/null)
			break
		done
		[ -n "$path" ] || sleep 0.1
		i=$((i + 1))
	done
	if [ -z "$path" ]; then
		wait $bg
		why="never saw the sandboxed sleep (nsbox exit $?)"
		return 1
	fi
	echo "# sandbox cgroup: $path"
	mem=$(cat "$CG$path/memory.max" 2>&1)
	pids=$(cat "$CG$path/pids.max" 2>&1)
	wait $bg
	rc=$?
	expect_rc 0 || return 1
	[ "$mem" = 67108864 ] && [ "$pids" = 32 ] ||
		{ why="cgroup $path: memory.max=$mem pids.max=$pids"; return 1; }
	case $role in
	deleg)
		case $path in
		/deleg.slice/*) ;;
		*) why="sandbox cgroup $path is outside the delegated /deleg.slice"; return 1 ;;
		esac ;;
	root)
		[ "$path" != / ] || { why="sandbox ran in the root cgroup"; return 1; }
		;;
	esac
	[ ! -e "$CG$path" ] || { why="cgroup $path left behind"; return 1; }
}

# Nothing of nsbox's is left in the delegated subtree: only the session.
t_no_leftovers() {
	have_nsbox || return
	left=$(cd $DELEG && find . -mindepth 1 -type d ! -path ./session.scope)
	[ -z "$left" ] || { why="left in $DELEG: $(echo $left)"; return 1; }
	[ "$(cat $DELEG/session.scope/cgroup.procs | wc -l)" -ge 1 ] || { why="session.scope lost its processes"; return 1; }
}

t_no_leftovers_root() {
	have_nsbox || return
	left=$(cd $CG && find . -mindepth 1 -type d -name '*nsbox*')
	[ -z "$left" ] || { why="left in $CG: $(echo $left)"; return 1; }
}

t_write_outside_tmp() {
	have_nsbox || return
	nsbox_run -- /bin/sh -c 'echo ok >/tmp/x && cat /tmp/x; for d in / /usr /etc /home /var; do
		if echo x >"$d/nsbox-write-test" 2>/dev/null; then echo "wrote $d"; fi; done'
	expect_rc 0 || return 1
	[ "$(cat "$T/out")" = ok ] || { why="write /tmp ok, elsewhere refused: got other output"; return 1; }
}

t_landlock_bind() {
	have_nsbox || return
	# --workspace: read-write at /workspace, the working directory.  /usr
	# stays read-only beside it.
	mkdir -p "$T/ws" && chmod 0777 "$T/ws"
	nsbox_run --workspace "$T/ws" -- /bin/sh -c 'pwd; echo hi >./f && cat ./f; echo x >/usr/lib/nsbox-x 2>/dev/null && echo wrote-usr; true'
	expect_rc 0 || return 1
	[ "$(head -n 1 "$T/out")" = /workspace ] || { why="working directory is not /workspace"; return 1; }
	grep -q wrote-usr "$T/out" && { why="wrote into /usr"; return 1; }
	grep -qx hi "$T/out" || { why="could not write the workspace"; return 1; }
	[ "$(cat "$T/ws/f" 2>/dev/null)" = hi ] || { why="workspace file not on the host"; return 1; }
}

# The runner: embedded CPython in the sandbox (nsbox python).
nsbox_python() {
	timeout 60 "$NSBOX" python "$@" >"$T/out" 2>"$T/err"
	rc=$?
}

t_runner_hello() {
	have_nsbox || return
	nsbox_python -c 'import sys; print(sys.version_info[:2], 6 * 7)'
	expect_rc 0 || return 1
	[ "$(cat "$T/out")" = "(3, 11) 42" ] || { why="unexpected output"; return 1; }
}

t_runner_memory() {
	have_nsbox || return
	nsbox_python --memory 64M -c 'b = bytearray(200 << 20)'
	expect_rc 123
}

t_runner_time_limit() {
	have_nsbox || return
	nsbox_python --time-limit 1 -c 'while True: pass'
	expect_rc 124
}

# Per-user budgets (README, the budget table): inotify is refused by the
# filter (watches on the inodes a sandbox shares with the host saw the
# host's activity); with the filter only logging, a sandbox holding every
# instance it can get leaves the host user theirs.  AIO is denied.
t_budget_inotify() {
	have_nsbox || return
	[ -x /usr/local/lib/nsbox/tests/probe/budget_hog ] || { why="no budget_hog in the image"; return 77; }
	timeout 60 "$NSBOX" run --ro-bind /usr/local/lib/nsbox/tests/probe:/probe -- /probe/budget_hog inotify \
		</dev/null >"$T/def" 2>&1
	grep -q "HOLD inotify 0 EPERM" "$T/def" || { why="inotify with the filter on: $(cat "$T/def")"; return 1; }
	mkfifo "$T/hold"
	timeout 60 "$NSBOX" run --seccomp-log --ro-bind /usr/local/lib/nsbox/tests/probe:/probe -- \
		/probe/budget_hog inotify <"$T/hold" >"$T/out" 2>"$T/err" &
	bg=$!
	exec 9>"$T/hold"
	i=0
	while [ $i -lt 100 ] && ! grep -q HOLD "$T/out"; do sleep 0.1; i=$((i + 1)); done
	host=$($PY -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True); fd = l.inotify_init1(0)
print("ok" if fd >= 0 else os.strerror(ctypes.get_errno()))' 2>&1)
	exec 9>&-
	wait $bg
	rc=$?
	set -- $(cat "$T/out")
	echo "# sandbox: $*; host inotify_init1: $host"
	[ "$host" = ok ] || { why="host inotify_init1 failed while a sandbox held ${3:-?} instances: $host"; return 1; }
	max=$(cat /proc/sys/user/max_inotify_instances)
	[ "${4:-}" = EMFILE ] && [ "${3:-0}" -le $((max / 8)) ] || { why="sandbox took ${3:-?} of $max (${4:-?})"; return 1; }
	expect_rc 0
}

t_budget_aio_tcp() {
	have_nsbox || return
	[ -x /usr/local/lib/nsbox/tests/probe/budget_hog ] || { why="no budget_hog in the image"; return 77; }
	nsbox_run --ro-bind /usr/local/lib/nsbox/tests/probe:/probe -- /probe/budget_hog aio </dev/null
	grep -q "HOLD aio 0 ENOSYS" "$T/out" || { why="AIO: $(cat "$T/out")"; return 1; }
	[ "$role" = nodeleg ] && return 0
	# v2 charges socket buffers to memory.max: limited, or OOM-killed.
	nsbox_run --memory 64M --ro-bind /usr/local/lib/nsbox/tests/probe:/probe -- /probe/budget_hog tcp 256 </dev/null
	echo "# tcp under --memory 64M: $(cat "$T/out") exit $rc"
	[ $rc -eq 123 ] && return 0
	set -- $(cat "$T/out")
	[ "${3:-0}" -le $((96 << 20)) ] || { why="queued ${3:-?} bytes under --memory 64M"; return 1; }
}

# Module requests (the kernel running modprobe as root for an alias):
# /proc/sys/kernel/modprobe points at a script that logs what it was asked,
# and tests/integ/kernel_asks.py makes every call that asks.  Outside any
# sandbox, root's SCTP, L2TP and netlink sockets, socket pairs and bridge
# and VLAN ioctls are asked for (the check can fail); from a sandbox,
# nothing may be.
KERNEL_ASKS=/usr/local/lib/nsbox/src/tests/integ/kernel_asks.py
t_module_requests() {
	have_nsbox || return
	[ -w /proc/sys/kernel/modprobe ] || { why="no /proc/sys/kernel/modprobe (a kernel without modules)"; return 77; }
	[ -r "$KERNEL_ASKS" ] || { why="no $KERNEL_ASKS in the image"; return 77; }
	old=$(cat /proc/sys/kernel/modprobe)
	printf '#!/bin/sh\necho "$*" >>%s/modreq\nexit 1\n' "$T" >"$T/modprobe"
	chmod 755 "$T/modprobe"
	echo "$T/modprobe" >/proc/sys/kernel/modprobe
	: >"$T/modreq"
	$PY "$KERNEL_ASKS" >/dev/null 2>&1
	control=$(sort -u "$T/modreq" | tr '\n' ' ')
	: >"$T/modreq"
	timeout 60 "$NSBOX" python -c "$(cat "$KERNEL_ASKS")" >"$T/out" 2>"$T/err"
	rc=$?
	echo "$old" >/proc/sys/kernel/modprobe
	echo "# outside: $control"
	case $control in *net-pf-2-proto-132*) ;; *) why="outside, no SCTP request was logged: '$control'"; return 1 ;; esac
	[ "$(tail -n 1 "$T/out")" = done ] || { why="the sandbox's probe did not run to its end"; return 1; }
	[ ! -s "$T/modreq" ] || { why="from a sandbox: $(sort -u "$T/modreq" | tr '\n' ' ')"; return 1; }
	expect_rc 0
}

t_boot_id() {
	have_nsbox || return
	nsbox_run -- cat /proc/sys/kernel/random/boot_id
	expect_rc 0 || return 1
	[ "$(cat "$T/out")" != "$(cat /proc/sys/kernel/random/boot_id)" ] || { why="the host's boot_id"; return 1; }
}

t_nodeleg_warns() {
	have_nsbox || return
	nsbox_run --memory 64M -- /bin/true
	expect_rc 0 || return 1
	grep -iq cgroup "$T/err" || { why="no warning naming cgroups on stderr"; return 1; }
	echo "# warning: $(head -n 3 "$T/err" | tr '\n' ' ')"
}

t_nodeleg_strict() {
	have_nsbox || return
	nsbox_run --policy strict -- /bin/true
	expect_rc 125 || return 1
	grep -iq cgroup "$T/err" || { why="refusal does not mention cgroups"; return 1; }
	echo "# refusal: $(head -n 3 "$T/err" | tr '\n' ' ')"
}

# ------------------------------------------------------- nsboxd, as root
# nsboxd started as systemd starts nsboxd.service (Delegate=yes, on a pure
# v2 host): alone in the unit's cgroup, system.slice/nsboxd.service, with
# cpu, memory and pids enabled in system.slice so the unit has them.  It
# must move into a leaf of its own, favour it, make the sessions' cgroups
# beside it, and leave nothing but that (empty) leaf after SIGTERM.
NSBOXD=/usr/local/sbin/nsboxd
SVC=$CG/system.slice/nsboxd.service
svc_pid=

have_nsboxd() {
	[ -x "$NSBOXD" ] && return 0
	why="nsboxd not built (no $NSBOXD in the image)"
	return 77
}

t_svc_start() {
	have_nsboxd || return
	mkdir -p $CG/system.slice && echo "+cpu +memory +pids" >$CG/system.slice/cgroup.subtree_control &&
		mkdir $SVC || { why="cannot make $SVC"; return 1; }
	printf '[Service]\nPoolSize=1\nWorkers=1\n' >"$T/nsboxd.conf"
	sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' $SVC \
		$NSBOXD --listen "$T/svc.sock" --config "$T/nsboxd.conf" --verbose >"$T/nsboxd.log" 2>&1 &
	svc_pid=$!
	i=0
	while [ $i -lt 300 ] && ! [ -S "$T/svc.sock" ] && kill -0 $svc_pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
	cp "$T/nsboxd.log" "$T/err"
	[ -S "$T/svc.sock" ] || { why="nsboxd never listened"; return 1; }
	sed 's/^/# nsboxd: /' "$T/nsboxd.log"
	mine=$(cat /proc/$svc_pid/cgroup)
	[ "$mine" = "0::/system.slice/nsboxd.service/nsboxd" ] || { why="nsboxd's cgroup: $mine"; return 1; }
	[ -z "$(cat $SVC/cgroup.procs)" ] || { why="processes left in $SVC itself: $(cat $SVC/cgroup.procs)"; return 1; }
	w=$(cat $SVC/nsboxd/cpu.weight)
	[ "$w" = 1000 ] || { why="nsboxd's leaf cpu.weight $w, expected 1000"; return 1; }
	sc=$(cat $SVC/cgroup.subtree_control)
	[ "$sc" = "cpu memory pids" ] || { why="$SVC/cgroup.subtree_control: $sc"; return 1; }
}

# A raw client (tests/integ/svcclient.py): a session with memory=64M, its
# cgroup seen from the host beside nsboxd's leaf, then a hog in it: EXITED
# says OOM, CLOSED follows, the cgroup is gone.
SVC_OOM='import json, os, sys, time
sys.path.insert(0, "/usr/local/lib/nsbox/src/tests/integ")
import svcclient
c = svcclient.Client(sys.argv[1], timeout=60)
sb, m = c.open(memory=64 << 20)
assert sb, m
cg = open("/proc/%d/cgroup" % sb.pid).read().strip()
d = "/sys/fs/cgroup" + cg[3:]
assert os.path.dirname(d) == sys.argv[2], (cg, sys.argv[2])
lim = (open(d + "/memory.max").read().strip(), open(d + "/cpu.weight").read().strip())
print("# session cgroup %s: memory.max %s, cpu.weight %s" % ((cg,) + lim))
assert lim == ("67108864", "100"), lim
try:
    r = sb.exec("b = bytearray(200 << 20)")
except EOFError:
    pass
t, m, _, _ = c.recv()
print("#", t, json.dumps(m))
assert t == "EXITED" and m["handle"] == sb.handle and m["status"]["oom_killed"], m
t, m = sb.close()
print("#", t, json.dumps(m))
assert t == "CLOSED" and m["status"]["oom_killed"], m
for i in range(100):
    if not os.path.exists(d):
        break
    time.sleep(0.05)
assert not os.path.exists(d), d + " left"
'

t_svc_oom() {
	[ -n "$svc_pid" ] || { why="nsboxd did not start"; return 1; }
	timeout 60 $PY -c "$SVC_OOM" "$T/svc.sock" $SVC >"$T/out" 2>"$T/err"
	rc=$?
	cat "$T/out"
	expect_rc 0
}

# The CLI through the service, then SIGTERM to nsboxd while that session
# and the pool's sandbox are alive.
t_svc_sigterm() {
	[ -n "$svc_pid" ] || { why="nsboxd did not start"; return 1; }
	timeout 60 "$NSBOX" python --connect "$T/svc.sock" \
		-c 'import os, time; print("up", os.getuid(), 6 * 7, flush=True); time.sleep(50)' >"$T/out" 2>"$T/err" &
	cli=$!
	i=0
	while [ $i -lt 300 ] && ! grep -q up "$T/out"; do sleep 0.1; i=$((i + 1)); done
	[ "$(cat "$T/out")" = "up 1000 42" ] || { why="the CLI's session did not start as expected"; kill $cli; return 1; }
	# Every process of the sessions and the pool, from the host.
	pids=$(cat $SVC/nsbox-*/cgroup.procs 2>/dev/null)
	[ -n "$pids" ] || { why="no process in $SVC/nsbox-*"; kill $cli; return 1; }
	kill -TERM $svc_pid
	i=0
	while [ $i -lt 200 ] && kill -0 $svc_pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
	wait $svc_pid
	src=$?
	wait $cli
	crc=$?
	svc_pid=
	cat "$T/nsboxd.log" >>"$T/err"
	[ $src -eq 0 ] || { why="nsboxd exited $src after SIGTERM"; return 1; }
	for p in $pids; do
		[ ! -d /proc/$p ] || { why="sandbox process $p survived"; return 1; }
	done
	left=$(cd $SVC && find . -mindepth 1 -type d)
	[ "$left" = ./nsboxd ] || { why="left in $SVC: $(echo $left)"; return 1; }
	[ -z "$(cat $SVC/nsboxd/cgroup.procs)" ] || { why="processes left in nsboxd's leaf"; return 1; }
	pgrep -x nsbox-runner >/dev/null && { why="an nsbox-runner is still running"; return 1; }
	[ ! -e "$T/svc.sock" ] || { why="the socket was not removed"; return 1; }
	echo "# after SIGTERM: $(echo $pids | wc -w) sandbox processes gone, only the empty leaf left; the CLI exited $crc"
	rmdir $SVC/nsboxd $SVC
}

# The project's integration suite (tests/integ, pytest) in this role, in
# the time the VM has left (NSBOX_VM_DEADLINE, guest uptime): running out
# of time is a failure, reported, not a silent cut.
t_integ() {
	have_nsbox || return
	case $role in root) mode=root ;; deleg) mode=delegated ;; *) mode=nodeleg ;; esac
	left=$(time_left)
	[ "$left" -ge 15 ] || { why="only $left s left before the VM deadline; raise NSBOX_VM_TIMEOUT"; return 1; }
	files=
	for f in ${NSBOX_VM_INTEG_TESTS:-.}; do
		files="$files /usr/local/lib/nsbox/src/tests/integ/$f"
	done
	(cd /usr/local/lib/nsbox/src/tests/integ &&
	 NSBOX_BUILD=/usr/local/lib/nsbox NSBOX_TEST_MODE=$mode PYTHONDONTWRITEBYTECODE=1 \
		timeout -k 2 "$left" $PY -m pytest -q -p no:cacheprovider --tb=short -rfEs $files) >"$T/integ" 2>&1
	rc=$?
	# The whole report goes to the log; the check's summary is its last line.
	sed 's/^/# integ: /' "$T/integ"
	why="pytest: $(tail -n 1 "$T/integ")"
	[ $rc -ne 124 ] || why="$why; killed after $left s at the VM deadline"
	expect_rc 0
}

case $part in
integ)
	check "integration suite (tests/integ${NSBOX_VM_INTEG_TESTS:+: $NSBOX_VM_INTEG_TESTS})" t_integ ;;
unit)
	for u in /usr/local/lib/nsbox/tests/test-*; do
		[ -x "$u" ] || continue
		case " $NSBOX_VM_UNIT " in
		*" all "*|*" ${u##*/} "*) check "unit ${u##*/}" t_unit "$u" ;;
		esac
	done
	[ $n -gt 0 ] || check "unit test binaries in the image" t_no_units ;;
esac
if [ "$part" != plan ]; then
	verdict=PASS
	[ $fail -eq 0 ] || verdict=FAIL
	echo "NSBOX-VM-RESULT: $verdict $pass/$n $role+$part (failed $fail, skipped $skip)"
	[ $fail -eq 0 ]
	exit
fi

# ---------------------------------------------------------------- the plan

echo "# role $role: uid $(id -u), cgroup $(cat /proc/self/cgroup), nsbox $([ -x "$NSBOX" ] && echo present || echo MISSING)"
# Facts of the VM, the same for every role: checked once, as root.
if [ "$role" = root ]; then
	check "cgroup2 mounted alone at $CG" t_cgroup2_alone
	check "controllers cpu memory pids io available and enabled" t_controllers
	check "cgroup v2 files nsbox uses exist" t_v2_features
	check "python3.11 with its C modules" t_python
fi
check "running in the expected cgroup" t_my_cgroup
check "ids and capabilities" t_ids
check "user namespaces available" t_userns
check "kernel has Landlock" t_landlock_kernel
case $role in
deleg) check "the delegated subtree is usable" t_delegation_works ;;
nodeleg) check "no cgroup delegation" t_no_delegation ;;
esac

check "nsbox info" t_info
check "nsbox info reports the kernel's Landlock ABI" t_info_landlock
check "nsbox info reports cgroup v2" t_info_cgroup
check "run /bin/true" t_true
check "runs as uid 1000 inside" t_uid
check "json status" t_json_basic
check "time limit kills (124)" t_time_limit
check "nsbox python runs code in the runner" t_runner_hello
# Behaviour that does not depend on who runs nsbox: once, in the role this
# VM exists for (unprivileged, delegated, pure v2).
if [ "$role" = deleg ]; then
	check "exit status passes through" t_false
	check "signal death is 128+N" t_signal
	check "command not found is 127" t_notfound
	check "write outside /tmp and workspace refused" t_write_outside_tmp
	check "workspace is writable, /usr is not" t_landlock_bind
	check "nsbox python time limit (124)" t_runner_time_limit
fi
case $role in
root|deleg)
	check "memory under the limit runs" t_memory_ok
	check "memory hog killed by --memory 64M (123, oom_killed, peak)" t_memory_hog
	check "nsbox python memory hog killed by --memory 64M (123)" t_runner_memory
	check "fork bomb bounded by --pids 16" t_fork_bomb
	check "sh fork loop bounded by --pids 16" t_fork_bomb_sh
	check "--cpus 0.5 busy loop gets ~1 s CPU in 2 s" t_cpu_quota
	check "sandbox cgroup created with limits, removed after" t_cgroup_lifecycle
	;;
esac
check "a sandbox holding inotify instances leaves the host user theirs" t_budget_inotify
check "AIO denied; TCP buffers charged to --memory" t_budget_aio_tcp
check "boot_id is the sandbox's own" t_boot_id
[ "$role" = root ] && check "a sandbox's sockets make the kernel ask modprobe for nothing" t_module_requests
case $role in
root|deleg) check "--policy strict runs where cgroups work" t_strict_runs ;;
esac
if [ "$role" = root ]; then
	check "HostUid=: the user namespace is that uid's, the cgroup limit holds" t_host_uid_owner
	check "nsboxd in a Delegate=yes cgroup moves into a favoured leaf" t_svc_start
	check "a service session's cgroup is beside nsboxd's; OOM in EXITED and CLOSED" t_svc_oom
	check "nsbox python --connect; then SIGTERM to nsboxd leaves no process or cgroup" t_svc_sigterm
	[ -z "$svc_pid" ] || kill -KILL $svc_pid 2>/dev/null
fi
case $role in
deleg) check "no nsbox cgroups left under $DELEG" t_no_leftovers ;;
root) check "no nsbox cgroups left anywhere" t_no_leftovers_root ;;
nodeleg)
	check "limits without cgroups: warns and runs" t_nodeleg_warns
	check "--policy strict refuses without cgroups (125)" t_nodeleg_strict
	;;
esac

verdict=PASS
[ $fail -eq 0 ] || verdict=FAIL
echo "NSBOX-VM-RESULT: $verdict $pass/$n $role (failed $fail, skipped $skip)"
[ $fail -eq 0 ]
