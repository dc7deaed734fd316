// "random": uniformly random valid points, never the same one twice. The baseline every
// other strategy should beat.
#include "fresh_points.h"
#include "strategies.h"

namespace kestrel::tuner {
namespace {

class RandomSearch final : public Strategy {
 public:
  RandomSearch(const Space& space, const StrategyOptions& options) : fresh_(space), rng_(options.seed) {}

  std::string_view name() const override { return "random"; }

  std::vector<std::uint64_t> propose(std::size_t n) override {
    std::vector<std::uint64_t> out;
    while (out.size() < n) {
      auto index = fresh_.take_random(rng_);
      if (!index) break;
      out.push_back(*index);
    }
    return out;
  }

  void observe(const std::vector<Observation>& observations) override {
    for (const auto& o : observations) fresh_.mark(o.index);
  }

 private:
  detail::FreshPoints fresh_;
  Rng rng_;
};

}  // namespace

std::unique_ptr<Strategy> make_random_search(const Space& space, const StrategyOptions& options) {
  return std::make_unique<RandomSearch>(space, options);
}

}  // namespace kestrel::tuner
