// Schema check: walks a message with Cap'n Proto's dynamic API. Reading a pointer
// field through its schema type makes capnp verify the pointer's kind (a struct where
// a struct is declared, a list of the declared element size, text ending in NUL), and
// throw a kj::Exception when it does not; the walk turns that into a message that
// names the field.
#include "kestrel/rpc/schema_check.h"

#include <capnp/schema.h>
#include <kj/exception.h>

#include "kestrel/base/log.h"

namespace kestrel::rpc {
namespace {

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

class Walker {
 public:
  // Returns false (with `error` set) at the first field that does not conform.
  bool check_struct(capnp::DynamicStruct::Reader reader, const std::string& path) {
    capnp::StructSchema schema = reader.getSchema();
    for (capnp::StructSchema::Field field : schema.getNonUnionFields()) {
      if (!check_field(reader, field, path)) return false;
    }
    if (schema.getUnionFields().size() > 0) {
      KJ_IF_MAYBE(active, reader.which()) {
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
  bool check_field(capnp::DynamicStruct::Reader reader, capnp::StructSchema::Field field, const std::string& path) {
    std::string name = str(path, ".", field.getProto().getName().cStr());
    capnp::Type type = field.getType();
    // Plain data fields need no check (every bit pattern is a value), except enums.
    if (!type.isStruct() && !type.isList() && !type.isText() && !type.isData() && !type.isEnum()) return true;
    try {
      return check_value(reader.get(field), type, name);
    } catch (const kj::Exception& e) {
      error = str(name, ": ", describe(e));
      return false;
    }
  }

  bool check_value(capnp::DynamicValue::Reader value, capnp::Type type, const std::string& name) {
    switch (type.which()) {
      case capnp::schema::Type::STRUCT: return check_struct(value.as<capnp::DynamicStruct>(), name);
      case capnp::schema::Type::LIST: return check_list(value.as<capnp::DynamicList>(), name);
      case capnp::schema::Type::TEXT: (void)value.as<capnp::Text>(); return true;  // NUL checked by get()
      case capnp::schema::Type::DATA: (void)value.as<capnp::Data>(); return true;
      case capnp::schema::Type::ENUM: {
        capnp::DynamicEnum e = value.as<capnp::DynamicEnum>();
        if (e.getEnumerant() == nullptr) {
          error = str(name, ": unknown enum value ", e.getRaw());
          return false;
        }
        return true;
      }
      case capnp::schema::Type::ANY_POINTER:
      case capnp::schema::Type::INTERFACE:
        error = str(name, ": capabilities and untyped pointers are not part of the protocol");
        return false;
      default: return true;
    }
  }

  bool check_list(capnp::DynamicList::Reader list, const std::string& name) {
    capnp::Type element = list.getSchema().getElementType();
    // A list of plain data is valid once capnp accepted its element size; enums and
    // pointers are checked one by one.
    if (!element.isStruct() && !element.isList() && !element.isText() && !element.isData() && !element.isEnum()) {
      return true;
    }
    for (unsigned i = 0; i < list.size(); ++i) {
      std::string item = str(name, "[", i, "]");
      try {
        if (!check_value(list[i], element, item)) return false;
      } catch (const kj::Exception& e) {
        error = str(item, ": ", describe(e));
        return false;
      }
    }
    return true;
  }
};

}  // namespace

std::string check_schema(capnp::DynamicStruct::Reader message, const std::string& root_name) {
  Walker walker;
  try {
    if (walker.check_struct(message, root_name)) return {};
  } catch (const kj::Exception& e) {
    return str(root_name, ": ", describe(e));
  }
  return walker.error;
}

}  // namespace kestrel::rpc
