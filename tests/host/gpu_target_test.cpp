// GPU targets from a device's registered GPUs, launch limits, and GPU module builds:
// OpenCL source packaging and (when built with NVRTC) CUDA to cubin/PTX in-process.
// This executable links libclang-cpp: it never loads OpenCL, it only packages source.
#include <catch2/catch.hpp>

#include <algorithm>

#include "support/traits.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"
#include "kestrel/kernel/gpu_module.h"

using namespace kestrel;

namespace {

rpc::DeviceInfo gpu_server() {
  rpc::DeviceInfo info;
  info.name = "h100-a";
  info.hostname = "some-other-host";
  info.arch = "x86_64";
  info.triple = "x86_64-linux-gnu";
  info.gpus.push_back({"cuda", 0, "NVIDIA H100", "NVIDIA", "sm_90", "CUDA 13.0", 80ull << 30, 132, 1024, 227 * 1024, 50 << 20});
  info.gpus.push_back({"opencl", 0, "NVIDIA H100", "NVIDIA", "OpenCL C 3.0", "NVIDIA CUDA", 80ull << 30, 132, 1024, 48 * 1024, 0});
  info.gpus.push_back({"opencl", 1, "pthread", "PoCL", "OpenCL C 1.2", "PoCL", 8ull << 30, 16, 4096, 1 << 20, 0});
  return info;
}

rpc::DeviceInfo cpu_board() {
  rpc::DeviceInfo info;
  info.name = "rpi4";
  info.arch = "aarch64";
  info.triple = "aarch64-linux-gnu";
  info.gpu_notes = {"no CUDA driver (libcuda.so.1: cannot open shared object file)", "no OpenCL platform"};
  return info;
}

}  // namespace

TEST_CASE("GPU targets come from the device's registered GPUs", "[host][target][gpu]") {
  host::Target cuda = host::gpu_target_for_device("cuda", gpu_server());
  CHECK(cuda.backend == ops::Backend::cuda);
  CHECK(cuda.gpu_arch == "sm_90");
  CHECK(cuda.triple == "x86_64-linux-gnu");  // the reference kernel's
  CHECK(cuda.max_threads == 1024);
  CHECK(cuda.max_shared_bytes == 227 * 1024);
  CHECK(cuda.to_string() == "cuda sm_90");
  CHECK(cuda.reference_target().backend == ops::Backend::cpu);
  CHECK(cuda.reference_target().to_string() == "x86_64-linux-gnu");

  CHECK(host::gpu_target_for_device("cuda:sm_80", gpu_server()).gpu_arch == "sm_80");
  CHECK(host::gpu_target_for_device("cuda:compute_90", gpu_server()).to_string() == "cuda compute_90");
  host::Target pocl = host::gpu_target_for_device("opencl#1", gpu_server());
  CHECK(pocl.backend == ops::Backend::opencl);
  CHECK(pocl.gpu_index == 1);
  CHECK(pocl.max_threads == 4096);
  CHECK(pocl.to_string() == "opencl #1");
  CHECK(host::gpu_target_for_device("opencl", gpu_server()).to_string() == "opencl");

  CHECK(host::is_gpu_target_spec("cuda:sm_90"));
  CHECK(host::is_gpu_target_spec("opencl#2"));
  CHECK_FALSE(host::is_gpu_target_spec("cudax"));
  CHECK_FALSE(host::is_gpu_target_spec("x86_64-linux-gnu"));
}

TEST_CASE("GPU targets a device cannot run say why", "[host][target][gpu][bad-input]") {
  CHECK_THROWS_WITH(host::gpu_target_for_device("cuda", cpu_board()),
                    Catch::Contains("rpi4") && Catch::Contains("no cuda device") && Catch::Contains("no CUDA driver"));
  CHECK_THROWS_WITH(host::gpu_target_for_device("opencl", cpu_board()), Catch::Contains("no OpenCL platform"));
  CHECK_THROWS_WITH(host::gpu_target_for_device("opencl#2", gpu_server()), Catch::Contains("has 2 opencl device(s)"));
  CHECK_THROWS_WITH(host::gpu_target_for_device("cuda:sm90", gpu_server()), Catch::Contains("bad CUDA architecture"));
  CHECK_THROWS_WITH(host::gpu_target_for_device("opencl:sm_90", gpu_server()), Catch::Contains("no architecture"));
  CHECK_THROWS_WITH(host::gpu_target_for_device("opencl#x", gpu_server()), Catch::Contains("bad GPU index"));
}

TEST_CASE("launches beyond the GPU's limits are instantiation errors", "[host][target][gpu]") {
  host::Target target = host::gpu_target_for_device("opencl", gpu_server());  // 1024 threads, 48 KiB
  ops::KernelSource source;
  source.backend = ops::Backend::opencl;
  source.launch.block = {32, 32, 1};
  source.launch.shared_bytes = 48 * 1024;
  CHECK(host::check_launch(source, target).empty());
  source.launch.block = {32, 32, 2};
  CHECK_THAT(host::check_launch(source, target), Catch::Contains("2048 threads") && Catch::Contains("1024"));
  source.launch.block = {16, 16, 1};
  source.launch.shared_bytes = 48 * 1024 + 4;
  CHECK_THAT(host::check_launch(source, target), Catch::Contains("shared/local memory"));
  CHECK(host::check_launch(source, host::gpu_target_for_device("opencl#1", gpu_server())).empty());
  CHECK(host::check_launch(source, host::parse_target("x86_64-linux-gnu")).empty());
}

