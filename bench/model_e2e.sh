#!/usr/bin/env bash
# End-to-end latency of ResNet-18 and MobileNetV2 at batch 1: Kestrel's kernels (an
# exported library per model) against ONNX Runtime on this machine, 1 and 2 threads,
# each output checked against ONNX Runtime's by `kestrel run`.
#   bench/model_e2e.sh KERNELS_ROOT        # KERNELS_ROOT/resnet18/, KERNELS_ROOT/mobilenetv2/
#                                          # (kestrel export -o KERNELS_ROOT/<model>)
#   bench/model_e2e.sh                     # no export: kernels compiled here at the defaults
# Environment: KESTREL_BIN (default build/tools/kestrel), KESTREL_PYTHON (default .venv's),
# MODELS_DIR (models to use; made with scripts/make_models.py when absent), REPEAT (20),
# THREADS ("1 2"). Prints the CPU, its vector ISA, and per model and thread count both
# medians and the speedup (ONNX Runtime's median / Kestrel's: above 1, Kestrel is faster).
# Timings taken while other work shares the machine are not figures to report.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kernels_root="${1:-}"
kestrel="${KESTREL_BIN:-$root/build/tools/kestrel}"
python="${KESTREL_PYTHON:-$root/.venv/bin/python}"
repeat="${REPEAT:-20}"
threads_list="${THREADS:-1 2}"

[ -x "$kestrel" ] || { echo "model_e2e: no kestrel binary at $kestrel (build it, or set KESTREL_BIN)" >&2; exit 2; }
[ -x "$python" ] || { echo "model_e2e: no Python at $python (run scripts/setup-python.sh, or set KESTREL_PYTHON)" >&2; exit 2; }
if [ -n "$kernels_root" ] && [ ! -d "$kernels_root" ]; then
  echo "model_e2e: no directory $kernels_root" >&2
  exit 2
fi

models="${MODELS_DIR:-}"
if [ -z "$models" ]; then
  models="$(mktemp -d /tmp/kestrel-models-XXXXXX)"
  trap 'rm -rf "$models"' EXIT
fi
for m in resnet18 mobilenetv2; do
  [ -f "$models/$m.onnx" ] || "$python" "$root/scripts/make_models.py" "$models" "$m" > /dev/null
done

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || true)"
flags="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || true)"
isa="scalar"
case " $flags " in
  *" avx512f "*) isa="AVX-512" ;;
  *" avx2 "*) isa="AVX2" ;;
  *" asimd "*) isa="NEON" ;;
esac
echo "cpu: ${cpu:-unknown} ($(nproc) cores), vector ISA: $isa"
echo "onnxruntime: $("$python" -c 'import onnxruntime; print(onnxruntime.__version__)')"
printf "%-12s %-40s %7s %12s %12s %8s  %s\n" MODEL KERNELS THREADS "KESTREL ms" "ORT ms" SPEEDUP CHECK

status=0
for m in resnet18 mobilenetv2; do
  kernels=()
  label="compiled here (defaults)"
  if [ -n "$kernels_root" ]; then
    if [ ! -d "$kernels_root/$m" ]; then
      echo "model_e2e: no export for $m in $kernels_root/$m (kestrel export --model $m.onnx -o $kernels_root/$m)" >&2
      status=1
      continue
    fi
    kernels=(--kernels "$kernels_root/$m")
    label="$kernels_root/$m"
  fi
  for t in $threads_list; do
    out="$("$kestrel" run --model "$models/$m.onnx" "${kernels[@]}" --threads "$t" --repeat "$repeat" \
            --python "$python" --json 2>&1)" || true
    line="$(printf '%s' "$out" | "$python" -c '
import json, sys
text = sys.stdin.read()
try:
    j = json.loads(text[text.index("{"):])
except ValueError:
    print("error " + " ".join(text.split())[:200]); sys.exit()
k = j["latency_ms"]["kestrel"]["median"]; o = j["latency_ms"]["onnxruntime"]["median"]
print("%.3f %.3f %.2f %s" % (k, o, o / k, "match" if j["ok"] else "MISMATCH"))')"
    if [ "${line%% *}" = "error" ]; then
      printf "%-12s %-40s %7s  %s\n" "$m" "$label" "$t" "$line"
      status=1
      continue
    fi
    read -r k o s check <<< "$line"
    [ "$check" = "match" ] || status=1
    printf "%-12s %-40s %7s %12s %12s %8s  %s\n" "$m" "$label" "$t" "$k" "$o" "x$s" "$check"
  done
done
exit $status
