// DeviceClass: the model is the CPU's for CPU targets and the target's GPU's for GPU
// targets; the fingerprint is host::device_fingerprint.
#include <catch2/catch.hpp>

#include "kestrel/host/measure_client.h"
#include "kestrel/tuner/task.h"

using namespace kestrel;

TEST_CASE("device_class_of names the hardware a target runs on", "[tuner][device-class]") {
  rpc::DeviceInfo device;
  device.name = "jetson-0";
  device.triple = "aarch64-linux-gnu";
  device.cpu_model = "Cortex-A78AE";
  device.cores = 8;
  device.gpus.push_back({"cuda", 0, "Orin", "NVIDIA", "sm_87", "", 0, 0, 0, 0, 0});
  device.gpus.push_back({"opencl", 0, "pthread-cortex-a78ae", "PoCL", "OpenCL C 1.2", "", 0, 0, 0, 0, 0});
  device.gpus.push_back({"opencl", 1, "Orin (OpenCL)", "NVIDIA", "OpenCL C 3.0", "", 0, 0, 0, 0, 0});

  host::Target cpu;
  cpu.triple = "aarch64-linux-gnu";
  auto c = tuner::device_class_of("jetson", device, cpu);
  CHECK(c.key == "jetson");
  CHECK(c.model == "Cortex-A78AE");
  CHECK(c.fingerprint == host::device_fingerprint(device));
  CHECK(c.fingerprint == "aarch64-linux-gnu|Cortex-A78AE|8");

  host::Target cuda = cpu;
  cuda.backend = ops::Backend::cuda;
  cuda.gpu_arch = "sm_87";
  CHECK(tuner::device_class_of("jetson", device, cuda).model == "Orin");

  host::Target opencl = cpu;
  opencl.backend = ops::Backend::opencl;
  CHECK(tuner::device_class_of("jetson", device, opencl).model == "pthread-cortex-a78ae");
  opencl.gpu_index = 1;
  CHECK(tuner::device_class_of("jetson", device, opencl).model == "Orin (OpenCL)");
  opencl.gpu_index = 5;  // not registered
  CHECK(tuner::device_class_of("jetson", device, opencl).model.empty());

  // Same hardware under another key is another class.
  CHECK(!(tuner::device_class_of("pi4", device, cpu) == c));
  CHECK(tuner::device_class_of("jetson", device, cpu) == c);
}
