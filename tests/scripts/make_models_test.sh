#!/usr/bin/env bash
# Runs make_models_test.py with the test Python: $KESTREL_PYTHON, the source tree's .venv
# (scripts/setup-python.sh), else python3; exit 77 (skipped) when it has no onnx.
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${KESTREL_PYTHON:-}"
[ -z "$python" ] && [ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
[ -z "$python" ] && python="$(command -v python3 || true)"
if [ -z "$python" ]; then echo "skipped: no python3"; exit 77; fi
exec "$python" "$root/tests/scripts/make_models_test.py"
