// A model run checked against ONNX Runtime and timed (see model_check.h).
#include "kestrel/deploy/model_check.h"

#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <zip.h>

#include "kestrel/base/stats.h"
#include "kestrel/base/usage_error.h"
#include "kestrel/deploy/python_tool.h"
#include "kestrel/device_runtime/kernel_runner.h"

namespace kestrel::deploy {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A temporary directory, removed with everything in it when this goes.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "kestrel-run-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      throw ModelRunError("cannot create a temporary directory in " + fs::temp_directory_path().string());
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// `t` as a version-1.0 .npy file: "<f4" or "<i8", C order.
void write_npy(const fs::path& file, const Tensor& t) {
  const bool floats = t.type == model::ElemType::f32;
  std::string dims;
  for (auto d : t.shape) dims += std::to_string(d) + ",";
  if (t.shape.size() > 1) dims.pop_back();
  std::string header = std::string("{'descr': '") + (floats ? "<f4" : "<i8") + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + length (2) + header + '\n', padded to a multiple of 64.
  const std::size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream out(file, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  out.write(len, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (floats) {
    out.write(reinterpret_cast<const char*>(t.f32.data()), static_cast<std::streamsize>(t.f32.size() * sizeof(float)));
  } else {
    out.write(reinterpret_cast<const char*>(t.i64.data()), static_cast<std::streamsize>(t.i64.size() * sizeof(std::int64_t)));
  }
  if (!out) throw ModelRunError("cannot write " + file.string());
}

OrtRun run_ort_in(const OnnxRuntime& ort, const std::string& model_path, const std::map<std::string, Tensor>& inputs,
                  int threads, int repeat, const fs::path& dir) {
  const std::string& python = ort.python;
  const std::string& script = ort.script;
  std::string command = shell_quote(python) + " " + shell_quote(script) + " " + shell_quote(model_path);
  for (const auto& [name, t] : inputs) {
    // A .npy file: float32 or int64 (integer and boolean inputs); the script converts it
    // to the element type the model declares (int32, bool).
    const fs::path file = dir / ("input_" + std::to_string(std::distance(inputs.begin(), inputs.find(name))) + ".npy");
    write_npy(file, t);
    command += " --input " + shell_quote(name + "=" + file.string());
  }
  const fs::path err = dir / "ort_stderr.txt";
  command += " --out-dir " + shell_quote((dir / "ort").string()) + " --threads " + std::to_string(threads) + " --repeat " +
             std::to_string(repeat) + " 2> " + shell_quote(err.string());
  if (!fs::exists(script)) {
    OrtRun missing;
    missing.why = "no script " + script + " (give its path with --ort-script)";
    return missing;
  }
  std::string stdout_text;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw ModelRunError("cannot start " + python);
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) stdout_text.append(buffer, n);
  int status = ::pclose(pipe);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::string err_text = read_text(err);
  while (!err_text.empty() && (err_text.back() == '\n' || err_text.back() == ' ')) err_text.pop_back();
  OrtRun r;
  if (code == 3 || code == 126 || code == 127) {
    r.why = code == 3 ? err_text : python + (code == 127 ? " was not found" : " cannot be run");
    return r;
  }
  if (code != 0) throw ModelRunError("onnxruntime failed (" + script + ", exit " + std::to_string(code) + "): " + err_text);
  json j;
  try {
    j = json::parse(stdout_text);
  } catch (const json::exception&) {
    throw ModelRunError("unexpected output from " + script + ": " + stdout_text.substr(0, 300));
  }
  r.available = true;
  r.version = j.value("onnxruntime", "");
  r.latency.median_ms = j["latency_ms"]["median"].get<double>();
  r.latency.min_ms = j["latency_ms"]["min"].get<double>();
  r.latency.runs = j["latency_ms"]["runs"].get<int>();
  for (const auto& o : j["outputs"]) {
    Tensor t;
    t.shape = o["shape"].get<std::vector<std::int64_t>>();
    t.f32.resize(static_cast<std::size_t>(t.elements()));
    std::ifstream in(o["file"].get<std::string>(), std::ios::binary);
    in.read(reinterpret_cast<char*>(t.f32.data()), static_cast<std::streamsize>(t.f32.size() * sizeof(float)));
    if (!in) throw ModelRunError("cannot read onnxruntime's output " + o["file"].get<std::string>());
    r.outputs[o["name"].get<std::string>()] = std::move(t);
  }
  return r;
}

}  // namespace

namespace {

// splitmix64 stream of a seed (the mixing of device::fill_uniform, for integers).
struct SplitMix {
  std::uint64_t state;
  explicit SplitMix(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// How an integer input is filled: values in [0, bound) (bound 1: all ones is `ones`).
struct IntFill {
  enum class Kind { indices, mask, small, boolean } kind = Kind::small;
  std::int64_t bound = 4;
  std::string gather;  // the Gather whose indices it is
};

bool passes_value(const std::string& op) {
  return op == "Cast" || op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" || op == "Flatten" || op == "Identity";
}

std::optional<std::vector<std::int64_t>> known_shape(const model::Graph& graph, const std::string& value) {
  if (const model::Initializer* init = graph.initializer(value)) return init->shape;
  const model::ValueInfo* info = graph.value(value);
  if (!info || !info->shape) return std::nullopt;
  std::vector<std::int64_t> out;
  for (const auto& d : *info->shape) {
    if (d.symbolic()) return std::nullopt;
    out.push_back(d.value);
  }
  return out;
}

IntFill int_fill(const model::Graph& graph, const model::ValueInfo& in) {
  IntFill fill;
  if (in.type != model::ElemType::i64 && in.type != model::ElemType::i32) {
    fill.kind = IntFill::Kind::boolean;
    fill.bound = 1;
    return fill;
  }
  // The Gathers whose indices this input is (through value-preserving nodes): the
  // smallest gathered extent.
  std::vector<std::string> values = {in.name};
  std::set<std::string> seen;
  std::int64_t extent = -1;
  while (!values.empty()) {
    const std::string v = values.back();
    values.pop_back();
    if (!seen.insert(v).second) continue;
    for (const model::Node& node : graph.nodes) {
      for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] != v) continue;
        if (node.op_type == "Gather" && i == 1) {
          const auto data = known_shape(graph, node.inputs[0]);
          if (!data || data->empty()) continue;
          auto axis = node.attr_int("axis", 0);
          if (axis < 0) axis += static_cast<std::int64_t>(data->size());
          if (axis < 0 || axis >= static_cast<std::int64_t>(data->size())) continue;
          const std::int64_t e = (*data)[static_cast<std::size_t>(axis)];
          if (e > 0 && (extent < 0 || e < extent)) {
            extent = e;
            fill.gather = node.name;
          }
        } else if (i == 0 && passes_value(node.op_type) && !node.outputs.empty()) {
          values.push_back(node.outputs[0]);
        }
      }
    }
  }
  if (extent > 0) {
    fill.kind = IntFill::Kind::indices;
    fill.bound = extent;
    return fill;
  }
  std::string lower = in.name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower.find("mask") != std::string::npos) {
    fill.kind = IntFill::Kind::mask;
    fill.bound = 1;
  }
  return fill;
}

