#!/usr/bin/env bash
# Fails if the device runtime binary depends on, or contains, the host's heavy
# libraries (LLVM, Clang, LLD, SQLite, XGBoost, cairo), or links a GPU runtime (libOpenCL,
# libcuda, NVRTC): those are loaded with dlopen, so one binary runs with or without a GPU.
# It must not contain the tracker (kestrel_tracker) either, nor its dashboard's HTTP server
# (Boost.Beast): devices depend on rpc only.
set -euo pipefail
# (grep reads nm's whole output, never -q: under pipefail an early exit of grep makes nm
# die of SIGPIPE and the pipeline fail, so a match would read as no match.)
binary="$1"
[ -x "$binary" ] || { echo "no such binary: $binary"; exit 1; }
needed=$(readelf -d "$binary" | awk '/NEEDED/ {print $5}')
echo "kestrel-device needs: $(echo $needed | tr -d '[]')"
if echo "$needed" | grep -Ei 'llvm|clang|lld|sqlite|xgboost|cairo'; then
  echo "FAIL: kestrel-device links a host-only library"
  exit 1
fi
if echo "$needed" | grep -Ei 'opencl|libcuda|nvrtc|cudart'; then
  echo "FAIL: kestrel-device links a GPU runtime (it must dlopen it)"
  exit 1
fi
if nm -C "$binary" 2>/dev/null | grep -E ' (T|W) (llvm::|clang::|sqlite3_|XGBoost)' >/dev/null; then
  echo "FAIL: kestrel-device contains LLVM/Clang/SQLite/XGBoost code"
  exit 1
fi
if nm -C "$binary" 2>/dev/null | grep -E ' (T|W|t) kestrel::tracker::' >/dev/null; then
  echo "FAIL: kestrel-device contains tracker code (kestrel::tracker); the device runtime must depend on rpc only"
  exit 1
fi
if nm -C "$binary" 2>/dev/null | grep -E ' (T|W|t) (boost::beast::|kestrel::tracker::Http)' >/dev/null; then
  echo "FAIL: kestrel-device contains the dashboard's HTTP server (Boost.Beast); it belongs to the tracker"
  exit 1
fi
echo "size: $(stat -c %s "$binary") bytes (unstripped)"
