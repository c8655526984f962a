#!/bin/bash
# Build the initramfs for the nsbox VM test (tests/vm/run-vm.sh) from this
# host's files: busybox-static, setpriv, Debian's python3.11 and its stdlib,
# the built nsbox binaries (nsbox, nsboxd, the runner, the test programs),
# every shared library they need, and the test plan.
#
#   tests/vm/mkinitramfs.sh OUT.cpio[.gz]
#
# Environment: NSBOX_BUILD (default: <tree>/build), NSBOX_VM_STAGE (staging
# directory to fill; default: a temp dir next to OUT, removed afterwards),
# NSBOX_VM_COMPRESS (none|gzip; default: from OUT's suffix).
#
# The layout is Debian's merged /usr (bin, lib, lib64, sbin are symlinks into
# usr), so nsbox sees the same host layout inside the VM as on a real Debian
# system.  Nothing is installed on the host; only files in the staging
# directory and OUT are written.
set -euo pipefail

die() { echo "mkinitramfs: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 OUT.cpio[.gz]"
out=$1
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${NSBOX_BUILD:-$top/build}
py=/usr/bin/python3.11
pylib=/usr/lib/python3.11

case ${NSBOX_VM_COMPRESS:-} in
"") case $out in *.gz) compress=gzip ;; *) compress=none ;; esac ;;
gzip|none) compress=$NSBOX_VM_COMPRESS ;;
*) die "NSBOX_VM_COMPRESS must be none or gzip" ;;
esac

for t in /bin/busybox /usr/bin/setpriv "$py" cpio ldd; do
	command -v "$t" >/dev/null || die "missing $t (make deps installs busybox-static, util-linux, python3.11, cpio)"
done
# busybox must be the static one: the initramfs' /bin/sh runs before any
# library path is trusted, and a dynamic busybox would hide missing libs.
if ldd /bin/busybox >/dev/null 2>&1; then
	die "/bin/busybox is dynamically linked; install busybox-static"
fi

cleanup_stage=
if [ -n "${NSBOX_VM_STAGE:-}" ]; then
	stage=$NSBOX_VM_STAGE
	mkdir -p "$stage"
else
	stage=$(mktemp -d "$(dirname "$out")/stage.XXXXXX")
	cleanup_stage=$stage
fi
trap '[ -z "$cleanup_stage" ] || rm -rf "$cleanup_stage"' EXIT
[ -z "$(ls -A "$stage")" ] || die "staging directory $stage is not empty"
# It becomes /: mktemp's 0700 would lock every user but root out.
chmod 0755 "$stage"

# Merged /usr, as on Debian 12.
mkdir -p "$stage"/usr/{bin,sbin,lib,lib64,local/bin,local/lib/nsbox,local/libexec/nsbox} \
	"$stage"/{dev,proc,sys,tmp,run,root,etc,home/deleg,home/nodeleg,var/tmp,mnt,newroot}
ln -s usr/bin "$stage/bin"
# overlayfs is a module of Debian's kernel (CONFIG_OVERLAY_FS=m), autoloaded
# on a real host; /init loads it (a bounded --workspace is an overlay).
ko=/lib/modules/${NSBOX_VM_KVER:-none}/kernel/fs/overlayfs/overlay.ko
if [ -r "$ko" ]; then
	mkdir -p "$stage/usr/lib/nsbox-vm"
	cp "$ko" "$stage/usr/lib/nsbox-vm/overlay.ko"
fi
ln -s usr/sbin "$stage/sbin"
ln -s usr/lib "$stage/lib"
ln -s usr/lib64 "$stage/lib64"
chmod 1777 "$stage/tmp" "$stage/var/tmp"
chmod 700 "$stage/root"

# Copy a host file to the same path in the stage, dereferencing symlinks.
# The stage's own bin/lib symlinks route /lib/... into usr/lib/...
put() {
	local src=$1 dst=${2:-$1}
	mkdir -p "$stage$(dirname "$dst")"
	cp -L --preserve=mode "$src" "$stage$dst"
}

