// Schema check: walks a message's raw struct layout (AnyStruct, AnyPointer) under the
// schema that capnp compiled into the generated code (StructSchema), without the dynamic
// API (capnp's dynamic.o is 100 KB of every board runtime: docs/device-size.md). Reading
// a pointer as the kind its field declares makes capnp verify it (a struct where a
// struct is declared, a list of a compatible element size, text ending in NUL), and
// throw a kj::Exception when it does not; the walk turns that into a message that names
// the field. Enum values and union members are looked up in the schema.
#include "kestrel/rpc/schema_check.h"

#include <capnp/schema.h>
#include <kj/exception.h>

#include "kestrel/base/log.h"

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

bool is_pointer(const capnp::Type& type) {
  return type.isStruct() || type.isList() || type.isText() || type.isData() || type.isAnyPointer() ||
         type.isInterface();
}

class Walker {
 public:
  // Returns false (with `error` set) at the first field that does not conform.
  bool check_struct(AnyStruct::Reader reader, capnp::StructSchema schema, const std::string& path) {
    for (capnp::StructSchema::Field field : schema.getNonUnionFields()) {
      if (!check_field(reader, field, path)) return false;
    }
    if (schema.getUnionFields().size() > 0) {
      std::uint16_t which = data_u16(reader, schema.getProto().getStruct().getDiscriminantOffset());
      KJ_IF_MAYBE(active, schema.getFieldByDiscriminant(which)) {
        if (!check_field(reader, *active, path)) return false;
      } else {
        error = str(path, ": unknown union member (peer speaks a newer protocol?)");
        return false;
      }
    }
    return true;
  }

  std::string error;

 private:
  bool check_field(AnyStruct::Reader reader, capnp::StructSchema::Field field, const std::string& path) {
    auto proto = field.getProto();
    std::string name = str(path, ".", proto.getName().cStr());
    capnp::Type type = field.getType();
    // A group lives in its parent's sections: walk it with its own schema.
    if (proto.isGroup()) return check_struct(reader, type.asStruct(), name);
    std::uint32_t offset = proto.getSlot().getOffset();
    if (type.isEnum()) {
      std::uint16_t raw = data_u16(reader, offset) ^ proto.getSlot().getDefaultValue().getEnum();
      return check_enum(raw, type.asEnum(), name);
    }
    // Plain data fields need no check: every bit pattern is a value.
    if (!is_pointer(type)) return true;
    try {
      return check_pointer(pointer_field(reader, offset), type, name);
    } catch (const kj::Exception& e) {
      error = str(name, ": ", describe(e));
      return false;
    }
  }

  bool check_enum(std::uint16_t raw, capnp::EnumSchema schema, const std::string& name) {
    if (raw >= schema.getEnumerants().size()) {
      error = str(name, ": unknown enum value ", raw);
      return false;
    }
    return true;
  }

  // A pointer read as `type` (null reads as the field's default, which the schema holds).
  bool check_pointer(AnyPointer::Reader pointer, capnp::Type type, const std::string& name) {
    if (type.isAnyPointer() || type.isInterface()) {
      error = str(name, ": capabilities and untyped pointers are not part of the protocol");
      return false;
    }
    if (pointer.isNull()) return true;
    if (type.isStruct()) return check_struct(pointer.getAs<AnyStruct>(), type.asStruct(), name);
    if (type.isText()) return (void)pointer.getAs<capnp::Text>(), true;  // NUL checked by getAs
    if (type.isData()) return (void)pointer.getAs<capnp::Data>(), true;
    return check_list(pointer, type.asList().getElementType(), name);
  }

  // A list read with the element size its element type has; capnp refuses an
  // incompatible one. Plain data elements need no further check; enums and pointers are
  // checked one by one.
  bool check_list(AnyPointer::Reader pointer, capnp::Type element, const std::string& name) {
    using Which = capnp::schema::Type::Which;
    switch (element.which()) {
      case Which::VOID: (void)pointer.getAs<List<capnp::Void>>(); return true;
      case Which::BOOL: (void)pointer.getAs<List<bool>>(); return true;
      case Which::INT8:
      case Which::UINT8: (void)pointer.getAs<List<std::uint8_t>>(); return true;
      case Which::INT16:
      case Which::UINT16: (void)pointer.getAs<List<std::uint16_t>>(); return true;
      case Which::INT32:
      case Which::UINT32:
      case Which::FLOAT32: (void)pointer.getAs<List<std::uint32_t>>(); return true;
      case Which::INT64:
      case Which::UINT64:
      case Which::FLOAT64: (void)pointer.getAs<List<std::uint64_t>>(); return true;
      case Which::ENUM: {
        auto list = pointer.getAs<List<std::uint16_t>>();
        for (unsigned i = 0; i < list.size(); ++i) {
          if (!check_enum(list[i], element.asEnum(), str(name, "[", i, "]"))) return false;
        }
        return true;
      }
      case Which::STRUCT: {
        // As capnp reads a list where structs are declared: any element size but bits
        // (a primitive or pointer list reads as structs of that one field).
        auto any = pointer.getAs<capnp::AnyList>();
        if (any.getElementSize() == capnp::ElementSize::BIT) {
          error = str(name, ": a list of bits where a list of structs is declared");
          return false;
        }
        auto list = any.as<List<AnyStruct>>();
        for (unsigned i = 0; i < list.size(); ++i) {
          if (!check_item([&] { return check_struct(list[i], element.asStruct(), str(name, "[", i, "]")); }, name, i)) {
            return false;
          }
        }
        return true;
      }
      case Which::TEXT: return check_items(pointer.getAs<List<capnp::Text>>(), name);  // NUL checked per item
      case Which::DATA: return check_items(pointer.getAs<List<capnp::Data>>(), name);
      case Which::LIST:
        // Not in the protocol; a schema that adds one must extend this walk.
        error = str(name, ": lists of lists are not part of the protocol");
        return false;
      case Which::ANY_POINTER:
      case Which::INTERFACE:
        error = str(name, ": capabilities and untyped pointers are not part of the protocol");
        return false;
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

std::string check_schema(capnp::AnyStruct::Reader message, capnp::StructSchema schema, const std::string& root_name) {
  Walker walker;
  try {
    if (walker.check_struct(message, schema, root_name)) return {};
  } catch (const kj::Exception& e) {
    return str(root_name, ": ", describe(e));
  }
  return walker.error;
}

}  // namespace kestrel::rpc
