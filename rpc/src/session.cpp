// Session payload codec.
#include "kestrel/rpc/session.h"

#include <kj/exception.h>

#include <cstring>

#include "kestrel/base/log.h"
#include "kestrel/kernel/status.h"
#include "kestrel/rpc/schema_check.h"
#include "read_budget.h"

namespace kestrel::rpc {
namespace {
// The wire's MeasureStatus carries kernel::Status by value.
using kernel::Status;
static_assert(static_cast<unsigned>(wire::MeasureStatus::OK) == static_cast<unsigned>(Status::ok));
static_assert(static_cast<unsigned>(wire::MeasureStatus::WRONG_ANSWER) == static_cast<unsigned>(Status::wrong_answer));
static_assert(static_cast<unsigned>(wire::MeasureStatus::DEVICE_LOST) == static_cast<unsigned>(Status::device_lost));
static_assert(static_cast<unsigned>(wire::MeasureStatus::DEVICE_COMPILE_ERROR) ==
              static_cast<unsigned>(Status::device_compile_error));
static_assert(Status::last == Status::device_compile_error, "a new status needs its wire value");
}  // namespace

Payload encode_session(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return Payload(bytes.begin(), bytes.end());
}

std::unique_ptr<SessionPayload> SessionPayload::decode(std::span<const std::uint8_t> bytes, std::string& error) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    error = str("session payload of ", bytes.size(), " bytes is not a positive multiple of 8");
    return nullptr;
  }
  std::unique_ptr<SessionPayload> payload(new SessionPayload);
  payload->words_.resize(bytes.size() / sizeof(capnp::word));
  std::memcpy(payload->words_.data(), bytes.data(), bytes.size());
  try {
    kj::ArrayPtr<const capnp::word> view(payload->words_.data(), payload->words_.size());
    {
      capnp::FlatArrayMessageReader check(view, detail::validation_read_options(view.size()));
      auto root = check.getRoot<wire::SessionMessage>();
      (void)root.totalSize();
      std::string wrong = check_schema(root, capnp::typeId<wire::SessionMessage>(), "session");
      if (!wrong.empty()) {
        error = str("invalid session message: ", wrong);
        return nullptr;
      }
    }
    payload->reader_ = std::make_unique<capnp::FlatArrayMessageReader>(view, detail::handler_read_options(view.size()));
    payload->root_ = payload->reader_->getRoot<wire::SessionMessage>();
  } catch (const kj::Exception& e) {
    error = str("invalid session message: ", e.getDescription().cStr());
    return nullptr;
  }
  return payload;
}

}  // namespace kestrel::rpc
