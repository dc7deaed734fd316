#!/usr/bin/env bash
# Installs the kestrel Python package that the build laid out (<build>/python/package:
# python/CMakeLists.txt) into the venv of scripts/setup-python.sh (<repo>/.venv or
# $KESTREL_VENV), replacing any earlier install. Offline: no index, no build isolation
# (setuptools from the venv), no dependencies. Run after scripts/build.sh
# ($KESTREL_BUILD_DIR, default <repo>/build); scripts/test.sh does.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KESTREL_BUILD_DIR:-$root/build}"
venv="${KESTREL_VENV:-$root/.venv}"
package="$build/python/package"
if [ ! -x "$venv/bin/python" ]; then
  echo "install-python-package: no venv at $venv (run scripts/setup-python.sh)" >&2
  exit 1
fi
if ! ls "$package"/kestrel/_kestrel*.so > /dev/null 2>&1 || [ ! -f "$package/setup.py" ]; then
  echo "install-python-package: no built package in $package (build with scripts/build.sh; the configure" \
       "step says why the Python package was skipped: see $build/configure.log)" >&2
  exit 1
fi
"$venv/bin/python" -m pip install --disable-pip-version-check --no-index --no-deps --no-build-isolation \
  --force-reinstall -q "$package" >&2
(cd / && "$venv/bin/python" -c "import kestrel; print('install-python-package: kestrel', kestrel.version(), 'in', kestrel.__file__)" >&2)
