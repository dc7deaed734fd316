#!/usr/bin/env bash
# The Python environment for scripts/model-zoo.py (issue 28, docs/model-zoo.md): a virtual
# environment at <repo>/.venv-zoo (or $KESTREL_ZOO_VENV), separate from the tests' .venv
# because torch is large, with torch, torchvision, transformers, onnx, onnxruntime and
# onnxscript (the default, dynamo-based, torch.onnx.export needs onnxscript).
#
# torch: PyPI only offers the default Linux wheel, which pulls the CUDA libraries (several
# GB; they are never used here). To use a CPU-only wheel index instead, set
# KESTREL_TORCH_INDEX_URL to it: torch and torchvision are then installed from that index
# first, and the default wheel only if that fails.
#
# Idempotent: packages that already import in the venv are not installed again (a second
# run takes a few seconds). pip is retried (KESTREL_PIP_TRIES, 3 by default) with a growing
# pause between tries, because the mirror hiccups. Prints the venv's python path on its
# last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KESTREL_ZOO_VENV:-$root/.venv-zoo}"
tries="${KESTREL_PIP_TRIES:-3}"
delay="${KESTREL_PIP_RETRY_DELAY:-5}"  # seconds; the n-th retry waits n times this
torch_index="${KESTREL_TORCH_INDEX_URL:-}"

# package name -> module name it imports as, in install order (torch before the packages
# that depend on it, so that pip does not resolve torch twice).
packages=(torch torchvision transformers onnx onnxruntime onnxscript)
declare -A module=([torch]=torch [torchvision]=torchvision [transformers]=transformers
                   [onnx]=onnx [onnxruntime]=onnxruntime [onnxscript]=onnxscript)

log() { echo "setup-zoo: $*" >&2; }

if ! command -v python3 >/dev/null 2>&1; then
  log "python3 is not installed (Debian: apt-get install python3 python3-venv)"
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  if ! python3 -m venv "$venv" >&2; then
    log "python3 -m venv failed (Debian: apt-get install python3-venv)"
    rm -rf "$venv"
    exit 1
  fi
fi
python="$venv/bin/python"

imports() { "$python" -c "import $1" >/dev/null 2>&1; }

# pip_install ARGS...: pip install, tried $tries times.
pip_install() {
  local try
  for try in $(seq 1 "$tries"); do
    if "$python" -m pip install --disable-pip-version-check -q "$@" >&2; then
      return 0
    fi
    log "pip install $* failed (try $try of $tries)"
    if [ "$try" -lt "$tries" ]; then sleep $((try * delay)); fi
  done
  return 1
}

missing=()
for p in "${packages[@]}"; do
  if ! imports "${module[$p]}"; then missing+=("$p"); fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  log "${packages[*]} already importable in $venv"
  echo "$python"
  exit 0
fi

log "installing ${missing[*]} into $venv"
for p in "${missing[@]}"; do
  if imports "${module[$p]}"; then continue; fi  # came in as a dependency of an earlier one
  if [ -n "$torch_index" ] && { [ "$p" = torch ] || [ "$p" = torchvision ]; }; then
    log "trying $p from $torch_index (KESTREL_TORCH_INDEX_URL)"
    if pip_install --index-url "$torch_index" "$p"; then continue; fi
    log "$p from $torch_index failed; falling back to the default index"
  fi
  start=$(date +%s)
  if ! pip_install "$p"; then
    log "could not install $p into $venv (is PyPI reachable?)"
    exit 1
  fi
  log "$p installed in $(( $(date +%s) - start )) s"
done

for p in "${packages[@]}"; do
  if ! imports "${module[$p]}"; then
    log "$p was installed but does not import in $venv"
    "$python" -c "import ${module[$p]}" >&2 || true
    exit 1
  fi
done
"$python" - >&2 <<'EOF'
import torch, torchvision, transformers, onnx, onnxruntime, onnxscript
print("setup-zoo: torch", torch.__version__, "torchvision", torchvision.__version__,
      "transformers", transformers.__version__, "onnx", onnx.__version__,
      "onnxruntime", onnxruntime.__version__, "onnxscript", onnxscript.__version__)
EOF
echo "$python"
