#!/usr/bin/env bash
# Fails when a library depends on what its layer must not, directly or through other
# kestrel_* libraries, as CMake links them (scripts/layering.sh --closure reads the
# build's layering.txt, written at configure time):
#   kestrel_records         no kestrel_tuner, kestrel_host or XGBoost (records are data)
#   kestrel_plot            no kestrel_tuner or XGBoost (it draws records)
#   kestrel_compare         no kestrel_tuner or XGBoost (it times given configurations)
#   kestrel_model           no kestrel_host, kestrel_tuner or LLVM (import and planning are pure)
#   kestrel_device_runtime  no kestrel_host, kestrel_tracker, LLVM, SQLite or XGBoost (it ships to boards)
#   kestrel_model_runtime   none of those, and no kestrel_model (ONNX import), ONNX, protobuf, kestrel_ops,
#                           kestrel_rpc or kestrel_records (libkestrel_model ships to boards)
# Usage: check_layering.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir="$1"
build="$2"
[ -f "$build/layering.txt" ] || { echo "FAIL: no $build/layering.txt (configure $build again)"; exit 1; }
closure="$(bash "$source_dir/scripts/layering.sh" --closure "$build")"
status=0
forbid() {
  local target="$1" line dep found=""
  shift
  if ! line="$(grep -E "^$target: " <<< "$closure")"; then
    echo "FAIL: $target is not a target of $build/layering.txt"
    status=1
    return
  fi
  for dep in "$@"; do
    if [[ " ${line#*: } " == *" $dep "* ]]; then found="$found $dep"; fi
  done
  if [ -n "$found" ]; then
    echo "FAIL: $target depends on$found (it links: ${line#*: })"
    status=1
  else
    echo "$target: none of $*"
  fi
}
forbid kestrel_records kestrel_tuner kestrel_host XGBoost
forbid kestrel_plot kestrel_tuner XGBoost
forbid kestrel_compare kestrel_tuner XGBoost
forbid kestrel_model kestrel_host kestrel_tuner LLVM/Clang/LLD
forbid kestrel_device_runtime kestrel_host kestrel_tracker LLVM/Clang/LLD SQLite XGBoost
forbid kestrel_model_runtime kestrel_host kestrel_tracker kestrel_model kestrel_ops kestrel_rpc kestrel_records \
  kestrel_tuner LLVM/Clang/LLD SQLite XGBoost onnx onnx_proto protobuf::libprotobuf
[ "$status" -eq 0 ] || echo "(scripts/layering.sh $build draws what each library links directly)"
exit $status
