// One table from the kind of error that ended a command or a call to what each front end
// makes of it: the exit status of a `kestrel` command, the exception class of the Python
// package. Every command and binding classifies through here, so a records error is the
// same kind (and exit status) in `kestrel tune` as in `kestrel export`.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace kestrel::frontend {

enum class ErrorKind {
  usage,       // the options or arguments themselves (UsageError; a bad target, strategy)
  op,          // an unknown op, a malformed or unsupported workload or configuration (ops::OpError)
  records,     // a records database that cannot be used: missing, not one, newer, unreachable (RecordsError)
  model,       // an ONNX model that cannot be read or planned, or an export that cannot be done (ModelError)
  cost_model,  // a cost-model file that cannot be read or trained (tuner::ModelFileError)
  device,      // the tracker or a device: unreachable, refused token, none of the key (rpc::RpcError)
  terminated,  // SIGTERM ended a tuning session; its records are kept (SessionTerminated)
  failure,     // anything else: the work itself failed
};

// Exit statuses of `kestrel` commands: 0 done; 1 the work failed (a device, a kernel,
// a mismatch, an I/O error); 2 what the command was given cannot be used (options, an op
// or workload, a records database, a model or cost-model file); 130 interrupted
// (Ctrl-C, twice); 143 terminated (SIGTERM).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInterrupted = 130;
inline constexpr int kExitTerminated = 143;

struct ClassifiedError {
  ErrorKind kind = ErrorKind::failure;
  std::string message;  // what() of the exception
};

// The kind and message of the exception in `error` (not null). Never throws.
ClassifiedError classify(std::exception_ptr error);
// The exit status of a command that ended with an error of `kind`.
int exit_status(ErrorKind kind);
// "usage", "op", "records", ...: for logs and tests.
std::string_view to_string(ErrorKind kind);

}  // namespace kestrel::frontend