[[noreturn]] void npz_fail(const std::string& path, const std::string& message) {
  throw UsageError("--inputs " + path + ": " + message);
}

std::uint32_t le32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 | static_cast<std::uint32_t>(p[2]) << 16 |
         static_cast<std::uint32_t>(p[3]) << 24;
}
std::uint16_t le16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | p[1] << 8); }
std::uint64_t le64(const unsigned char* p) { return le32(p) | static_cast<std::uint64_t>(le32(p + 4)) << 32; }

// One .npy file's bytes -> NpzArray.
NpzArray parse_npy(const std::string& path, const std::string& entry, const unsigned char* data, std::uint64_t size) {
  auto bad = [&](const std::string& why) -> void { npz_fail(path, "entry " + entry + ": " + why); };
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) bad("not a .npy array (no \\x93NUMPY magic)");
  const int major = data[6];
  std::uint64_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = le16(data + 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) bad("truncated .npy header");
    header_len = le32(data + 8);
    start = 12;
  } else {
    bad(".npy format version " + std::to_string(major) + " is not supported (1, 2 or 3)");
  }
  if (start + header_len > size) bad("truncated .npy header");
  const std::string header(reinterpret_cast<const char*>(data + start), static_cast<std::size_t>(header_len));
  // {'descr': '<f4', 'fortran_order': False, 'shape': (1, 16), }
  auto field = [&](const std::string& key) -> std::string {
    const std::size_t at = header.find("'" + key + "'");
    if (at == std::string::npos) bad(".npy header has no '" + key + "': " + header);
    std::size_t colon = header.find(':', at);
    if (colon == std::string::npos) bad("bad .npy header: " + header);
    std::size_t b = colon + 1;
    while (b < header.size() && header[b] == ' ') ++b;
    return header.substr(b);
  };
  NpzArray a;
  {
    const std::string d = field("descr");
    if (d.empty() || d[0] != '\'') bad("a structured dtype is not supported: " + header);
    const std::size_t end = d.find('\'', 1);
    if (end == std::string::npos) bad("bad descr in the .npy header: " + header);
    a.dtype = d.substr(1, end - 1);
  }
  if (field("fortran_order").rfind("False", 0) != 0) bad("Fortran-ordered arrays are not supported (save np.ascontiguousarray(a))");
  {
    const std::string sh = field("shape");
    if (sh.empty() || sh[0] != '(') bad("bad shape in the .npy header: " + header);
    const std::size_t end = sh.find(')');
    if (end == std::string::npos) bad("bad shape in the .npy header: " + header);
    std::stringstream dims(sh.substr(1, end - 1));
    std::string item;
    while (std::getline(dims, item, ',')) {
      const std::size_t f = item.find_first_not_of(' ');
      if (f == std::string::npos) continue;
      try {
        std::size_t used = 0;
        const long long v = std::stoll(item.substr(f), &used);
        if (v < 0) throw std::invalid_argument("negative");
        a.shape.push_back(v);
      } catch (const std::exception&) {
        bad("bad dimension '" + item + "' in the .npy header: " + header);
      }
    }
  }
  if (a.dtype.size() < 3 || (a.dtype[0] != '<' && a.dtype[0] != '|' && a.dtype[0] != '=')) {
    bad("dtype " + a.dtype + " is not supported (little-endian float32/64, int8/16/32/64, uint8/16/32 or bool)");
  }
  const std::string kind = a.dtype.substr(1);
  int width = 0;
  if (kind == "f4" || kind == "i4" || kind == "u4") width = 4;
  else if (kind == "f8" || kind == "i8") width = 8;
  else if (kind == "i2" || kind == "u2") width = 2;
  else if (kind == "i1" || kind == "u1" || kind == "b1") width = 1;
  else bad("dtype " + a.dtype + " is not supported (little-endian float32/64, int8/16/32/64, uint8/16/32 or bool)");
  a.floating = kind[0] == 'f';
  const std::int64_t count = element_count(a.shape);
  const std::uint64_t body = size - start - header_len;
  if (body != static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(width)) {
    bad("holds " + std::to_string(body) + " bytes of data, shape " + shape_text(a.shape) + " of " + a.dtype + " needs " +
        std::to_string(count * width));
  }
  const unsigned char* p = data + start + header_len;
  a.values.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i, p += width) {
    double v = 0;
    if (kind == "f4") {
      float f;
      std::memcpy(&f, p, 4);
      v = f;
    } else if (kind == "f8") {
      std::memcpy(&v, p, 8);
    } else if (kind == "i8") {
      v = static_cast<double>(static_cast<std::int64_t>(le64(p)));
    } else if (kind == "i4") {
      v = static_cast<std::int32_t>(le32(p));
    } else if (kind == "u4") {
      v = le32(p);
    } else if (kind == "i2") {
      v = static_cast<std::int16_t>(le16(p));
    } else if (kind == "u2") {
      v = le16(p);
    } else if (kind == "i1") {
      v = static_cast<std::int8_t>(p[0]);
    } else {
      v = p[0];
      if (kind == "b1" && p[0] > 1) bad("a bool value other than 0 or 1");
    }
    a.values[static_cast<std::size_t>(i)] = v;
  }
  return a;
}

}  // namespace

