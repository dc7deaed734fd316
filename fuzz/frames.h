// Real frames and session payloads, as Kestrel's peers send them: what the tracker target
// says to get past the handshake and register its helpers, and what the seed corpus is
// made of (seed_corpus.cpp).
#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/rpc/sha256.h"
#include "kestrel/base/version.h"
#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/framing.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/rpc/measure.h"
#include "kestrel/rpc/session.h"
#include "kestrel/wire/session.capnp.h"
#include "kestrel/wire/tracker.capnp.h"

namespace kestrel::fuzz::frames {

inline rpc::DeviceInfo device_info(const std::string& name) {
  rpc::DeviceInfo info;
  info.name = name;
  info.hostname = "fuzz-host";
  info.os = "Linux 6.1";
  info.arch = "x86_64";
  info.triple = "x86_64-linux-gnu";
  info.cpu_model = "fuzz cpu";
  info.cores = 2;
  info.caches = {{1, "data", 32768, 64}, {2, "unified", 1 << 20, 64}};
  info.memory_bytes = 1ull << 30;
  info.cpu_features = {"avx2", "fma"};
  info.runtime_version = "0.1.0";
  info.abi_version = 3;
  return info;
}

// A module image (a truncated ELF header: the device refuses to load it) and its name,
// the SHA-256 of its bytes, as the host names what it uploads.
inline const std::vector<std::uint8_t>& module_image() {
  static const std::vector<std::uint8_t> image = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  return image;
}
inline std::string module_hash() { return rpc::sha256_hex(module_image()); }

template <typename Fill>
rpc::FrameBytes frame(Fill fill) {
  capnp::MallocMessageBuilder builder;
  fill(builder.initRoot<wire::Frame>());
  return rpc::encode_frame(builder);
}

template <typename Fill>
rpc::Payload session(Fill fill) {
  capnp::MallocMessageBuilder builder;
  fill(builder.initRoot<wire::SessionMessage>());
  return rpc::encode_session(builder);
}

inline rpc::FrameBytes hello(wire::Role role, const std::string& name, std::uint32_t version = rpc::protocol_version()) {
  return frame([&](wire::Frame::Builder f) {
    auto h = f.initHello();
    h.setProtocolVersion(version);
    h.setRole(role);
    rpc::Nonce nonce{};
    for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<std::uint8_t>(i * 7 + 1);
    h.setNonce(capnp::Data::Reader(nonce.data(), nonce.size()));
    h.setName(name);
    h.setSoftwareVersion(std::string(software_version()));
  });
}

inline rpc::FrameBytes auth_proof(std::size_t mac_bytes = 0) {
  return frame([&](wire::Frame::Builder f) {
    auto proof = f.initAuthProof();
    if (mac_bytes > 0) {
      std::vector<std::uint8_t> mac(mac_bytes, 0x5a);
      proof.setMac(capnp::Data::Reader(mac.data(), mac.size()));
    }
  });
}

inline rpc::FrameBytes register_device(const std::string& key, const std::string& name) {
  return frame([&](wire::Frame::Builder f) {
    auto r = f.initRegister();
    r.setKey(key);
    rpc::to_wire(device_info(name), r.initInfo());
  });
}

inline rpc::FrameBytes request_device(std::uint64_t id, const std::string& key, std::int32_t priority = 0,
                                      std::uint32_t timeout_ms = 0) {
  return frame([&](wire::Frame::Builder f) {
    auto r = f.initRequestDevice();
    r.setRequestId(id);
    r.setKey(key);
    r.setPriority(priority);
    r.setTimeoutMs(timeout_ms);
  });
}

inline rpc::FrameBytes cancel_request(std::uint64_t id) {
  return frame([&](wire::Frame::Builder f) { f.initCancelRequest().setRequestId(id); });
}

inline rpc::FrameBytes release(std::uint64_t lease) {
  return frame([&](wire::Frame::Builder f) { f.initRelease().setLeaseId(lease); });
}

inline rpc::FrameBytes relay(std::uint64_t lease, const rpc::Payload& payload) {
  return frame([&](wire::Frame::Builder f) {
    auto r = f.initRelay();
    r.setLeaseId(lease);
    r.setPayload(capnp::Data::Reader(payload.data(), payload.size()));
  });
}

inline rpc::FrameBytes summary_request(std::uint64_t id) {
  return frame([&](wire::Frame::Builder f) { f.initSummaryRequest().setRequestId(id); });
}

inline rpc::FrameBytes heartbeat(bool ack, std::uint64_t seq) {
  return frame([&](wire::Frame::Builder f) {
    if (ack) f.initHeartbeatAck().setSeq(seq);
    else f.initHeartbeat().setSeq(seq);
  });
}

inline rpc::FrameBytes failure(wire::FailureCode code, const std::string& message) {
  return frame([&](wire::Frame::Builder f) {
    auto x = f.initFailure();
    x.setCode(code);
    x.setMessage(message);
  });
}

// A batch as the host sends it: one output and two inputs, a reference, two candidates.
inline rpc::BatchRequest batch(std::uint64_t seq) {
  rpc::BatchRequest b;
  b.seq = seq;
  b.args = {{64, false}, {64, false}, {64, true}};
  b.reference_hash = std::string(64, 'a');
  b.tolerance = 1e-4;
  b.settings.repeat = 2;
  b.settings.min_repeat_ms = 1;
  b.settings.timeout_ms = 1000;
  b.candidates = {{1, module_hash(), ""}, {2, std::string(64, 'c'), "kestrel_kernel"}};
  return b;
}

// One of each session message.
inline std::vector<std::pair<std::string, rpc::Payload>> session_messages() {
  std::vector<std::pair<std::string, rpc::Payload>> out;
  out.emplace_back("ping", session([](wire::SessionMessage::Builder m) { m.initPing().setSeq(1); }));
  out.emplace_back("pong", session([](wire::SessionMessage::Builder m) { m.initPong().setSeq(1); }));
  out.emplace_back("info-request", session([](wire::SessionMessage::Builder m) { m.initInfoRequest().setSeq(2); }));
  out.emplace_back("info", session([](wire::SessionMessage::Builder m) {
                     auto i = m.initInfo();
                     i.setSeq(2);
                     rpc::to_wire(device_info("d"), i.initInfo());
                   }));
  out.emplace_back("error", session([](wire::SessionMessage::Builder m) {
                     auto e = m.initError();
                     e.setSeq(3);
                     e.setMessage("bad request");
                   }));
  out.emplace_back("query-modules", session([](wire::SessionMessage::Builder m) {
                     auto q = m.initQueryModules();
                     q.setSeq(4);
                     auto hashes = q.initHashes(2);
                     hashes.set(0, std::string(64, 'a'));
                     hashes.set(1, module_hash());
                   }));
  out.emplace_back("modules-present", session([](wire::SessionMessage::Builder m) {
                     auto p = m.initModulesPresent();
                     p.setSeq(4);
                     auto present = p.initPresent(2);
                     present.set(0, true);
                   }));
  out.emplace_back("upload-module", session([](wire::SessionMessage::Builder m) {
                     auto u = m.initUploadModule();
                     u.setSeq(5);
                     u.setHash(module_hash());
                     u.setImage(capnp::Data::Reader(module_image().data(), module_image().size()));
                   }));
  out.emplace_back("module-stored", session([](wire::SessionMessage::Builder m) {
                     auto s = m.initModuleStored();
                     s.setSeq(5);
                     s.setHash(module_hash());
                   }));
  out.emplace_back("measure-batch", session([](wire::SessionMessage::Builder m) {
                     rpc::to_wire(batch(6), m.initMeasureBatch());
                   }));
  out.emplace_back("measure-batch-no-reference", session([](wire::SessionMessage::Builder m) {
                     rpc::BatchRequest b = batch(7);
                     b.reference_hash.clear();
                     rpc::to_wire(b, m.initMeasureBatch());
                   }));
  out.emplace_back("measure-result", session([](wire::SessionMessage::Builder m) {
                     rpc::CandidateResult r;
                     r.id = 1;
                     r.status = kernel::Status::ok;
                     r.number = 10;
                     r.round_seconds = {1e-5, 1.1e-5};
                     r.max_error = 1e-7;
                     r.load_ms = 0.2;
                     auto out_result = m.initMeasureResult();
                     rpc::to_wire(r, out_result);
                     out_result.setSeq(6);
                   }));
  out.emplace_back("batch-done", session([](wire::SessionMessage::Builder m) {
                     auto d = m.initBatchDone();
                     d.setSeq(6);
                   }));
  return out;
}

}  // namespace kestrel::fuzz::frames
