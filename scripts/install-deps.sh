#!/usr/bin/env bash
# Installs what vmkeeper needs on Debian 12, then its npm dependencies, then builds it.
#   install-deps.sh run    what running the agent on the embedded default needs
#   install-deps.sh test   plus what the test suite needs (libvirtd, qemu, busctl, ...)
# Idempotent: only missing Debian packages are installed, and npm ci runs only when the
# lockfile changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure-debian-packages.sh
purpose="${1:-run}"

run_pkgs=(libvirt-dev libsystemd-dev pkg-config python3 make g++ qemu-utils dbus systemd)
test_pkgs=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 busybox-static
           cpio xz-utils util-linux passwd libxml2-utils python3-dbus python3-gi libglib2.0-bin
           polkitd)
pkgs=("${run_pkgs[@]}")
[[ "$purpose" == test ]] && pkgs+=("${test_pkgs[@]}")

ensure_debian_packages "installing Debian packages" "${pkgs[@]}"

if ! command -v node >/dev/null || ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)'; then
  echo "vmkeeper needs Node.js 20 or newer on the PATH" >&2
  exit 1
fi

stamp=node_modules/.vmkeeper-lock-hash
hash=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$hash" ]]; then
  npm ci --no-audit --no-fund
  echo "$hash" > "$stamp"
fi
npm run --silent build
