// The measurement client: leases devices of a key through the tracker, uploads each
// kernel module once per device, sends batches of candidates, and collects the results
// as they stream back. If a device is lost mid-batch, its unfinished candidates are
// measured again on another device of the key (a bounded number of times) before they
// are recorded as "device lost".
//
// Coroutine API on the TrackerClient's executor; not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/kernel/status.h"
#include "kestrel/rpc/measure.h"
#include "kestrel/rpc/tracker_client.h"

namespace kestrel::host {

using Status = kernel::Status;
using kernel::parse_status;
using kernel::to_string;


// A compiled module, shared by every candidate and device that uses it.
struct Module {
  std::string hash;  // the compiler's content hash (64 hex digits)
  std::shared_ptr<const std::vector<std::uint8_t>> image;
};

struct Workload {
  std::vector<rpc::TensorArg> args;
  Module reference;           // empty hash: no correctness check
  std::string reference_entry;  // the reference kernel's entry symbol; empty: the module's only kernel
  double tolerance = 1e-4;
};

struct Candidate {
  std::uint64_t id = 0;
  Module module;
  std::string entry;  // kernel entry symbol; empty: the module's only kernel
};

// The device's result (id, status, message, number, round_seconds, max_error, load_ms)
// and where it came from.
struct Measurement : rpc::CandidateResult {
  std::string device;     // name of the device that measured it
  unsigned attempts = 0;  // devices tried (more than 1 after a device loss)
};

// What identifies a device's hardware in the records: triple, CPU model and cores.
std::string device_fingerprint(const rpc::DeviceInfo& device);

struct MeasureClientOptions {
  std::string key;
  unsigned devices = 1;                          // leases to hold in parallel
  std::int32_t priority = 0;
  std::chrono::milliseconds request_timeout{30'000};  // for the first device
  // How long to wait for a device when every leased one is lost (a board rebooting, a
  // device stopped and resumed, a tracker restarting) before measure() gives up with
  // RpcError(device_lost) saying so. 0: wait until interrupted.
  std::chrono::milliseconds replacement_wait{300'000};
  unsigned retries = 2;                          // re-measurements after a device loss
  std::chrono::milliseconds reply_slack{30'000};  // beyond the device's announced limits
  // When set, a lost tracker connection is re-established with this (capped backoff, up
  // to reconnect_timeout), the devices are leased again, and unfinished candidates go
  // back to the queue: a tuning session survives a tracker restart.
  std::function<rpc::awaitable<std::shared_ptr<rpc::TrackerClient>>()> reconnect;
  std::chrono::milliseconds reconnect_timeout{120'000};
};

class MeasureClient {
 public:
  MeasureClient(std::shared_ptr<rpc::TrackerClient> tracker, MeasureClientOptions options);
  ~MeasureClient() { *alive_ = false; }
  MeasureClient(const MeasureClient&) = delete;
  MeasureClient& operator=(const MeasureClient&) = delete;

  // Leases the first device (waiting up to request_timeout; throws RpcError with the
  // tracker's message when none comes) and asks for the others without waiting.
  rpc::awaitable<void> open();
  // Measures every candidate once; results in the order of `candidates`. `on_result`
  // (optional) is called as each one completes. A device given up on (lost at the
  // tracker, silent beyond its announced limits, an answer that cannot be matched to the
  // request) has its lease ended at the tracker, which makes the device drop the batch;
  // its unfinished candidates are measured again on another device (up to `retries`
  // times, then recorded once as device_lost). When no device is left, a replacement
  // is awaited up to replacement_wait; then RpcError(device_lost) says which key and why.
  // Throws RpcError(connection_lost) when the tracker is gone and cannot be reached
  // again (within reconnect_timeout, if set); candidates not measured by then get no
  // result. What `on_result` throws (a records database that cannot take the result:
  // disk full) ends the measurement: no further result is handed out, and once the
  // batches in flight on other devices are over, the exception is rethrown here.
  // RpcError(cancelled) after abort() or interrupt(). Waiting is event-driven: a grant, a
  // result, a loss or a stop wakes it; nothing polls.
  rpc::awaitable<std::vector<Measurement>> measure(const Workload& workload, const std::vector<Candidate>& candidates,
                                                   const rpc::MeasureSettings& options,
                                                   std::function<void(const Measurement&)> on_result = {});
  // Releases every lease.
  rpc::awaitable<void> close();
  // Stops at once (SIGTERM): closes the tracker connection, which ends every lease and
  // queued request at the tracker; a measure() in progress throws RpcError(cancelled)
  // without handing out further results, and so does every later one. Never reconnects.
  void abort();
  bool aborted() const { return aborted_; }
  // Ctrl-C: ends every wait at once but keeps the tracker connection: a queued request for
  // a device is cancelled, the leases with a batch in flight are released (the devices
  // drop those batches), and measure() throws RpcError(cancelled) once they are; results
  // that arrived before are kept. Later measure() calls throw RpcError(cancelled) too.
  // close() still releases the leases. Safe from a signal handler's completion.
  void interrupt();
  bool interrupted() const { return interrupted_; }

  // The devices currently leased (their capabilities pick the compile target).
  std::vector<rpc::Lease> leases() const;
  // The current tracker connection (a new one after a reconnect).
  std::shared_ptr<rpc::TrackerClient> tracker() const { return tracker_; }
  unsigned reconnects() const { return reconnects_; }
  // Sends a tuning session's progress to the tracker's dashboard, fire and forget: false
  // when the tracker does not take reports (an older one), the connection is gone, or the
  // client was aborted. Never throws and never waits.
  bool report(const rpc::SessionReport& report) noexcept;

 private:
  struct Device;
  struct Waker;
  rpc::awaitable<void> collect_grant(RequestId id, std::shared_ptr<bool> alive);
  // Ends a lease given up on: released at the tracker unless the tracker ended it already
  // (which tells the device to drop what it runs for it). Never throws.
  rpc::awaitable<void> give_up(Device& device, const rpc::RpcError& why);
  void wake();
  rpc::awaitable<void> request_extra_devices();
  rpc::awaitable<void> reconnect_tracker();
  rpc::awaitable<void> ensure_modules(Device& device, const std::vector<const Module*>& modules);
  rpc::awaitable<void> run_batch(Device& device, const Workload& workload, const std::vector<Candidate>& batch,
                                 const rpc::MeasureSettings& options, std::function<void(Measurement)> on_result);

  std::shared_ptr<rpc::TrackerClient> tracker_;
  MeasureClientOptions options_;
  std::vector<std::shared_ptr<Device>> devices_;
  std::vector<RequestId> pending_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  unsigned reconnects_ = 0;
  bool aborted_ = false;
  bool interrupted_ = false;
  Waker* waker_ = nullptr;          // measure()'s, while it runs
  std::string last_request_error_;  // why the last request for a device failed
};

}  // namespace kestrel::host
