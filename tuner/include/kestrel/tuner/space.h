// A search space: an op's knob domains for one workload, with its constraints. Points
// are numbered by mixed-radix index (knobs in the op's order, the last knob varying
// fastest), so spaces of 10^9 points and more are never materialised.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "kestrel/ops/op.h"

namespace kestrel::tuner {

using Rng = std::mt19937_64;

class Space {
 public:
  // Throws ops::OpError if the space is empty or larger than 2^62 points. `target` is
  // what the op's constraints are checked against (valid()).
  Space(const ops::Op& op, ops::Params params, const ops::TargetTraits& target);

  const ops::Op& op() const { return *op_; }
  const ops::Params& params() const { return params_; }
  const ops::TargetTraits& target() const { return target_; }
  const std::vector<ops::Knob>& knobs() const { return knobs_; }
  // Points before constraints.
  std::uint64_t size() const { return size_; }

  ops::Config config(std::uint64_t index) const;
  // Throws ops::OpError if a knob is missing or a value is outside its domain.
  std::uint64_t index(const ops::Config& config) const;
  // The value position of each knob at `index` (digits of the mixed radix).
  std::vector<std::uint32_t> digits(std::uint64_t index) const;
  std::uint64_t from_digits(const std::vector<std::uint32_t>& digits) const;

  // Whether the op accepts the configuration (its constraints hold).
  bool valid(std::uint64_t index) const;
  // Uniform over valid points by rejection; nullopt if `attempts` draws found none.
  std::optional<std::uint64_t> sample_valid(Rng& rng, int attempts = 10'000) const;
  // Every point that differs from `index` in exactly one knob (valid or not).
  std::vector<std::uint64_t> neighbours(std::uint64_t index) const;
  // A random valid point differing in one knob; nullopt if none found in `attempts`.
  std::optional<std::uint64_t> random_neighbour(std::uint64_t index, Rng& rng, int attempts = 64) const;

 private:
  const ops::Op* op_;
  ops::Params params_;
  ops::TargetTraits target_;
  std::vector<ops::Knob> knobs_;
  std::vector<std::uint64_t> strides_;
  std::uint64_t size_ = 1;
};

}  // namespace kestrel::tuner
