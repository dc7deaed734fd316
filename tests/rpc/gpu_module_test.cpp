// GPU module images: magic + session.capnp's GpuModule.
#include <catch2/catch.hpp>

#include "kestrel/kernel/gpu_module.h"

using namespace kestrel;

TEST_CASE("a GPU module survives encoding and decoding", "[rpc][gpu]") {
  kernel::GpuModule module;
  module.backend = kernel::GpuBackend::cuda;
  module.code_kind = kernel::GpuCodeKind::cubin;
  module.code = {0x7f, 'E', 'L', 'F', 1, 2, 3};
  module.entry = "gemm";
  module.grid = {10, 20, 1};
  module.block = {16, 8, 2};
  module.shared_bytes = 4096;
  module.build_options = "-cl-fast-relaxed-math";
  module.device_index = 3;
  auto image = kernel::encode_gpu_module(module);
  CHECK(kernel::is_gpu_module(image));
  kernel::GpuModule back;
  std::string error;
  REQUIRE(kernel::decode_gpu_module(image, back, error));
  CHECK(back.backend == kernel::GpuBackend::cuda);
  CHECK(back.code_kind == kernel::GpuCodeKind::cubin);
  CHECK(back.code == module.code);
  CHECK(back.entry == "gemm");
  CHECK(back.grid == module.grid);
  CHECK(back.block == module.block);
  CHECK(back.shared_bytes == 4096);
  CHECK(back.build_options == "-cl-fast-relaxed-math");
  CHECK(back.device_index == 3);
}

TEST_CASE("malformed GPU modules are rejected with a reason", "[rpc][gpu][bad-input]") {
  kernel::GpuModule module;
  module.code = {'x'};
  module.entry = "k";
  auto image = kernel::encode_gpu_module(module);
  kernel::GpuModule back;
  std::string error;

  std::vector<std::uint8_t> elf = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_FALSE(kernel::is_gpu_module(elf));
  CHECK_FALSE(kernel::decode_gpu_module(elf, back, error));
  CHECK_THAT(error, Catch::Contains("KGPUMOD1"));

  auto truncated = image;
  truncated.resize(image.size() - 8);
  CHECK_FALSE(kernel::decode_gpu_module(truncated, back, error));
  CHECK_FALSE(error.empty());

  auto odd = image;
  odd.pop_back();
  CHECK_FALSE(kernel::decode_gpu_module(odd, back, error));
  CHECK_THAT(error, Catch::Contains("multiple of 8"));

  kernel::GpuModule no_entry = module;
  no_entry.entry.clear();
  CHECK_FALSE(kernel::decode_gpu_module(kernel::encode_gpu_module(no_entry), back, error));
  CHECK_THAT(error, Catch::Contains("no entry point"));

  kernel::GpuModule zero = module;
  zero.block = {0, 1, 1};
  CHECK_FALSE(kernel::decode_gpu_module(kernel::encode_gpu_module(zero), back, error));
  CHECK_THAT(error, Catch::Contains("zero dimension"));

  kernel::GpuModule mismatch = module;
  mismatch.code_kind = kernel::GpuCodeKind::ptx;  // PTX for the OpenCL backend
  CHECK_FALSE(kernel::decode_gpu_module(kernel::encode_gpu_module(mismatch), back, error));
  CHECK_THAT(error, Catch::Contains("does not match its backend"));
}
