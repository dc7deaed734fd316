// Traversal budgets of a decoded message (frames and session payloads).
//
// A message is decoded twice over: a validation reader walks it once (every pointer's
// bounds, then every field against the schema) under a budget of a few times its size,
// which is what stops a message whose aliased pointers make a walk cost far more than its
// bytes (amplification). The reader handed to handlers gets a budget of its own, many
// times larger: a message that passed validation costs at most a few times its size per
// full walk, so that budget only bounds how often handlers read it. Sharing one budget
// between the two (as before) made a handler that reads a list element by element fail on
// lists past a dozen entries ("Exceeded message traversal limit" on a module query of 13
// hashes).
#pragma once

#include <capnp/message.h>

#include <cstddef>
#include <cstdint>

namespace kestrel::rpc::detail {

inline capnp::ReaderOptions validation_read_options(std::size_t words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = static_cast<std::uint64_t>(words) * 4 + 64;
  options.nestingLimit = 32;
  return options;
}

inline capnp::ReaderOptions handler_read_options(std::size_t words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = static_cast<std::uint64_t>(words) * 256 + (std::uint64_t(1) << 20);
  options.nestingLimit = 32;
  return options;
}

}  // namespace kestrel::rpc::detail
