// The fixture kernel modules (tests/device_runtime/fixtures, built into
// KESTREL_FIXTURE_DIR by tests/CMakeLists.txt) and the batch the add fixtures answer.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kestrel/rpc/measure.h"

namespace kestrel::test {

// A whole file; the test fails when it cannot be read.
inline std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

#ifdef KESTREL_FIXTURE_DIR
inline std::string fixture_path(const std::string& name) {
  return std::string(KESTREL_FIXTURE_DIR) + "/fixture_" + name + ".so";
}
inline std::vector<std::uint8_t> read_fixture(const std::string& name) { return read_bytes(fixture_path(name)); }
#endif

// A module hash made of one repeated hex digit ("aaaa...": 64 of them).
inline std::string hash_of(char c) { return std::string(64, c); }

// out = a + b over `n` floats (the add fixtures), checked against the module stored under
// `reference_hash`, with short rounds on one thread.
inline rpc::BatchRequest add_batch_request(std::int64_t n, const std::string& reference_hash) {
  rpc::BatchRequest batch;
  batch.args = {{n, false}, {n, false}, {n, true}};
  batch.reference_hash = reference_hash;
  batch.tolerance = 1e-6;
  batch.settings.repeat = 2;
  batch.settings.min_repeat_ms = 2;
  batch.settings.timeout_ms = 3000;
  batch.settings.threads = 1;
  return batch;
}

}  // namespace kestrel::test
