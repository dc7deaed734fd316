// Frame codec: length-prefixed Cap'n Proto flat-array messages.
#include "kestrel/rpc/framing.h"

#include <kj/exception.h>

#include <cstring>
#include <limits>

#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/schema_check.h"
#include "kestrel/base/log.h"
#include "read_budget.h"

namespace kestrel::rpc {

std::string_view to_string(FrameError error) {
  switch (error) {
    case FrameError::none: return "none";
    case FrameError::closed: return "connection closed";
    case FrameError::oversized: return "oversized frame";
    case FrameError::malformed: return "malformed frame";
    case FrameError::truncated: return "truncated frame";
    case FrameError::timeout: return "frame timeout";
    case FrameError::io: return "i/o error";
  }
  return "?";
}

namespace {
void put_le32(std::uint8_t* out, std::uint32_t v) {
  out[0] = static_cast<std::uint8_t>(v);
  out[1] = static_cast<std::uint8_t>(v >> 8);
  out[2] = static_cast<std::uint8_t>(v >> 16);
  out[3] = static_cast<std::uint8_t>(v >> 24);
}
}  // namespace

FrameBytes encode_raw(std::span<const std::uint8_t> message_bytes) {
  if (message_bytes.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw RpcError(ErrorCode::bad_request,
                   str("message of ", message_bytes.size(), " bytes is too large for one frame"));
  }
  FrameBytes out(kFrameHeaderBytes + message_bytes.size());
  put_le32(out.data(), static_cast<std::uint32_t>(message_bytes.size()));
  if (!message_bytes.empty()) std::memcpy(out.data() + kFrameHeaderBytes, message_bytes.data(), message_bytes.size());
  return out;
}

FrameBytes encode_frame(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return encode_raw({bytes.begin(), bytes.size()});
}

HeaderCheck check_header(std::span<const std::uint8_t, kFrameHeaderBytes> h, std::size_t max_frame_bytes) {
  std::uint32_t length = static_cast<std::uint32_t>(h[0]) | (static_cast<std::uint32_t>(h[1]) << 8) |
                         (static_cast<std::uint32_t>(h[2]) << 16) | (static_cast<std::uint32_t>(h[3]) << 24);
  HeaderCheck check;
  check.length = length;
  if (length > max_frame_bytes) {
    check.error = FrameError::oversized;
    check.detail = str("frame of ", length, " bytes exceeds the ", max_frame_bytes,
                       "-byte limit (is the peer a Kestrel program?)");
  } else if (length == 0 || length % sizeof(capnp::word) != 0) {
    check.error = FrameError::malformed;
    check.detail = str("frame length ", length, " is not a positive multiple of 8");
  }
  return check;
}

std::unique_ptr<InFrame> InFrame::decode(std::vector<capnp::word> words, std::string& error) {
  std::unique_ptr<InFrame> frame(new InFrame);
  frame->words_ = std::move(words);
  try {
    kj::ArrayPtr<const capnp::word> view(frame->words_.data(), frame->words_.size());
    {
      // Validation: every pointer walked now (bounds, then types through the schema), so
      // malformed content is rejected here and never reaches a handler.
      capnp::FlatArrayMessageReader check(view, detail::validation_read_options(view.size()));
      if (check.getEnd() != view.end()) {
        error = "frame has trailing bytes after its message";
        return nullptr;
      }
      auto root = check.getRoot<wire::Frame>();
      (void)root.totalSize();
      if (static_cast<unsigned>(root.which()) > static_cast<unsigned>(wire::Frame::SESSION_REPORT)) {
        error = str("unknown frame kind ", static_cast<unsigned>(root.which()), " (peer speaks a newer protocol?)");
        return nullptr;
      }
      std::string wrong = check_schema(root, capnp::typeId<wire::Frame>(), "frame");
      if (!wrong.empty()) {
        error = str("invalid message: ", wrong);
        return nullptr;
      }
    }
    frame->reader_ = std::make_unique<capnp::FlatArrayMessageReader>(view, detail::handler_read_options(view.size()));
    frame->root_ = frame->reader_->getRoot<wire::Frame>();
  } catch (const kj::Exception& e) {
    error = str("invalid message: ", e.getDescription().cStr());
    return nullptr;
  }
  return frame;
}

std::unique_ptr<InFrame> decode_frame_bytes(std::span<const std::uint8_t> bytes, std::size_t max_frame_bytes,
                                            std::string& error) {
  if (bytes.size() < kFrameHeaderBytes) {
    error = "truncated frame header";
    return nullptr;
  }
  auto check = check_header(bytes.first<kFrameHeaderBytes>(), max_frame_bytes);
  if (check.error != FrameError::none) {
    error = check.detail;
    return nullptr;
  }
  if (bytes.size() - kFrameHeaderBytes != check.length) {
    error = str("frame announces ", check.length, " bytes but carries ", bytes.size() - kFrameHeaderBytes);
    return nullptr;
  }
  std::vector<capnp::word> words(check.length / sizeof(capnp::word));
  std::memcpy(words.data(), bytes.data() + kFrameHeaderBytes, check.length);
  return InFrame::decode(std::move(words), error);
}

std::string_view frame_kind(wire::Frame::Reader frame) {
  switch (frame.which()) {
    case wire::Frame::HELLO: return "hello";
    case wire::Frame::CHALLENGE: return "challenge";
    case wire::Frame::AUTH_PROOF: return "authProof";
    case wire::Frame::WELCOME: return "welcome";
    case wire::Frame::FAILURE: return "failure";
    case wire::Frame::REGISTER: return "register";
    case wire::Frame::REGISTERED: return "registered";
    case wire::Frame::HEARTBEAT: return "heartbeat";
    case wire::Frame::HEARTBEAT_ACK: return "heartbeatAck";
    case wire::Frame::REQUEST_DEVICE: return "requestDevice";
    case wire::Frame::CANCEL_REQUEST: return "cancelRequest";
    case wire::Frame::GRANT: return "grant";
    case wire::Frame::REQUEST_FAILED: return "requestFailed";
    case wire::Frame::RELEASE: return "release";
    case wire::Frame::LEASE_STARTED: return "leaseStarted";
    case wire::Frame::LEASE_ENDED: return "leaseEnded";
    case wire::Frame::RELAY: return "relay";
    case wire::Frame::SUMMARY_REQUEST: return "summaryRequest";
    case wire::Frame::SUMMARY: return "summary";
    case wire::Frame::SESSION_REPORT: return "sessionReport";
  }
  return "unknown";
}

}  // namespace kestrel::rpc
