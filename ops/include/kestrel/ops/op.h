// The vocabulary of a tunable kernel. An Op declares its workload parameters, its
// tensor arguments, its FLOP count, its knob space with constraints, and for a given
// workload and configuration the kernel source and #defines per backend, plus a
// reference kernel that computes the expected output.
//
// Ops are plain objects built by main and passed down (no static registration).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/target_traits.h"

namespace kestrel::ops {

// Workload parameters (e.g. M, N, K) and knob values, by name. Ordered maps so that
// printing, hashing and feature extraction are deterministic.
using Params = std::map<std::string, std::int64_t>;
using Config = std::map<std::string, std::int64_t>;

// A user error in a workload or a configuration: unknown op, malformed shape, a shape
// the op cannot handle. The message says what is wrong and what is accepted.
struct OpError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class DType { f32 };
enum class Role { input, output };
enum class Backend { cpu, cuda, opencl };

std::string_view to_string(DType dtype);
std::string_view to_string(Backend backend);
std::size_t size_of(DType dtype);

struct ParamSpec {
  std::string name;
  std::string help;
  std::int64_t min = 1;
  std::int64_t max = 1 << 20;
  // Used when the user does not give it. Required when below min (so 0 means required
  // for the usual min of 1; a parameter with min 0, such as pad, may default to 0).
  std::int64_t fallback = 0;
  // An optional parameter (an epilogue, a transpose, groups) is left out of the workload
  // when it equals its fallback, so workloads written before it existed keep their text.
  bool optional = false;
};

// One kernel argument, in the order the kernel receives them (kestrel_arg array).
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  Role role = Role::input;
  std::vector<std::int64_t> shape;
  std::int64_t elements() const;
  std::int64_t bytes() const;
};

struct Knob {
  std::string name;
  std::vector<std::int64_t> values;  // the domain, in a meaningful order
  std::string help;
};

struct Define {
  std::string name;
  std::string value;
};

// How a GPU kernel is launched, computed by the op from the workload and the knobs:
// `grid` blocks (CUDA) or work-groups (OpenCL) of `block` threads / work-items each
// (the OpenCL global size is grid * block), per dimension x, y, z.
struct Launch {
  std::string entry;                     // kernel function name
  std::array<std::int64_t, 3> grid{1, 1, 1};
  std::array<std::int64_t, 3> block{1, 1, 1};
  std::int64_t shared_bytes = 0;         // shared / local memory the kernel declares per block
  std::int64_t threads() const { return block[0] * block[1] * block[2]; }
};

// A kernel source ready to compile: the file's text plus the #defines that specialise
// it to one workload and configuration.
struct KernelSource {
  Backend backend = Backend::cpu;
  std::string file_name;  // e.g. "gemm.c", for diagnostics
  std::string text;
  std::vector<Define> defines;
  Launch launch = {};     // GPU backends only
};

// A vendor library as a contender for an op's workload: a small shim kernel with the
// op's exact arguments that finds the library's functions on the device through the
// kernel ABI's vendor_symbol service, measured, checked and recorded like any candidate.
struct VendorKernel {
  std::string implementation;  // "openblas", "onednn": what records and `kestrel best` show
  std::string description;     // e.g. "OpenBLAS cblas_sgemm (libopenblas.so.0)"
  KernelSource source;         // a CPU kernel source
};

