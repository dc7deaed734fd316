// Helpers of the export tests: a scratch folder, a loaded exported library, and runs of
// its entries against the op's reference kernel (compiled natively with host::Compiler).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kestrel/host/compiler.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/ops/op.h"

namespace kestrel::deploy::test {

// A folder under the temporary directory, removed with its content.
class Scratch {
 public:
  Scratch();
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// An exported libkestrel_kernels.so, loaded with dlopen (RTLD_LOCAL), closed on destruction.
class Library {
 public:
  explicit Library(const std::filesystem::path& path);  // throws std::runtime_error
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  void* raw_symbol(const char* name) const;  // throws when absent
  template <class F>
  F symbol(const char* name) const {
    return reinterpret_cast<F>(raw_symbol(name));
  }
  // kestrel_dispatch_which for the op's workload ("" for NULL).
  std::string which(const ops::Op& op, const ops::Params& params) const;

 private:
  void* handle_;
};


// The outputs of the op's reference kernel on the seeded random inputs `inputs`.
std::vector<std::vector<float>> reference_outputs(host::Compiler& compiler, const ops::Op& op,
                                                  const ops::Params& params,
                                                  const std::vector<std::vector<float>>& inputs);
// Seeded random inputs in [-1, 1] for the op's input tensors.
std::vector<std::vector<float>> random_inputs(const ops::Op& op, const ops::Params& params, std::uint64_t seed);
// Whether `got` matches `want` within the op's tolerance; reports the first mismatch via INFO/CHECK.
bool outputs_match(const ops::Op& op, const ops::Params& params, const std::vector<std::vector<float>>& got,
                   const std::vector<std::vector<float>>& want);

// Runs kestrel_dispatch (or the typed entry `typed`, given a shape struct of int64_t in
// the op's parameter order) on random inputs and compares with the reference.
bool dispatch_matches(const Library& library, const kestrel_services* svc, const ops::Op& op,
                      const ops::Params& params, host::Compiler& compiler);
bool typed_matches(const Library& library, const kestrel_services* svc, const ops::Op& op, const std::string& typed,
                   const ops::Params& params, host::Compiler& compiler);

}  // namespace kestrel::deploy::test
