// "grid": every valid point in index order, skipping those already measured. Lazy: a
// cursor walks the mixed-radix numbering, so huge spaces cost nothing up front (and
// are only ever explored at their start: a baseline, not a tuner).
#include <unordered_set>

#include "strategies.h"

namespace kestrel::tuner {
namespace {

class GridSearch final : public Strategy {
 public:
  explicit GridSearch(const Space& space) : space_(&space) {}

  std::string_view name() const override { return "grid"; }

  std::vector<std::uint64_t> propose(std::size_t n) override {
    std::vector<std::uint64_t> out;
    for (; out.size() < n && cursor_ < space_->size(); ++cursor_) {
      if (measured_.count(cursor_) == 0 && space_->valid(cursor_)) out.push_back(cursor_);
    }
    return out;
  }

  void observe(const std::vector<Observation>& observations) override {
    // Points behind the cursor were proposed already or skipped; remember the rest.
    for (const auto& o : observations) {
      if (o.index >= cursor_) measured_.insert(o.index);
    }
  }

 private:
  const Space* space_;
  std::uint64_t cursor_ = 0;
  std::unordered_set<std::uint64_t> measured_;
};

}  // namespace

std::unique_ptr<Strategy> make_grid_search(const Space& space, const StrategyOptions& /*options*/) {
  return std::make_unique<GridSearch>(space);
}

}  // namespace kestrel::tuner
