#!/bin/bash
# Run nsbox's tests on a pure cgroup v2 host with Debian 12's own kernel:
# build an initramfs (tests/vm/mkinitramfs.sh), boot the cloud kernel under
# qemu with software emulation, let tests/vm/init run tests/vm/inside.sh as
# root (nsboxd too, in a cgroup delegated as systemd's Delegate=yes does), as
# a user with a delegated cgroup subtree and as a user without one, and read
# the results back from the serial console.  `make check-vm` runs
# this.
#
# Exit status: 0 when every check passed; 1 when a check failed or was
# skipped, the VM timed out or never reported; 2 when the harness itself
# could not run (missing kernel, qemu, busybox-static).
#
# Environment:
#   NSBOX_BUILD            build directory (default <tree>/build)
#   NSBOX_VM_KERNEL        kernel image (default: newest /boot/vmlinuz-*-cloud-amd64)
#   NSBOX_VM_TIMEOUT       seconds before the VM is killed (default 170)
#   NSBOX_VM_COMPRESS      none|gzip initramfs (default none: faster to boot)
#   NSBOX_VM_ALLOW_SKIP=1  skipped checks don't fail the run (bring-up only)
#   NSBOX_VM_UNIT          unit test binaries (build/tests/test-*) to run inside
#                          as root: names separated by spaces, "all" or "none"
#                          (default "test-landlock test-seccomp": the ones
#                          whose answers depend on the kernel)
#   NSBOX_VM_INTEG         roles that also run tests/integ with pytest inside:
#                          comma-separated root,deleg,nodeleg, "all" or "none"
#                          (default deleg)
#   NSBOX_VM_INTEG_TESTS   which files of tests/integ (space-separated; default
#                          "test_limits.py test_workspace.py test_host_info.py"; empty: the whole suite)
#   NSBOX_VM_KEEP=1        keep the temp dir (initramfs, staging) for debugging
# The serial log of the last run is kept in <build>/vm/serial.log.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${NSBOX_BUILD:-$top/build}
timeout=${NSBOX_VM_TIMEOUT:-170}
compress=${NSBOX_VM_COMPRESS:-none}
unit=${NSBOX_VM_UNIT-test-landlock test-seccomp}
integ=${NSBOX_VM_INTEG-deleg}
integ_tests=${NSBOX_VM_INTEG_TESTS-test_limits.py test_workspace.py test_host_info.py}

fatal() { echo "run-vm: $*" >&2; exit 2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

t_start=$(now)
if [ -n "${NSBOX_VM_KERNEL:-}" ]; then
	kernel=$NSBOX_VM_KERNEL
else
	kernel=$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1)
fi
[ -n "$kernel" ] && [ -r "$kernel" ] ||
	fatal "no readable Debian cloud kernel (/boot/vmlinuz-*-cloud-amd64); run make deps (linux-image-cloud-amd64)"
command -v qemu-system-x86_64 >/dev/null || fatal "qemu-system-x86_64 missing; run make deps (qemu-system-x86)"
[[ $timeout =~ ^[0-9]+$ ]] || fatal "NSBOX_VM_TIMEOUT must be a number of seconds"
[[ $unit =~ ^[A-Za-z0-9_\ -]*$ ]] || fatal "NSBOX_VM_UNIT: test names separated by spaces"
unit=${unit// /,}
[[ $integ =~ ^[a-z,]*$ ]] || fatal "NSBOX_VM_INTEG: roles separated by commas"
[[ $integ_tests =~ ^[A-Za-z0-9_.:\ -]*$ ]] || fatal "NSBOX_VM_INTEG_TESTS: test file names separated by spaces"
integ_tests=${integ_tests// /,}
case $compress in none) img=initramfs.cpio ;; gzip) img=initramfs.cpio.gz ;; *) fatal "NSBOX_VM_COMPRESS: none or gzip" ;; esac
[ -x "$build/nsbox" ] || echo "run-vm: warning: $build/nsbox is not built; only the host checks can pass" >&2

