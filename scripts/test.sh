#!/usr/bin/env bash
# The test command: installs what the tests need, type-checks, runs every test (unit and
# integration; integration tests start their own dbus-daemon, libvirtd and guests), and ends
# with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test || exit 1

echo "== type check"
if ! npx tsc -p tsconfig.json; then
  echo "0 passed, 1 failed"
  exit 1
fi

echo "== tests"
report=$(mktemp)
npx vitest run --reporter=default --reporter=json --outputFile.json="$report" "$@"
status=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const skipped = r.numPendingTests + r.numTodoTests;
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (skipped ? `, ${skipped} skipped` : ""));
' "$report" || echo "0 passed, 1 failed"
rm -f "$report"
exit $status
