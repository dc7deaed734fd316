// Frames on the wire: a 4-byte little-endian length, then a Cap'n Proto flat-array
// message of that many bytes holding one tracker.capnp `Frame`. This file is the pure
// codec (no I/O), so every malformed input can be tested without sockets.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/wire/tracker.capnp.h"

namespace kestrel::rpc {

inline constexpr std::size_t kFrameHeaderBytes = 4;
inline constexpr std::size_t kDefaultMaxFrameBytes = 64u << 20;

enum class FrameError {
  none,
  closed,     // orderly end of stream between frames
  oversized,  // header announces more than the receiver's maximum
  malformed,  // length not a positive multiple of 8, or not a valid message
  truncated,  // stream ended inside a frame
  timeout,    // a frame body did not arrive in time
  io,         // any other transport error
};

std::string_view to_string(FrameError error);

// Header + payload, ready to be written.
using FrameBytes = std::vector<std::uint8_t>;

// Serializes a message into a frame. Throws RpcError(bad_request) if the result would
// exceed 4 GiB - 1 (callers also check their peer's maximum).
FrameBytes encode_frame(capnp::MessageBuilder& message);
// Wraps an already-serialized flat-array message (e.g. a frame being relayed).
FrameBytes encode_raw(std::span<const std::uint8_t> message_bytes);

// Outcome of reading a header: the body length, or why it is unacceptable.
struct HeaderCheck {
  FrameError error = FrameError::none;
  std::uint32_t length = 0;
  std::string detail;
};
HeaderCheck check_header(std::span<const std::uint8_t, kFrameHeaderBytes> header,
                         std::size_t max_frame_bytes);

// A received frame. Owns its bytes; `root()` is valid as long as the InFrame lives.
class InFrame {
 public:
  // Validates the whole message eagerly (segment table, every pointer's bounds, and every
  // field's type against the schema: check_schema), so handlers never meet a malformed
  // or wrong-typed pointer later. On failure returns nullptr and sets `error`.
  static std::unique_ptr<InFrame> decode(std::vector<capnp::word> words, std::string& error);

  wire::Frame::Reader root() const { return root_; }
  std::span<const std::uint8_t> bytes() const {
    return {reinterpret_cast<const std::uint8_t*>(words_.data()), words_.size() * sizeof(capnp::word)};
  }

 private:
  InFrame() = default;
  std::vector<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  wire::Frame::Reader root_;
};

// Decodes a complete frame (header included) from a byte buffer; for tests and tools.
// Returns nullptr with `error` set on any problem.
std::unique_ptr<InFrame> decode_frame_bytes(std::span<const std::uint8_t> frame,
                                            std::size_t max_frame_bytes, std::string& error);

// Human-readable name of a frame's union member, for logs ("hello", "relay", ...).
std::string_view frame_kind(wire::Frame::Reader frame);

}  // namespace kestrel::rpc
