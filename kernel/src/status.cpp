// Names of candidate statuses.
#include "kestrel/kernel/status.h"

#include <iterator>

namespace kestrel::kernel {
namespace {
constexpr std::string_view kNames[] = {"ok",           "instantiation error", "host compile error",
                                       "device load error", "runtime error",  "wrong answer",
                                       "build timeout", "run timeout",        "device lost",
                                       "device compile error"};
static_assert(std::size(kNames) == static_cast<std::size_t>(Status::last) + 1);
}  // namespace

std::string_view to_string(Status status) {
  auto index = static_cast<std::size_t>(status);
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

bool parse_status(std::string_view text, Status& out) {
  for (std::size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == text) {
      out = static_cast<Status>(i);
      return true;
    }
  }
  return false;
}

}  // namespace kestrel::kernel
