// Frame builders shared by tracker, client and device.
#include "kestrel/rpc/messages.h"

namespace kestrel::rpc {

wire::FailureCode to_wire(ErrorCode code) {
  switch (code) {
    case ErrorCode::protocol_error: return wire::FailureCode::PROTOCOL_ERROR;
    case ErrorCode::version_mismatch: return wire::FailureCode::VERSION_MISMATCH;
    case ErrorCode::auth_failed: return wire::FailureCode::AUTH_FAILED;
    case ErrorCode::timeout: return wire::FailureCode::TIMEOUT;
    case ErrorCode::cancelled: return wire::FailureCode::CANCELLED;
    case ErrorCode::no_such_lease: return wire::FailureCode::NO_SUCH_LEASE;
    case ErrorCode::device_lost: return wire::FailureCode::DEVICE_LOST;
    case ErrorCode::shutting_down: return wire::FailureCode::SHUTTING_DOWN;
    case ErrorCode::overloaded: return wire::FailureCode::OVERLOADED;
    case ErrorCode::bad_request: return wire::FailureCode::BAD_REQUEST;
    case ErrorCode::connection_lost: return wire::FailureCode::PROTOCOL_ERROR;
  }
  return wire::FailureCode::PROTOCOL_ERROR;
}

ErrorCode from_wire(wire::FailureCode code) {
  switch (code) {
    case wire::FailureCode::PROTOCOL_ERROR: return ErrorCode::protocol_error;
    case wire::FailureCode::VERSION_MISMATCH: return ErrorCode::version_mismatch;
    case wire::FailureCode::AUTH_FAILED: return ErrorCode::auth_failed;
    case wire::FailureCode::TIMEOUT: return ErrorCode::timeout;
    case wire::FailureCode::CANCELLED: return ErrorCode::cancelled;
    case wire::FailureCode::NO_SUCH_LEASE: return ErrorCode::no_such_lease;
    case wire::FailureCode::DEVICE_LOST: return ErrorCode::device_lost;
    case wire::FailureCode::SHUTTING_DOWN: return ErrorCode::shutting_down;
    case wire::FailureCode::OVERLOADED: return ErrorCode::overloaded;
    case wire::FailureCode::BAD_REQUEST: return ErrorCode::bad_request;
  }
  return ErrorCode::protocol_error;
}

RpcError to_error(wire::Failure::Reader failure) {
  return RpcError(from_wire(failure.getCode()), failure.getMessage().cStr());
}

FrameBytes failure_frame(ErrorCode code, std::string_view message) {
  capnp::MallocMessageBuilder builder;
  auto failure = builder.initRoot<wire::Frame>().initFailure();
  failure.setCode(to_wire(code));
  failure.setMessage(capnp::Text::Reader(message.data(), message.size()));
  return encode_frame(builder);
}

FrameBytes heartbeat_frame(bool ack, std::uint64_t seq) {
  capnp::MallocMessageBuilder builder;
  auto frame = builder.initRoot<wire::Frame>();
  if (ack) {
    frame.initHeartbeatAck().setSeq(seq);
  } else {
    frame.initHeartbeat().setSeq(seq);
  }
  return encode_frame(builder);
}

FrameBytes relay_frame(LeaseId lease, std::span<const std::uint8_t> payload) {
  capnp::MallocMessageBuilder builder;
  auto relay = builder.initRoot<wire::Frame>().initRelay();
  relay.setLeaseId(lease.value);
  relay.setPayload(capnp::Data::Reader(payload.data(), payload.size()));
  return encode_frame(builder);
}

}  // namespace kestrel::rpc
