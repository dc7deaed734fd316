#!/usr/bin/env bash
# kestrel-wire-layout --check on a copy of the layout tables with one enum's size changed:
# it must exit 1 and name the command that regenerates the tables (and pass the original).
set -euo pipefail
tool="$1"
tables="$2"
stale="$(mktemp)"
trap 'rm -f "$stale"' EXIT
sed 's|^    {2},  // 0: Role$|    {3},  // 0: Role|' "$tables" > "$stale"
if cmp -s "$tables" "$stale"; then
  echo "FAIL: the test's edit no longer applies to $tables (the Role enum's row moved): update this test"
  exit 1
fi
"$tool" --check "$tables"
set +e
out=$("$tool" --check "$stale" 2>&1)
rc=$?
set -e
echo "$out"
if [ "$rc" -ne 1 ]; then
  echo "FAIL: --check of stale tables exited $rc, not 1"
  exit 1
fi
if ! grep -q "regenerate it with" <<< "$out"; then
  echo "FAIL: the message does not say how to regenerate the tables"
  exit 1
fi
echo "ok: stale tables refused"
