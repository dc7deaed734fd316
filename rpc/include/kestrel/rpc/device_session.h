// A typed session with one leased device, over the tracker's relay: ask what it is,
// which modules it holds, upload modules, and measure a batch as a stream of results.
// Builds and reads every session.capnp message so that callers never do. Replies are
// matched by sequence number; stale replies (of an earlier, abandoned request) are
// skipped.
//
// Coroutine API on the TrackerClient's executor; one request at a time per session.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/rpc/measure.h"
#include "kestrel/rpc/tracker_client.h"

namespace kestrel::rpc {

// How a batch ended: `message` is empty when every candidate ran, or says why the rest
// could not; `refused` is set when the device refused the whole batch (a bad request, a
// missing reference module) before running any of it.
struct BatchDone {
  std::string message;
  bool refused = false;
};

// One module to upload: its content hash and image (borrowed for the call).
struct ModuleImage {
  std::string hash;
  std::span<const std::uint8_t> image;
};

class DeviceSession {
 public:
  // `reply_timeout` bounds the wait for each reply; a batch waits per message as long as
  // the device's limit for the step it announced, plus reply_timeout.
  DeviceSession(std::shared_ptr<TrackerClient> tracker, Lease lease,
                std::chrono::milliseconds reply_timeout = std::chrono::seconds(30));

  const Lease& lease() const { return lease_; }

  // Round trip through the tracker to the device and back.
  awaitable<std::chrono::nanoseconds> ping();
  // The device's capabilities as it reports them now.
  awaitable<DeviceInfo> info();
  // Which of `hashes` the device holds, parallel to them.
  awaitable<std::vector<bool>> query_modules(const std::vector<std::string>& hashes);
  // Uploads modules, pipelined: all are sent, then every answer is collected. Returns,
  // parallel to `modules`, an empty string for each stored one or the device's reason
  // for refusing it.
  awaitable<std::vector<std::string>> upload(const std::vector<ModuleImage>& modules);
  // Runs a batch (request.seq is assigned here). `on_result` is called as each
  // candidate's result arrives (once per candidate at most, in the device's order;
  // ids not in the request are dropped). Returns when the device says the batch is done.
  // Each next message is awaited as long as the device's announced limit for its current
  // step (BatchProgress) plus reply_timeout; an error the device could not tie to a
  // request (seq 0) ends the batch with RpcError(protocol_error) carrying its message.
  //
  // All of these throw RpcError on a lost device or tracker (device_lost,
  // connection_lost), on silence beyond the timeout (timeout) and on a malformed reply
  // (protocol_error).
  awaitable<BatchDone> measure(BatchRequest request, const std::function<void(CandidateResult)>& on_result);

 private:
  // Throws protocol_error when `message` is the device's error about request `seq`, or
  // an error it could not tie to any request (seq 0).
  void throw_if_error_for(wire::SessionMessage::Reader message, std::uint64_t seq, std::string_view what) const;
  // The next message of this lease; throws protocol_error on garbage.
  awaitable<std::unique_ptr<SessionPayload>> next(std::chrono::milliseconds timeout);

  std::shared_ptr<TrackerClient> tracker_;
  Lease lease_;
  std::chrono::milliseconds reply_timeout_;
  std::uint64_t next_seq_ = 1;
};

}  // namespace kestrel::rpc
