#!/bin/sh
# Debian 12 build and test packages for nsbox (make deps).
set -e
export DEBIAN_FRONTEND=noninteractive
PKGS="build-essential pkg-config mmdebstrap fakechroot fakeroot uidmap clang clang-format libclang-rt-14-dev libseccomp-dev libcap-dev \
libjansson-dev libsystemd-dev libedit-dev tmux libpython3.11-dev python3.11 python3-pytest libpython3.11-testsuite python3-setuptools python3-pip publicsuffix \
python3-wheel python3-mypy python3-matplotlib python3-pandas curl openssl \
python3.11-venv bubblewrap hyperfine strace \
systemd util-linux procps iproute2 locales valgrind qemu-system-x86 linux-image-cloud-amd64 busybox-static cpio"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends $missing
fi
# The MCP tests' clients and test server: the official TypeScript SDK (v1,
# and the v2 client package for the 2026-07-28 revision) and the MCP
# Inspector, pinned by tests/mcp/package-lock.json (about 170 MB, 20 s).  The
# v1 SDK runs on node >= 18 (Debian 12's nodejs); the v2 client and the
# Inspector need node >= 20, and their tests skip on an older node, saying so.
# No install scripts: none of these packages needs one.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends nodejs npm
fi
mcp_modules="$(dirname "$0")/../tests/mcp/node_modules/@modelcontextprotocol"
if [ ! -d "$mcp_modules/sdk" ] || [ ! -d "$mcp_modules/client" ] || [ ! -d "$mcp_modules/inspector" ]; then
	(cd "$(dirname "$0")/../tests/mcp" && npm ci --no-audit --no-fund --ignore-scripts)
fi
