// Names of measurement statuses, and the check that they match the wire enum.
#include "kestrel/rpc/measure_status.h"

#include <iterator>

#include "kestrel/wire/session.capnp.h"

namespace kestrel::rpc {
namespace {
constexpr std::string_view kNames[] = {"ok",           "instantiation error", "host compile error",
                                       "device load error", "runtime error",  "wrong answer",
                                       "build timeout", "run timeout",        "device lost",
                                       "device compile error"};
static_assert(static_cast<unsigned>(wire::MeasureStatus::DEVICE_LOST) ==
              static_cast<unsigned>(MeasureStatus::device_lost));
static_assert(static_cast<unsigned>(wire::MeasureStatus::WRONG_ANSWER) ==
              static_cast<unsigned>(MeasureStatus::wrong_answer));
static_assert(static_cast<unsigned>(wire::MeasureStatus::DEVICE_COMPILE_ERROR) ==
              static_cast<unsigned>(MeasureStatus::device_compile_error));
static_assert(std::size(kNames) == static_cast<std::size_t>(MeasureStatus::last) + 1);
}  // namespace

std::string_view to_string(MeasureStatus status) {
  auto index = static_cast<std::size_t>(status);
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

bool parse_status(std::string_view text, MeasureStatus& out) {
  for (std::size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == text) {
      out = static_cast<MeasureStatus>(i);
      return true;
    }
  }
  return false;
}

}  // namespace kestrel::rpc
