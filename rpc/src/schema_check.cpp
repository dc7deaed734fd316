// Schema check: walks a message's raw struct layout (AnyStruct, AnyPointer) under the
// protocol's layout tables (wire_layout.h: generated from the schemas by
// kestrel-wire-layout), without capnp's reflection: the board runtimes build Cap'n Proto
// in lite mode, with no schemas compiled in and no dynamic API (docs/device-size.md).
// Reading a pointer as the kind its field declares makes capnp verify it (a struct where
// a struct is declared, a list of a compatible element size, text ending in NUL), and
// throw a kj::Exception when it does not; the walk turns that into a message that names
// the field. Enum values and union members are looked up in the tables.
#include "kestrel/rpc/schema_check.h"

#include <kj/exception.h>

#include "kestrel/base/log.h"
#include "wire_layout.h"
// The tables (generated), after the types they fill.
#include "wire_layout.inc"

namespace kestrel::rpc {
namespace {

using capnp::AnyPointer;
using capnp::AnyStruct;
using capnp::List;

// What capnp said, for a person: some of its checks describe themselves by their source
// expression and the raw values, which can hold control characters (a NUL, even).
std::string describe(const kj::Exception& e) {
  std::string text = e.getDescription().cStr();
  if (text.find("'\\0'") != std::string::npos || text.find("NUL-terminated") != std::string::npos) {
    return "text without its terminating NUL";
  }
  std::string clean;
  for (char c : text) clean += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? ' ' : c;
  return clean;
}

// A 16-bit value of a struct's data section at `offset` (in 16-bit units); zero past
// its end, as capnp reads a field a shorter (older) struct does not have.
std::uint16_t data_u16(AnyStruct::Reader reader, std::uint32_t offset) {
  auto data = reader.getDataSection();
  std::size_t at = static_cast<std::size_t>(offset) * 2;
  if (at + 2 > data.size()) return 0;
  return static_cast<std::uint16_t>(data[at] | (data[at + 1] << 8));
}

AnyPointer::Reader pointer_field(AnyStruct::Reader reader, std::uint32_t index) {
  auto pointers = reader.getPointerSection();
  if (index >= pointers.size()) return AnyPointer::Reader();  // null: the field's default
  return pointers[index];
}

namespace layout = wire_layout;

const layout::Struct* struct_by_id(std::uint64_t id) {
  for (const layout::Struct& s : layout::kStructs) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

class Walker {
 public:
  // Returns false (with `error` set) at the first field that does not conform.
  bool check_struct(AnyStruct::Reader reader, const layout::Struct& schema, const std::string& path) {
    const layout::Field* fields = layout::kFields + schema.first_field;
    for (unsigned i = 0; i < schema.plain_fields; ++i) {
      if (!check_field(reader, fields[i], path)) return false;
    }
    if (schema.union_fields > 0) {
      std::uint16_t which = data_u16(reader, schema.discriminant_offset);
      const layout::Field* members = fields + schema.plain_fields;
      for (unsigned i = 0; i < schema.union_fields; ++i) {
        if (members[i].discriminant == which) return check_field(reader, members[i], path);
      }
      error = str(path, ": unknown union member (peer speaks a newer protocol?)");
      return false;
    }
    return true;
  }

  std::string error;

 private:
  bool check_field(AnyStruct::Reader reader, const layout::Field& field, const std::string& path) {
    std::string name = str(path, ".", layout::kNames + field.name);
    switch (field.kind) {
      // A group lives in its parent's sections: walk it with its own layout.
      case layout::Kind::group: return check_struct(reader, layout::kStructs[field.target], name);
      case layout::Kind::enumeration:
        return check_enum(data_u16(reader, field.offset) ^ field.enum_default, field.target, name);
      // Plain data fields need no check: every bit pattern is a value.
      case layout::Kind::plain: return true;
      default: break;
    }
    try {
      return check_pointer(pointer_field(reader, field.offset), field, name);
    } catch (const kj::Exception& e) {
      error = str(name, ": ", describe(e));
      return false;
    }
  }

  bool check_enum(std::uint16_t raw, std::uint16_t which, const std::string& name) {
    if (raw >= layout::kEnums[which].enumerants) {
      error = str(name, ": unknown enum value ", raw);
      return false;
    }
    return true;
  }

  // A pointer read as the field's kind (null reads as the field's default).
  bool check_pointer(AnyPointer::Reader pointer, const layout::Field& field, const std::string& name) {
    if (field.kind == layout::Kind::unsupported) {
      error = str(name, ": capabilities and untyped pointers are not part of the protocol");
      return false;
    }
    if (pointer.isNull()) return true;
    switch (field.kind) {
      case layout::Kind::structure:
        return check_struct(pointer.getAs<AnyStruct>(), layout::kStructs[field.target], name);
      case layout::Kind::text: return (void)pointer.getAs<capnp::Text>(), true;  // NUL checked by getAs
      case layout::Kind::data: return (void)pointer.getAs<capnp::Data>(), true;
      default: return check_list(pointer, field, name);
    }
  }

  // A list read with the element size its element type has; capnp refuses an
  // incompatible one. Plain data elements need no further check; enums and pointers are
  // checked one by one.
  bool check_list(AnyPointer::Reader pointer, const layout::Field& field, const std::string& name) {
    using layout::Element;
    switch (field.element) {
      case Element::void_: (void)pointer.getAs<List<capnp::Void>>(); return true;
      case Element::bit: (void)pointer.getAs<List<bool>>(); return true;
      case Element::byte: (void)pointer.getAs<List<std::uint8_t>>(); return true;
      case Element::two_bytes: (void)pointer.getAs<List<std::uint16_t>>(); return true;
      case Element::four_bytes: (void)pointer.getAs<List<std::uint32_t>>(); return true;
      case Element::eight_bytes: (void)pointer.getAs<List<std::uint64_t>>(); return true;
      case Element::enumeration: {
        auto list = pointer.getAs<List<std::uint16_t>>();
        for (unsigned i = 0; i < list.size(); ++i) {
          if (!check_enum(list[i], field.target, str(name, "[", i, "]"))) return false;
        }
        return true;
      }
      case Element::structure: {
        // As capnp reads a list where structs are declared: any element size but bits
        // (a primitive or pointer list reads as structs of that one field).
        auto any = pointer.getAs<capnp::AnyList>();
        if (any.getElementSize() == capnp::ElementSize::BIT) {
          error = str(name, ": a list of bits where a list of structs is declared");
          return false;
        }
        auto list = any.as<List<AnyStruct>>();
        const layout::Struct& element = layout::kStructs[field.target];
        for (unsigned i = 0; i < list.size(); ++i) {
          if (!check_item([&] { return check_struct(list[i], element, str(name, "[", i, "]")); }, name, i)) {
            return false;
          }
        }
        return true;
      }
      case Element::text: return check_items(pointer.getAs<List<capnp::Text>>(), name);  // NUL checked per item
      case Element::data: return check_items(pointer.getAs<List<capnp::Data>>(), name);
      case Element::list:
        // Not in the protocol; a schema that adds one must extend this walk.
        error = str(name, ": lists of lists are not part of the protocol");
        return false;
      case Element::unsupported:
        error = str(name, ": capabilities and untyped pointers are not part of the protocol");
        return false;
      case Element::none: break;
    }
    error = str(name, ": a list of an element type this build does not know");
    return false;
  }

  // Reads every item of a list of text or data (capnp checks each as it is read).
  template <typename ListReader>
  bool check_items(ListReader list, const std::string& name) {
    for (unsigned i = 0; i < list.size(); ++i) {
      if (!check_item([&] { return (void)list[i], true; }, name, i)) return false;
    }
    return true;
  }

  // One list item's check, its capnp error named by its index.
  template <typename Check>
  bool check_item(Check check, const std::string& name, unsigned i) {
    try {
      return check();
    } catch (const kj::Exception& e) {
      error = str(name, "[", i, "]: ", describe(e));
      return false;
    }
  }
};

}  // namespace

std::string check_schema(capnp::AnyStruct::Reader message, std::uint64_t struct_id, const std::string& root_name) {
  const wire_layout::Struct* schema = struct_by_id(struct_id);
  if (schema == nullptr) {
    return str(root_name, ": no layout for struct ", struct_id, " (not a root of rpc/src/wire_layout.inc)");
  }
  Walker walker;
  try {
    if (walker.check_struct(message, *schema, root_name)) return {};
  } catch (const kj::Exception& e) {
    return str(root_name, ": ", describe(e));
  }
  return walker.error;
}

}  // namespace kestrel::rpc