TEST_CASE("OpenCL kernels become GPU modules carrying source, defines and launch", "[host][compiler][gpu]") {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get("gemm", ops::Backend::opencl);
  ops::Params p = ops::parse_params(op, "48x40x32");
  ops::Config c = op.default_config(p, test::fixed_traits());
  host::Compiler compiler({1});
  host::Target target = host::gpu_target_for_device("opencl#1", gpu_server());
  host::CompileResult r = compiler.compile({op.source(ops::Backend::opencl, p, c), target});
  INFO(r.diagnostics);
  REQUIRE(r.ok);
  kernel::GpuModule module;
  std::string error;
  REQUIRE(kernel::decode_gpu_module(r.shared_object, module, error));
  CHECK(module.backend == kernel::GpuBackend::opencl);
  CHECK(module.device_index == 1);
  CHECK(module.entry == "gemm");
  std::string text(module.code.begin(), module.code.end());
  CHECK_THAT(text, Catch::StartsWith("#define GEMM_K 32\n") && Catch::Contains("__kernel"));
  ops::KernelSource source = op.source(ops::Backend::opencl, p, c);
  CHECK(module.grid[0] == source.launch.grid[0]);
  CHECK(module.block[1] == source.launch.block[1]);

  // The launch and the device are part of the module's hash.
  ops::Config other = ops::parse_config(op, p, "bm=16", test::fixed_traits());
  CHECK(compiler.compile({op.source(ops::Backend::opencl, p, other), target}).hash != r.hash);
  CHECK(compiler.compile({op.source(ops::Backend::opencl, p, c), host::gpu_target_for_device("opencl", gpu_server())})
            .hash != r.hash);
  // A CPU kernel for a GPU target (or the reverse) is a host compile error, not a crash.
  host::CompileResult mixed = compiler.compile({op.reference(p), target});
  CHECK_FALSE(mixed.ok);
  CHECK_THAT(mixed.diagnostics, Catch::Contains("is a cpu kernel but the target is opencl"));
}

TEST_CASE("CUDA kernels compile in-process with NVRTC to cubin and PTX", "[host][compiler][gpu][cuda]") {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get("gemm", ops::Backend::cuda);
  ops::Params p = ops::parse_params(op, "100x70x30");
  host::Compiler compiler({1});
  host::Target sm90 = host::gpu_target_for_device("cuda", gpu_server());
  host::Target ptx = host::gpu_target_for_device("cuda:compute_90", gpu_server());
  const std::vector<std::string> configs = {"", "stage=0,vec=1,tm=1,tn=1", "stage=0,vec=2,tm=2,tn=2,unroll=2",
                                            "stage=1,vec=4,tm=8,tn=8,bm=64,bn=64,bk=16,unroll=8"};
#if KESTREL_HAVE_NVRTC
  for (const std::string& text : configs) {
    ops::Config c = ops::parse_config(op, p, text, test::fixed_traits());
    REQUIRE(op.check(p, c, test::fixed_traits()).empty());
    host::CompileResult cubin = compiler.compile({op.source(ops::Backend::cuda, p, c), sm90});
    INFO(text << ": " << cubin.diagnostics);
    REQUIRE(cubin.ok);
    kernel::GpuModule module;
    std::string error;
    REQUIRE(kernel::decode_gpu_module(cubin.shared_object, module, error));
    CHECK(module.code_kind == kernel::GpuCodeKind::cubin);
    CHECK(host::elf_machine(module.code) == "machine 190");  // EM_CUDA
    host::CompileResult text_ptx = compiler.compile({op.source(ops::Backend::cuda, p, c), ptx});
    REQUIRE(text_ptx.ok);
    REQUIRE(kernel::decode_gpu_module(text_ptx.shared_object, module, error));
    CHECK(module.code_kind == kernel::GpuCodeKind::ptx);
    std::string code(module.code.begin(), module.code.end());
    CHECK_THAT(code, Catch::Contains(".target sm_90") && Catch::Contains(".entry gemm"));
  }
  const ops::Op& conv = registry.get("conv2d", ops::Backend::cuda);
  ops::Params cp = ops::parse_params(conv, "C=16,H=14,W=14,K=32,R=3,S=3,pad=1");
  for (const std::string& text : {std::string(""), std::string("stage=0,tq=4,tk=8,bq=16,bk=32,unroll=4")}) {
    host::CompileResult r = compiler.compile({conv.source(ops::Backend::cuda, cp, ops::parse_config(conv, cp, text, test::fixed_traits())), sm90});
    INFO(text << ": " << r.diagnostics);
    CHECK(r.ok);
  }
  // A CUDA compile error is a host compile error with NVRTC's log.
  ops::KernelSource broken = op.source(ops::Backend::cuda, p, op.default_config(p, test::fixed_traits()));
  broken.text += "\nthis is not CUDA;\n";
  host::CompileResult bad = compiler.compile({broken, sm90});
  CHECK_FALSE(bad.ok);
  CHECK_THAT(bad.diagnostics, Catch::Contains("gemm.cu") && Catch::Contains("error"));
#else
  host::CompileResult r = compiler.compile({op.source(ops::Backend::cuda, p, op.default_config(p, test::fixed_traits())), sm90});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.diagnostics, Catch::Contains("without NVRTC"));
  (void)ptx;
  (void)configs;
#endif
}
