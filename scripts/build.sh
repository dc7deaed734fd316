#!/usr/bin/env bash
# Configures and builds Kestrel into ./build (or $KESTREL_BUILD_DIR) with Ninja and
# ccache, two jobs. Extra arguments go to cmake's configure step.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KESTREL_BUILD_DIR:-$root/build}"
jobs="${KESTREL_JOBS:-2}"
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > "$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs"
