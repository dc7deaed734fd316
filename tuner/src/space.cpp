// Search spaces: mixed-radix numbering of an op's knob domains (the last knob varies
// fastest), constraint checks through the op, and random valid points and neighbours.
#include "kestrel/tuner/space.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace kestrel::tuner {
namespace {

constexpr std::uint64_t kMaxSize = std::uint64_t{1} << 62;

std::string describe(const ops::Op& op, const ops::Params& params) {
  return std::string(op.name()) + " (" + ops::format_params(params) + ")";
}

}  // namespace

Space::Space(const ops::Op& op, ops::Params params, const ops::TargetTraits& target)
    : op_(&op), params_(std::move(params)), target_(target) {
  op.validate(params_);
  knobs_ = op.knobs(params_);
  strides_.assign(knobs_.size(), 1);
  for (std::size_t i = knobs_.size(); i-- > 0;) {
    const auto& knob = knobs_[i];
    if (knob.values.empty()) {
      throw ops::OpError("the search space of " + describe(op, params_) + " is empty: knob " + knob.name +
                         " has no values");
    }
    strides_[i] = size_;
    auto count = static_cast<std::uint64_t>(knob.values.size());
    if (size_ > kMaxSize / count) {
      throw ops::OpError("the search space of " + describe(op, params_) + " has more than 2^62 points");
    }
    size_ *= count;
  }
}

ops::Config Space::config(std::uint64_t index) const {
  auto position = digits(index);
  ops::Config out;
  for (std::size_t i = 0; i < knobs_.size(); ++i) out.emplace(knobs_[i].name, knobs_[i].values[position[i]]);
  return out;
}

std::uint64_t Space::index(const ops::Config& config) const {
  std::uint64_t out = 0;
  for (std::size_t i = 0; i < knobs_.size(); ++i) {
    const auto& knob = knobs_[i];
    auto it = config.find(knob.name);
    if (it == config.end()) {
      throw ops::OpError("configuration " + ops::format_config(config) + " of " + describe(*op_, params_) +
                         " lacks knob " + knob.name);
    }
    auto value = std::find(knob.values.begin(), knob.values.end(), it->second);
    if (value == knob.values.end()) {
      throw ops::OpError("configuration " + ops::format_config(config) + " of " + describe(*op_, params_) + ": " +
                         knob.name + "=" + std::to_string(it->second) + " is outside the knob's domain");
    }
    out += static_cast<std::uint64_t>(value - knob.values.begin()) * strides_[i];
  }
  if (config.size() != knobs_.size()) {
    for (const auto& entry : config) {
      bool known = std::any_of(knobs_.begin(), knobs_.end(), [&](const ops::Knob& k) { return k.name == entry.first; });
      if (!known) {
        throw ops::OpError("configuration " + ops::format_config(config) + " of " + describe(*op_, params_) +
                           " names unknown knob " + entry.first);
      }
    }
  }
  return out;
}

std::vector<std::uint32_t> Space::digits(std::uint64_t index) const {
  if (index >= size_) {
    throw std::out_of_range("space index " + std::to_string(index) + " is outside 0.." + std::to_string(size_ - 1));
  }
  std::vector<std::uint32_t> out(knobs_.size());
  for (std::size_t i = 0; i < knobs_.size(); ++i) {
    out[i] = static_cast<std::uint32_t>(index / strides_[i]);
    index %= strides_[i];
  }
  return out;
}

std::uint64_t Space::from_digits(const std::vector<std::uint32_t>& digits) const {
  if (digits.size() != knobs_.size()) {
    throw std::invalid_argument("from_digits: " + std::to_string(digits.size()) + " digits for " +
                                std::to_string(knobs_.size()) + " knobs");
  }
  std::uint64_t out = 0;
  for (std::size_t i = 0; i < knobs_.size(); ++i) {
    if (digits[i] >= knobs_[i].values.size()) {
      throw std::out_of_range("from_digits: digit " + std::to_string(digits[i]) + " of knob " + knobs_[i].name +
                              " is outside its " + std::to_string(knobs_[i].values.size()) + " values");
    }
    out += digits[i] * strides_[i];
  }
  return out;
}

bool Space::valid(std::uint64_t index) const { return op_->check(params_, config(index), target_).empty(); }

std::optional<std::uint64_t> Space::sample_valid(Rng& rng, int attempts) const {
  std::uniform_int_distribution<std::uint64_t> pick(0, size_ - 1);
  for (int i = 0; i < attempts; ++i) {
    std::uint64_t index = pick(rng);
    if (valid(index)) return index;
  }
  return std::nullopt;
}

std::vector<std::uint64_t> Space::neighbours(std::uint64_t index) const {
  auto position = digits(index);
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < knobs_.size(); ++i) {
    std::uint64_t base = index - position[i] * strides_[i];
    for (std::uint64_t v = 0; v < knobs_[i].values.size(); ++v) {
      if (v != position[i]) out.push_back(base + v * strides_[i]);
    }
  }
  return out;
}

std::optional<std::uint64_t> Space::random_neighbour(std::uint64_t index, Rng& rng, int attempts) const {
  auto position = digits(index);
  std::vector<std::size_t> movable;
  for (std::size_t i = 0; i < knobs_.size(); ++i) {
    if (knobs_[i].values.size() > 1) movable.push_back(i);
  }
  if (movable.empty()) return std::nullopt;
  std::uniform_int_distribution<std::size_t> pick_knob(0, movable.size() - 1);
  for (int i = 0; i < attempts; ++i) {
    std::size_t knob = movable[pick_knob(rng)];
    // A uniformly random value other than the current one.
    std::uniform_int_distribution<std::uint64_t> pick_value(0, knobs_[knob].values.size() - 2);
    std::uint64_t value = pick_value(rng);
    if (value >= position[knob]) ++value;
    std::uint64_t candidate = index - position[knob] * strides_[knob] + value * strides_[knob];
    if (valid(candidate)) return candidate;
  }
  return std::nullopt;
}

}  // namespace kestrel::tuner
