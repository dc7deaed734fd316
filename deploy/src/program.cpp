// A lowered model's file format and its execution (program.h). The execution is the
// model runner proper: the host's Runner lowers a plan and runs it here, and so does a
// board (model_runtime/).
#include "kestrel/deploy/program.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string_view>

#include "kestrel/deploy/layout.h"
#include "kestrel/deploy/portable_ops.h"

namespace kestrel::deploy {

using model::ArgLayout;
using model::ElemType;
using model::Initializer;
using model::ModelError;
using model::Node;

// ---------------------------------------------------------------------------------------
// The files: "KESTRELP" (a program) or "KESTRELW" (a weights file), u32 format version,
// u64 payload bytes, the payload, u64 FNV-1a of the payload. Numbers little-endian;
// strings and arrays as u64 count + elements. A program's payload starts with where its
// float arrays are: in it (0), or in a weights file (1, its name and checksum), each
// array then a u64 index into the weights file's arrays (its payload: u64 count, each
// array as u64 count + floats). Format 2 added the weights file and the memory plan.

namespace {

constexpr char kMagic[8] = {'K', 'E', 'S', 'T', 'R', 'E', 'L', 'P'};
constexpr char kWeightsMagic[8] = {'K', 'E', 'S', 'T', 'R', 'E', 'L', 'W'};
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::uint32_t kWeightsFormatVersion = 1;
// Larger counts than this are corruption, not a model (4 Gi elements).
constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 32;
constexpr std::size_t kHeaderBytes = 8 + 4 + 8;

std::uint64_t fnv1a(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string file_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace

// The distinct float arrays of the programs a ProgramsWriter writes, by content (copies:
// a program may go once it is added).
class ArrayStore {
 public:
  std::vector<std::vector<float>> arrays;
  std::size_t added = 0;

  std::uint64_t add(std::span<const float> values) {
    ++added;
    const std::string_view bytes(reinterpret_cast<const char*>(values.data()), values.size_bytes());
    std::vector<std::uint64_t>& same = by_hash_[fnv1a(bytes)];
    for (std::uint64_t i : same) {
      if (arrays[i].size() == values.size() && std::equal(values.begin(), values.end(), arrays[i].begin())) return i;
    }
    same.push_back(arrays.size());
    arrays.emplace_back(values.begin(), values.end());
    return arrays.size() - 1;
  }

 private:
  std::map<std::uint64_t, std::vector<std::uint64_t>> by_hash_;
};

namespace {

class Writer {
 public:
  std::string out;
  ArrayStore* store = nullptr;  // float arrays go there, by index; null: inline

  template <typename T>
  void pod(T v) {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    if constexpr (std::endian::native == std::endian::big) std::reverse(bytes, bytes + sizeof(T));
    out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
  }
  void u64(std::uint64_t v) { pod(v); }
  void i64(std::int64_t v) { pod(v); }
  void str(const std::string& s) {
    u64(s.size());
    out += s;
  }
  template <typename T>
  void array(std::span<const T> values) {
    u64(values.size());
    if constexpr (std::endian::native == std::endian::little) {
      out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    } else {
      for (const T& v : values) pod(v);
    }
  }
  void ints(const std::vector<std::int64_t>& v) { array<std::int64_t>(v); }
  // A tensor's floats: inline, or their index in the weights file.
  void floats(std::span<const float> v) {
    if (store) u64(store->add(v));
    else array<float>(v);
  }
  void sizes(const std::vector<std::size_t>& v) {
    u64(v.size());
    for (std::size_t x : v) u64(x == kNoValue ? ~std::uint64_t{0} : x);
  }
  void initializer(const Initializer& init) {
    str(init.name);
    pod(static_cast<std::uint8_t>(init.type));
    ints(init.shape);
    floats(init.f32);
    ints(init.i64);
  }
  void node(const Node& n) {
    str(n.name);
    str(n.op_type);
    str(n.domain);
    u64(n.inputs.size());
    for (const auto& s : n.inputs) str(s);
    u64(n.outputs.size());
    for (const auto& s : n.outputs) str(s);
    u64(n.attributes.size());
    for (const auto& [key, a] : n.attributes) {
      str(key);
      const std::uint8_t present = (a.i ? 1 : 0) | (a.f ? 2 : 0) | (a.s ? 4 : 0) | (a.t ? 8 : 0);
      pod(present);
      if (a.i) i64(*a.i);
      if (a.f) pod(*a.f);
      if (a.s) str(*a.s);
      if (a.t) initializer(*a.t);
      ints(a.ints);
      array<float>(a.floats);
    }
  }
};

// A weights file read whole: where each of its arrays is.
struct WeightsFile {
  std::string path;
  std::string bytes;
  std::vector<std::pair<std::size_t, std::size_t>> arrays;  // (byte offset, floats)
};

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& path) : data_(bytes), path_(path) {}

  const WeightsFile* weights = nullptr;  // float arrays are indices into it; null: inline

  [[noreturn]] void corrupt(const std::string& what) const {
    throw ModelError(path_ + " is corrupt: " + what + " (export it again with kestrel export --model)");
  }
  template <typename T>
  T pod() {
    if (data_.size() - at_ < sizeof(T)) corrupt("it ends early");
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, data_.data() + at_, sizeof(T));
    if constexpr (std::endian::native == std::endian::big) std::reverse(bytes, bytes + sizeof(T));
    at_ += sizeof(T);
    T v;
    std::memcpy(&v, bytes, sizeof(T));
    return v;
  }
  std::uint64_t u64() { return pod<std::uint64_t>(); }
  std::int64_t i64() { return pod<std::int64_t>(); }
  std::uint64_t count(std::size_t element_size) {
    const std::uint64_t n = u64();
    if (n > kMaxCount || n * element_size > data_.size() - at_) corrupt("a count past the end of the file");
    return n;
  }
  std::string str() {
    const std::uint64_t n = count(1);
    std::string s(data_.substr(at_, n));
    at_ += n;
    return s;
  }
  template <typename T, typename Vec>
  void array(Vec& out) {
    const std::uint64_t n = count(sizeof(T));
    out.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) out[i] = pod<T>();
  }
  std::vector<std::int64_t> ints() {
    std::vector<std::int64_t> v;
    array<std::int64_t>(v);
    return v;
  }
  template <typename Vec>
  void floats(Vec& out) {
    if (!weights) {
      array<float>(out);
      return;
    }
    const std::uint64_t i = u64();
    if (i >= weights->arrays.size()) {
      corrupt("array " + std::to_string(i) + " of " + weights->path + ", which holds " +
              std::to_string(weights->arrays.size()));
    }
    const auto [at, n] = weights->arrays[i];
    out.resize(n);
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(out.data(), weights->bytes.data() + at, n * sizeof(float));
    } else {
      Reader raw(std::string_view(weights->bytes).substr(at, n * sizeof(float)), weights->path);
      for (std::size_t k = 0; k < n; ++k) out[k] = raw.pod<float>();
    }
  }
  std::size_t at() const { return at_; }
  void skip(std::size_t bytes) { at_ += bytes; }  // after count() checked they are there
  std::vector<std::size_t> sizes() {
    const std::uint64_t n = count(8);
    std::vector<std::size_t> v(n);
    for (auto& x : v) {
      const std::uint64_t raw = u64();
      x = raw == ~std::uint64_t{0} ? kNoValue : static_cast<std::size_t>(raw);
    }
    return v;
  }
  Initializer initializer() {
    Initializer init;
    init.name = str();
    const auto type = pod<std::uint8_t>();
    if (type > static_cast<std::uint8_t>(ElemType::other)) corrupt("an unknown element type");
    init.type = static_cast<ElemType>(type);
    init.shape = ints();
    floats(init.f32);
    init.i64 = ints();
    return init;
  }
  Node node() {
    Node n;
    n.name = str();
    n.op_type = str();
    n.domain = str();
    for (std::uint64_t i = 0, k = count(8); i < k; ++i) n.inputs.push_back(str());
    for (std::uint64_t i = 0, k = count(8); i < k; ++i) n.outputs.push_back(str());
    for (std::uint64_t i = 0, k = count(8); i < k; ++i) {
      std::string key = str();
      model::Attribute a;
      const auto present = pod<std::uint8_t>();
      if (present & 1) a.i = i64();
      if (present & 2) a.f = pod<float>();
      if (present & 4) a.s = str();
      if (present & 8) a.t = initializer();
      a.ints = ints();
      array<float>(a.floats);
      n.attributes.emplace(std::move(key), std::move(a));
    }
    return n;
  }
  bool done() const { return at_ == data_.size(); }

 private:
  std::string_view data_;
  const std::string& path_;
  std::size_t at_ = 0;
};

