// Schema check of a received message: every field a handler could read has the type
// the schema says, so no handler ever meets a wrong-typed pointer.
#pragma once

#include <capnp/any.h>
#include <capnp/schema.h>

#include <string>

namespace kestrel::rpc {

// Walks `message` through its schema: every field of the struct and of its active union
// member, recursively through structs and lists. Pointers must have the schema's kind
// (struct, list with the right element size, text with its NUL, data); enum values and
// union members must be ones the schema names. Returns an empty string when the whole
// message conforms, else what is wrong, naming the field ("hello.nonce: ...").
// Bounds and depth are the reader's (capnp::ReaderOptions) as usual. `message` is read
// as a struct of `schema` (capnp::Schema::from<T>().asStruct() for a generated T);
// Cap'n Proto's dynamic API is not used (it would add 100 KB to the board runtimes).
std::string check_schema(capnp::AnyStruct::Reader message, capnp::StructSchema schema, const std::string& root_name);

}  // namespace kestrel::rpc
