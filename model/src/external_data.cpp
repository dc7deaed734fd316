// External tensor data (see external_data.h). The keys are ONNX's: location, offset,
// length (and checksum, not checked).
#include "external_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "kestrel/model/graph.h"

namespace kestrel::model {

namespace {

namespace fs = std::filesystem;

// Bytes per element of the types a tensor can keep externally; none for others (string).
std::optional<std::int64_t> element_size(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::UINT32: return 4;
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::UINT64:
    case onnx::TensorProto::COMPLEX64: return 8;
    case onnx::TensorProto::COMPLEX128: return 16;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16: return 2;
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL: return 1;
    default: return std::nullopt;
  }
}

std::optional<std::int64_t> parse_size(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    folder_ = fs::path(path).parent_path();
    if (folder_.empty()) folder_ = ".";
  }

  void load(onnx::TensorProto& tensor, const std::string& what) {
    std::string location;
    std::optional<std::int64_t> offset, length;
    for (const auto& entry : tensor.external_data()) {
      if (entry.key() == "location") {
        location = entry.value();
      } else if (entry.key() == "offset" || entry.key() == "length") {
        auto v = parse_size(entry.value());
        if (!v) {
          throw ModelError(what + " has an external data " + entry.key() + " '" + entry.value() +
                           "' that is not a byte count");
        }
        (entry.key() == "offset" ? offset : length) = v;
      }
    }
    if (location.empty()) throw ModelError(what + " keeps its data in an external file but names no location");
    const fs::path file = resolve(location, what);
    std::optional<std::int64_t> expected;
    if (auto size = element_size(tensor.data_type())) {
      std::int64_t n = 1;
      for (auto d : tensor.dims()) n *= d;
      expected = n * *size;
    }
    if (length && expected && *length != *expected) {
      throw ModelError(what + " keeps " + std::to_string(*length) + " bytes in '" + location + "', expected " +
                       std::to_string(*expected) + " for its type and shape");
    }
    std::ifstream& in = open(file, location, what);
    in.clear();
    in.seekg(0, std::ios::end);
    const auto file_size = static_cast<std::int64_t>(in.tellg());
    const std::int64_t begin = offset.value_or(0);
    const std::int64_t count = length ? *length : expected ? *expected : file_size - begin;
    if (begin > file_size || count < 0 || begin + count > file_size) {
      throw ModelError(what + " keeps its data in '" + location + "' at bytes " + std::to_string(begin) + " to " +
                       std::to_string(begin + count) + ", but the file has " + std::to_string(file_size) +
                       " bytes (truncated, or not the data file written with this model)");
    }
    std::string bytes(static_cast<std::size_t>(count), '\0');
    in.seekg(begin);
    if (count && !in.read(bytes.data(), count)) {
      throw ModelError(what + ": reading " + std::to_string(count) + " bytes of '" + location + "' failed");
    }
    tensor.set_raw_data(std::move(bytes));
    tensor.clear_external_data();
    tensor.set_data_location(onnx::TensorProto::DEFAULT);
  }

 private:
  // The file `location` names, which must stay inside the model's folder.
  fs::path resolve(const std::string& location, const std::string& what) {
    const fs::path rel(location);
    bool escapes = rel.is_absolute() || rel.has_root_name() || rel.has_root_directory();
    for (const auto& part : rel) escapes = escapes || part == "..";
    std::error_code ec;
    const fs::path file = folder_ / rel;
    if (!escapes) {
      const fs::path base = fs::weakly_canonical(folder_, ec);
      const fs::path target = fs::weakly_canonical(file, ec);
      const auto mismatch = std::mismatch(base.begin(), base.end(), target.begin(), target.end());
      escapes = ec || mismatch.first != base.end();  // a symbolic link out of the folder
    }
    if (escapes) {
      throw ModelError(what + " keeps its data in '" + location +
                       "', outside the model's folder: Kestrel reads external data only from files beside the "
                       "model (or in folders below it)");
    }
    return file;
  }

  std::ifstream& open(const fs::path& file, const std::string& location, const std::string& what) {
    auto it = files_.find(file.string());
    if (it != files_.end()) return it->second;
    std::ifstream in(file, std::ios::binary);
    if (!in || fs::is_directory(file)) {
      throw ModelError(what + " keeps its data in the external file '" + location + "', which is missing beside " +
                       path_ + " (copy the model's .data file with it)");
    }
    return files_.emplace(file.string(), std::move(in)).first->second;
  }

  std::string path_;
  fs::path folder_;
  std::map<std::string, std::ifstream> files_;
};

void load_graph(onnx::GraphProto& graph, Reader& reader, const std::string& path);

void load_attributes(onnx::NodeProto& node, Reader& reader, const std::string& path) {
  for (auto& attr : *node.mutable_attribute()) {
    const std::string what = path + ": node '" + node.name() + "' (" + node.op_type() + ") attribute " + attr.name();
    if (attr.has_t() && attr.t().data_location() == onnx::TensorProto::EXTERNAL) reader.load(*attr.mutable_t(), what);
    for (auto& t : *attr.mutable_tensors()) {
      if (t.data_location() == onnx::TensorProto::EXTERNAL) reader.load(t, what);
    }
    if (attr.has_g()) load_graph(*attr.mutable_g(), reader, path);
    for (auto& g : *attr.mutable_graphs()) load_graph(g, reader, path);
  }
}

void load_graph(onnx::GraphProto& graph, Reader& reader, const std::string& path) {
  for (auto& init : *graph.mutable_initializer()) {
    if (init.data_location() == onnx::TensorProto::EXTERNAL) {
      reader.load(init, path + ": initializer '" + init.name() + "'");
    }
  }
  for (auto& node : *graph.mutable_node()) load_attributes(node, reader, path);
}

}  // namespace

void load_external_data(onnx::ModelProto& proto, const std::string& path) {
  Reader reader(path);
  load_graph(*proto.mutable_graph(), reader, path);
}

}  // namespace kestrel::model
