#!/usr/bin/env bash
# Sets up, builds (warnings as errors) and runs the whole test suite: unit tests,
# multi-process tests with the real binaries, the layering check, and the boards tests,
# for which it also installs the cross toolchains and qemu and cross-builds the device
# runtime for aarch64 (also fully static), armv7 and riscv64 (emulated boards), and builds the
# board runtime for this machine too (mbedTLS interop). KESTREL_NO_CROSS=1 leaves the cross builds out
# (the emulated-board test then reports itself skipped). The Python test dependencies
# (numpy, onnx, onnxruntime in .venv: scripts/setup-python.sh) come next; without them
# (no PyPI, KESTREL_NO_PYTHON=1) the tests against ONNX Runtime report themselves skipped,
# except with KESTREL_REQUIRE_PYTHON=1 (CI: .ci/run), where that is a failure. After the
# build, the kestrel Python package is pip-installed into the venv
# (scripts/install-python-package.sh; docs/python.md). After
# ctest, the fuzz smoke runs each fuzz target for about a minute (scripts/fuzz.sh smoke;
# KESTREL_NO_FUZZ=1 skips it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
if [ "${KESTREL_NO_PYTHON:-0}" != "1" ]; then
  if ! "$root/scripts/setup-python.sh" > /dev/null; then
    if [ "${KESTREL_REQUIRE_PYTHON:-0}" = "1" ]; then
      echo "test: the Python test dependencies could not be installed (KESTREL_REQUIRE_PYTHON=1)" >&2
      exit 1
    fi
    echo "test: the Python test dependencies could not be installed: the ONNX Runtime tests will be skipped" >&2
  fi
fi
if [ "${KESTREL_NO_CROSS:-0}" != "1" ]; then
  "$root/scripts/setup-cross.sh"
  # Every board's Cap'n Proto is built from Debian's source (scripts/build-capnp.sh); a
  # board whose build could not be made is left out and its board test reports itself
  # skipped (a runtime left from an earlier build is removed, so it is not tested stale).
  for triple in aarch64-linux-gnu armv7a-linux-gnueabihf; do
    if "$root/scripts/build-capnp.sh" "$triple" > /dev/null; then
      "$root/scripts/build-device.sh" "$triple"
      [ "$triple" != aarch64-linux-gnu ] || "$root/scripts/build-device.sh" "$triple" --static
    else
      echo "test: no $triple Cap'n Proto (scripts/build-capnp.sh): the $triple board tests will be skipped" >&2
      rm -f "$root/build-device-$triple/kestrel-device" "$root/build-device-$triple-static/kestrel-device"
    fi
  done
  # riscv64's libraries are built from source (scripts/build-riscv64-deps.sh,
  # scripts/build-mbedtls.sh, scripts/build-capnp.sh); where that failed, its board test
  # reports itself skipped.
  if [ -f "${KESTREL_RISCV64_PREFIX:-/opt/kestrel/riscv64-linux-gnu}/.kestrel-deps" ] &&
     "$root/scripts/build-mbedtls.sh" riscv64-linux-gnu > /dev/null &&
     "$root/scripts/build-capnp.sh" riscv64-linux-gnu > /dev/null; then
    "$root/scripts/build-device.sh" riscv64-linux-gnu
  else
    echo "test: no riscv64 libraries (scripts/build-riscv64-deps.sh, scripts/build-mbedtls.sh, scripts/build-capnp.sh): the riscv64 board test will be skipped" >&2
    rm -f "$root/build-device-riscv64-linux-gnu/kestrel-device"
  fi
fi
# The board runtime for this machine (TLS from mbedTLS, like the boards'): the test of
# an mbedTLS runtime against the OpenSSL tracker runs it.
"$root/scripts/build-device.sh" native
"$root/scripts/build.sh" -DKESTREL_WERROR=ON
build="${KESTREL_BUILD_DIR:-$root/build}"
# The kestrel Python package into the venv (the ctest cases `python: ...` install it again
# before testing it).
if [ "${KESTREL_NO_PYTHON:-0}" != "1" ]; then
  if ! "$root/scripts/install-python-package.sh"; then
    if [ "${KESTREL_REQUIRE_PYTHON:-0}" = "1" ]; then
      echo "test: the kestrel Python package could not be installed (KESTREL_REQUIRE_PYTHON=1)" >&2
      exit 1
    fi
    echo "test: the kestrel Python package could not be installed: its tests will be skipped" >&2
  fi
fi
ctest --test-dir "$build" -j 2 --output-on-failure --timeout 300
# The fuzz smoke: every libFuzzer target for about a minute (scripts/fuzz.sh).
if [ "${KESTREL_NO_FUZZ:-0}" = "1" ]; then
  echo "test: the fuzz smoke was skipped (KESTREL_NO_FUZZ=1)"
else
  "$root/scripts/fuzz.sh" smoke
fi
