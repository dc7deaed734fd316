// DeviceSession: session.capnp requests out, typed replies in (see device_session.h).
#include "kestrel/rpc/device_session.h"

#include <algorithm>
#include <map>
#include <set>

#include "kestrel/base/log.h"
#include "kestrel/base/str.h"
#include "kestrel/rpc/session.h"

namespace kestrel::rpc {
namespace {
using namespace std::chrono_literals;
constexpr std::string_view kLog = "session";
}  // namespace

DeviceSession::DeviceSession(std::shared_ptr<TrackerClient> tracker, Lease lease,
                             std::chrono::milliseconds reply_timeout)
    : tracker_(std::move(tracker)), lease_(std::move(lease)), reply_timeout_(reply_timeout) {}

awaitable<std::unique_ptr<SessionPayload>> DeviceSession::next(std::chrono::milliseconds timeout) {
  Payload payload = co_await tracker_->receive(lease_.id, timeout);
  std::string error;
  auto message = SessionPayload::decode(payload, error);
  if (!message) throw RpcError(ErrorCode::protocol_error, str("device '", lease_.info.name, "' sent ", error));
  co_return message;
}

awaitable<std::chrono::nanoseconds> DeviceSession::ping() {
  co_return co_await tracker_->ping(lease_.id, reply_timeout_);
}

awaitable<DeviceInfo> DeviceSession::info() { co_return co_await tracker_->device_info(lease_.id, reply_timeout_); }

awaitable<std::vector<bool>> DeviceSession::query_modules(const std::vector<std::string>& hashes) {
  const std::uint64_t seq = next_seq_++;
  {
    capnp::MallocMessageBuilder builder;
    auto query = builder.initRoot<wire::SessionMessage>().initQueryModules();
    query.setSeq(seq);
    auto list = query.initHashes(static_cast<unsigned>(hashes.size()));
    for (unsigned i = 0; i < hashes.size(); ++i) list.set(i, hashes[i]);
    tracker_->send(lease_.id, encode_session(builder));
  }
  while (true) {
    auto message = co_await next(reply_timeout_);
    auto root = message->root();
    throw_if_error_for(root, seq, "a module query");
    if (!root.isModulesPresent() || root.getModulesPresent().getSeq() != seq) continue;
    auto present = root.getModulesPresent().getPresent();
    if (present.size() != hashes.size()) {
      throw RpcError(ErrorCode::protocol_error,
                     str("device '", lease_.info.name, "' answered a query for ", hashes.size(), " modules with ",
                         present.size(), " flags"));
    }
    std::vector<bool> out;
    for (bool p : present) out.push_back(p);
    co_return out;
  }
}

awaitable<std::vector<std::string>> DeviceSession::upload(const std::vector<ModuleImage>& modules) {
  std::vector<std::string> errors(modules.size());
  std::map<std::uint64_t, std::size_t> waiting;  // seq -> index in modules
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const std::uint64_t seq = next_seq_++;
    capnp::MallocMessageBuilder builder;
    auto upload = builder.initRoot<wire::SessionMessage>().initUploadModule();
    upload.setSeq(seq);
    upload.setHash(modules[i].hash);
    upload.setImage(capnp::Data::Reader(modules[i].image.data(), modules[i].image.size()));
    tracker_->send(lease_.id, encode_session(builder));
    waiting[seq] = i;
  }
  while (!waiting.empty()) {
    auto message = co_await next(reply_timeout_);
    auto root = message->root();
    if (root.isModuleStored()) {
      waiting.erase(root.getModuleStored().getSeq());
    } else if (root.isError()) {
      // An error the device could not tie to a request (seq 0) ends the whole upload.
      if (root.getError().getSeq() == 0) throw_if_error_for(root, 0, "a module upload");
      auto it = waiting.find(root.getError().getSeq());
      if (it == waiting.end()) continue;
      errors[it->second] = root.getError().getMessage();
      if (errors[it->second].empty()) errors[it->second] = "refused without a reason";
      waiting.erase(it);
    }
  }
  co_return errors;
}

awaitable<BatchDone> DeviceSession::measure(BatchRequest request,
                                            const std::function<void(CandidateResult)>& on_result) {
  request.seq = next_seq_++;
  const std::uint64_t seq = request.seq;
  {
    capnp::MallocMessageBuilder builder;
    to_wire(request, builder.initRoot<wire::SessionMessage>().initMeasureBatch());
    tracker_->send(lease_.id, encode_session(builder));
  }
  // Each next message is due within the device's limit for the step it runs, which the
  // device announces (BatchProgress: preparing the batch, a candidate started), plus
  // the network's slack; before the first announcement, within the setup allowance the
  // device gives a worker (4 x the candidate limit + 10 s). A device that is slow but
  // alive keeps announcing, so only silence beyond what it promised ends the wait.
  const auto candidate_limit = std::chrono::milliseconds(std::max<std::uint32_t>(request.settings.timeout_ms, 1));
  auto next_within = candidate_limit * 4 + 10s + reply_timeout_;
  std::set<std::uint64_t> outstanding;
  for (const auto& c : request.candidates) outstanding.insert(c.id);
  while (true) {
    auto message = co_await next(next_within);
    auto root = message->root();
    if (root.isBatchProgress() && root.getBatchProgress().getSeq() == seq) {
      next_within = std::chrono::milliseconds(root.getBatchProgress().getLimitMs()) + reply_timeout_;
    } else if (root.isMeasureResult() && root.getMeasureResult().getSeq() == seq) {
      CandidateResult result;
      std::string error;
      if (!from_wire(root.getMeasureResult(), result, error)) {
        throw RpcError(ErrorCode::protocol_error, str("device '", lease_.info.name, "' sent a bad result: ", error));
      }
      // The next candidate starts at once (its announcement follows) or the batch ends.
      next_within = candidate_limit * 4 + 10s + reply_timeout_;
      if (!outstanding.erase(result.id)) {
        log::debug(kLog, "dropping a result for candidate ", result.id, " that is not outstanding");
        continue;
      }
      on_result(std::move(result));
    } else if (root.isBatchDone() && root.getBatchDone().getSeq() == seq) {
      co_return BatchDone{root.getBatchDone().getMessage(), false};
    } else if (root.isError() && root.getError().getSeq() == seq) {
      co_return BatchDone{root.getError().getMessage(), true};
    } else {
      throw_if_error_for(root, seq, "a batch");
    }
  }
}

void DeviceSession::throw_if_error_for(wire::SessionMessage::Reader message, std::uint64_t seq,
                                       std::string_view what) const {
  if (!message.isError()) return;
  const std::uint64_t about = message.getError().getSeq();
  // seq 0: the device could not tell which request failed. One request is in flight per
  // session, so it is this one: waiting on would wait for an answer that never comes.
  if (about != seq && about != 0) return;
  throw RpcError(ErrorCode::protocol_error, str("device '", lease_.info.name, "' refused ", what, ": ",
                                                message.getError().getMessage().cStr()));
}

}  // namespace kestrel::rpc