mkdir -p "$build/vm" || fatal "mkdir $build/vm"
work=$(mktemp -d "$build/vm/run.XXXXXX") || fatal "mktemp in $build/vm"
qpid=
cleanup() {
	# qemu first (it may still write the log), then the log, then files.
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill -TERM "$qpid" 2>/dev/null
		sleep 0.5
		kill -KILL "$qpid" 2>/dev/null
		wait "$qpid" 2>/dev/null
	fi
	[ -f "$work/serial.log" ] && tr -d '\r' <"$work/serial.log" >"$build/vm/serial.log"
	if [ "${NSBOX_VM_KEEP:-}" = 1 ]; then
		echo "run-vm: kept $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

kver=${kernel##*/vmlinuz-}
NSBOX_BUILD=$build NSBOX_VM_COMPRESS=$compress NSBOX_VM_KVER=$kver "$here/mkinitramfs.sh" "$work/$img" ||
	fatal "building the initramfs failed"
t_image=$(now)

log=$work/serial.log
: >"$log"
# No KVM: on these machines it fails with an MSR error, and TCG is what CI
# has anyway.  -cpu max gives the guest RDRAND, so the kernel's RNG is ready
# at once and Python's startup never waits on getrandom(2).  -nodefaults
# leaves out VGA and the NIC: nothing to probe, nothing to wait for.
# loglevel=3 keeps the kernel's OOM reports off the console, where they
# could split a result line; init prints them from dmesg at the end.
qemu-system-x86_64 \
	-accel tcg,thread=multi -cpu max -m 1024 -smp 2 \
	-nodefaults -display none -no-reboot \
	-serial "file:$log" -monitor none \
	-kernel "$kernel" -initrd "$work/$img" \
	-append "console=ttyS0 quiet loglevel=3 panic=-1 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all nsbox.unit=${unit:-none} nsbox.integ=${integ:-none} nsbox.integ_tests=$integ_tests nsbox.deadline=$((timeout - 8))" \
	</dev/null >"$work/qemu.out" 2>&1 &
qpid=$!

# Stream the console as it comes (CRs from the serial line dropped).
shown=0
show_new() {
	local size
	size=$(stat -c %s "$log" 2>/dev/null) || return 0
	[ "$size" -gt "$shown" ] || return 0
	tail -c +$((shown + 1)) "$log" | head -c $((size - shown)) | tr -d '\r'
	shown=$size
}

deadline=$(awk -v a="$(now)" -v t="$timeout" 'BEGIN { printf "%d", a + t }')
timed_out=0
while kill -0 "$qpid" 2>/dev/null; do
	if [ "$(date +%s)" -ge "$deadline" ]; then
		timed_out=1
		break
	fi
	# Done: no need to wait for poweroff to finish under emulation.
	show_new
	grep -q '^NSBOX-VM-DONE' "$log" 2>/dev/null && sleep 1 && break
	sleep 0.5
done
if [ $timed_out = 1 ]; then
	echo "run-vm: the VM did not finish within $timeout s; killing qemu" >&2
fi
if kill -0 "$qpid" 2>/dev/null; then
	kill -TERM "$qpid" 2>/dev/null
	sleep 0.5
	kill -KILL "$qpid" 2>/dev/null
fi
wait "$qpid" 2>/dev/null
qrc=$?
qpid=
show_new
t_end=$(now)

tr -d '\r' <"$log" >"$build/vm/serial.log"
if [ -s "$work/qemu.out" ]; then
	echo "run-vm: qemu said:" >&2
	sed 's/^/  /' "$work/qemu.out" >&2
fi

# The verdict, from the console only.
clean=$build/vm/serial.log
boot=$(sed -n 's/^NSBOX-VM: kernel .* uptime \([0-9.]*\) s$/\1/p' "$clean" | head -n 1)
status=0
echo
echo "==== nsbox VM results ($(basename "$kernel"), cgroup v2 only)"
if ! grep '^NSBOX-VM-RESULT:' "$clean"; then
	echo "run-vm: no results on the console"
	status=1
fi
grep -q '^NSBOX-VM-RESULT: FAIL' "$clean" && status=1
# Each failure with its reason (the "#   " lines; the output under them,
# "#     ", is in the log above).
awk '/^not ok / { print "  FAILED: " $0; f = 1; next }
	f && /^#   [^ ]/ { print "    " substr($0, 5); next }
	{ f = f && /^#/ }' "$clean"
nskip=$(grep -c '^ok .* # SKIP ' "$clean")
if [ "$nskip" -gt 0 ]; then
	grep '^ok .* # SKIP ' "$clean" | sed 's/^/  SKIPPED: /'
	if [ "${NSBOX_VM_ALLOW_SKIP:-}" = 1 ]; then
		echo "run-vm: $nskip checks skipped (allowed by NSBOX_VM_ALLOW_SKIP=1)"
	else
		echo "run-vm: $nskip checks skipped; a skip fails the run (NSBOX_VM_ALLOW_SKIP=1 to allow)"
		status=1
	fi
fi
done_line=$(grep '^NSBOX-VM-DONE' "$clean" | head -n 1)
if [ -z "$done_line" ]; then
	echo "run-vm: the VM never finished its plan (timed out: $timed_out, qemu status $qrc)"
	status=1
else
	case $done_line in
	*"status=0 "*) ;;
	*) status=1 ;;
	esac
	nroles=$(grep -c '^NSBOX-VM-RESULT:' "$clean")
	if [ "${done_line##*roles=}" != "$nroles" ]; then
		echo "run-vm: $done_line but $nroles role results"
		status=1
	fi
fi
echo "run-vm: image $(elapsed "$t_start" "$t_image") s, boot to init ${boot:-?} s (guest uptime)," \
	"VM $(elapsed "$t_image" "$t_end") s, total $(elapsed "$t_start" "$t_end") s; log: $clean"
if [ $status -eq 0 ]; then
	echo "run-vm: PASS"
else
	echo "run-vm: FAIL"
fi
exit $status