std::map<std::string, Tensor> generated_inputs(const model::Graph& graph, std::uint64_t seed) {
  std::map<std::string, Tensor> inputs;
  std::uint64_t stream = seed;
  for (const auto& in : graph.inputs) {
    if (!in.shape) throw UsageError("model input " + in.name + " has no shape");
    std::vector<std::int64_t> shape;
    for (const auto& d : *in.shape) {
      if (d.symbolic()) throw UsageError("model input " + in.name + " has the unbound dimension " + d.symbol);
      shape.push_back(d.value);
    }
    if (in.type == model::ElemType::f32) {
      Tensor t = Tensor::floats(shape);
      device::fill_uniform(t.f32, stream++);
      inputs[in.name] = std::move(t);
      continue;
    }
    const IntFill fill = int_fill(graph, in);
    std::vector<std::int64_t> values(static_cast<std::size_t>(element_count(shape)), 1);
    if (fill.kind == IntFill::Kind::indices || fill.kind == IntFill::Kind::small) {
      SplitMix rng(stream);
      for (auto& v : values) v = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(fill.bound));
    }
    ++stream;
    inputs[in.name] = Tensor::ints(shape, std::move(values));
  }
  return inputs;
}

std::string generated_input_text(const model::Graph& graph, const std::string& input) {
  for (const auto& in : graph.inputs) {
    if (in.name != input) continue;
    if (in.type == model::ElemType::f32) return "uniform in [-1, 1)";
    const IntFill fill = int_fill(graph, in);
    switch (fill.kind) {
      case IntFill::Kind::indices: return "indices in [0, " + std::to_string(fill.bound) + ") (of Gather " + fill.gather + ")";
      case IntFill::Kind::mask: return "ones (a mask)";
      case IntFill::Kind::boolean: return "true (ones)";
      case IntFill::Kind::small: return "values in [0, " + std::to_string(fill.bound) + ")";
    }
  }
  return "";
}

