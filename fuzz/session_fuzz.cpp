// Fuzz target: the device's session handlers (device::SessionServer), which serve what a
// lease holder relays. Input: byte 0 picks the lease of each message (bit i: message i
// goes to lease 2, else lease 1), then [u16 length][payload] chunks, each handed to
// SessionServer::handle as a relayed payload.
// Guarantees checked: handling never crashes or throws; every reply the device sends is a
// session message that decodes and reads as its schema says.
// A batch that passes its checks would fork a worker and run modules: the target points
// its reference at a module that is never uploaded (kNoModule), so the device refuses it
// after every check a batch meets before it runs (the batch decoding has its own target,
// fuzz_measure).
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <asio/io_context.hpp>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kestrel/base/log.h"
#include "kestrel/device_runtime/session_server.h"
#include "kestrel/rpc/session.h"
#include "kestrel/wire/session.capnp.h"
#include "support.h"

using namespace kestrel;

namespace {

const std::string kNoModule(64, '0');  // never uploaded: the target drops uploads under it

rpc::DeviceInfo device_info() {
  rpc::DeviceInfo info;
  info.name = "fuzz-device";
  info.hostname = "fuzz";
  info.os = "Linux";
  info.arch = "x86_64";
  info.triple = "x86_64-linux-gnu";
  info.cpu_model = "fuzz cpu";
  info.cores = 2;
  info.abi_version = 3;
  return info;
}

void check_reply(LeaseId lease, const rpc::Payload& payload) {
  fuzz::check(lease.value == 1 || lease.value == 2, "a reply goes to a lease that sent something");
  std::string error;
  auto reply = rpc::SessionPayload::decode(payload, error);
  fuzz::check(reply != nullptr, "the device's reply decodes: " + error);
  try {
    fuzz::read_every_field(reply->root());
  } catch (const kj::Exception& e) {
    fuzz::broken(std::string("the device's reply does not read as its schema says: ") + e.getDescription().cStr());
  }
}

// The payload to hand to the device: `payload` itself, or for a batch that decodes, the
// same batch with the never-uploaded reference; nothing for an upload under kNoModule, or
// for a message this cannot read (it reads on a reader of its own with a generous
// traversal limit, so that it never misses a batch the device would run).
std::optional<rpc::Payload> prepare(std::span<const std::uint8_t> payload) {
  std::string error;
  auto message = rpc::SessionPayload::decode(payload, error);
  if (!message) return rpc::Payload(payload.begin(), payload.end());
  std::vector<capnp::word> words(payload.size() / sizeof(capnp::word));
  std::memcpy(words.data(), payload.data(), words.size() * sizeof(capnp::word));
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() * 64 + 1024;
  options.nestingLimit = 32;
  try {
    capnp::FlatArrayMessageReader reader({words.data(), words.size()}, options);
    auto root = reader.getRoot<wire::SessionMessage>();
    if (root.isUploadModule() && root.getUploadModule().getHash() == kNoModule) return std::nullopt;
    if (!root.isMeasureBatch()) return rpc::Payload(payload.begin(), payload.end());
    rpc::BatchRequest batch;
    if (!rpc::from_wire(root.getMeasureBatch(), batch, error)) return rpc::Payload(payload.begin(), payload.end());
    capnp::MallocMessageBuilder builder;
    builder.setRoot(root);
    builder.getRoot<wire::SessionMessage>().getMeasureBatch().setReferenceHash(kNoModule);
    return rpc::encode_session(builder);
  } catch (const kj::Exception&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t lanes = data[0];
  auto chunks = fuzz::split_chunks({data + 1, size - 1}, 32);
  asio::io_context io;
  std::size_t replies = 0, handled = 0;
  {
    device::SessionServer server(io.get_executor(), device_info(), [&](LeaseId lease, const rpc::Payload& payload) {
      check_reply(lease, payload);
      ++replies;
    });
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      auto payload = prepare(chunks[i]);
      if (!payload) continue;
      LeaseId lease(i < 8 && (lanes >> i) & 1 ? 2 : 1);
      ++handled;
      try {
        server.handle(lease, *payload);
      } catch (const std::exception& e) {
        fuzz::broken(std::string("SessionServer::handle threw: ") + e.what());
      } catch (const kj::Exception& e) {
        fuzz::broken(std::string("SessionServer::handle threw: ") + e.getDescription().cStr());
      }
      io.poll();
      fuzz::check(server.pending_batches() == 0, "no batch runs (its reference is never uploaded)");
    }
    server.end_lease(LeaseId(1));
    server.end_all();
    io.poll();
  }
  // The session protocol: every request gets one reply (an answer or a SessionError).
  fuzz::check(replies == handled, "the device answers every message exactly once");
  return 0;
}
