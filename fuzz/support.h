// What the fuzz targets share: reading every field of a message the way a handler could,
// splitting an input into length-prefixed chunks, and stopping with a message when an
// invariant does not hold (libFuzzer then saves the input as a crash).
#pragma once

#include <capnp/dynamic.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "kestrel/base/log.h"

namespace kestrel::fuzz {

// Quiet unless KESTREL_FUZZ_LOG names a level (debug, info, ...): to see what the code
// under test says about one input, e.g. KESTREL_FUZZ_LOG=debug fuzz_tracker crash-file.
inline void init_logging() {
  log::Level level = log::Level::off;
  if (const char* env = std::getenv("KESTREL_FUZZ_LOG")) log::parse_level(env, level);
  log::set_level(level);
}

// Stops the process: the input broke a guarantee (libFuzzer reports a deadly signal and
// keeps the input).
[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "\nkestrel fuzz: invariant broken: %s\n", what.c_str());
  std::abort();
}

inline void check(bool condition, const std::string& what) {
  if (!condition) broken(what);
}

namespace detail {
void walk_value(const capnp::DynamicValue::Reader& value);

inline void walk_struct(capnp::DynamicStruct::Reader s) {
  for (auto field : s.getSchema().getNonUnionFields()) walk_value(s.get(field));
  KJ_IF_MAYBE(active, s.which()) { walk_value(s.get(*active)); }
}

inline void walk_value(const capnp::DynamicValue::Reader& value) {
  switch (value.getType()) {
    case capnp::DynamicValue::TEXT:
      (void)value.as<capnp::Text>().size();  // checks the terminating NUL
      break;
    case capnp::DynamicValue::DATA:
      (void)value.as<capnp::Data>().size();
      break;
    case capnp::DynamicValue::LIST:
      for (auto element : value.as<capnp::DynamicList>()) walk_value(element);
      break;
    case capnp::DynamicValue::STRUCT:
      walk_struct(value.as<capnp::DynamicStruct>());
      break;
    default:
      break;  // numbers, enums, void: nothing behind them
  }
}
}  // namespace detail

// Reads every field of `root` as the schema types it (every pointer of the active union
// members, recursively), as a handler may. Throws kj::Exception on anything a handler
// would trip on: a pointer of the wrong kind, text without its NUL, the traversal limit.
template <typename Reader>
void read_every_field(Reader root) {
  detail::walk_struct(capnp::toDynamic(root));
}

// Reads every field of a decoded message through the reader a handler gets (`root`), and
// through a fresh reader over the same words with the decoders' traversal limit (4 x the
// words + 64). The fresh read must not throw: a decoded message conforms to its schema
// (pointer kinds, text NULs) and does not amplify past the limit. Through `root` the only
// exception allowed is the traversal limit, and only for a message whose reading costs
// more words than it has (pointers aliasing one object: Cap'n Proto's amplification,
// which no Kestrel peer produces); for any other message the decoder must leave its
// handlers the budget to read it all.
// Whether reading every field of the message costs more words than it has: pointers
// aliasing one object (Cap'n Proto's amplification; no Kestrel peer produces it).
template <typename Root>
bool amplifies(kj::ArrayPtr<const capnp::word> words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() + 8;
  options.nestingLimit = 32;
  try {
    capnp::FlatArrayMessageReader reader(words, options);
    read_every_field(reader.getRoot<Root>());
    return false;
  } catch (const kj::Exception&) {
    return true;
  }
}

inline bool is_traversal_limit(const kj::Exception& e) {
  return std::string(e.getDescription().cStr()).find("traversal limit") != std::string::npos;
}

template <typename Root>
void check_reads_fully(typename Root::Reader root, kj::ArrayPtr<const capnp::word> words, const std::string& what) {
  auto fresh_read = [&](std::uint64_t limit) {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = limit;
    options.nestingLimit = 32;
    capnp::FlatArrayMessageReader reader(words, options);
    read_every_field(reader.getRoot<Root>());
  };
  try {
    fresh_read(words.size() * 4 + 64);
  } catch (const kj::Exception& e) {
    // Pointers aliasing one object can pass decode yet cost more than its budget to read
    // in full; handlers then get a clean error (docs/security.md). Anything else is a bug.
    if (is_traversal_limit(e) && amplifies<Root>(words)) return;
    broken("a decoded " + what + " does not read as its schema says: " + e.getDescription().cStr());
  }
  try {
    read_every_field(root);
  } catch (const kj::Exception& e) {
    std::string description = e.getDescription().cStr();
    if (description.find("traversal limit") == std::string::npos) {
      broken("a decoded " + what + " throws when a handler reads it: " + description);
    }
    check(amplifies<Root>(words), "a decoded " + what + " that does not amplify leaves its handlers too little traversal budget "
                     "to read it once: " + description);
  }
}

// Splits `data` into chunks of [u16 little-endian length][that many bytes] (the last one
// cut short when the input ends), at most `max_chunks`.
inline std::vector<std::span<const std::uint8_t>> split_chunks(std::span<const std::uint8_t> data,
                                                               std::size_t max_chunks) {
  std::vector<std::span<const std::uint8_t>> chunks;
  while (data.size() >= 2 && chunks.size() < max_chunks) {
    std::size_t length = data[0] | (std::size_t(data[1]) << 8);
    data = data.subspan(2);
    length = std::min(length, data.size());
    chunks.push_back(data.first(length));
    data = data.subspan(length);
  }
  return chunks;
}

// The inverse, for seeds: appends one chunk.
inline void append_chunk(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> chunk) {
  out.push_back(static_cast<std::uint8_t>(chunk.size() & 0xff));
  out.push_back(static_cast<std::uint8_t>((chunk.size() >> 8) & 0xff));
  out.insert(out.end(), chunk.begin(), chunk.end());
}

}  // namespace kestrel::fuzz