std::map<std::string, NpzArray> read_npz(const std::string& path) {
  // The archive through libzip (stored or deflated entries, zip64, CRC-checked); the
  // .npy inside each entry by parse_npy.
  if (!fs::is_regular_file(path)) npz_fail(path, "no such file (or it cannot be read)");
  int error = 0;
  std::unique_ptr<zip_t, decltype(&zip_discard)> archive(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &error),
                                                         &zip_discard);
  if (!archive) {
    zip_error_t why;
    zip_error_init_with_code(&why, error);
    const std::string text = zip_error_strerror(&why);
    zip_error_fini(&why);
    npz_fail(path, "not a .npz file (" + text + "; numpy writes .npz with np.savez)");
  }
  std::map<std::string, NpzArray> out;
  const zip_int64_t entries = zip_get_num_entries(archive.get(), 0);
  for (zip_int64_t e = 0; e < entries; ++e) {
    zip_stat_t stat;
    if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(e), 0, &stat) != 0) {
      npz_fail(path, std::string("a corrupt zip directory: ") + zip_strerror(archive.get()));
    }
    const std::string name = stat.name;
    std::unique_ptr<zip_file_t, decltype(&zip_fclose)> file(zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(e), 0),
                                                            &zip_fclose);
    if (!file) npz_fail(path, "entry " + name + ": " + zip_strerror(archive.get()));
    // Read to the end, where libzip checks the entry's CRC (a read past it: 0 bytes, or -1).
    std::string bytes(static_cast<std::size_t>(stat.size), '\0');
    zip_int64_t got = zip_fread(file.get(), bytes.data(), stat.size);
    char past = 0;
    if (got == static_cast<zip_int64_t>(stat.size)) got += zip_fread(file.get(), &past, 1);
    if (got != static_cast<zip_int64_t>(stat.size)) {
      npz_fail(path, "entry " + name + " cannot be read: " + (got < static_cast<zip_int64_t>(stat.size)
                                                                     ? std::string(zip_file_strerror(file.get()))
                                                                     : std::string("longer than its directory says")));
    }
    std::string key = name;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
    out[key] = parse_npy(path, name, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  }
  return out;
}

std::map<std::string, Tensor> inputs_from_npz(const model::Graph& graph, const std::map<std::string, NpzArray>& arrays,
                                              const std::string& path) {
  std::map<std::string, Tensor> out;
  std::set<std::string> used;
  for (const auto& in : graph.inputs) {
    auto it = arrays.find("input:" + in.name);
    if (it == arrays.end()) it = arrays.find(in.name);
    if (it == arrays.end()) npz_fail(path, "no array for the model input " + in.name + " (name it input:" + in.name + " or " + in.name + ")");
    used.insert(it->first);
    const NpzArray& a = it->second;
    std::vector<std::int64_t> shape;
    for (const auto& d : *in.shape) shape.push_back(d.value);
    if (a.shape != shape) {
      npz_fail(path, it->first + " has shape " + shape_text(a.shape) + ", the model input " + in.name + " is " + shape_text(shape));
    }
    if (in.type == model::ElemType::f32) {
      if (!a.floating) npz_fail(path, it->first + " is " + a.dtype + ", the model input " + in.name + " is float");
      Tensor t = Tensor::floats(shape);
      for (std::size_t i = 0; i < a.values.size(); ++i) t.f32[i] = static_cast<float>(a.values[i]);
      out[in.name] = std::move(t);
    } else {
      if (a.floating) {
        npz_fail(path, it->first + " is " + a.dtype + ", the model input " + in.name + " is " +
                           (in.type == model::ElemType::other ? "not float" : "an integer"));
      }
      std::vector<std::int64_t> values;
      for (double v : a.values) values.push_back(static_cast<std::int64_t>(v));
      out[in.name] = Tensor::ints(shape, std::move(values));
    }
  }
  for (const auto& [name, a] : arrays) {
    if (used.count(name) || name.rfind("output:", 0) == 0) continue;
    std::string names;
    for (const auto& in : graph.inputs) names += (names.empty() ? "" : ", ") + in.name;
    npz_fail(path, "the array " + name + " names no model input (the inputs: " + names + ")");
  }
  return out;
}

