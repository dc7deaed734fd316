// Test support: building messages whose pointers have the wrong kind, to check that the
// schema check refuses them.
#pragma once

#include <capnp/any.h>
#include <capnp/schema.h>

#include <cstring>
#include <string_view>

namespace kestrel::test {

// The pointer slot of a field, for overwriting it with a pointer of another kind.
template <typename Builder>
capnp::AnyPointer::Builder pointer_of(Builder builder, const char* field) {
  capnp::StructSchema schema = capnp::Schema::from<capnp::FromBuilder<Builder>>();
  auto slot = schema.getFieldByName(field).getProto().getSlot().getOffset();
  return capnp::AnyStruct::Builder(Builder(builder)).getPointerSection()[slot];
}

// Bytes that are no text: no terminating NUL.
inline void set_unterminated(capnp::AnyPointer::Builder pointer, std::string_view bytes) {
  auto data = pointer.initAs<capnp::Data>(static_cast<unsigned>(bytes.size()));
  std::memcpy(data.begin(), bytes.data(), bytes.size());
}

}  // namespace kestrel::test
