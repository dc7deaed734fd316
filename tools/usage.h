// What both command-line parsers share (args.h for kestrel, device_args.h for
// kestrel-device): the user's error type (kestrel::UsageError, base/usage_error.h) and
// integer options with a range.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kestrel/base/usage_error.h"

namespace kestrel::tools {

// The value `text` of option --`name` as an integer in [min, max]; UsageError naming the
// option otherwise.
inline std::int64_t parse_int_option(const std::string& name, const std::string& text, std::int64_t min,
                                     std::int64_t max) {
  std::size_t used = 0;
  std::int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || used == 0) {
    throw UsageError("option '--" + name + "' expects an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    throw UsageError("option '--" + name + "' must be between " + std::to_string(min) + " and " +
                     std::to_string(max) + ", got " + text);
  }
  return value;
}

}  // namespace kestrel::tools