// The program's payload; its float arrays into `store` when given (the weights file
// `weights_name` whose checksum the caller patches in at `*checksum_at`).
std::string payload_of(const Program& p, ArrayStore* store, const std::string& weights_name, std::size_t* checksum_at) {
  Writer w;
  w.store = store;
  w.pod(static_cast<std::uint8_t>(store ? 1 : 0));
  if (store) {
    w.str(weights_name);
    if (checksum_at) *checksum_at = w.out.size();
    w.u64(0);
  }
  w.i64(p.block);
  w.u64(p.values.size());
  for (const ProgramValue& v : p.values) {
    w.str(v.name);
    w.pod(static_cast<std::uint8_t>(v.type));
    w.pod(static_cast<std::uint8_t>(v.shape.has_value()));
    if (v.shape) w.ints(*v.shape);
    w.i64(v.constant);
  }
  w.u64(p.constants.size());
  for (const Initializer& c : p.constants) w.initializer(c);
  w.u64(p.packed.size());
  for (const AlignedFloats& f : p.packed) w.floats(f);
  w.u64(p.nodes.size());
  for (const ProgramNode& n : p.nodes) {
    w.node(n.node);
    w.sizes(n.in);
    w.sizes(n.out);
  }
  w.u64(p.steps.size());
  for (const ProgramStep& s : p.steps) {
    w.pod(static_cast<std::uint8_t>(s.task));
    w.str(s.label);
    w.str(s.kind);
    w.str(s.op);
    w.ints(s.params);
    w.u64(s.args.size());
    for (const ProgramArg& a : s.args) {
      w.u64(a.value);
      w.pod(static_cast<std::uint8_t>(a.layout));
      w.i64(a.elements);
      w.i64(a.packed);
    }
    w.sizes(s.nodes);
    w.sizes(s.frees);
  }
  w.sizes(p.inputs);
  w.sizes(p.outputs);
  w.i64(p.memory.arena);
  w.u64(p.memory.buffers.size());
  for (const MemoryBuffer& b : p.memory.buffers) {
    w.u64(b.value);
    w.pod(static_cast<std::uint8_t>(b.blocked));
    w.i64(b.bytes);
    w.i64(b.offset);
    w.i64(b.first);
    w.i64(b.last);
  }
  return std::move(w.out);
}

// A whole file: magic, version, payload size, payload, checksum.
std::string framed(const char* magic, std::uint32_t version, const std::string& payload) {
  Writer w;
  w.out.reserve(payload.size() + kHeaderBytes + 8);
  w.out.append(magic, 8);
  w.pod(version);
  w.u64(payload.size());
  w.out += payload;
  w.u64(fnv1a(payload));
  return std::move(w.out);
}

// Written beside and renamed: a reader never sees half a file.
void write_whole(const std::string& path, const std::string& bytes) {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) throw ModelError("cannot write " + partial + ": " + std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      const std::string why = std::strerror(errno);
      std::remove(partial.c_str());
      throw ModelError("cannot write " + partial + ": " + why);
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(partial.c_str());
    throw ModelError("cannot write " + path + ": " + why);
  }
}

// A file's payload after its magic, version, size and checksum are checked. `what` is
// "a Kestrel model program" or "a Kestrel weights file".
std::string_view unframe(const std::string& bytes, const std::string& path, const char* magic, std::uint32_t version,
                         const std::string& what) {
  Reader head(bytes, path);
  if (bytes.size() < 8 || std::memcmp(bytes.data(), magic, 8) != 0) {
    throw ModelError(path + " is not " + what + " (write one with kestrel export --model)");
  }
  for (std::size_t i = 0; i < 8; ++i) head.pod<char>();
  const auto got = head.pod<std::uint32_t>();
  if (got != version) {
    throw ModelError(path + " is " + what + " of format " + std::to_string(got) + "; this runtime reads format " +
                     std::to_string(version) + " (export it again with the kestrel that built this runtime)");
  }
  const std::uint64_t size = head.u64();
  if (bytes.size() < kHeaderBytes + 8 || size != bytes.size() - kHeaderBytes - 8) {
    head.corrupt("it is " + std::to_string(bytes.size()) + " bytes, its header says " + std::to_string(size + kHeaderBytes + 8));
  }
  const std::string_view payload = std::string_view(bytes).substr(kHeaderBytes, size);
  std::uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + kHeaderBytes + size, 8);
  if constexpr (std::endian::native == std::endian::big) sum = __builtin_bswap64(sum);
  if (sum != fnv1a(payload)) head.corrupt("its checksum does not match its contents");
  return payload;
}

