// Small builders for the frames every party sends, and conversions between the wire
// failure codes and rpc::ErrorCode.
#pragma once

#include <string_view>

#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/framing.h"
#include "kestrel/base/ids.h"

namespace kestrel::rpc {

wire::FailureCode to_wire(ErrorCode code);
ErrorCode from_wire(wire::FailureCode code);

// Turns a received Failure into an exception object (not thrown).
RpcError to_error(wire::Failure::Reader failure);

FrameBytes failure_frame(ErrorCode code, std::string_view message);
FrameBytes heartbeat_frame(bool ack, std::uint64_t seq);
FrameBytes relay_frame(LeaseId lease, std::span<const std::uint8_t> payload);

}  // namespace kestrel::rpc
