// SessionServer: one lease holder's requests in, replies out (see session_server.h).
#include "kestrel/device_runtime/session_server.h"

#include <kj/exception.h>

#include <algorithm>
#include <cstdint>

#include "kestrel/base/log.h"
#include "kestrel/base/str.h"
#include "kestrel/base/version.h"
#include "kestrel/rpc/measure.h"
#include "sandbox.h"
#include "worker_image.h"

namespace kestrel::device {
namespace {
constexpr std::string_view kLog = "device";

// The sequence number of a request, so that an error about it can name it; 0 when the
// message cannot tell (the holder then ends whatever it was waiting for with the error).
std::uint64_t seq_of(wire::SessionMessage::Reader message) noexcept {
  try {
    switch (message.which()) {
      case wire::SessionMessage::PING: return message.getPing().getSeq();
      case wire::SessionMessage::INFO_REQUEST: return message.getInfoRequest().getSeq();
      case wire::SessionMessage::QUERY_MODULES: return message.getQueryModules().getSeq();
      case wire::SessionMessage::UPLOAD_MODULE: return message.getUploadModule().getSeq();
      case wire::SessionMessage::MEASURE_BATCH: return message.getMeasureBatch().getSeq();
      default: return 0;
    }
  } catch (const kj::Exception&) {
    return 0;
  }
}
}  // namespace

SessionServer::SessionServer(asio::any_io_executor executor, rpc::DeviceInfo info, SendFn send)
    : executor_(std::move(executor)), info_(std::move(info)), send_(std::move(send)) {
  static const bool said = [] {
    worker::check_image();
    const worker::Image* image = worker::image();
    log::info(kLog, "worker sandbox: ", sandbox::describe(), "; workers ",
              image ? "exec " + image->path + " (a fresh image, empty environment)"
                    : "are forks of the runtime (" + worker::no_image_reason() + ")");
    return true;
  }();
  (void)said;
}

SessionServer::~SessionServer() { end_all(); }

void SessionServer::send_error(LeaseId lease, std::uint64_t seq, const std::string& message) {
  capnp::MallocMessageBuilder builder;
  auto err = builder.initRoot<wire::SessionMessage>().initError();
  err.setSeq(seq);
  err.setMessage(message);
  send_(lease, rpc::encode_session(builder));
}

void SessionServer::handle(LeaseId lease, std::span<const std::uint8_t> payload) {
  std::string error;
  auto message = rpc::SessionPayload::decode(payload, error);
  if (!message) {
    log::warn(kLog, "lease ", lease.value, ": bad session message: ", error);
    send_error(lease, 0, str("bad session message: ", error));
    return;
  }
  try {
    handle(lease, message->root());
  } catch (const kj::Exception& e) {
    // A message that passed the checks but could not be handled: the error answers the
    // request it came with, so the holder's wait for it ends.
    log::warn(kLog, "lease ", lease.value, ": session message not handled: ", e.getDescription().cStr());
    send_error(lease, seq_of(message->root()), str("session message not handled: ", e.getDescription().cStr()));
  }
}

void SessionServer::handle(LeaseId lease, wire::SessionMessage::Reader message) {
  capnp::MallocMessageBuilder builder;
  auto out = builder.initRoot<wire::SessionMessage>();
  switch (message.which()) {
    case wire::SessionMessage::PING:
      out.initPong().setSeq(message.getPing().getSeq());
      break;
    case wire::SessionMessage::INFO_REQUEST: {
      auto answer = out.initInfo();
      answer.setSeq(message.getInfoRequest().getSeq());
      rpc::to_wire(info_, answer.initInfo());
      break;
    }
    case wire::SessionMessage::QUERY_MODULES: {
      auto query = message.getQueryModules();
      auto answer = out.initModulesPresent();
      answer.setSeq(query.getSeq());
      auto hashes = query.getHashes();  // read once: each list access costs traversal budget
      auto present = answer.initPresent(hashes.size());
      auto store = modules_.find(lease);
      for (unsigned i = 0; i < hashes.size(); ++i) {
        present.set(i, store != modules_.end() && store->second.contains(hashes[i]));
      }
      break;
    }
    case wire::SessionMessage::UPLOAD_MODULE: {
      auto upload = message.getUploadModule();
      auto image = upload.getImage();
      const std::string hash = upload.getHash();
      std::span<const std::uint8_t> bytes(image.begin(), image.size());
      const std::string content = ModuleStore::valid_hash(hash) ? ModuleStore::content_hash(bytes) : hash;
      if (content != hash) {
        log::warn(kLog, "lease ", lease.value, ": refused module ", hash.substr(0, 12), ": not the hash of its content");
        send_error(lease, upload.getSeq(),
                   str("module ", hash.substr(0, 12), " refused: its hash is not the SHA-256 of its ", image.size(),
                       " bytes (", content.substr(0, 12), "...)"));
        return;
      }
      std::string store_error = modules_[lease].put(hash, bytes);
      if (!store_error.empty()) {
        send_error(lease, upload.getSeq(), store_error);
        return;
      }
      auto stored = out.initModuleStored();
      stored.setSeq(upload.getSeq());
      stored.setHash(upload.getHash());
      break;
    }
    case wire::SessionMessage::MEASURE_BATCH: {
      auto batch = message.getMeasureBatch();
      BatchSpec spec;
      std::string error;
      if (!rpc::from_wire(batch, spec.request, error)) {
        send_error(lease, batch.getSeq(), error);
        return;
      }
      const auto& reference = spec.request.reference_hash;
      ModuleStore& store = modules_[lease];
      if (!reference.empty()) {
        spec.reference_fd = store.fd(reference);
        if (spec.reference_fd < 0) {
          send_error(lease, batch.getSeq(), str("reference module ", reference.substr(0, 12), " is not on this device"));
          return;
        }
      }
      for (const auto& c : spec.request.candidates) spec.module_fds.push_back(store.fd(c.module_hash));
      auto& lease_work = work_[lease];
      lease_work.waiting.push_back(std::move(spec));
      if (!lease_work.running) start_next(lease);
      return;  // results are streamed back as each candidate finishes
    }
    default:
      send_error(lease, 0,
                 str("session message kind ", static_cast<unsigned>(message.which()),
                     " is not supported by this runtime (", software_version(), ")"));
      return;
  }
  send_(lease, rpc::encode_session(builder));
}

void SessionServer::start_next(LeaseId lease) {
  auto it = work_.find(lease);
  if (it == work_.end() || it->second.waiting.empty()) return;
  BatchSpec spec = std::move(it->second.waiting.front());
  it->second.waiting.pop_front();
  const std::uint64_t seq = spec.request.seq;
  log::info(kLog, "lease ", lease.value, ": measuring ", spec.request.candidates.size(), " candidate(s)");
  it->second.running = BatchRunner::start(
      executor_, std::move(spec),
      [this, lease, seq](const rpc::CandidateResult& r) {
        capnp::MallocMessageBuilder builder;
        auto out = builder.initRoot<wire::SessionMessage>().initMeasureResult();
        rpc::to_wire(r, out);
        out.setSeq(seq);
        send_(lease, rpc::encode_session(builder));
      },
      [this, lease, seq](const std::string& message) {
        capnp::MallocMessageBuilder builder;
        auto done = builder.initRoot<wire::SessionMessage>().initBatchDone();
        done.setSeq(seq);
        done.setMessage(message);
        send_(lease, rpc::encode_session(builder));
        auto w = work_.find(lease);
        if (w == work_.end()) return;
        w->second.running.reset();
        if (w->second.waiting.empty()) {
          work_.erase(w);
        } else {
          start_next(lease);
        }
      },
      [this, lease, seq](std::optional<std::uint64_t> candidate, std::chrono::milliseconds limit) {
        // The holder's wait for the next message of the batch follows this limit.
        capnp::MallocMessageBuilder builder;
        auto progress = builder.initRoot<wire::SessionMessage>().initBatchProgress();
        progress.setSeq(seq);
        progress.setStarted(candidate.has_value());
        progress.setCandidateId(candidate.value_or(0));
        progress.setLimitMs(static_cast<std::uint32_t>(std::min<std::int64_t>(limit.count(), UINT32_MAX)));
        send_(lease, rpc::encode_session(builder));
      });
}

void SessionServer::end_lease(LeaseId lease) {
  auto it = work_.find(lease);
  if (it != work_.end()) {
    if (it->second.running) it->second.running->cancel();
    work_.erase(it);
  }
  modules_.erase(lease);  // after the cancel: a cancelled batch's worker is already killed
}

void SessionServer::end_all() {
  for (auto& [lease, w] : work_) {
    if (w.running) w.running->cancel();
  }
  work_.clear();
  modules_.clear();
}

std::size_t SessionServer::pending_batches() const {
  std::size_t n = 0;
  for (const auto& [lease, w] : work_) n += w.waiting.size() + (w.running ? 1 : 0);
  return n;
}

}  // namespace kestrel::device
