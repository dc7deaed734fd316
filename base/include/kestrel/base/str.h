// String building without iostreams: str("lease ", id, " ended").
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

}  // namespace kestrel
