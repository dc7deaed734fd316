// Helpers of the export tests (see export_util.h).
#include "deploy/export_util.h"

#include "kestrel/deploy/kernel_provider.h"

#include <dlfcn.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>

namespace kestrel::deploy::test {

Scratch::Scratch() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kestrel-export-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("cannot create a scratch folder");
  path_ = pattern;
}

Scratch::~Scratch() {
  if (std::getenv("KESTREL_TEST_KEEP")) return;  // for debugging a failure: keep the files
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Library::Library(const std::filesystem::path& path) : handle_(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
  if (!handle_) throw std::runtime_error("cannot load " + path.string() + ": " + ::dlerror());
}

Library::~Library() { ::dlclose(handle_); }

void* Library::raw_symbol(const char* name) const {
  void* found = ::dlsym(handle_, name);
  if (!found) throw std::runtime_error(std::string("the library has no symbol ") + name);
  return found;
}

std::string Library::which(const ops::Op& op, const ops::Params& params) const {
  using which_fn = const char* (*)(const char*, const std::int64_t*, std::int32_t);
  const std::vector<std::int64_t> values = ordered_params(op, params);
  const char* text = symbol<which_fn>("kestrel_dispatch_which")(std::string(op.name()).c_str(), values.data(),
                                                                 static_cast<std::int32_t>(values.size()));
  return text ? text : "";
}


std::vector<std::vector<float>> random_inputs(const ops::Op& op, const ops::Params& params, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> out;
  for (const ops::TensorSpec& t : op.tensors(params)) {
    if (t.role != ops::Role::input) continue;
    out.emplace_back(static_cast<std::size_t>(t.elements()));
    for (float& v : out.back()) v = uniform(rng);
  }
  return out;
}

namespace {

struct Buffers {
  std::vector<std::vector<float>> storage;  // inputs (copied), then outputs
  std::vector<kestrel_arg> args;
  std::vector<std::size_t> outputs;         // indices into storage
};

Buffers buffers_for(const ops::Op& op, const ops::Params& params, const std::vector<std::vector<float>>& inputs) {
  Buffers b;
  std::size_t next_input = 0;
  for (const ops::TensorSpec& t : op.tensors(params)) {
    if (t.role == ops::Role::input) {
      b.storage.push_back(inputs.at(next_input++));
    } else {
      b.storage.emplace_back(static_cast<std::size_t>(t.elements()), std::numeric_limits<float>::quiet_NaN());
      b.outputs.push_back(b.storage.size() - 1);
    }
  }
  for (auto& s : b.storage) b.args.push_back({s.data(), static_cast<std::int64_t>(s.size()), 0.0});
  return b;
}

std::vector<std::vector<float>> outputs_of(const Buffers& b) {
  std::vector<std::vector<float>> out;
  for (std::size_t i : b.outputs) out.push_back(b.storage[i]);
  return out;
}

void serial_for(void*, std::int64_t n, void (*fn)(std::int64_t, void*), void* arg) {
  for (std::int64_t i = 0; i < n; ++i) fn(i, arg);
}
void* plain_alloc(void*, std::size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
void plain_release(void*, void* p) { std::free(p); }

}  // namespace

std::vector<std::vector<float>> reference_outputs(host::Compiler& compiler, const ops::Op& op,
                                                  const ops::Params& params,
                                                  const std::vector<std::vector<float>>& inputs) {
  host::CompileRequest request;
  request.source = op.reference(params);
  request.target = host::parse_target("native");
  request.opt_level = 1;
  const host::CompileResult compiled = compiler.compile(request);
  if (!compiled.ok) throw std::runtime_error("the reference does not compile: " + compiled.diagnostics);
  Scratch dir;
  const std::filesystem::path so = dir.path() / "reference.so";
  std::ofstream(so, std::ios::binary)
      .write(reinterpret_cast<const char*>(compiled.shared_object.data()),
             static_cast<std::streamsize>(compiled.shared_object.size()));
  Library library(so);
  Buffers b = buffers_for(op, params, inputs);
  kestrel_services svc{};
  svc.abi_version = KESTREL_KERNEL_ABI_VERSION;
  svc.num_threads = 1;
  svc.parallel_for = serial_for;
  svc.alloc = plain_alloc;
  svc.release = plain_release;
  const std::int32_t rc = library.symbol<kestrel_kernel_fn>(KESTREL_KERNEL_DEFAULT_ENTRY)(
      &svc, b.args.data(), static_cast<std::int32_t>(b.args.size()));
  if (rc != 0) throw std::runtime_error("the reference returned " + std::to_string(rc));
  return outputs_of(b);
}

bool outputs_match(const ops::Op& op, const ops::Params& params, const std::vector<std::vector<float>>& got,
                   const std::vector<std::vector<float>>& want) {
  const double tol = op.tolerance(params);
  if (got.size() != want.size()) return false;
  for (std::size_t o = 0; o < got.size(); ++o) {
    if (got[o].size() != want[o].size()) return false;
    for (std::size_t j = 0; j < got[o].size(); ++j) {
      const double err = std::fabs(static_cast<double>(got[o][j]) - want[o][j]);
      if (!(err <= tol * (1.0 + std::fabs(static_cast<double>(want[o][j]))))) {
        INFO("output " << o << " element " << j << ": got " << got[o][j] << ", expected " << want[o][j]);
        CHECK(false);
        return false;
      }
    }
  }
  return true;
}

namespace {

bool run_and_compare(const ops::Op& op, const ops::Params& params, host::Compiler& compiler,
                     const std::function<std::int32_t(const kestrel_arg*, std::int32_t)>& run) {
  const auto inputs = random_inputs(op, params, 42);
  const auto want = reference_outputs(compiler, op, params, inputs);
  Buffers b = buffers_for(op, params, inputs);
  const std::int32_t rc = run(b.args.data(), static_cast<std::int32_t>(b.args.size()));
  INFO("the library returned " << rc);
  if (rc != 0) {
    CHECK(rc == 0);
    return false;
  }
  return outputs_match(op, params, outputs_of(b), want);
}

}  // namespace

bool dispatch_matches(const Library& library, const kestrel_services* svc, const ops::Op& op,
                      const ops::Params& params, host::Compiler& compiler) {
  using dispatch_fn = std::int32_t (*)(const kestrel_services*, const char*, const std::int64_t*, std::int32_t,
                                       const kestrel_arg*, std::int32_t);
  auto dispatch = library.symbol<dispatch_fn>("kestrel_dispatch");
  const std::vector<std::int64_t> values = ordered_params(op, params);
  const std::string name(op.name());
  return run_and_compare(op, params, compiler, [&](const kestrel_arg* args, std::int32_t n) {
    return dispatch(svc, name.c_str(), values.data(), static_cast<std::int32_t>(values.size()), args, n);
  });
}

bool typed_matches(const Library& library, const kestrel_services* svc, const ops::Op& op, const std::string& typed,
                   const ops::Params& params, host::Compiler& compiler) {
  using typed_fn = std::int32_t (*)(const kestrel_services*, const std::int64_t*, const kestrel_arg*, std::int32_t);
  auto entry = library.symbol<typed_fn>(typed.c_str());
  const std::vector<std::int64_t> shape = ordered_params(op, params);
  return run_and_compare(op, params, compiler,
                         [&](const kestrel_arg* args, std::int32_t n) { return entry(svc, shape.data(), args, n); });
}

}  // namespace kestrel::deploy::test
