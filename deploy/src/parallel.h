// Loops of the model runner's own work (portable operators, layout conversions) split
// over the kernels' thread pool (kestrel_services::parallel_for).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kestrel/kernel/abi.h"

namespace kestrel::deploy::detail {

// body(begin, end) over [0, n) split into ranges of at least `grain` items on the pool of
// `services`: two ranges per thread, or the whole range on the calling thread when there
// is no pool (null) or too little work. `body` must not throw (it runs on pool threads).
template <typename F>
void parallel_ranges(const kestrel_services* services, std::int64_t n, std::int64_t grain, const F& body) {
  const std::int64_t threads = services ? static_cast<std::int64_t>(services->num_threads) : 1;
  const std::int64_t ranges = std::min(threads * 2, n / std::max<std::int64_t>(grain, 1));
  if (threads <= 1 || ranges <= 1) {
    if (n > 0) body(std::int64_t{0}, n);
    return;
  }
  struct Job {
    const F* body;
    std::int64_t n, ranges;
  } job{&body, n, ranges};
  services->parallel_for(
      services->context, ranges,
      [](std::int64_t i, void* arg) {
        const Job& j = *static_cast<const Job*>(arg);
        (*j.body)(j.n * i / j.ranges, j.n * (i + 1) / j.ranges);
      },
      &job);
}

}  // namespace kestrel::deploy::detail
