// The error type of the rpc layer. A `RpcError` carries a code that tells the caller
// how to react (retry elsewhere, fix configuration, give up) and a one-line message
// meant for a person.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kestrel::rpc {

// Mirrors wire::FailureCode (tracker.capnp) plus local transport conditions.
enum class ErrorCode {
  protocol_error,
  version_mismatch,
  auth_failed,
  timeout,
  cancelled,
  no_such_lease,
  device_lost,
  shutting_down,
  overloaded,
  bad_request,
  connection_lost,  // local: the tracker connection closed or could not be opened
};

std::string_view to_string(ErrorCode code);

class RpcError : public std::runtime_error {
 public:
  RpcError(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// True for errors that a retry cannot fix (wrong token, wrong protocol version).
bool is_permanent(ErrorCode code);

}  // namespace kestrel::rpc