std::string read_whole(const std::string& path, const std::string& hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError("cannot read " + path + ": " + std::strerror(errno) + " (" + hint + ")");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The weights file `name` beside `program_path`, which says its checksum is `checksum`.
WeightsFile read_weights(const std::string& program_path, const std::string& name, std::uint64_t checksum) {
  WeightsFile w;
  w.path = folder_of(program_path) + name;
  const std::string program = file_name(program_path);
  w.bytes = read_whole(w.path, "the weights " + program + " was exported with; export the model again with kestrel export --model");
  const std::string_view payload = unframe(w.bytes, w.path, kWeightsMagic, kWeightsFormatVersion, "a Kestrel weights file");
  std::uint64_t sum = 0;
  std::memcpy(&sum, w.bytes.data() + kHeaderBytes + payload.size(), 8);
  if constexpr (std::endian::native == std::endian::big) sum = __builtin_bswap64(sum);
  if (sum != checksum) {
    throw ModelError(w.path + " is not the weights file " + program_path +
                     " was written with (another export's?): export the model again with kestrel export --model");
  }
  Reader r(payload, w.path);
  for (std::uint64_t i = 0, n = r.count(8); i < n; ++i) {
    const std::uint64_t floats = r.count(sizeof(float));
    w.arrays.emplace_back(kHeaderBytes + r.at(), floats);
    r.skip(floats * sizeof(float));
  }
  if (!r.done()) r.corrupt("bytes after its end");
  return w;
}

// Every index in range: a file that passes the checksum but was written wrong (or by
// hand) fails here, not as a wild read during a run.
void check_consistent(const Program& p, Reader& r) {
  const std::size_t values = p.values.size();
  auto value_ok = [&](std::size_t v, bool omitted_ok) { return (omitted_ok && v == kNoValue) || v < values; };
  for (const ProgramValue& v : p.values) {
    if (v.constant >= static_cast<std::int64_t>(p.constants.size())) r.corrupt("value " + v.name + " names no constant");
  }
  for (const ProgramNode& n : p.nodes) {
    for (std::size_t v : n.in) {
      if (!value_ok(v, true)) r.corrupt("node " + n.node.name + " reads no value");
    }
    for (std::size_t v : n.out) {
      if (!value_ok(v, true)) r.corrupt("node " + n.node.name + " writes no value");
    }
  }
  for (const ProgramStep& s : p.steps) {
    for (const ProgramArg& a : s.args) {
      if (!value_ok(a.value, false) || a.packed >= static_cast<std::int64_t>(p.packed.size()) || a.elements < 0) {
        r.corrupt("step " + s.label + " has an argument out of range");
      }
    }
    if (s.task && s.args.empty()) r.corrupt("task step " + s.label + " has no output");
    for (std::size_t n : s.nodes) {
      if (n >= p.nodes.size()) r.corrupt("step " + s.label + " names no node");
    }
    for (std::size_t v : s.frees) {
      if (!value_ok(v, false)) r.corrupt("step " + s.label + " frees no value");
    }
  }
  for (std::size_t v : p.inputs) {
    if (!value_ok(v, false)) r.corrupt("an input out of range");
  }
  for (std::size_t v : p.outputs) {
    if (!value_ok(v, false)) r.corrupt("an output out of range");
  }
  if (p.block < 0 || p.block > 1024) r.corrupt("a block of " + std::to_string(p.block));
  if (std::string why = memory_plan_conflict(p.memory, p.steps.size(), p.values.size()); !why.empty()) {
    r.corrupt("its memory plan: " + why);
  }
}

}  // namespace

std::string program_file(const std::map<std::string, std::int64_t>& binding) {
  std::string text;
  for (const auto& [symbol, value] : binding) text += (text.empty() ? "" : ",") + symbol + "=" + std::to_string(value);
  return "model." + text + ".kprog";
}

void save_program(const Program& program, const std::string& path) {
  write_whole(path, framed(kMagic, kFormatVersion, payload_of(program, nullptr, "", nullptr)));
}

struct ProgramsWriter::Pending {
  std::string name;
  std::string payload;
  std::size_t checksum_at = 0;
};

ProgramsWriter::ProgramsWriter(std::string dir)
    : dir_(dir.empty() || dir.back() == '/' ? std::move(dir) : std::move(dir) + "/"), store_(std::make_unique<ArrayStore>()) {}

ProgramsWriter::~ProgramsWriter() = default;

void ProgramsWriter::add(const Program& program, const std::string& name) {
  Pending p;
  p.name = name;
  p.payload = payload_of(program, store_.get(), kWeightsFile, &p.checksum_at);
  pending_.push_back(std::move(p));
}

SavedPrograms ProgramsWriter::finish() {
  Writer weights;
  weights.u64(store_->arrays.size());
  for (const std::vector<float>& a : store_->arrays) weights.array<float>(std::span<const float>(a));
  const std::uint64_t checksum = fnv1a(weights.out);
  SavedPrograms saved;
  saved.arrays = store_->added;
  saved.stored = store_->arrays.size();
  store_ = std::make_unique<ArrayStore>();
  // The weights first: a program is never on disk before the weights it names.
  const std::string weights_file = framed(kWeightsMagic, kWeightsFormatVersion, weights.out);
  weights.out = std::string();
  write_whole(dir_ + kWeightsFile, weights_file);
  saved.weights_bytes = weights_file.size();
  Writer sum;
  sum.u64(checksum);
  for (Pending& p : pending_) {
    p.payload.replace(p.checksum_at, 8, sum.out);
    const std::string file = framed(kMagic, kFormatVersion, p.payload);
    write_whole(dir_ + p.name, file);
    saved.program_bytes.push_back(file.size());
  }
  pending_.clear();
  return saved;
}

Program load_program(const std::string& path) {
  const std::string bytes = read_whole(path, "write it with kestrel export --model");
  Reader r(unframe(bytes, path, kMagic, kFormatVersion, "a Kestrel model program"), path);
  WeightsFile weights;
  if (r.pod<std::uint8_t>()) {
    const std::string name = r.str();
    if (name.empty() || name.find('/') != std::string::npos) r.corrupt("a weights file named \"" + name + "\"");
    const std::uint64_t checksum = r.u64();
    weights = read_weights(path, name, checksum);
    r.weights = &weights;
  }
  Program p;
  p.block = r.i64();
  for (std::uint64_t i = 0, n = r.count(8); i < n; ++i) {
    ProgramValue v;
    v.name = r.str();
    const auto type = r.pod<std::uint8_t>();
    if (type > static_cast<std::uint8_t>(ElemType::other)) r.corrupt("an unknown element type");
    v.type = static_cast<ElemType>(type);
    if (r.pod<std::uint8_t>()) v.shape = r.ints();
    v.constant = r.i64();
    p.values.push_back(std::move(v));
  }
  for (std::uint64_t i = 0, n = r.count(8); i < n; ++i) p.constants.push_back(r.initializer());
  for (std::uint64_t i = 0, n = r.count(8); i < n; ++i) {
    AlignedFloats f;
    r.floats(f);
    p.packed.push_back(std::move(f));
  }
  for (std::uint64_t i = 0, n = r.count(8); i < n; ++i) {
    ProgramNode node;
    node.node = r.node();
    node.in = r.sizes();
    node.out = r.sizes();
    p.nodes.push_back(std::move(node));
  }
  for (std::uint64_t i = 0, n = r.count(8); i < n; ++i) {
    ProgramStep s;
    s.task = r.pod<std::uint8_t>() != 0;
    s.label = r.str();
    s.kind = r.str();
    s.op = r.str();
    s.params = r.ints();
    for (std::uint64_t k = 0, m = r.count(8); k < m; ++k) {
      ProgramArg a;
      a.value = static_cast<std::size_t>(r.u64());
      const auto layout = r.pod<std::uint8_t>();
      if (layout > static_cast<std::uint8_t>(ArgLayout::gemm_panels_transposed)) r.corrupt("an unknown argument layout");
      a.layout = static_cast<ArgLayout>(layout);
      a.elements = r.i64();
      a.packed = r.i64();
      s.args.push_back(a);
    }
    s.nodes = r.sizes();
    s.frees = r.sizes();
    p.steps.push_back(std::move(s));
  }
  p.inputs = r.sizes();
  p.outputs = r.sizes();
  p.memory.arena = r.i64();
  for (std::uint64_t i = 0, n = r.count(8 + 1 + 4 * 8); i < n; ++i) {
    MemoryBuffer b;
    b.value = static_cast<std::size_t>(r.u64());
    b.blocked = r.pod<std::uint8_t>() != 0;
    b.bytes = r.i64();
    b.offset = r.i64();
    b.first = r.i64();
    b.last = r.i64();
    p.memory.buffers.push_back(b);
  }
  if (!r.done()) r.corrupt("bytes after its end");
  check_consistent(p, r);
  return p;
}

