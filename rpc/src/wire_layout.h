// The protocol's struct layouts, as the schema check walks them (schema_check.cpp): for
// every struct a frame or a session message can hold, its fields' kinds and places, the
// union members' discriminants, the enums' sizes. The tables themselves are
// wire_layout.inc, written by kestrel-wire-layout (rpc/tools/wire_layout_main.cpp) from
// the schemas compiled into the host's generated code; a ctest checks that they are what
// the schemas say. The board runtimes use Cap'n Proto in lite mode (no schemas compiled
// in: 40 KB of the aarch64 runtime, docs/device-size.md), so the check cannot read the
// schemas there, and host and board share these tables instead.
#pragma once

#include <cstdint>

namespace kestrel::rpc::wire_layout {

// What a field holds, as far as the check is concerned.
enum class Kind : std::uint8_t {
  plain,        // a number or bool in the data section: every bit pattern is a value
  enumeration,  // a 16-bit enum in the data section
  group,        // a group: fields of its parent's sections (target: its struct)
  structure,    // a struct pointer (target: its struct)
  text,
  data,
  list,         // a list pointer (element: what it holds)
  unsupported,  // AnyPointer, a capability: not part of the protocol
};

// What a list holds.
enum class Element : std::uint8_t {
  none,  // not a list
  void_,
  bit,
  byte,
  two_bytes,
  four_bytes,
  eight_bytes,
  enumeration,  // target: its enum
  structure,    // target: its struct
  text,
  data,
  list,         // a list of lists: not part of the protocol
  unsupported,  // AnyPointer, capabilities
};

inline constexpr std::uint16_t kNotInUnion = 0xffff;

struct Field {
  std::uint16_t name;          // offset of its NUL-terminated name in kNames
  Kind kind;
  Element element;
  std::uint16_t offset;        // the slot: pointer index, or the enum's 16-bit data offset
  std::uint16_t target;        // index in kStructs (group, struct, list of structs) or kEnums
  std::uint16_t enum_default;  // an enum field's default (values are stored XOR it)
  std::uint16_t discriminant;  // a union member's discriminant, else kNotInUnion
};

struct Struct {
  std::uint64_t id;            // the schema's type id (capnp::typeId<T>())
  std::uint16_t first_field;   // in kFields: the fields outside the union, then its members
  std::uint16_t plain_fields;  // how many are outside the union
  std::uint16_t union_fields;  // how many are union members
  std::uint16_t discriminant_offset;  // in 16-bit units of the data section
};

struct Enum {
  std::uint16_t enumerants;  // values 0 .. enumerants - 1 are known
};

}  // namespace kestrel::rpc::wire_layout
