// Vendor shim kernels (ops/vendor/*.c through the ops' vendor_kernels()): OpenBLAS gemm
// and oneDNN conv2d_nchwc against the reference on ragged shapes, serial and with two
// threads; a wrong shim fails the comparison; a library that is not there is a clear
// error code and a named failure, never a crash. OpenBLAS and oneDNN come from
// scripts/setup.sh (libopenblas-dev, libdnnl-dev).
#include <catch2/catch.hpp>

#include "kernel_harness.h"
#include "kestrel/kernel/abi.h"

using namespace kestrel::ops;

namespace {

const VendorKernel& vendor_of(const std::vector<VendorKernel>& kernels, const std::string& implementation) {
  for (const auto& k : kernels) {
    if (k.implementation == implementation) return k;
  }
  FAIL("no vendor kernel " << implementation);
  return kernels.front();
}

KernelSource with_define(KernelSource source, const std::string& name, const std::string& value) {
  for (auto& d : source.defines) {
    if (d.name == name) d.value = value;
  }
  return source;
}

void check_vendor(const std::string& op_name, const std::string& shape, const std::string& implementation) {
  Registry registry = builtin_ops();
  const Op& op = registry.get(op_name);
  Params params = parse_params(op, shape);
  INFO(op_name << " " << shape << " by " << implementation);
  auto kernels = op.vendor_kernels(params);
  const VendorKernel& kernel = vendor_of(kernels, implementation);
  CHECK_FALSE(kernel.description.empty());
  test::WorkloadChecker checker(op, params);
  CHECK(checker.check(kernel.source));
}

}  // namespace

TEST_CASE("vendor: OpenBLAS gemm matches the reference on ragged shapes", "[vendor][gemm][kernel]") {
  for (const char* shape : {"37x29x53", "1x300x77", "37x1x19", "129x200x300", "7x5x1"}) {
    check_vendor("gemm", shape, "openblas");
  }
}

TEST_CASE("vendor: OpenBLAS gemm with an epilogue and batch_matmul with transposes match the reference",
          "[vendor][gemm][batch_matmul][kernel]") {
  check_vendor("gemm", "M=37,N=29,K=53,bias=1,act=3", "openblas");
  check_vendor("gemm", "M=9,N=33,K=20,residual=1,act=2", "openblas");
  for (const char* shape : {"batch=3,M=17,N=13,K=9", "batch=2,M=17,N=13,K=9,trans_b=1",
                            "batch=4,M=5,N=31,K=12,trans_a=1", "batch=1,M=8,N=8,K=70,trans_a=1,trans_b=1"}) {
    check_vendor("batch_matmul", shape, "openblas");
  }
}

TEST_CASE("vendor: oneDNN conv2d_nchwc matches the reference on ragged shapes", "[vendor][conv2d_nchwc][kernel]") {
  // Channels not multiples of the block (padded lanes hold anything), strides, padding,
  // dilation, every block size, a batch.
  for (const char* shape : {"N=1,C=3,H=13,W=11,K=10,R=3,S=3,stride=2,pad=1,block=8",
                            "N=2,C=16,H=9,W=10,K=16,R=3,S=3,pad=1,block=16",
                            "N=1,C=5,H=12,W=12,K=7,R=3,S=3,pad=2,dilation=2,block=4",
                            "N=1,C=17,H=8,W=9,K=33,R=5,S=5,stride=2,pad=2,block=16",
                            "N=1,C=24,H=14,W=14,K=40,R=1,S=1,block=8"}) {
    check_vendor("conv2d_nchwc", shape, "onednn");
  }
}

TEST_CASE("vendor: the comparison catches a wrong shim", "[vendor][kernel][bug]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, "24x24x24");
  test::WorkloadChecker checker(gemm, params);
  const KernelSource good = vendor_of(gemm.vendor_kernels(params), "openblas").source;
  CHECK(checker.matches(good));
  CHECK_FALSE(checker.matches(with_define(good, "GEMM_TRANS_B", "1")));  // B read transposed

  const Op& conv = registry.get("conv2d_nchwc");
  Params conv_params = parse_params(conv, "N=1,C=8,H=7,W=7,K=8,R=3,S=3,pad=1,block=8");
  test::WorkloadChecker conv_checker(conv, conv_params);
  const KernelSource conv_good = vendor_of(conv.vendor_kernels(conv_params), "onednn").source;
  CHECK(conv_checker.matches(conv_good));
  CHECK_FALSE(conv_checker.matches(with_define(conv_good, "CONV_ACT", "1")));  // a ReLU the op does not have
}

TEST_CASE("vendor: a library that is not there is an error code naming it, not a crash", "[vendor][kernel]") {
  Registry registry = builtin_ops();
  for (const char* op_name : {"gemm", "conv2d_nchwc"}) {
    const Op& op = registry.get(op_name);
    Params params = parse_params(op, std::string(op_name) == "gemm" ? "9x8x7" : "N=1,C=4,H=5,W=5,K=4,R=3,S=3,block=4");
    INFO(op_name);
    KernelSource source = with_define(op.vendor_kernels(params).at(0).source, "VENDOR_LIBRARY",
                                      "libkestrel_no_such_library.so.1");
    test::TempDir dir;
    auto kernel = test::Kernel::build(source, dir.path(), "missing");
    std::vector<test::Buffer> buffers;
    std::vector<kestrel_arg> args;
    for (const auto& tensor : op.tensors(params)) buffers.emplace_back(tensor.elements());
    for (auto& b : buffers) {
      b.fill_random(1);
      args.push_back({b.data(), b.elements(), 0.0});
    }
    CHECK(kernel.run(args, 1) == KESTREL_KERNEL_VENDOR_MISSING);
    CHECK(test::last_vendor_failure() == "the vendor library libkestrel_no_such_library.so.1 is not on this machine");
  }
}

TEST_CASE("vendor: ops offer their libraries only where they compute the same thing", "[vendor]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  auto gemm_kernels = gemm.vendor_kernels(parse_params(gemm, "8x8x8"));
  REQUIRE(gemm_kernels.size() == 1);
  CHECK(gemm_kernels[0].implementation == "openblas");
  CHECK(gemm_kernels[0].source.backend == Backend::cpu);
  const Op& conv = registry.get("conv2d_nchwc");
  CHECK(conv.vendor_kernels(parse_params(conv, "N=1,C=8,H=7,W=7,K=8,R=3,S=3,block=8")).size() == 1);
  // The oneDNN shim does not express groups: none then.
  CHECK(conv.vendor_kernels(parse_params(conv, "N=1,C=16,H=7,W=7,K=16,R=3,S=3,block=8,groups=2")).empty());
  const Op& bmm = registry.get("batch_matmul");
  CHECK(bmm.vendor_kernels(parse_params(bmm, "batch=2,M=4,N=4,K=4,trans_b=1")).size() == 1);
  // Ops without a vendor contender give none.
  const Op& layout = registry.get("layout_nchwc");
  CHECK(layout.vendor_kernels(parse_params(layout, "N=1,C=8,H=4,W=4,block=8")).empty());
}
