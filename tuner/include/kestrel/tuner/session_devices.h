// Where a tuning session measures: the devices it leases and the evaluator that compiles
// and measures on them. TuneSession opens them when it starts and closes them when it
// ends; a real session leases a pool (LeasedDevices: a tracker's devices or the embedded
// pool), a test gives one of its own (a synthetic evaluator on a described device).
#pragma once

#include <memory>
#include <optional>

#include "kestrel/host/compiler.h"
#include "kestrel/host/leased_pool.h"
#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/session_report.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/tuner/task.h"

namespace kestrel::tuner {

class SessionDevices {
 public:
  virtual ~SessionDevices() = default;
  // Leases the devices. Throws what leasing throws (rpc::RpcError: no tracker, no device
  // of the key within the wait, a refused token).
  virtual rpc::awaitable<void> open() = 0;
  // The first leased device, whose capabilities choose the compile target (after open()).
  virtual const rpc::DeviceInfo& device() const = 0;
  // What compiles and measures on the devices (after open(), until close()).
  virtual Evaluator& evaluator() = 0;
  // The class the devices' measurements of code for `target` are recorded under (which
  // devices they hold for; after open()).
  virtual records::DeviceClass device_class(const host::Target& target) const = 0;
  // A stop: a wait for a device or a result ends now; what arrived before is kept.
  virtual void interrupt() = 0;
  // SIGTERM: the leases end now; a measurement in flight throws rpc::RpcError (cancelled).
  virtual void abort() = 0;
  // A progress report for the pool's tracker (its dashboard), fire and forget.
  virtual void report(const rpc::SessionReport& report) = 0;
  // Releases the leases; never throws.
  virtual rpc::awaitable<void> close() = 0;
};

// A leased pool (host::LeasedPool) with an in-process compiler of `compile_threads`
// threads (0: one per core) and a MeasuredEvaluator on the pool's devices.
class LeasedDevices final : public SessionDevices {
 public:
  LeasedDevices(host::PoolOptions pool, unsigned compile_threads);
  ~LeasedDevices() override;

  rpc::awaitable<void> open() override;
  const rpc::DeviceInfo& device() const override { return pool_.device(); }
  Evaluator& evaluator() override;
  // tuner::device_class_of the first device under the pool's key.
  records::DeviceClass device_class(const host::Target& target) const override;
  void interrupt() override;
  void abort() override;
  void report(const rpc::SessionReport& report) override;
  rpc::awaitable<void> close() override;

 private:
  std::string key_;
  unsigned compile_threads_;
  host::LeasedPool pool_;
  bool open_ = false;
  std::optional<host::Compiler> compiler_;
  std::optional<MeasuredEvaluator> evaluator_;
};

}  // namespace kestrel::tuner
