#!/usr/bin/env bash
# Runs vmkeeperd on the embedded default: libvirt's in-process test driver (test:///default) and
# a private D-Bus bus started here, with state under .dev/. No root services are needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh run

dev="$PWD/.dev"
mkdir -p "$dev/state" "$dev/images"
rm -f "$dev/bus"
sed "s#@SOCKET@#$dev/bus#" scripts/session-bus.conf.in > "$dev/bus.conf"
bus_pid=$(dbus-daemon --config-file="$dev/bus.conf" --fork --print-pid)
trap 'kill "$bus_pid" 2>/dev/null || true' EXIT
address="unix:path=$dev/bus"

cat <<HELP

vmkeeperd is starting on a private bus. In another terminal, try:

  export BUS='$address'
  busctl --address=\$BUS call org.vmkeeper1 /org/vmkeeper1 org.vmkeeper1.Manager CreateMachine ss web-1 '{"cpus":1,"memoryMiB":256,"disks":[{"name":"root","sizeGiB":1}]}'
  busctl --address=\$BUS get-property org.vmkeeper1 /org/vmkeeper1/machine/web_2d1 org.vmkeeper1.Machine State
  busctl --address=\$BUS call org.vmkeeper1 /org/vmkeeper1 org.vmkeeper1.Manager ListMachines
  busctl --address=\$BUS call org.vmkeeper1 /org/vmkeeper1 org.vmkeeper1.Manager DescribeMachine s web-1
  busctl --address=\$BUS introspect org.vmkeeper1 /org/vmkeeper1/machine/web_2d1
  busctl --address=\$BUS call org.vmkeeper1 /org/vmkeeper1 org.vmkeeper1.Manager DeleteMachineWithGracePeriod su web-1 5
  busctl --address=\$BUS call org.vmkeeper1 /org/vmkeeper1 org.vmkeeper1.Manager ListEvents

Images for specs go in $dev/images. Stop with Ctrl-C.

HELP
# The packaged form: the unit's environment (libuv pool, malloc thresholds) and V8 options. One
# plain KEY=VALUE per Environment= line (as bench/fixtures.ts reads them); anything else (quotes,
# spaces, specifiers) stops here rather than being split into words.
unit_env=$(sed -n "s/^Environment=//p" systemd/vmkeeperd.service)
if grep -qvE '^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]"$%\\]*$' <<<"$unit_env"; then
  echo "run-dev.sh: systemd/vmkeeperd.service has an Environment= line that is not one plain KEY=VALUE" >&2
  exit 1
fi
# shellcheck disable=SC2086 # one word per checked KEY=VALUE
env $unit_env \
  node $(sed "s/#.*//" packaging/node-flags | xargs) dist/main.js --config "$PWD/config/config.yaml" --bus "$address" --libvirt-uri test:///default \
  --state-dir "$dev/state" --image-dir "$dev/images" --log-format text "$@"
