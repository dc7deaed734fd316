// Target traits: the register files of the ISAs Kestrel compiles for and their description.
#include "kestrel/ops/target_traits.h"

namespace kestrel::ops {
namespace {

std::string size_text(std::int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

std::string_view to_string(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::sse: return "sse";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::neon: return "neon";
    case Isa::neon32: return "neon32";
  }
  return "?";
}

TargetTraits TargetTraits::of(Isa isa) {
  TargetTraits t;
  t.isa = isa;
  switch (isa) {
    case Isa::scalar:  // e.g. RISC-V without V: 32 floating-point registers
      t = {isa, 1, 32, false, 32 << 10, 256 << 10, 0, 1};
      break;
    case Isa::sse:
      t = {isa, 4, 16, false, 32 << 10, 256 << 10, 8 << 20, 1};
      break;
    case Isa::avx2:
      t = {isa, 8, 16, true, 32 << 10, 512 << 10, 16 << 20, 1};
      break;
    case Isa::avx512:
      t = {isa, 16, 32, true, 48 << 10, 1 << 20, 32 << 20, 1};
      break;
    case Isa::neon:  // Cortex-A72 class (Raspberry Pi 4)
      t = {isa, 4, 32, true, 32 << 10, 1 << 20, 0, 1};
      break;
    case Isa::neon32:  // Cortex-A7/A53 in 32-bit mode: VFPv4 has fused multiply-add
      t = {isa, 4, 16, true, 32 << 10, 512 << 10, 0, 1};
      break;
  }
  return t;
}

int TargetTraits::registers_per_vector(std::int64_t floats) const {
  if (floats <= vector_floats) return 1;
  return static_cast<int>((floats + vector_floats - 1) / vector_floats);
}

std::string TargetTraits::to_string() const {
  std::string out = std::string(ops::to_string(isa)) + ": " + std::to_string(vector_registers) + " x " +
                    std::to_string(vector_floats) + (vector_floats == 1 ? " float" : " floats");
  if (fma) out += ", fma";
  out += ", L1d " + size_text(l1d_bytes) + ", L2 " + size_text(l2_bytes);
  if (l3_bytes > 0) out += ", L3 " + size_text(l3_bytes);
  out += ", " + std::to_string(cores) + (cores == 1 ? " core" : " cores");
  return out;
}

}  // namespace kestrel::ops