class Op {
 public:
  virtual ~Op() = default;

  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual std::vector<ParamSpec> params() const = 0;
  // Throws OpError naming the parameter when the workload is not supported.
  virtual void validate(const Params& params) const = 0;
  virtual std::vector<TensorSpec> tensors(const Params& params) const = 0;
  virtual double flops(const Params& params) const = 0;
  // The knob domains for this workload (tile sizes may depend on the shape).
  virtual std::vector<Knob> knobs(const Params& params) const = 0;
  // Empty when the configuration is valid on `target`; otherwise why it is not (reported
  // as an instantiation error, never compiled): a domain or divisibility rule, or more
  // than the target can hold (a micro-tile over its register file).
  virtual std::string check(const Params& params, const Config& config, const TargetTraits& target) const = 0;
  // A valid configuration derived from the target's traits that performs well there
  // without tuning: the baseline that speed-ups are reported against.
  virtual Config default_config(const Params& params, const TargetTraits& target) const = 0;
  virtual std::vector<Backend> backends() const = 0;
  // Throws OpError if the backend is not supported or the configuration is invalid.
  virtual KernelSource source(Backend backend, const Params& params, const Config& config) const = 0;
  // The reference kernel (CPU C, same argument order, straightforward loops) whose output
  // candidates are checked against.
  virtual KernelSource reference(const Params& params) const = 0;
  // Absolute+relative tolerance for comparing outputs with the reference.
  virtual double tolerance(const Params& params) const = 0;

  // Features of a configuration for the cost model: the workload parameters, the knob
  // values, and derived quantities the op knows matter (tile footprints in bytes,
  // padding waste, vector utilisation, arithmetic intensity). The names and their order
  // depend only on the op, never on the workload, so a model trained on some shapes can
  // rank configurations of others. The default gives parameters and knobs only.
  virtual std::vector<std::pair<std::string, double>> features(const Params& params, const Config& config) const;

  // Vendor libraries that compute this workload with the op's own arguments (none by
  // default; none for workloads a library cannot express). Their config is no point of
  // the knob space: they never feed a search or a cost model.
  virtual std::vector<VendorKernel> vendor_kernels(const Params&) const { return {}; }
};

// Ops by name. An op may have backend variants: a second op added under a name already
// present (e.g. the GPU gemm, whose knobs differ from the CPU one's) is a variant of the
// first for its own backends, found with find(name, backend); the first one added is
// the name's primary op, which find(name) and all() return.
class Registry {
 public:
  // Throws OpError when a variant claims a backend that the name already has.
  void add(std::unique_ptr<Op> op);
  // Null when unknown.
  const Op* find(std::string_view name) const;
  // The op of that name with a kernel for `backend`; null when there is none.
  const Op* find(std::string_view name, Backend backend) const;
  // Throws OpError listing the known ops.
  const Op& get(std::string_view name) const;
  // Throws OpError naming the backends the op does have.
  const Op& get(std::string_view name, Backend backend) const;
  // The primary op of every name.
  std::vector<const Op*> all() const;
  // Every op of a name, primary first.
  std::vector<const Op*> variants(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<Op>> ops_;
};

// The built-in op library: gemm, conv2d, the blocked-channel convolution conv2d_nchwc
// with its layout transform layout_nchwc, batch_matmul (CPU), and the GPU variants of
// gemm, conv2d and batch_matmul (CUDA and OpenCL).
Registry builtin_ops();
// The built-in ops, built once and kept, unchanged, for the life of the process: for
// values that point to an op and outlive the code that made them (a model's plan).
const Registry& builtin_registry();

// Parses "M=512,N=256,K=128" (or "512x256x128" in the order of params()) into a
// validated workload; missing parameters take their fallback, and optional parameters
// equal to their fallback are left out. Throws OpError.
Params parse_params(const Op& op, std::string_view text);
// Parses "mc=64,nc=256" into a configuration (unmentioned knobs take the default
// configuration's value on `target`). Throws OpError on unknown knobs or values outside
// the domain.
Config parse_config(const Op& op, const Params& params, std::string_view text, const TargetTraits& target);
// The workload as records store it: optional parameters equal to their fallback left out
// (parse_params gives it so; workloads built in code go through this).
Params normalize_params(const Op& op, Params params);
std::string format_params(const Params& params);  // "K=128,M=512,N=256"
std::string format_config(const Config& config);
// Parses the text format_params / format_config write ("A=1,B=2"; "" is the empty map)
// back into a map, without an op: no defaults, no domains. The one parser of stored
// workloads and configurations (records). Throws OpError on a malformed item, a value
// that is not an integer, or a name given twice.
std::map<std::string, std::int64_t> parse_pairs(std::string_view text);

}  // namespace kestrel::ops
