// The user's mistake in what a command or a call was given (an unknown option, a value
// out of range, options that contradict each other): every front end reports it with a
// pointer to its help, and it is never counted as a failure of the work.
#pragma once

#include <stdexcept>

namespace kestrel {

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

}  // namespace kestrel