# Every shared library an ELF file needs (ldd resolves the full closure),
# plus the dynamic loader at the path the binaries name.
declare -A have_lib=()
build_real=$(realpath -m "$build")
add_libs() {
	local f=$1 line lib real
	# ldd exits non-zero on static binaries and scripts: nothing to add.
	ldd "$f" >/dev/null 2>&1 || return 0
	while read -r line; do
		case $line in
		*"=> not found"*) die "$f: ${line%% *} not found" ;;
		*"=> /"*) lib=${line#*=> }; lib=${lib%% (*} ;;
		/*) lib=${line%% (*} ;;
		*) continue ;;
		esac
		[ -n "${have_lib[$lib]:-}" ] && continue
		have_lib[$lib]=1
		# Our own libraries (libnsbox.so.0, found through
		# RUNPATH $ORIGIN/..) go where the build layout puts them
		# relative to the binaries: under /usr/local/lib/nsbox.
		real=$(realpath -m "$lib")
		case $real in
		"$build_real"/*) put "$lib" "/usr/local/lib/nsbox/${real#"$build_real"/}" ;;
		*) put "$lib" ;;
		esac
	done < <(ldd "$f")
}
add_bin() {
	put "$1" "${2:-$1}"
	add_libs "$1"
}

# The base tools of a Debian system, as the real binaries: tests run
# commands inside sandboxes that show the host's /usr, and rely on e.g.
# `exec -a NAME sleep` (a busybox applet picks itself by argv[0]) and pgrep.
# /bin/sh is dash, as on Debian.
add_pkg_bins() {
	local pkg=$1 f t
	shift
	for f in $(dpkg -L "$pkg" 2>/dev/null | grep -E '^(/usr)?/s?bin/[^/]+$'); do
		if [ $# -gt 0 ]; then
			case " $* " in *" ${f##*/} "*) ;; *) continue ;; esac
		fi
		t=/usr/${f#/usr/}
		if [ -L "$f" ]; then
			# Package symlinks (pkill -> pgrep): same directory, by name.
			[ -e "$stage$t" ] || ln -s "$(basename "$(readlink -f "$f")")" "$stage$t"
		elif [ -f "$f" ] && [ -x "$f" ]; then
			add_bin "$f" "$t"
		fi
	done
}
for pkg in dash coreutils procps grep sed findutils mawk; do
	dpkg -s "$pkg" >/dev/null 2>&1 || die "package $pkg is not installed"
	add_pkg_bins "$pkg"
done
# From util-linux only what tests use; setpriv because busybox's can't
# change ids or clear supplementary groups.
add_pkg_bins util-linux setpriv unshare nsenter prlimit taskset
ln -sfn dash "$stage/usr/bin/sh"
ln -sfn mawk "$stage/usr/bin/awk"
for t in sh awk setpriv sleep pgrep; do
	[ -x "$stage/usr/bin/$t" ] || die "no $t in the image"
done
# busybox for the rest (mount, ip, poweroff, ...), never over a real binary.
put /bin/busybox /usr/bin/busybox
for a in $(/bin/busybox --list); do
	[ -e "$stage/usr/bin/$a" ] || [ -L "$stage/usr/bin/$a" ] || [ -e "$stage/usr/sbin/$a" ] ||
		ln -s busybox "$stage/usr/bin/$a"
done

# Python: the interpreter, its stdlib without the test suite and GUI/tooling
# parts, the C extension modules and their libraries.  Bytecode caches are
# kept (only the plain .pyc, not opt-1/opt-2): compiling the startup modules
# on every interpreter start costs seconds under software emulation, and
# inside the sandbox /usr is read-only so nothing would ever be cached.
add_bin "$py"
ln -sf python3.11 "$stage/usr/bin/python3"
(cd / && tar -cf - \
	--exclude="${pylib#/}/test" --exclude="${pylib#/}/idlelib" --exclude="${pylib#/}/tkinter" \
	--exclude="${pylib#/}/turtledemo" --exclude="${pylib#/}/lib2to3" --exclude="${pylib#/}/ensurepip" \
	--exclude="${pylib#/}/config-3.11-*" --exclude="${pylib#/}/pydoc_data" \
	--exclude='*/unittest/test' --exclude='*/ctypes/test' --exclude='*/sqlite3/test' \
	--exclude='*/distutils/tests' --exclude='*.opt-1.pyc' --exclude='*.opt-2.pyc' \
	"${pylib#/}") | (cd "$stage" && tar -xf -)
rm -f "$stage$pylib/sitecustomize.py"	# Debian's points into /etc (apport hook)
# pytest and what it imports, for the integration suite (tests/integ).
dist=/usr/lib/python3/dist-packages
if [ -d "$dist/pytest" ]; then
	(cd / && tar -cf - --exclude='*.opt-1.pyc' --exclude='*.opt-2.pyc' \
		$(cd / && for m in pytest _pytest pluggy iniconfig packaging attr attrs py.py; do
			[ -e "$dist/$m" ] && echo "${dist#/}/$m"; done)) | (cd "$stage" && tar -xf -)
