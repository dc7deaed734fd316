#!/usr/bin/env bash
# The Python side of the tests and of `kestrel run`: a virtual environment at
# <repo>/.venv (or $KESTREL_VENV) with numpy, onnx (scripts/make_models.py builds the test
# models with it), onnxruntime (scripts/ort_run.py, the reference `kestrel run` checks
# against), pyarrow (`kestrel dataset -o X.parquet`), selenium and prometheus_client
# (tests/dashboard: the dashboard in headless Chromium, /metrics parsed), pytest, pandas and matplotlib
# (python/tests: the Python package's tests; records as a DataFrame; the docs example plots), wheel (pip builds the
# package into a wheel: scripts/install-python-package.sh); with --bench also kernel_tuner
# (bench/kernel_tuner_strategies.py, the strategy bench against Kernel Tuner's
# strategies; not needed by the tests). Idempotent: packages already importable in the
# venv are not installed again.
# pip is retried (KESTREL_PIP_TRIES, 3 by default) with a growing pause between tries.
# Prints the venv's python path on its last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KESTREL_VENV:-$root/.venv}"
tries="${KESTREL_PIP_TRIES:-3}"
delay="${KESTREL_PIP_RETRY_DELAY:-5}"  # seconds; the n-th retry waits n times this
packages=(numpy onnx onnxruntime pyarrow selenium prometheus_client pytest pandas matplotlib wheel)
if [ "${1:-}" = "--bench" ]; then packages+=(kernel_tuner); fi

if ! command -v python3 >/dev/null 2>&1; then
  echo "setup-python: python3 is not installed (Debian: apt-get install python3 python3-venv)" >&2
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup-python: creating $venv" >&2
  if ! python3 -m venv "$venv" >&2; then
    echo "setup-python: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
    rm -rf "$venv"
    exit 1
  fi
fi
python="$venv/bin/python"

# The packages that do not import yet (the module name is the package name for all of them).
missing=()
for p in "${packages[@]}"; do
  if ! "$python" -c "import $p" >/dev/null 2>&1; then missing+=("$p"); fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-python: installing ${missing[*]}" >&2
  ok=0
  for try in $(seq 1 "$tries"); do
    if "$python" -m pip install --disable-pip-version-check -q "${missing[@]}" >&2; then
      ok=1
      break
    fi
    echo "setup-python: pip install failed (try $try of $tries)" >&2
    if [ "$try" -lt "$tries" ]; then sleep $((try * delay)); fi
  done
  if [ "$ok" -ne 1 ]; then
    echo "setup-python: could not install ${missing[*]} into $venv (is PyPI reachable?)" >&2
    exit 1
  fi
  for p in "${missing[@]}"; do
    if ! "$python" -c "import $p" >/dev/null 2>&1; then
      echo "setup-python: $p was installed but does not import in $venv" >&2
      exit 1
    fi
  done
else
  echo "setup-python: ${packages[*]} already importable in $venv" >&2
fi

echo "$python"
