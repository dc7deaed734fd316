// Minimal process-wide logging to stderr: a timestamp, a level, a component and one
// line of text. Thread-safe. The level is set once by main from --log-level.
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>
#include <utility>

namespace kestrel {

// Appends text and numbers without iostreams (the device runtime avoids them: they pull
// libstdc++'s locale machinery, a third of a statically linked runtime).
namespace detail {
inline void append(std::string& out, std::string_view text) { out.append(text); }
inline void append(std::string& out, const char* text) { out.append(text ? text : "(null)"); }
inline void append(std::string& out, const std::string& text) { out.append(text); }
inline void append(std::string& out, char c) { out.push_back(c); }
inline void append(std::string& out, bool b) { out.append(b ? "true" : "false"); }
template <std::integral T>
  requires(!std::same_as<T, char> && !std::same_as<T, bool>)
void append(std::string& out, T value) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}
template <std::floating_point T>
void append(std::string& out, T value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, 6);
  out.append(buffer, result.ptr);
}
}  // namespace detail

// Concatenates strings and numbers: str("lease ", id, " ended").
template <typename... Args>
std::string str(Args&&... args) {
  std::string out;
  (detail::append(out, std::forward<Args>(args)), ...);
  return out;
}

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
