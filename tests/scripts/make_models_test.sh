#!/usr/bin/env bash
# Runs make_models_test.py with the test Python: $KESTREL_PYTHON, $KESTREL_VENV's or the
# source tree's .venv (scripts/setup-python.sh), else python3; exit 77 (skipped) when it
# has no onnx, a failure under KESTREL_REQUIRE_PYTHON=1 (CI).
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${KESTREL_PYTHON:-}"
[ -z "$python" ] && [ -n "${KESTREL_VENV:-}" ] && [ -x "$KESTREL_VENV/bin/python" ] && python="$KESTREL_VENV/bin/python"
[ -z "$python" ] && [ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
[ -z "$python" ] && python="$(command -v python3 || true)"
if [ -z "$python" ]; then echo "skipped: no python3"; exit 77; fi
exec "$python" "$root/tests/scripts/make_models_test.py"
