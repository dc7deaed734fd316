// GPU discovery for registration: the probe child's report, and a real probe.
#include <catch2/catch.hpp>

#include "kestrel/device_runtime/capabilities.h"

using namespace kestrel;

TEST_CASE("the GPU probe's report becomes GPUs and notes", "[device][gpu]") {
  rpc::DeviceInfo info;
  device::parse_gpu_probe(
      "note\tno CUDA driver (libcuda.so.1: cannot open shared object file)\n"
      "gpu\topencl\t0\tpthread-x86\tAMD\tOpenCL C 1.2 PoCL\tPoCL 3.1\t7000000000\t2\t4096\t1048576\t524288\n"
      "gpu\tbroken line\n",
      info);
  REQUIRE(info.gpus.size() == 1);
  CHECK(info.gpus[0].backend == "opencl");
  CHECK(info.gpus[0].name == "pthread-x86");
  CHECK(info.gpus[0].version == "OpenCL C 1.2 PoCL");
  CHECK(info.gpus[0].memory_bytes == 7000000000ull);
  CHECK(info.gpus[0].compute_units == 2);
  CHECK(info.gpus[0].max_threads_per_group == 4096);
  CHECK(info.gpus[0].max_shared_bytes == 1048576);
  CHECK(info.gpus[0].l2_bytes == 524288);
  REQUIRE(info.gpu_notes.size() == 1);
  CHECK_THAT(info.gpu_notes[0], Catch::StartsWith("no CUDA driver"));
}

TEST_CASE("detect_gpus reports every backend: a device found or why not", "[device][gpu]") {
  rpc::DeviceInfo info;
  device::detect_gpus(info);
  bool cuda = false;
  for (const auto& g : info.gpus) cuda = cuda || g.backend == "cuda";
  bool opencl = false;
  for (const auto& g : info.gpus) opencl = opencl || g.backend == "opencl";
  for (const auto& note : info.gpu_notes) {
    cuda = cuda || note.find("CUDA") != std::string::npos;
    opencl = opencl || note.find("OpenCL") != std::string::npos;
  }
  CHECK(cuda);
  CHECK(opencl);
}
