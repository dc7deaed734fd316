// The timing loop of a measurement (see timing_loop.h).
#include "timing_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>

#include "kestrel/base/file.h"

namespace kestrel::device::worker {

using Status = kernel::Status;

double now_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::size_t CacheFlush::bytes() {
  std::size_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    auto content = read_file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    if (!content) break;
    std::string text = *content;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.empty()) break;
    std::size_t value = std::strtoull(text.c_str(), nullptr, 10);
    if (text.back() == 'K') value <<= 10;
    if (text.back() == 'M') value <<= 20;
    largest = std::max(largest, value);
  }
  return std::max<std::size_t>(largest * 2, std::size_t(8) << 20);
}

CacheFlush::CacheFlush(bool enabled) {
  if (enabled) buffer_.resize(bytes());
}

void CacheFlush::flush() {
  for (std::size_t i = 0; i < buffer_.size(); i += 64) buffer_[i] = static_cast<std::uint8_t>(buffer_[i] + 1);
}

void time_cpu(const rpc::MeasureSettings& s, const CpuKernelModule& module, const kestrel_services* table,
              std::span<const kestrel_arg> args, KernelServices& services, CacheFlush& cache,
              rpc::CandidateResult& result) {
  std::uint32_t number = s.number;
  if (number == 0) {
    // A warm call estimates the per-call time; number grows to fill min_repeat_ms.
    number = calibrate_number(s.min_repeat_ms * 1e-3, [&](std::uint32_t calls) {
      double start = now_seconds();
      for (std::uint32_t i = 0; i < calls; ++i) module.call(table, args);
      double seconds = now_seconds() - start;
      services.reclaim_scratch();
      return seconds;
    });
  }
  result.number = number;
  for (std::uint32_t round = 0; round < std::max<std::uint32_t>(s.repeat, 1); ++round) {
    if (round > 0 && s.cooldown_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(s.cooldown_ms));
    cache.flush();
    double start = now_seconds();
    for (std::uint32_t i = 0; i < number; ++i) {
      if (module.call(table, args) != 0) {
        result.status = Status::runtime_error;
        result.message = "kernel returned an error code in a timed round";
        services.reclaim_scratch();
        return;
      }
    }
    double elapsed = now_seconds() - start;
    services.reclaim_scratch();
    result.round_seconds.push_back(elapsed / number);
  }
}

void time_gpu(const rpc::MeasureSettings& s, gpu::Session& session, rpc::CandidateResult& result) {
  std::uint32_t number = s.number;
  double seconds = 0;
  if (number == 0) {
    if ((result.status = session.time_round(1, false, seconds, result.message)) != Status::ok) return;
    number = static_cast<std::uint32_t>(std::clamp(std::ceil(s.min_repeat_ms * 1e-3 / std::max(seconds, 1e-9)), 1.0, 1e7));
    for (int attempt = 0; attempt < 4 && s.min_repeat_ms > 0; ++attempt) {
      if ((result.status = session.time_round(number, false, seconds, result.message)) != Status::ok) return;
      double round = seconds * number;
      if (round >= s.min_repeat_ms * 1e-3 || number >= 10'000'000) break;
      double grow = s.min_repeat_ms * 1e-3 / std::max(round, 1e-9) * 1.1;
      number = static_cast<std::uint32_t>(std::clamp(std::ceil(number * grow), number + 1.0, 1e7));
    }
  }
  result.number = number;
  for (std::uint32_t round = 0; round < std::max<std::uint32_t>(s.repeat, 1); ++round) {
    if (round > 0 && s.cooldown_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(s.cooldown_ms));
    if ((result.status = session.time_round(number, s.flush_cache, seconds, result.message)) != Status::ok) {
      result.round_seconds.clear();
      return;
    }
    result.round_seconds.push_back(seconds);
  }
}

}  // namespace kestrel::device::worker
