// Target traits for tests whose outcome must not depend on the machine they run on
// (spaces, strategies, cost models): a fixed AVX2 register file.
#pragma once

#include "kestrel/ops/target_traits.h"

namespace kestrel::test {

inline const ops::TargetTraits& fixed_traits() {
  static const ops::TargetTraits traits = ops::TargetTraits::of(ops::Isa::avx2);
  return traits;
}

}  // namespace kestrel::test
