#!/usr/bin/env bash
# Sets up, builds (warnings as errors) and runs the whole test suite: unit tests,
# multi-process tests with the real binaries, and the layering check.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" -DKESTREL_WERROR=ON
build="${KESTREL_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" -j 2 --output-on-failure --timeout 300
