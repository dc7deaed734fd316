// Session payloads: session.capnp messages carried inside Relay frames between a
// lease holder and its device.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kestrel/wire/session.capnp.h"

namespace kestrel::rpc {

using Payload = std::vector<std::uint8_t>;

// Serializes a session message (the root of `message` is a SessionMessage).
Payload encode_session(capnp::MessageBuilder& message);

// A received session message; owns its bytes.
class SessionPayload {
 public:
  // Validates eagerly (bounds, then every field's type against the schema: check_schema);
  // returns nullptr and sets `error` on anything malformed or wrong-typed.
  static std::unique_ptr<SessionPayload> decode(std::span<const std::uint8_t> bytes, std::string& error);
  wire::SessionMessage::Reader root() const { return root_; }

 private:
  SessionPayload() = default;
  std::vector<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  wire::SessionMessage::Reader root_;
};

}  // namespace kestrel::rpc
