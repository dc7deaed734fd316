// What an op needs to know about the CPU it compiles for: the vector register file (width
// and count), FMA, the cache sizes and the core count. Constraints reject configurations
// the target cannot hold (a micro-tile over its register file) and defaults are derived
// from them, so the default is good on the machine it runs on, not on the widest one.
//
// The host fills them in for a compile target (host::Target::traits): from the device's
// registered capabilities when measuring on a device, from the triple and -mcpu when
// compiling ahead. GPU ops ignore them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::ops {

// The vector instruction set kernels are compiled for. neon is AArch64's Advanced SIMD
// (32 128-bit registers), neon32 ARMv7's NEON (16 128-bit q registers), sse the x86-64
// baseline (16 128-bit registers).
enum class Isa { scalar, sse, avx2, avx512, neon, neon32 };

std::string_view to_string(Isa isa);

struct TargetTraits;
// The columns of gemm's register micro-tile on `traits`' register file: two vectors of
// its width, four when 4- or 8-float vectors have 32 registers (AVX-512 32, AVX2 16,
// AArch64 16, SSE and ARMv7 8). gemm's default nr for M > 16, and the panel width a
// model's constant B is packed in (gemm's `panels`); 0 below 4 floats a vector.
std::int64_t gemm_tile_columns(const TargetTraits& traits);

struct TargetTraits {
  Isa isa = Isa::sse;
  int vector_floats = 4;     // fp32 lanes of one vector register
  int vector_registers = 16; // architectural vector registers
  bool fma = false;          // fused multiply-add instructions
  std::int64_t l1d_bytes = 32 << 10;
  std::int64_t l2_bytes = 256 << 10;
  std::int64_t l3_bytes = 8 << 20;  // 0 when the target has no L3
  int cores = 1;

  // The ISA's register file with typical caches for it and one core.
  static TargetTraits of(Isa isa);

  // Vector registers one vector of `floats` lanes occupies on this target (a wider vector
  // is split by the compiler into several registers).
  int registers_per_vector(std::int64_t floats) const;

  // "avx2: 16 x 8 floats, fma, L1d 32 KiB, L2 512 KiB, L3 32 MiB, 2 cores"
  std::string to_string() const;
  friend bool operator==(const TargetTraits&, const TargetTraits&) = default;
};

}  // namespace kestrel::ops
