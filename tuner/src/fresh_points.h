// The points a strategy has already proposed or seen measured, and uniform draws of
// valid points outside them. Shared by the strategies that sample at random; small
// spaces whose fresh points rejection sampling struggles to find are enumerated once,
// so that they can be exhausted exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <unordered_set>
#include <vector>

#include "kestrel/tuner/space.h"

namespace kestrel::tuner::detail {

class FreshPoints {
 public:
  // `space` must outlive this object.
  explicit FreshPoints(const Space& space) : space_(&space) {}

  // Records `index` as taken (proposed or measured); true if it was not before.
  bool mark(std::uint64_t index) { return taken_.insert(index).second; }
  bool taken(std::uint64_t index) const { return taken_.count(index) != 0; }
  std::size_t count() const { return taken_.size(); }

  // Whether `index` is valid and not yet taken (does not take it).
  bool fresh(std::uint64_t index) const { return !taken(index) && space_->valid(index); }

  // A uniformly random valid point not yet taken, taken now; nullopt when the space has
  // none left (or, in a space too big to enumerate, when `attempts` draws found none).
  std::optional<std::uint64_t> take_random(Rng& rng, int attempts = 10'000) {
    if (!pool_) {
      std::uniform_int_distribution<std::uint64_t> pick(0, space_->size() - 1);
      for (int i = 0; i < attempts; ++i) {
        std::uint64_t index = pick(rng);
        if (!taken(index) && space_->valid(index)) {
          mark(index);
          return index;
        }
      }
      if (space_->size() > kEnumerateLimit) return std::nullopt;
      pool_.emplace();
      for (std::uint64_t index = 0; index < space_->size(); ++index) {
        if (fresh(index)) pool_->push_back(index);
      }
    }
    while (!pool_->empty()) {
      std::uniform_int_distribution<std::size_t> pick(0, pool_->size() - 1);
      std::size_t at = pick(rng);
      std::uint64_t index = (*pool_)[at];
      (*pool_)[at] = pool_->back();
      pool_->pop_back();
      if (mark(index)) return index;
    }
    return std::nullopt;
  }

 private:
  // Spaces up to this many points are enumerated when rejection sampling fails.
  static constexpr std::uint64_t kEnumerateLimit = std::uint64_t{1} << 18;

  const Space* space_;
  std::unordered_set<std::uint64_t> taken_;
  // Valid points not taken when the enumeration ran (some may have been taken since).
  std::optional<std::vector<std::uint64_t>> pool_;
};

}  // namespace kestrel::tuner::detail
