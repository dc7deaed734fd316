#!/usr/bin/env bash
# The ctest cases of the kestrel Python package (python/CMakeLists.txt):
#   run_pytest.sh PYTHON BUILD_DIR --install   pip-installs <BUILD_DIR>/python/package into
#                                              PYTHON's venv (scripts/install-python-package.sh)
#   run_pytest.sh PYTHON BUILD_DIR TEST.py     runs python/tests/TEST.py with pytest against
#                                              the installed package
# Exits 77 (skipped) when PYTHON cannot import pytest, pandas and matplotlib; under
# KESTREL_REQUIRE_PYTHON=1 (CI) that is a failure instead.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ "$#" -ne 3 ]; then echo "usage: $0 PYTHON BUILD_DIR --install|TEST.py" >&2; exit 2; fi
python="$1"; build="$2"; what="$3"

skip() {
  if [ "${KESTREL_REQUIRE_PYTHON:-}" = "1" ]; then echo "failed: $*"; exit 1; fi
  echo "skipped: $*"; exit 77
}
[ -x "$python" ] || skip "no Python at $python (run scripts/setup-python.sh)"
"$python" -c "import pytest, pandas, matplotlib" > /dev/null 2>&1 \
  || skip "$python cannot import pytest, pandas, matplotlib (run scripts/setup-python.sh)"

if [ "$what" = "--install" ]; then
  exec env KESTREL_BUILD_DIR="$build" KESTREL_VENV="$(cd "$(dirname "$python")/.." && pwd)" \
    "$root/scripts/install-python-package.sh"
fi
# From a scratch folder: the installed package is imported, never the source tree's
# python/kestrel (which has no extension module). KESTREL_DEVICE_BIN is left to the
# package (its own bin/kestrel-device).
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$scratch" || exit 1
unset KESTREL_DEVICE_BIN
export PYTHONDONTWRITEBYTECODE=1 KESTREL_SOURCE_DIR="$root" KESTREL_BUILD_DIR="$build"
"$python" -m pytest -q -p no:cacheprovider "$here/$what"