std::string npz_binding(const model::Graph& graph, const std::map<std::string, NpzArray>& arrays, const std::string& path) {
  std::map<std::string, std::int64_t> values;
  std::vector<std::string> order;
  for (const auto& in : graph.inputs) {
    auto it = arrays.find("input:" + in.name);
    if (it == arrays.end()) it = arrays.find(in.name);
    if (it == arrays.end() || !in.shape || it->second.shape.size() != in.shape->size()) continue;
    for (std::size_t d = 0; d < in.shape->size(); ++d) {
      const model::Dim& dim = (*in.shape)[d];
      if (!dim.symbolic() || dim.symbol.empty()) continue;
      const std::int64_t v = it->second.shape[d];
      auto [pos, fresh] = values.emplace(dim.symbol, v);
      if (fresh) order.push_back(dim.symbol);
      else if (pos->second != v) {
        npz_fail(path, "the arrays give " + dim.symbol + " two values, " + std::to_string(pos->second) + " and " + std::to_string(v));
      }
    }
  }
  std::string out;
  for (const auto& sym : order) out += (out.empty() ? "" : ";") + sym + "=" + std::to_string(values[sym]);
  return out;
}

std::vector<std::string> constant_outputs(const model::Graph& graph, const std::map<std::string, Tensor>& outputs) {
  std::vector<std::string> out;
  for (const auto& o : graph.outputs) {
    auto it = outputs.find(o.name);
    if (it == outputs.end()) continue;
    const Tensor& t = it->second;
    bool constant = true;
    if (t.type == model::ElemType::f32) {
      for (std::size_t i = 1; i < t.f32.size() && constant; ++i) {
        constant = t.f32[i] == t.f32[0] || (std::isnan(t.f32[i]) && std::isnan(t.f32[0]));
      }
    } else {
      for (std::size_t i = 1; i < t.i64.size() && constant; ++i) constant = t.i64[i] == t.i64[0];
    }
    // A single value is trivially "constant": only outputs of two or more values count.
    if (constant && t.elements() > 1) out.push_back(o.name);
  }
  return out;
}

std::unique_ptr<Runner> make_checked_runner(const model::Graph& graph, const model::Plan& plan, KernelProvider& kernels,
                                            std::map<std::string, std::int64_t> symbols) {
  try {
    return std::make_unique<Runner>(graph, plan, kernels, std::move(symbols));
  } catch (const model::ModelError& e) {
    throw ModelRunError(e.what());
  }
}

Latency time_runs(const std::function<void()>& run, int repeat) {
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const stats::Summary s = stats::summarize(ms);
  Latency l;
  l.runs = repeat;
  l.min_ms = s.min;
  l.median_ms = s.median;
  return l;
}

TimedRun run_and_time(Runner& runner, const std::map<std::string, Tensor>& inputs, int repeat) {
  TimedRun r;
  try {
    r.outputs = runner.run(inputs);
    r.latency = time_runs([&] { runner.run(inputs); }, repeat);
  } catch (const model::ModelError& e) {
    throw ModelRunError(e.what());
  }
  return r;
}

std::string default_ort_script() { return (fs::path(KESTREL_SOURCE_DIR) / "scripts" / "ort_run.py").string(); }

std::optional<std::string> ort_unavailable(const OnnxRuntime& ort) {
  if (!fs::exists(ort.script)) return "no script " + ort.script + " (give its path with --ort-script)";
  if (std::system((shell_quote(ort.python) + " -c 'import onnxruntime, numpy' > /dev/null 2>&1").c_str()) != 0) {
    return ort.python + " cannot import onnxruntime and numpy";
  }
  return std::nullopt;
}