fi
for so in "$pylib"/lib-dynload/*.so; do
	add_libs "$so"
done

# nsbox: the whole build output that runs on the target (binaries and test
# programs), under /usr/local so a sandbox that shows the host's /usr sees
# the probes at the same path.
nsbox_present=no
if [ -x "$build/nsbox" ]; then
	nsbox_present=yes
	add_bin "$build/nsbox" /usr/local/lib/nsbox/nsbox
	ln -s ../lib/nsbox/nsbox "$stage/usr/local/bin/nsbox"
fi
# nsboxd (and libsystemd, through ldd), run by the root role's service
# checks; no systemd-socket-activate: socket activation is tested on the
# host (tests/integ/test_nsboxd.py), and its libsystemd-shared is 3 MiB more.
if [ -x "$build/nsboxd" ]; then
	add_bin "$build/nsboxd" /usr/local/lib/nsbox/nsboxd
	mkdir -p "$stage/usr/local/sbin"
	ln -s ../lib/nsbox/nsboxd "$stage/usr/local/sbin/nsboxd"
fi
if [ -x "$build/nsbox-runner" ]; then
	add_bin "$build/nsbox-runner" /usr/local/lib/nsbox/nsbox-runner
	ln -s ../../lib/nsbox/nsbox-runner "$stage/usr/local/libexec/nsbox/nsbox-runner"
fi
if [ -d "$build/tests" ]; then
	while IFS= read -r -d '' f; do
		rel=${f#"$build/"}
		add_bin "$f" "/usr/local/lib/nsbox/$rel"
	done < <(find "$build/tests" -maxdepth 2 -type f -perm -u+x -print0)
fi

# The test plan, init, and the source-tree tests a plan may run.
install -m 0755 "$here/init" "$stage/init"
install -d "$stage/usr/local/lib/nsbox/vm"
install -m 0755 "$here/inside.sh" "$stage/usr/local/lib/nsbox/vm/inside.sh"
# Laid out as in the source tree: unit tests open tests/data/... relative
# to the top of the tree.
for d in integ data; do
	[ -d "$top/tests/$d" ] || continue
	mkdir -p "$stage/usr/local/lib/nsbox/src/tests"
	cp -r "$top/tests/$d" "$stage/usr/local/lib/nsbox/src/tests/"
done

# Users: root, "deleg" (uid 1000, gets a delegated cgroup subtree) and
# "nodeleg" (uid 1001, no delegation).
cat >"$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
deleg:x:1000:1000:delegated cgroup user:/home/deleg:/bin/sh
nodeleg:x:1001:1001:no cgroup delegation:/home/nodeleg:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$stage/etc/group" <<'EOF'
root:x:0:
deleg:x:1000:
nodeleg:x:1001:
nogroup:x:65534:
EOF
# nsbox may consult these for rootless mappings; one range each.
printf 'deleg:100000:65536\nnodeleg:200000:65536\n' >"$stage/etc/subuid"
cp "$stage/etc/subuid" "$stage/etc/subgid"
chown -R 1000:1000 "$stage/home/deleg"
chown -R 1001:1001 "$stage/home/nodeleg"
echo nsbox-vm >"$stage/etc/hostname"
printf '127.0.0.1 localhost nsbox-vm\n::1 localhost\n' >"$stage/etc/hosts"
: >"$stage/etc/resolv.conf"
printf 'hosts: files\npasswd: files\ngroup: files\n' >"$stage/etc/nsswitch.conf"
# Python's os/platform and some tests read these.
cp /etc/os-release "$stage/etc/os-release" 2>/dev/null || true
# tzdata is Priority: required in Debian: every host has the zone files
# (tests bind them into sandboxes).
if [ -d /usr/share/zoneinfo ]; then
	mkdir -p "$stage/usr/share"
	cp -a /usr/share/zoneinfo "$stage/usr/share/"
fi
# Files every Debian host has and sandboxes bind: /etc/alternatives (as
# symlinks; some point at tools not in the image) and a loader cache built
# for the image's own libraries (ldconfig -r).
cp -a /etc/alternatives "$stage/etc/"
printf '/usr/local/lib\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n' \
	>"$stage/etc/ld.so.conf"
/usr/sbin/ldconfig -r "$stage" || die "ldconfig for the image failed"
[ -s "$stage/etc/ld.so.cache" ] || die "ldconfig made no /etc/ld.so.cache"

tmp_out="$out.tmp.$$"
# The kernel opens /dev/console for init before anything is mounted, so the
# image needs that node; a first archive carries it (the kernel unpacks
# concatenated archives in order), made without mknod so no privilege is
# needed to build the image.
"$py" - >"$tmp_out.cpio" <<'PY'
import sys
def entry(name, mode, rmaj=0, rmin=0):
    name = name.encode() + b"\0"
    hdr = "070701" + "".join("%08X" % v for v in (
        0, mode, 0, 0, 1, 0, 0, 0, 0, rmaj, rmin, len(name), 0))
    buf = hdr.encode() + name
    return buf + b"\0" * (-len(buf) % 4)
out = entry("dev", 0o040755) + entry("dev/console", 0o020600, 5, 1) + entry("TRAILER!!!", 0)
sys.stdout.buffer.write(out + b"\0" * (-len(out) % 512))
PY
# newc, entries sorted for a reproducible image; ownership as staged (the
# home directories belong to their users).
(cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio --null --create --format=newc --quiet) >>"$tmp_out.cpio"
if [ "$compress" = gzip ]; then
	gzip -1 -n -c "$tmp_out.cpio" >"$tmp_out"
	rm -f "$tmp_out.cpio"
else
	mv "$tmp_out.cpio" "$tmp_out"
fi
mv "$tmp_out" "$out"
echo "mkinitramfs: $out ($(du -h "$out" | cut -f1), $compress, nsbox: $nsbox_present)"