// ---------------------------------------------------------------------------------------
// The memory plan: the runner's allocations simulated, then packed.

namespace {

constexpr std::int64_t kArenaAlign = 64;

std::int64_t aligned(std::int64_t bytes) { return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// Follows ProgramRunner::Impl's decisions (which layouts each value is held in, when a
// step converts, moves or writes blocked) without running anything, and records every
// float buffer the runner makes with the times it is live. Every branch here has its
// twin in the runner below; a mismatch costs memory (the arena refuses a placement over
// a live tensor), never a wrong answer.
class MemorySimulator {
 public:
  explicit MemorySimulator(const Program& program) : p(program), held(program.values.size()) {}

  std::vector<MemoryBuffer> run() {
    for (std::size_t id : p.inputs) write(id, false, plain_bytes(id), 0);
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const ProgramStep& step = p.steps[i];
      const auto t = static_cast<std::int64_t>(i) + 1;
      if (step.task) {
        run_task(step, t);
      } else {
        for (std::size_t n : step.nodes) run_portable_node(step, p.nodes[n], t);
      }
      for (std::size_t dead : step.frees) release(dead, t);
    }
    const auto end = static_cast<std::int64_t>(p.steps.size()) + 1;
    for (std::size_t id : p.outputs) plain_of(id, end);
    for (MemoryBuffer& b : buffers) {
      if (b.last < 0) b.last = end;
    }
    return std::move(buffers);
  }

 private:
  struct Held {
    bool plain = false, blocked = false;
    std::int64_t plain_buffer = -1, blocked_buffer = -1;  // into buffers; -1: not planned
  };
  const Program& p;
  std::vector<Held> held;
  std::vector<MemoryBuffer> buffers;

  bool constant(std::size_t id) const { return p.values[id].constant >= 0; }
  const std::optional<std::vector<std::int64_t>>& shape(std::size_t id) const { return p.values[id].shape; }

  // The bytes of a value's plain floats, 0 when it is not a float value of known shape.
  std::int64_t plain_bytes(std::size_t id) const {
    if (p.values[id].type != ElemType::f32 || !shape(id)) return 0;
    return element_count(*shape(id)) * static_cast<std::int64_t>(sizeof(float));
  }
  std::int64_t blocked_bytes(std::size_t id) const {
    if (p.values[id].type != ElemType::f32 || !shape(id) || shape(id)->size() != 4 || p.block <= 0) return 0;
    const auto& s = *shape(id);
    return s[0] * ((s[1] + p.block - 1) / p.block) * s[2] * s[3] * p.block * static_cast<std::int64_t>(sizeof(float));
  }

  std::int64_t make(std::size_t id, bool blocked, std::int64_t bytes, std::int64_t t) {
    if (bytes <= 0) return -1;
    buffers.push_back(MemoryBuffer{id, blocked, bytes, 0, t, -1});
    return static_cast<std::int64_t>(buffers.size()) - 1;
  }
  void end(std::int64_t buffer, std::int64_t t) {
    if (buffer >= 0) buffers[static_cast<std::size_t>(buffer)].last = t;
  }
  void release(std::size_t id, std::int64_t t) {
    Held& h = held[id];
    end(h.plain_buffer, t);
    end(h.blocked_buffer, t);
    h = Held{};
  }
  void write(std::size_t id, bool blocked, std::int64_t bytes, std::int64_t t) {
    release(id, t);
    Held& h = held[id];
    (blocked ? h.blocked : h.plain) = true;
    (blocked ? h.blocked_buffer : h.plain_buffer) = make(id, blocked, bytes, t);
  }
  void plain_of(std::size_t id, std::int64_t t) {
    Held& h = held[id];
    if (constant(id) || h.plain || !h.blocked) return;
    h.plain = true;
    h.plain_buffer = make(id, false, plain_bytes(id), t);
  }
  void blocked_of(std::size_t id, std::int64_t t) {
    Held& h = held[id];
    if (constant(id) || h.blocked || !h.plain) return;
    h.blocked = true;
    h.blocked_buffer = make(id, true, blocked_bytes(id), t);
  }
  bool blocked_only(std::size_t id) const {
    if (id == kNoValue || constant(id)) return false;
    const Held& h = held[id];
    return h.blocked && !h.plain && shape(id) && shape(id)->size() == 4;
  }

  void run_task(const ProgramStep& step, std::int64_t t) {
    for (std::size_t a = 0; a + 1 < step.args.size(); ++a) {
      const ProgramArg& arg = step.args[a];
      if (arg.packed >= 0) continue;
      if (arg.layout == ArgLayout::nchwc) blocked_of(arg.value, t);
      else plain_of(arg.value, t);
    }
    const ProgramArg& out = step.args.back();
    const bool blocked = out.layout == ArgLayout::nchwc;
    write(out.value, blocked, p.values[out.value].type == ElemType::f32 && shape(out.value) ? out.elements * 4 : 0, t);
  }

  bool move_view(const ProgramStep& step, const ProgramNode& pn, std::int64_t t) {
    static const std::set<std::string> views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
    if (pn.in.empty() || pn.out.size() != 1 || !views.count(pn.node.op_type)) return false;
    const std::size_t value = pn.in[0];
    if (value == kNoValue || constant(value) || pn.out[0] == kNoValue) return false;
    if (std::count(pn.in.begin(), pn.in.end(), value) != 1) return false;
    if (std::find(step.frees.begin(), step.frees.end(), value) == step.frees.end()) return false;
    if (!shape(pn.out[0]) || !shape(value)) return false;
    if (!held[value].plain && !held[value].blocked) return false;
    plain_of(value, t);
    if (element_count(*shape(pn.out[0])) != element_count(*shape(value))) return false;
    hand_on(value, pn.out[0], false, t);
    return true;
  }

  // `to` takes over the buffer `from` holds in one layout (a view moved on, an in-place
  // step); the rest of `from` is released.
  void hand_on(std::size_t from, std::size_t to, bool blocked, std::int64_t t) {
    std::int64_t& buffer = blocked ? held[from].blocked_buffer : held[from].plain_buffer;
    const std::int64_t moved = buffer;
    buffer = -1;
    release(from, t);
    release(to, t);
    (blocked ? held[to].blocked : held[to].plain) = true;
    (blocked ? held[to].blocked_buffer : held[to].plain_buffer) = moved;
  }

  bool blocked_elementwise(const ProgramStep& step, const ProgramNode& pn, std::int64_t t) {
    static const std::set<std::string> binaries = {"Add", "Sub", "Mul", "Div"};
    static const std::set<std::string> unaries = {"Relu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Erf", "Neg"};
    const bool binary = binaries.count(pn.node.op_type) && pn.in.size() == 2;
    if (pn.out.size() != 1 || pn.out[0] == kNoValue) return false;
    if (!binary && !(unaries.count(pn.node.op_type) && pn.in.size() == 1)) return false;
    const auto& out_shape = shape(pn.out[0]);
    if (!out_shape || out_shape->size() != 4) return false;
    auto output_shaped = [&](std::size_t id) { return blocked_only(id) && *shape(id) == *out_shape; };
    std::size_t at = 0;
    if (!output_shaped(pn.in[0]) && binary) at = 1;
    const std::size_t a = pn.in[at];
    if (!output_shaped(a)) return false;
    bool per_channel = false;  // the runner's channel path
    if (binary) {
      const std::size_t id = pn.in[1 - at];
      if (id == kNoValue) return false;
      if (!(blocked_only(id) && *shape(id) == *shape(a))) {
        if (!constant(id) && !held[id].plain && !held[id].blocked) return false;  // the runner fails here
        plain_of(id, t);
        if (p.values[id].type != ElemType::f32 || !shape(id)) return false;
        const std::int64_t c = (*shape(a))[1];
        const auto& b = *shape(id);
        per_channel = b == std::vector<std::int64_t>{1, c, 1, 1} || b == std::vector<std::int64_t>{c, 1, 1};
        if (element_count(b) != 1 && !per_channel) return false;
      }
    }
    const bool dies = std::find(step.frees.begin(), step.frees.end(), a) != step.frees.end();
    if (per_channel && p.block % 4 == 0 && dies && std::count(pn.in.begin(), pn.in.end(), a) == 1) {
      hand_on(a, pn.out[0], true, t);  // in place: the output takes the dying operand's buffer
      return true;
    }
    write(pn.out[0], true, blocked_bytes(a), t);
    return true;
  }

  void run_portable_node(const ProgramStep& step, const ProgramNode& pn, std::int64_t t) {
    if (move_view(step, pn, t)) return;
    if (blocked_elementwise(step, pn, t)) return;
    for (std::size_t id : pn.in) {
      if (id != kNoValue) plain_of(id, t);
    }
    for (std::size_t id : pn.out) {
      if (id != kNoValue) write(id, false, plain_bytes(id), t);
    }
  }
};

bool times_overlap(const MemoryBuffer& a, const MemoryBuffer& b) { return a.first <= b.last && b.first <= a.last; }
bool bytes_overlap(const MemoryBuffer& a, const MemoryBuffer& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

}  // namespace

MemoryPlan plan_memory(const Program& program) {
  MemoryPlan plan;
  plan.buffers = MemorySimulator(program).run();
  std::vector<MemoryBuffer>& buffers = plan.buffers;
  // Largest first (then earliest), each at the lowest offset clear of the placed buffers
  // live at the same time as it.
  std::vector<std::size_t> order(buffers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (aligned(buffers[a].bytes) != aligned(buffers[b].bytes)) return aligned(buffers[a].bytes) > aligned(buffers[b].bytes);
    return buffers[a].first < buffers[b].first;
  });
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::int64_t, std::int64_t>> taken;  // (offset, end) of the overlapping ones
  for (std::size_t i : order) {
    MemoryBuffer& b = buffers[i];
    taken.clear();
    for (std::size_t k : placed) {
      if (times_overlap(b, buffers[k])) taken.emplace_back(buffers[k].offset, buffers[k].offset + aligned(buffers[k].bytes));
    }
    std::sort(taken.begin(), taken.end());
    std::int64_t offset = 0;
    for (const auto& [start, stop] : taken) {
      if (offset + aligned(b.bytes) <= start) break;
      offset = std::max(offset, stop);
    }
    b.offset = offset;
    plan.arena = std::max(plan.arena, offset + aligned(b.bytes));
    placed.push_back(i);
  }
  return plan;
}