OrtRun run_onnxruntime(const OnnxRuntime& ort, const std::string& model_path, const std::map<std::string, Tensor>& inputs,
                       int threads, int repeat) {
  const ScratchDir scratch;
  return run_ort_in(ort, model_path, inputs, threads, repeat, scratch.path());
}

OutputCheck compare_output(const std::string& name, const Tensor& got, const Tensor* want, double tolerance) {
  OutputCheck c;
  c.name = name;
  c.shape = got.shape;
  if (!want) {
    c.problem = "onnxruntime has no output " + name;
    return c;
  }
  if (want->shape != got.shape) {
    c.problem = "shape " + shape_text(got.shape) + ", onnxruntime's is " + shape_text(want->shape);
    return c;
  }
  // Integer and boolean outputs (held as i64) compare as numbers too.
  const bool ints = got.type != model::ElemType::f32;
  const std::size_t count = ints ? got.i64.size() : got.f32.size();
  if (count != want->f32.size()) {
    c.problem = "holds " + std::to_string(count) + " values, onnxruntime's " + std::to_string(want->f32.size());
    return c;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const double g = ints ? static_cast<double>(got.i64[i]) : static_cast<double>(got.f32[i]);
    double d = std::abs(g - want->f32[i]);
    c.max_abs = std::isnan(d) ? INFINITY : std::max(c.max_abs, d);
    c.magnitude = std::max(c.magnitude, std::abs(static_cast<double>(want->f32[i])));
  }
  c.relative = c.max_abs / std::max(c.magnitude, 1e-30);
  c.ok = c.relative <= tolerance;
  if (!c.ok) {
    std::ostringstream s;
    s << "max error " << c.max_abs << " is " << c.relative << " of the output's magnitude " << c.magnitude
      << ", above the tolerance " << tolerance;
    c.problem = s.str();
  }
  return c;
}

std::vector<OutputCheck> compare_outputs(const model::Graph& graph, const std::map<std::string, Tensor>& outputs,
                                         const OrtRun& ort, double tolerance) {
  std::vector<OutputCheck> checks;
  if (!ort.available) return checks;
  for (const auto& o : graph.outputs) {
    const auto it = ort.outputs.find(o.name);
    checks.push_back(compare_output(o.name, outputs.at(o.name), it == ort.outputs.end() ? nullptr : &it->second, tolerance));
  }
  return checks;
}

std::vector<OutputCheck> compare_npz_outputs(const model::Graph& graph, const std::map<std::string, Tensor>& outputs,
                                             const std::map<std::string, NpzArray>& arrays, double tolerance) {
  std::vector<OutputCheck> checks;
  for (const auto& o : graph.outputs) {
    const auto it = arrays.find("output:" + o.name);
    const auto got = outputs.find(o.name);
    if (it == arrays.end() || got == outputs.end()) continue;
    Tensor want = Tensor::floats(it->second.shape);
    for (std::size_t i = 0; i < it->second.values.size(); ++i) want.f32[i] = static_cast<float>(it->second.values[i]);
    checks.push_back(compare_output(o.name, got->second, &want, tolerance));
  }
  return checks;
}

double speedup(const Latency& ours, const Latency& onnxruntime) {
  return ours.median_ms > 0 ? onnxruntime.median_ms / ours.median_ms : 0.0;
}

StepProfile step_profile(const Runner& runner) {
  StepProfile p;
  p.slowest = runner.step_times();
  for (const auto& t : p.slowest) {
    p.total_s += t.seconds;
    if (t.task) p.task_s += t.seconds;
  }
  std::sort(p.slowest.begin(), p.slowest.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  std::map<std::pair<bool, std::string>, StepProfile::Kind> kinds;
  for (const auto& t : p.slowest) {
    StepProfile::Kind& k = kinds[{t.task, t.kind}];
    k.kind = t.kind;
    k.task = t.task;
    ++k.steps;
    k.seconds += t.seconds;
  }
  for (auto& [key, k] : kinds) p.by_kind.push_back(std::move(k));
  std::sort(p.by_kind.begin(), p.by_kind.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return p;
}

std::string machine_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  }
  unsigned cores = std::thread::hardware_concurrency();
  return (model.empty() ? "unknown CPU" : model) + " (" + std::to_string(cores) + (cores == 1 ? " core)" : " cores)");
}

}  // namespace kestrel::deploy
