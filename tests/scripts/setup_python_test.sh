#!/usr/bin/env bash
# Tests scripts/setup-python.sh against a fake python3 (its venv module and pip): a fresh
# venv gets numpy, onnx and onnxruntime; a pip that fails twice is retried; a pip that
# always fails is reported and fails; a second run with everything importable installs
# nothing; each success prints the venv's python path last.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
cat > "$work/fake-python" <<'FAKE'
#!/usr/bin/env bash
# Fake python: `-m venv DIR` makes DIR/bin/python (this script); `-c "import X"` succeeds
# when X is listed in $FAKE_DIR/installed; `-m pip install ... PKGS` is logged, fails as
# many times as $FAKE_DIR/pip-fails says, then lists PKGS as installed.
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
if [ "$1" = "-c" ]; then
  module="${2#import }"
  grep -qx "$module" "$FAKE_DIR/installed" 2>/dev/null && exit 0
  exit 1
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "${*:3}" >> "$FAKE_DIR/pip-calls"
  n=$(cat "$FAKE_DIR/pip-fails" 2>/dev/null || echo 0)
  if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$FAKE_DIR/pip-fails"; echo "ERROR: network unreachable" >&2; exit 1; fi
  for p in "${@:3}"; do case "$p" in -*) ;; install) ;; *) echo "$p" >> "$FAKE_DIR/installed" ;; esac; done
  exit 0
fi
exit 2
FAKE
chmod +x "$work/fake-python"
cp "$work/fake-python" "$work/bin/python3"
export PATH="$work/bin:$PATH" FAKE_DIR="$work" KESTREL_VENV="$work/venv" KESTREL_PIP_TRIES=3 KESTREL_PIP_RETRY_DELAY=0
fail() { echo "FAIL: $*"; exit 1; }

# 1. a fresh venv; pip fails twice, the third try installs all three packages.
echo 2 > "$work/pip-fails"
out=$("$root/scripts/setup-python.sh" 2> "$work/err") || fail "setup-python failed after two pip failures: $(cat "$work/err")"
[ "$(echo "$out" | tail -1)" = "$work/venv/bin/python" ] || fail "the venv's python path was not printed last: $out"
[ "$(wc -l < "$work/pip-calls")" -eq 3 ] || fail "pip was not tried 3 times"
grep -q "numpy onnx onnxruntime" "$work/pip-calls" || fail "pip was not asked for numpy, onnx and onnxruntime"
[ "$(grep -c 'try' "$work/err")" -eq 2 ] || fail "the failed tries were not reported"

# 2. run again: everything imports, nothing is installed, the path is printed.
: > "$work/pip-calls"
out=$("$root/scripts/setup-python.sh" 2> "$work/err") || fail "a second run failed"
[ ! -s "$work/pip-calls" ] || fail "a second run called pip"
[ "$(echo "$out" | tail -1)" = "$work/venv/bin/python" ] || fail "a second run did not print the path"

# 3. one package missing, pip always failing: three tries, a message naming it, exit 1.
grep -vx onnxruntime "$work/installed" > "$work/kept"; mv "$work/kept" "$work/installed"
: > "$work/pip-calls"; echo 99 > "$work/pip-fails"
if "$root/scripts/setup-python.sh" > /dev/null 2> "$work/err"; then fail "a pip that always fails succeeded"; fi
[ "$(wc -l < "$work/pip-calls")" -eq 3 ] || fail "pip was not tried 3 times"
grep -q -- "-q onnxruntime$" "$work/pip-calls" || fail "pip was asked for more than the missing package"
grep -q "could not install onnxruntime" "$work/err" || fail "no message naming the missing package"
echo "setup-python: venv created, pip retried, idempotent, a lasting failure reported"
