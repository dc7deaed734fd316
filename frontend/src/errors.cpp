// The error table (see errors.h).
#include "kestrel/frontend/errors.h"

#include "kestrel/base/usage_error.h"
#include "kestrel/frontend/session_runner.h"
#include "kestrel/model/graph.h"
#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/tuner/cross_model.h"

namespace kestrel::frontend {

ClassifiedError classify(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    return {ErrorKind::usage, e.what()};
  } catch (const ops::OpError& e) {
    return {ErrorKind::op, e.what()};
  } catch (const records::RecordsError& e) {
    return {ErrorKind::records, e.what()};
  } catch (const model::ModelError& e) {
    return {ErrorKind::model, e.what()};
  } catch (const tuner::ModelFileError& e) {
    return {ErrorKind::cost_model, e.what()};
  } catch (const rpc::RpcError& e) {
    return {ErrorKind::device, e.what()};
  } catch (const SessionTerminated& e) {
    return {ErrorKind::terminated, e.what()};
  } catch (const std::invalid_argument& e) {  // a bad target triple, strategy name, ...
    return {ErrorKind::usage, e.what()};
  } catch (const std::exception& e) {
    return {ErrorKind::failure, e.what()};
  } catch (...) {
    return {ErrorKind::failure, "unknown error"};
  }
}

int exit_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage:
    case ErrorKind::op:
    case ErrorKind::records:
    case ErrorKind::model:
    case ErrorKind::cost_model:
      return kExitBadInput;
    case ErrorKind::terminated:
      return kExitTerminated;
    case ErrorKind::device:
    case ErrorKind::failure:
      return kExitFailed;
  }
  return kExitFailed;
}

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return "usage";
    case ErrorKind::op: return "op";
    case ErrorKind::records: return "records";
    case ErrorKind::model: return "model";
    case ErrorKind::cost_model: return "cost_model";
    case ErrorKind::device: return "device";
    case ErrorKind::terminated: return "terminated";
    case ErrorKind::failure: return "failure";
  }
  return "failure";
}

}  // namespace kestrel::frontend