MemoryStats memory_stats(const MemoryPlan& plan) {
  MemoryStats stats;
  stats.arena = plan.arena;
  stats.buffers = plan.buffers.size();
  std::map<std::int64_t, std::int64_t> change;  // bytes coming live (+) and going (-) at each time
  for (const MemoryBuffer& b : plan.buffers) {
    stats.sum += b.bytes;
    change[b.first] += b.bytes;
    change[b.last + 1] -= b.bytes;
  }
  std::int64_t live = 0;
  for (const auto& [time, delta] : change) {
    live += delta;
    stats.peak = std::max(stats.peak, live);
  }
  return stats;
}

std::string memory_plan_conflict(const MemoryPlan& plan, std::size_t steps, std::size_t values) {
  const auto end = static_cast<std::int64_t>(steps) + 1;
  std::set<std::pair<std::size_t, bool>> seen;
  for (const MemoryBuffer& b : plan.buffers) {
    const std::string which = "buffer of value " + std::to_string(b.value) + (b.blocked ? " (blocked)" : "");
    if (b.value >= values) return "a buffer of value " + std::to_string(b.value) + ", which does not exist";
    if (!seen.emplace(b.value, b.blocked).second) return "a second " + which;
    if (b.bytes <= 0 || b.offset < 0 || b.offset % kArenaAlign || b.offset > plan.arena || b.bytes > plan.arena - b.offset) {
      return "the " + which + " (" + std::to_string(b.bytes) + " bytes at " + std::to_string(b.offset) +
             ") is outside the arena of " + std::to_string(plan.arena) + " bytes or misaligned";
    }
    if (b.first < 0 || b.first > b.last || b.last > end) return "the " + which + " lives at times out of range";
  }
  // By offset: each buffer is checked against the ones that start before it ends.
  std::vector<const MemoryBuffer*> by_offset;
  for (const MemoryBuffer& b : plan.buffers) by_offset.push_back(&b);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 0; i < by_offset.size(); ++i) {
    for (std::size_t k = i + 1; k < by_offset.size() && by_offset[k]->offset < by_offset[i]->offset + by_offset[i]->bytes; ++k) {
      const MemoryBuffer& a = *by_offset[i];
      const MemoryBuffer& b = *by_offset[k];
      if (times_overlap(a, b) && bytes_overlap(a, b)) {
        return "the buffers of values " + std::to_string(a.value) + " and " + std::to_string(b.value) +
               " overlap while both are live";
      }
    }
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// Execution.

namespace {

// A value while the program runs: in the layout it was written in, plus the other layout
// once a step asked for it.
struct Slot {
  std::optional<Tensor> plain;
  std::optional<Tensor> blocked;
};

}  // namespace

struct ProgramRunner::Impl {
  std::shared_ptr<const Program> program;
  const Program& p;
  std::vector<BoundKernel> kernels;
  const kestrel_services* services;
  std::function<std::string(std::int32_t)> describe_error;
  std::vector<std::optional<Tensor>> constants;  // by value: the constant as a plain tensor
  // The plan's arena and, by value, its plain and blocked buffers (indices into
  // p.memory.buffers, -1: none). Before env: the tensors placed in the arena go first.
  std::unique_ptr<TensorArena> arena;
  std::vector<std::array<std::int64_t, 2>> buffer_of;
  std::vector<Slot> env;                         // by value
  std::vector<std::vector<bool>> dies;           // per step, per node input: dies at this step
  std::vector<StepTime> times;
  bool timing = false;                       // time_steps(): each run's step times are kept
  std::vector<std::vector<double>> samples;  // per step, its seconds in each timed run

  Impl(std::shared_ptr<const Program> prog, std::vector<BoundKernel> k, const kestrel_services* s,
       std::function<std::string(std::int32_t)> describe)
      : program(std::move(prog)), p(*program), kernels(std::move(k)), services(s), describe_error(std::move(describe)) {
    // Every operator that cannot run, not just the first.
    std::vector<const Node*> portable;
    for (const ProgramStep& step : p.steps) {
      for (std::size_t n : step.nodes) portable.push_back(&p.nodes[n].node);
    }
    const std::vector<MissingPortable> missing = missing_portable(portable);
    if (!missing.empty()) throw ModelError(missing_portable_text(missing));
    if (kernels.size() != p.steps.size()) throw ModelError("the program has " + std::to_string(p.steps.size()) +
                                                           " steps, its kernels " + std::to_string(kernels.size()));
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      if (p.steps[i].task && !kernels[i]) throw ModelError(p.steps[i].label + ": no kernel");
    }
    constants.resize(p.values.size());
    for (std::size_t id = 0; id < p.values.size(); ++id) {
      if (p.values[id].constant >= 0) constants[id] = Tensor::of(p.constants[static_cast<std::size_t>(p.values[id].constant)]);
    }
    buffer_of.assign(p.values.size(), {-1, -1});
    if (p.memory.arena > 0) {
      arena = std::make_unique<TensorArena>(static_cast<std::size_t>(p.memory.arena));
      for (std::size_t b = 0; b < p.memory.buffers.size(); ++b) {
        const MemoryBuffer& buffer = p.memory.buffers[b];
        if (buffer.value < p.values.size()) buffer_of[buffer.value][buffer.blocked] = static_cast<std::int64_t>(b);
      }
    }
    env.resize(p.values.size());
    times.resize(p.steps.size());
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      times[i].step = p.steps[i].label;
      times[i].kind = p.steps[i].kind;
      times[i].task = p.steps[i].task;
    }
  }

  const std::string& name(std::size_t id) const { return p.values[id].name; }

  // The next allocation of the plain (blocked) buffer of `id` goes at its planned offset.
  // Armed right before the allocation it is meant for, with a Disarm in scope.
  void arm(std::size_t id, bool blocked) {
    if (!arena || id == kNoValue) return;
    const std::int64_t b = buffer_of[id][blocked];
    if (b < 0) return;
    const MemoryBuffer& buffer = p.memory.buffers[static_cast<std::size_t>(b)];
    arena->place_next(static_cast<std::size_t>(buffer.offset), static_cast<std::size_t>(buffer.bytes));
  }
  struct Disarm {
    Disarm() = default;
    Disarm(const Disarm&) = delete;
    Disarm& operator=(const Disarm&) = delete;
    ~Disarm() { TensorArena::disarm_all(); }
  };

  const std::vector<std::int64_t>& bound_shape(std::size_t id) const {
    if (!p.values[id].shape) throw ModelError("value " + name(id) + " has no known shape (bind the model's symbols)");
    return *p.values[id].shape;
  }

  bool dies_at(std::size_t step, std::size_t id) const {
    const auto& f = p.steps[step].frees;
    return std::find(f.begin(), f.end(), id) != f.end();
  }

  const Tensor& plain_of(std::size_t id) {
    if (constants[id]) return *constants[id];
    Slot& slot = env[id];
    if (!slot.plain && !slot.blocked) throw ModelError("value " + name(id) + " is read before any step wrote it");
    if (!slot.plain) {
      Disarm disarm;
      arm(id, false);
      slot.plain = to_plain(*slot.blocked, services);
    }
    return *slot.plain;
  }

  const Tensor& blocked_of(std::size_t id) {
    if (constants[id]) throw ModelError("value " + name(id) + " is a constant a kernel reads unpacked");
    Slot& slot = env[id];
    if (!slot.plain && !slot.blocked) throw ModelError("value " + name(id) + " is read before any step wrote it");
    if (!slot.blocked || slot.blocked->block != p.block) {
      Disarm disarm;
      arm(id, true);
      slot.blocked = to_nchwc(*slot.plain, p.block, services);
    }
    return *slot.blocked;
  }

  // The slot empty; its storage goes back to the arena (or the allocator, which keeps
  // blocks by size for the next run: tensor.h).
  void release(std::size_t id) {
    env[id].plain.reset();
    env[id].blocked.reset();
  }

  void run_task(std::size_t index) {
    const ProgramStep& step = p.steps[index];
    std::vector<kestrel_arg> args;
    const std::size_t n = step.args.size();
    for (std::size_t a = 0; a + 1 < n; ++a) {
      const ProgramArg& arg = step.args[a];
      float* data = nullptr;
      std::int64_t size = 0;
      if (arg.packed >= 0) {
        const AlignedFloats& packed = p.packed[static_cast<std::size_t>(arg.packed)];
        data = const_cast<float*>(packed.data());
        size = static_cast<std::int64_t>(packed.size());
      } else {
        const Tensor& v = arg.layout == ArgLayout::nchwc ? blocked_of(arg.value) : plain_of(arg.value);
        if (v.type != ElemType::f32) throw ModelError(step.label + ": argument " + name(arg.value) + " is not float");
        data = const_cast<float*>(v.f32.data());
        size = static_cast<std::int64_t>(v.f32.size());
      }
      if (size != arg.elements) {
        throw ModelError(step.label + ": argument " + std::to_string(a) + " (" + name(arg.value) + ") holds " +
                         std::to_string(size) + " floats, the kernel takes " + std::to_string(arg.elements));
      }
      args.push_back(kestrel_arg{data, size, 0.0});
    }
    const ProgramArg& out_arg = step.args.back();
    Tensor out;
    out.shape = bound_shape(out_arg.value);
    if (out_arg.layout == ArgLayout::nchwc) {
      out.layout = TensorLayout::nchwc;
      out.block = p.block;
    } else if (out.elements() != out_arg.elements) {
      throw ModelError(step.label + ": output " + name(out_arg.value) + " " + shape_text(out.shape) + " has " +
                       std::to_string(out.elements()) + " elements, the kernel writes " + std::to_string(out_arg.elements));
    }
    {
      Disarm disarm;
      arm(out_arg.value, out.layout == TensorLayout::nchwc);
      out.f32 = AlignedFloats(static_cast<std::size_t>(out_arg.elements));  // not zeroed: the kernel writes it all
    }
    args.push_back(kestrel_arg{out.f32.data(), out_arg.elements, 0.0});
    const std::int32_t rc = kernels[index](args);
    if (rc != 0) throw ModelError(step.label + ": " + (describe_error ? describe_error(rc) : "error " + std::to_string(rc)));
    release(out_arg.value);
    Slot& slot = env[out_arg.value];
    if (out.layout == TensorLayout::nchwc) slot.blocked = std::move(out);
    else slot.plain = std::move(out);
  }

  // Reshape, Flatten, Squeeze, Unsqueeze and Identity of a value that dies at this step:
  // its data moves to the output under the output's shape instead of being copied.
  // (MemorySimulator::move_view decides as this does: keep the two in step.)
  bool move_view(std::size_t index, const ProgramNode& pn) {
    static const std::set<std::string> views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
    if (pn.in.empty() || pn.out.size() != 1 || !views.count(pn.node.op_type)) return false;
    const std::size_t value = pn.in[0];
    if (value == kNoValue || constants[value] || pn.out[0] == kNoValue) return false;
    if (std::count(pn.in.begin(), pn.in.end(), value) != 1) return false;
    if (!dies_at(index, value)) return false;
    if (!p.values[pn.out[0]].shape) return false;
    std::vector<std::int64_t> shape = *p.values[pn.out[0]].shape;
    const Tensor& source = plain_of(value);
    if (element_count(shape) != source.elements()) return false;  // the portable step names the error
    Slot& slot = env[value];
    Tensor moved = std::move(*slot.plain);
    moved.shape = std::move(shape);
    release(value);
    release(pn.out[0]);
    env[pn.out[0]].plain = std::move(moved);
    return true;
  }

  // The blocked tensor of `id` when it is held only in the blocked layout (a task wrote it
  // and nothing has asked for it plain), else null.
  Tensor* blocked_only(std::size_t id) {
    if (id == kNoValue || constants[id]) return nullptr;
    Slot& slot = env[id];
    if (slot.plain || !slot.blocked) return nullptr;
    Tensor* t = &*slot.blocked;
    return t->shape.size() == 4 && t->block == p.block ? t : nullptr;
  }

  // An elementwise step whose activation operand is held only in the blocked layout runs
  // on the blocked data and writes a blocked output (the squeeze-excite Mul between two
  // convolutions then converts nothing): a unary operator on the data as a flat vector;
  // Add/Sub/Mul/Div with a second operand that is blocked of the same shape, one value,
  // or one value per channel ([1,C,1,1] or [C,1,1], zero-padded to whole blocks). The
  // portable implementation does the arithmetic on shape views of the blocked data; lanes
  // past C are zeroed after. False when the step does not qualify. (Mirrored by
  // MemorySimulator::blocked_elementwise.)
  bool blocked_elementwise(std::size_t index, const ProgramNode& pn) {
    static const std::set<std::string> binaries = {"Add", "Sub", "Mul", "Div"};
    static const std::set<std::string> unaries = {"Relu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Erf", "Neg"};
    const Node& node = pn.node;
    const bool binary = binaries.count(node.op_type) && pn.in.size() == 2;
    if (pn.out.size() != 1 || pn.out[0] == kNoValue) return false;
    if (!binary && !(unaries.count(node.op_type) && pn.in.size() == 1)) return false;
    // The blocked operand: one held blocked only, of the output's shape.
    const auto& out_shape_opt = p.values[pn.out[0]].shape;
    if (!out_shape_opt || out_shape_opt->size() != 4) return false;
    const std::vector<std::int64_t>& out_shape = *out_shape_opt;
    auto output_shaped = [&](Tensor* t) { return t && t->type == ElemType::f32 && t->shape == out_shape; };
    std::size_t at = 0;
    Tensor* a = blocked_only(pn.in[0]);
    if (!output_shaped(a) && binary) {
      at = 1;
      a = blocked_only(pn.in[1]);
    }
    if (!output_shaped(a)) return false;
    const std::int64_t n = a->shape[0], c = a->shape[1], hw = a->shape[2] * a->shape[3], block = a->block;
    const std::int64_t blocks = (c + block - 1) / block;
    const std::vector<std::int64_t> logical = a->shape;
    // The shape views: flat, or [N][C/B][H*W][B] against a [1][C/B][1][B] channel vector.
    std::vector<std::int64_t> view = {static_cast<std::int64_t>(a->f32.size())};
    std::optional<Tensor> channels;  // the other operand padded to whole blocks
    Tensor* other = nullptr;
    Tensor* other_blocked = nullptr;
    if (binary) {
      const std::size_t id = pn.in[1 - at];
      if (id == kNoValue) return false;
      other_blocked = blocked_only(id);
      if (other_blocked && (other_blocked->shape != logical || other_blocked->f32.size() != a->f32.size())) {
        other_blocked = nullptr;  // a per-channel vector a task wrote: read it plain
      }
      if (!other_blocked) {
        const Tensor& b = plain_of(id);
        if (b.type != ElemType::f32) return false;
        if (b.elements() == 1) {
          channels = Tensor::floats({}, std::span<const float>(b.f32.data(), 1));
        } else if (b.shape == std::vector<std::int64_t>{1, c, 1, 1} || b.shape == std::vector<std::int64_t>{c, 1, 1}) {
          channels = Tensor::floats({1, blocks, 1, block});
          std::copy(b.f32.begin(), b.f32.end(), channels->f32.begin());
          view = {n, blocks, hw, block};
        } else {
          return false;
        }
        other = &*channels;
      }
    }
    if (channels && view.size() == 4 && block % 4 == 0) {
      // In place when the blocked operand dies here (the squeeze-excite Mul's input): each
      // element is read before it is written, at its own index. (Mirrored by
      // MemorySimulator::blocked_elementwise, which hands the buffer on.)
      const std::size_t a_id = pn.in[at];
      const bool in_place = dies_at(index, a_id) && std::count(pn.in.begin(), pn.in.end(), a_id) == 1;
      Tensor result;
      if (in_place) {
        result = std::move(*a);
        release(a_id);
      } else {
        result.shape = logical;
        result.layout = TensorLayout::nchwc;
        result.block = block;
        Disarm disarm;
        arm(pn.out[0], true);
        result.f32.resize(a->f32.size());
      }
      const float* x = in_place ? result.f32.data() : a->f32.data();
      blocked_channel_binary(node.op_type, at == 1, x, channels->f32.data(), result.f32.data(), n, blocks, hw, block, services);
      finish_blocked(pn.out[0], std::move(result), c);
      return true;
    }
    // Run the portable operator on the views, then restore the operands' own shapes.
    auto as_view = [&](Tensor& t) {
      t.shape = view;
      t.layout = TensorLayout::plain;
    };
    auto restore = [&](Tensor& t) {
      t.shape = logical;
      t.layout = TensorLayout::nchwc;
    };
    std::vector<const Tensor*> inputs(pn.in.size());
    as_view(*a);
    inputs[at] = a;
    if (other_blocked) {
      if (other_blocked != a) as_view(*other_blocked);
      inputs[1 - at] = other_blocked;
    } else if (binary) {
      inputs[1 - at] = other;
    }
    std::vector<Tensor> out;
    try {
      Disarm disarm;
      arm(pn.out[0], true);
      out = run_portable(node, inputs, services);
    } catch (...) {
      restore(*a);
      if (other_blocked) restore(*other_blocked);
      throw;
    }
    restore(*a);
    if (other_blocked) restore(*other_blocked);
    Tensor result = std::move(out.at(0));
    result.shape = logical;
    result.layout = TensorLayout::nchwc;
    result.block = block;
    finish_blocked(pn.out[0], std::move(result), c);
    return true;
  }

  // A blocked result of blocked_elementwise into its slot, its lanes past C back to zero
  // (Sigmoid(0) is not, x / 0 is not even finite).
  void finish_blocked(std::size_t id, Tensor result, std::int64_t c) {
    const std::int64_t block = result.block, blocks = (c + block - 1) / block;
    const std::int64_t n = result.shape[0], hw = result.shape[2] * result.shape[3];
    if (c % block) {
      for (std::int64_t i = 0; i < n * hw; ++i) {
        float* last = result.f32.data() + ((i / hw * blocks + blocks - 1) * hw + i % hw) * block;
        std::fill(last + c % block, last + block, 0.0f);
      }
    }
    release(id);
    env[id].blocked = std::move(result);
  }

  void run_portable_node(std::size_t index, const ProgramNode& pn) {
    if (move_view(index, pn)) return;
    if (blocked_elementwise(index, pn)) return;
    std::vector<const Tensor*> inputs;
    for (std::size_t id : pn.in) inputs.push_back(id == kNoValue ? nullptr : &plain_of(id));
    std::vector<Tensor> outputs;
    {
      Disarm disarm;
      for (std::size_t id : pn.out) arm(id, false);
      outputs = run_portable(pn.node, inputs, services);
    }
    for (std::size_t j = 0; j < pn.out.size() && j < outputs.size(); ++j) {
      if (pn.out[j] == kNoValue) continue;
      release(pn.out[j]);
      env[pn.out[j]].plain = std::move(outputs[j]);
    }
  }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) {
    // Whatever a failed run left behind goes first.
    for (std::size_t id = 0; id < env.size(); ++id) release(id);
    for (std::size_t id : p.inputs) {
      const ProgramValue& in = p.values[id];
      auto it = inputs.find(in.name);
      if (it == inputs.end()) throw ModelError("no value for the model input " + in.name);
      const auto& shape = bound_shape(id);
      // Float inputs as f32; integer (int64, int32) and boolean ones as i64.
      const Tensor& given = it->second;
      const bool floats = in.type == ElemType::f32;
      const std::size_t held = floats ? given.f32.size() : given.i64.size();
      if (given.shape != shape || given.type != (floats ? ElemType::f32 : ElemType::i64) ||
          static_cast<std::int64_t>(held) != given.elements()) {
        throw ModelError("model input " + in.name + " must be a plain " + (floats ? "float" : "integer") +
                         " tensor of shape " + shape_text(shape) + ", got " +
                         (given.type == ElemType::f32 ? "a float" : "an integer") + " tensor of shape " + shape_text(given.shape));
      }
      Disarm disarm;
      arm(id, false);
      env[id].plain = to_plain(given);
    }
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const ProgramStep& step = p.steps[i];
      // Two clock reads per step cost a small model a tenth of its run: only when asked.
      std::chrono::steady_clock::time_point start;
      if (timing) start = std::chrono::steady_clock::now();
      if (step.task) {
        run_task(i);
      } else {
        for (std::size_t n : step.nodes) run_portable_node(i, p.nodes[n]);
      }
      for (std::size_t dead : step.frees) release(dead);
      if (timing) samples[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::map<std::string, Tensor> out;
    for (std::size_t id : p.outputs) out[name(id)] = plain_of(id);
    for (std::size_t id = 0; id < env.size(); ++id) release(id);
    return out;
  }
};

