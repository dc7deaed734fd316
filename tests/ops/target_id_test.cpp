// Tests of ops::TargetId: a target's identity and the text the records store, written
// and parsed in one place.
#include "kestrel/ops/target_id.h"

#include <catch2/catch.hpp>

using kestrel::ops::Backend;
using kestrel::ops::TargetId;

TEST_CASE("target id: every text form round-trips through parse and to_string", "[target-id]") {
  for (const char* text : {"x86_64-linux-gnu", "x86_64-linux-gnu (znver4)", "aarch64-linux-gnu (cortex-a72, +crc)",
                           "x86_64-linux-gnu (+avx2,+fma)", "cuda", "cuda sm_90", "cuda compute_90 #1", "opencl",
                           "opencl #2", "x"}) {
    INFO(text);
    const auto id = TargetId::parse(text);
    REQUIRE(id);
    CHECK(id->to_string() == text);
  }
}

TEST_CASE("target id: the fields of each form", "[target-id]") {
  auto cpu = TargetId::parse("aarch64-linux-gnu (cortex-a72, +crc)");
  REQUIRE(cpu);
  CHECK(cpu->backend == Backend::cpu);
  CHECK(cpu->triple == "aarch64-linux-gnu");
  CHECK(cpu->cpu == "cortex-a72");
  CHECK(cpu->features == "+crc");
  CHECK_FALSE(cpu->is_gpu());
  auto features = TargetId::parse("x86_64-linux-gnu (+avx2,+fma)");
  REQUIRE(features);
  CHECK(features->cpu.empty());
  CHECK(features->features == "+avx2,+fma");
  auto gpu = TargetId::parse("cuda sm_90 #1");
  REQUIRE(gpu);
  CHECK(gpu->backend == Backend::cuda);
  CHECK(gpu->gpu_arch == "sm_90");
  CHECK(gpu->gpu_index == 1);
  CHECK(gpu->triple.empty());
  CHECK(gpu->is_gpu());
  // "cudax" is a triple, not the CUDA backend.
  auto word = TargetId::parse("cudax");
  REQUIRE(word);
  CHECK(word->backend == Backend::cpu);
  CHECK(word->triple == "cudax");
}

TEST_CASE("target id: text of no such form is refused", "[target-id]") {
  for (const char* text : {"", "x86_64-linux-gnu (znver4", " (znver4)", "cuda sm_90 sm_80", "cuda #x", "cuda  sm_90"}) {
    INFO("'" << text << "'");
    CHECK_FALSE(TargetId::parse(text));
  }
}
