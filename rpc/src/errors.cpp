// Names of rpc error codes.
#include "kestrel/rpc/errors.h"

namespace kestrel::rpc {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::protocol_error: return "protocol error";
    case ErrorCode::version_mismatch: return "version mismatch";
    case ErrorCode::auth_failed: return "authentication failed";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::cancelled: return "cancelled";
    case ErrorCode::no_such_lease: return "no such lease";
    case ErrorCode::device_lost: return "device lost";
    case ErrorCode::shutting_down: return "shutting down";
    case ErrorCode::overloaded: return "overloaded";
    case ErrorCode::bad_request: return "bad request";
    case ErrorCode::connection_lost: return "connection lost";
  }
  return "unknown error";
}

bool is_permanent(ErrorCode code) {
  return code == ErrorCode::version_mismatch || code == ErrorCode::auth_failed;
}

}  // namespace kestrel::rpc