ProgramRunner::ProgramRunner(std::shared_ptr<const Program> program, std::vector<BoundKernel> kernels,
                             const kestrel_services* services, std::function<std::string(std::int32_t)> describe_error)
    : impl_(std::make_unique<Impl>(std::move(program), std::move(kernels), services, std::move(describe_error))) {}

ProgramRunner::~ProgramRunner() = default;

std::map<std::string, Tensor> ProgramRunner::run(const std::map<std::string, Tensor>& inputs) { return impl_->run(inputs); }

const Program& ProgramRunner::program() const { return impl_->p; }

std::vector<StepTime> ProgramRunner::step_times() const {
  std::vector<StepTime> out = impl_->times;
  for (std::size_t i = 0; i < out.size() && i < impl_->samples.size(); ++i) {
    std::vector<double> s = impl_->samples[i];
    if (s.empty()) continue;
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
    out[i].seconds = s[s.size() / 2];
  }
  return out;
}

void ProgramRunner::time_steps(bool on) {
  impl_->timing = on;
  impl_->samples.assign(impl_->times.size(), {});
}

ProgramRunner::Memory ProgramRunner::memory() const {
  Memory m;
  if (!impl_->arena) return m;
  m.arena = impl_->arena->size();
  const TensorArena::Counts counts = impl_->arena->counts();
  m.placed = counts.placed;
  m.refused = counts.refused;
  return m;
}

}  // namespace kestrel::deploy
