// Test support: the message of the error a piece of code throws, for CHECKs on messages.
#pragma once

#include <functional>
#include <string>

namespace kestrel::test {

// What the E that `f` throws says, or "(no error)" when it throws none (another kind of
// exception propagates and fails the test).
template <class E>
std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kestrel::test
