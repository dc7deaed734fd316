// Capability detection: parsing of recorded /proc/cpuinfo contents, and the live system.
#include <catch2/catch.hpp>

#include <sched.h>

#include "kestrel/device_runtime/capabilities.h"

using namespace kestrel::device;

TEST_CASE("x86 cpuinfo yields the model name and the relevant flags only", "[capabilities]") {
  std::string cpuinfo =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9454 48-Core Processor\n"
      "flags\t\t: fpu vme sse2 ssse3 fma avx avx2 avx512f avx512bw avx512vl avx512_vnni hypervisor\n\n"
      "processor\t: 1\nmodel name\t: AMD EPYC 9454 48-Core Processor\n";
  CHECK(cpu_model_from_cpuinfo(cpuinfo) == "AMD EPYC 9454 48-Core Processor");
  auto features = cpu_features_from_cpuinfo(cpuinfo);
  CHECK(features == std::vector<std::string>{"avx", "avx2", "avx512_vnni", "avx512bw", "avx512f", "avx512vl", "fma",
                                             "sse2", "ssse3"});
}

TEST_CASE("Raspberry Pi 4 (aarch64) cpuinfo yields features and a model", "[capabilities]") {
  std::string cpuinfo =
      "processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
      "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\n\n"
      "Hardware\t: BCM2835\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n";
  CHECK(cpu_model_from_cpuinfo(cpuinfo) == "Raspberry Pi 4 Model B Rev 1.1");
  auto features = cpu_features_from_cpuinfo(cpuinfo);
  CHECK(features == std::vector<std::string>{"asimd", "cpuid", "crc32", "evtstrm", "fp"});
}

TEST_CASE("ARM cpuinfo without a model falls back to implementer and part", "[capabilities]") {
  std::string cpuinfo = "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0b\n";
  CHECK(cpu_model_from_cpuinfo(cpuinfo) == "implementer 0x41 part 0xd0b");
}

TEST_CASE("ARM cpuinfo gives the implementer and part the host maps to -mcpu", "[capabilities]") {
  CHECK(cpu_part_from_cpuinfo("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n") == "0x41:0xd08");
  CHECK(cpu_part_from_cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: avx2\n").empty());
  CHECK(cpu_part_from_cpuinfo("CPU implementer\t: 0x41\n").empty());  // half of it is no answer
}

TEST_CASE("the live system is detected", "[capabilities]") {
  auto info = detect_device_info("");
  CHECK_FALSE(info.hostname.empty());
  CHECK(info.name.rfind(info.hostname + "-", 0) == 0);
  CHECK(info.cores >= 1);
  CHECK(info.memory_bytes > (64u << 20));
  CHECK(info.triple == std::string(build_triple()));
  CHECK_FALSE(info.os.empty());
  CHECK(detect_device_info("named").name == "named");
}

TEST_CASE("kestrel-device --cpus: pinning to a CPU list, and what is refused", "[capabilities][cpus]") {
  cpu_set_t saved;
  CPU_ZERO(&saved);
  REQUIRE(::sched_getaffinity(0, sizeof saved, &saved) == 0);
  const unsigned before = kestrel::device::usable_cpus();
  CHECK(before == static_cast<unsigned>(CPU_COUNT(&saved)));
  CHECK_THAT(kestrel::device::pin_to_cpus("two"), Catch::Contains("not a CPU number or range"));
  CHECK_THAT(kestrel::device::pin_to_cpus("3-1"), Catch::Contains("not a valid CPU range"));
  CHECK_THAT(kestrel::device::pin_to_cpus("0,"), Catch::Contains("not a CPU number"));
  CHECK(kestrel::device::usable_cpus() == before);  // a refused list changes nothing
  // Pin to the first CPU this process may use.
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  CHECK(kestrel::device::pin_to_cpus(std::to_string(first)).empty());
  CHECK(kestrel::device::usable_cpus() == 1);
  CHECK(kestrel::device::detect_device_info("pinned").cores == 1);
  CHECK(kestrel::device::pin_to_cpus(std::to_string(first) + "-" + std::to_string(first)).empty());
  CHECK(kestrel::device::usable_cpus() == 1);
  REQUIRE(::sched_setaffinity(0, sizeof saved, &saved) == 0);
  CHECK(kestrel::device::usable_cpus() == before);
}
