// Minimal process-wide logging to stderr: a timestamp, a level, a component and one
// line of text. Thread-safe. The level is set once by main from --log-level.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "kestrel/base/str.h"

namespace kestrel {

namespace log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_level(Level level);
Level level();
// Parses "debug", "info", "warn", "error", "off"; returns false on anything else.
bool parse_level(std::string_view text, Level& out);
void write(Level level, std::string_view component, std::string_view message);

template <typename... Args>
void debug(std::string_view component, Args&&... args) {
  if (level() <= Level::debug) write(Level::debug, component, str(std::forward<Args>(args)...));
}
template <typename... Args>
void info(std::string_view component, Args&&... args) {
  if (level() <= Level::info) write(Level::info, component, str(std::forward<Args>(args)...));
}
template <typename... Args>
void warn(std::string_view component, Args&&... args) {
  if (level() <= Level::warn) write(Level::warn, component, str(std::forward<Args>(args)...));
}
template <typename... Args>
void error(std::string_view component, Args&&... args) {
  if (level() <= Level::error) write(Level::error, component, str(std::forward<Args>(args)...));
}

}  // namespace log
}  // namespace kestrel
