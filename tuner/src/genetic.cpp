// "ga": a genetic algorithm over knob digits, steady-state with elitism (mu + lambda).
// The population is the ga_population fittest points measured so far (fitness 1/cost,
// failures 0), so the best are never lost; the first ga_population points are random.
// Children come from two tournament-selected parents by uniform crossover of digits and
// per-knob mutation (probability ga_mutation); invalid or already taken children are
// repaired by a random valid neighbour or bred again, and as a last resort replaced by
// a random valid point.
#include <algorithm>
#include <unordered_map>

#include "fresh_points.h"
#include "strategies.h"

namespace kestrel::tuner {
namespace {

constexpr int kTournament = 3;
constexpr int kBreedAttempts = 64;

struct Member {
  std::uint64_t index = 0;
  double fitness = 0;
};

class Genetic final : public Strategy {
 public:
  Genetic(const Space& space, const StrategyOptions& options)
      : space_(&space),
        fresh_(space),
        rng_(options.seed),
        population_size_(std::max(2u, options.ga_population)),
        mutation_(std::clamp(options.ga_mutation, 0.0, 1.0)) {}

  std::string_view name() const override { return "ga"; }

  std::vector<std::uint64_t> propose(std::size_t n) override {
    auto population = select_population();
    std::size_t parents = static_cast<std::size_t>(
        std::count_if(population.begin(), population.end(), [](const Member& m) { return m.fitness > 0; }));
    std::vector<std::uint64_t> out;
    while (out.size() < n) {
      std::optional<std::uint64_t> index;
      if (fresh_.count() >= population_size_ && parents >= 2) index = breed(population);
      if (!index) index = fresh_.take_random(rng_);
      if (!index) break;
      out.push_back(*index);
    }
    return out;
  }

  void observe(const std::vector<Observation>& observations) override {
    for (const auto& o : observations) {
      fresh_.mark(o.index);
      measured_[o.index] = o.ok && o.cost > 0 ? 1.0 / o.cost : 0.0;
    }
  }

 private:
  // The fittest measured points (ties by index, so that hash order never matters).
  std::vector<Member> select_population() const {
    std::vector<Member> all;
    all.reserve(measured_.size());
    for (const auto& [index, fitness] : measured_) all.push_back({index, fitness});
    auto fitter = [](const Member& a, const Member& b) {
      return a.fitness != b.fitness ? a.fitness > b.fitness : a.index < b.index;
    };
    std::size_t keep = std::min<std::size_t>(population_size_, all.size());
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end(), fitter);
    all.resize(keep);
    // Failures (fitness 0) only breed if nothing else can.
    while (all.size() > 2 && all.back().fitness <= 0) all.pop_back();
    return all;
  }

  const Member& tournament(const std::vector<Member>& population) {
    std::uniform_int_distribution<std::size_t> pick(0, population.size() - 1);
    const Member* best = &population[pick(rng_)];
    for (int i = 1; i < kTournament; ++i) {
      const Member& other = population[pick(rng_)];
      if (other.fitness > best->fitness) best = &other;
    }
    return *best;
  }

  std::optional<std::uint64_t> breed(const std::vector<Member>& population) {
    const auto& knobs = space_->knobs();
    std::bernoulli_distribution coin(0.5), mutate(mutation_);
    for (int attempt = 0; attempt < kBreedAttempts; ++attempt) {
      auto mother = space_->digits(tournament(population).index);
      auto father = space_->digits(tournament(population).index);
      std::vector<std::uint32_t> child(knobs.size());
      for (std::size_t k = 0; k < knobs.size(); ++k) {
        child[k] = coin(rng_) ? mother[k] : father[k];
        std::uint32_t count = static_cast<std::uint32_t>(knobs[k].values.size());
        if (count > 1 && mutate(rng_)) {
          std::uniform_int_distribution<std::uint32_t> other(0, count - 2);
          std::uint32_t value = other(rng_);
          child[k] = value >= child[k] ? value + 1 : value;
        }
      }
      std::uint64_t index = space_->from_digits(child);
      if (fresh_.fresh(index)) {
        fresh_.mark(index);
        return index;
      }
      // Repair: a valid point one knob away.
      if (auto near = space_->random_neighbour(index, rng_, 8); near && !fresh_.taken(*near)) {
        fresh_.mark(*near);
        return near;
      }
    }
    return std::nullopt;
  }

  const Space* space_;
  detail::FreshPoints fresh_;
  Rng rng_;
  std::size_t population_size_;
  double mutation_;
  std::unordered_map<std::uint64_t, double> measured_;  // index -> fitness
};

}  // namespace

std::unique_ptr<Strategy> make_genetic(const Space& space, const StrategyOptions& options) {
  return std::make_unique<Genetic>(space, options);
}

}  // namespace kestrel::tuner
