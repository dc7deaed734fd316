#!/usr/bin/env bash
# Installs the Debian packages Kestrel needs to build, test and benchmark.
# Idempotent: packages already present are skipped, and apt is not touched at all
# when nothing is missing. Needs root (or sudo) only when something must be installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkgconf   # build
  libasio-dev                                        # transport (standalone Asio)
  capnproto libcapnp-dev                             # wire schema
  libsodium-dev                                      # HMAC-SHA256 handshake, nonces, per-frame MACs, module hashes
  libssl-dev                                         # TLS on tracker connections (Asio's SSL stream over OpenSSL)
  dpkg-dev                                           # apt-get source: the boards' mbedTLS and Cap'n Proto are built from Debian's source (scripts/build-mbedtls.sh, scripts/build-capnp.sh)
  libclang-rt-19-dev                                 # libFuzzer, ASan and UBSan runtimes of the fuzz targets (clang-19)
  libboost-dev                                       # the tracker's dashboard: HTTP/1.1 server (Boost.Beast, header-only)
  nlohmann-json3-dev                                 # --json output of host tools
  libcairo2-dev                                      # `kestrel plot`: best-so-far charts as SVG and PNG (host tool only)
  libcli11-dev                                       # command-line parsing of both binaries
  libxgboost-dev libsqlite3-dev                     # cost model, records database
  libpq-dev postgresql                               # records on PostgreSQL (libpq); the tests start their own server (initdb, postgres)
  pybind11-dev                                       # the Python package `kestrel` (bindings over the C++ libraries)
  libonnx-dev libprotobuf-dev                        # model import (ONNX's parser and shape inference)
  libzip-dev                                         # `kestrel run --inputs FILE.npz` (numpy's zip archives)
  python3-venv                                       # the Python test dependencies' venv (onnx, onnxruntime)
  llvm-19-dev libclang-19-dev liblld-19-dev clang-19 lld-19 zlib1g-dev libzstd-dev libffi-dev libxml2-dev  # in-process kernel compiler (+ what LLVM/LLD's CMake configs find)
  catch2 libbenchmark-dev                            # tests, benchmarks
  libopenblas-dev libdnnl-dev                        # `kestrel bench` compares with them; the vendor tests load libopenblas.so.0 and libdnnl.so.2 on the device
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo  # OpenCL: ICD loader (dlopened by kestrel-device), PoCL CPU driver for the OpenCL tests
  iproute2 procps                                    # process/network helpers used by e2e tests
  openssh-server                                     # the deploy test's emulated ssh board (it starts its own sshd; where systemd runs, the package also starts one on port 22)
  chromium chromium-driver fonts-dejavu-core         # the dashboard's browser test (headless Chromium via selenium) and its screenshot's font
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

source "$(dirname "$0")/apt-retry.sh"
echo "setup: installing ${missing[*]}"
apt_update
apt_install "${missing[@]}"
echo "setup: done"
