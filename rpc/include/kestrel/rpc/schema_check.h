// Schema check of a received message: every field a handler could read has the type
// the schema says, so no handler ever meets a wrong-typed pointer.
#pragma once

#include <capnp/any.h>

#include <cstdint>
#include <string>

namespace kestrel::rpc {

// Walks `message` through its schema: every field of the struct and of its active union
// member, recursively through structs and lists. Pointers must have the schema's kind
// (struct, list with the right element size, text with its NUL, data); enum values and
// union members must be ones the schema names. Returns an empty string when the whole
// message conforms, else what is wrong, naming the field ("hello.nonce: ...").
// Bounds and depth are the reader's (capnp::ReaderOptions) as usual. `message` is read
// as a struct of the type `struct_id` (capnp::typeId<T>() for a generated T: wire::Frame,
// wire::SessionMessage or any struct they hold), walked with the protocol's layout
// tables (rpc/src/wire_layout.h), not capnp's reflection, which the board runtimes go
// without (Cap'n Proto in lite mode: docs/device-size.md).
std::string check_schema(capnp::AnyStruct::Reader message, std::uint64_t struct_id, const std::string& root_name);

}  // namespace kestrel::rpc
