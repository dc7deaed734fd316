// A session's devices on a leased pool (see session_devices.h).
#include "kestrel/tuner/session_devices.h"

#include <stdexcept>

namespace kestrel::tuner {

LeasedDevices::LeasedDevices(host::PoolOptions pool, unsigned compile_threads)
    : key_(pool.key), compile_threads_(compile_threads), pool_(std::move(pool)) {}

LeasedDevices::~LeasedDevices() = default;

rpc::awaitable<void> LeasedDevices::open() {
  co_await pool_.open();
  open_ = true;
  compiler_.emplace(host::CompilerOptions{compile_threads_});
  evaluator_.emplace(*compiler_, pool_.measurer(), key_);
}

Evaluator& LeasedDevices::evaluator() {
  if (!evaluator_) throw std::logic_error("the session's devices are not open");
  return *evaluator_;
}

records::DeviceClass LeasedDevices::device_class(const host::Target& target) const {
  return device_class_of(key_, pool_.device(), target);
}

void LeasedDevices::interrupt() {
  if (open_) pool_.measurer().interrupt();
}

void LeasedDevices::abort() {
  if (open_) pool_.measurer().abort();
}

void LeasedDevices::report(const rpc::SessionReport& report) {
  if (open_) pool_.measurer().report(report);
}

rpc::awaitable<void> LeasedDevices::close() {
  evaluator_.reset();
  compiler_.reset();
  open_ = false;
  co_await pool_.close();
}

}  // namespace kestrel::tuner
