// Targets: parsing, normalising, the host's own target, and device mapping.
#include "kestrel/host/target.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <stdexcept>

using kestrel::host::parse_target;
using kestrel::host::supported_triples;
using kestrel::host::Target;
using kestrel::host::target_for_device;

namespace {

std::string message_of(std::string_view triple, std::string_view cpu = "", std::string_view features = "") {
  try {
    parse_target(triple, cpu, features);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::string machine() {
  struct utsname uts {};
  ::uname(&uts);
  return uts.machine;
}

}  // namespace

TEST_CASE("supported triples parse to themselves", "[target]") {
  REQUIRE(supported_triples().size() == 4);
  for (const std::string& triple : supported_triples()) {
    const Target target = parse_target(triple);
    CHECK(target.triple == triple);
    CHECK(target.cpu.empty());
    CHECK(target.features.empty());
    CHECK(target.to_string() == triple);
  }
}

TEST_CASE("other spellings of a supported triple normalise", "[target]") {
  CHECK(parse_target("x86_64-pc-linux-gnu").triple == "x86_64-linux-gnu");
  CHECK(parse_target("x86_64-unknown-linux").triple == "x86_64-linux-gnu");
  CHECK(parse_target("aarch64-unknown-linux-gnu").triple == "aarch64-linux-gnu");
  CHECK(parse_target("armv7l-unknown-linux-gnueabihf").triple == "armv7a-linux-gnueabihf");
  CHECK(parse_target("riscv64-unknown-linux-gnu").triple == "riscv64-linux-gnu");
}

TEST_CASE("cpu and features are kept and shown", "[target]") {
  const Target pi4 = parse_target("aarch64-linux-gnu", "cortex-a72");
  CHECK(pi4.cpu == "cortex-a72");
  CHECK(pi4.to_string() == "aarch64-linux-gnu (cortex-a72)");
  const Target avx = parse_target("x86_64-linux-gnu", "znver3", "+avx2,-fma");
  CHECK(avx.features == "+avx2,-fma");
  CHECK(avx.to_string() == "x86_64-linux-gnu (znver3, +avx2,-fma)");
  CHECK(parse_target("riscv64-linux-gnu", "rv64gcv").cpu == "rv64gcv");
}

TEST_CASE("native is this host with its cpu", "[target]") {
  const Target native = parse_target("native");
  const std::string arch = machine();
  if (arch == "x86_64") CHECK(native.triple == "x86_64-linux-gnu");
  if (arch == "aarch64") CHECK(native.triple == "aarch64-linux-gnu");
  CHECK(!native.cpu.empty());
  INFO("native target: " << native.to_string());
  CHECK(parse_target("native", "x86-64").cpu == "x86-64");
}

TEST_CASE("unsupported triples are refused with the supported list", "[target]") {
  for (const char* bad : {"mips-linux-gnu", "x86_64-windows-msvc", "arm-linux-gnueabihf",
                          "armv7a-linux-gnueabi", "aarch64-apple-darwin", "", "gibberish"}) {
    const std::string message = message_of(bad);
    INFO(bad << ": " << message);
    CHECK(message.find("unsupported target") != std::string::npos);
    for (const std::string& triple : supported_triples()) CHECK(message.find(triple) != std::string::npos);
    CHECK(message.find("native") != std::string::npos);
  }
}

TEST_CASE("malformed cpu and feature strings are refused", "[target]") {
  CHECK(message_of("x86_64-linux-gnu", "bad cpu").find("bad target cpu") != std::string::npos);
  CHECK(message_of("x86_64-linux-gnu", "", "avx2").find("bad target feature 'avx2'") != std::string::npos);
  CHECK(message_of("x86_64-linux-gnu", "", "+avx2,").find("bad target feature ''") != std::string::npos);
  CHECK(message_of("x86_64-linux-gnu", "", "+avx2;+fma").find("bad target feature") != std::string::npos);
  CHECK(message_of("x86_64-linux-gnu", "", "+avx2,-fma") == "no error");
}

TEST_CASE("a device maps to its triple, with a cpu only when it is this host", "[target]") {
  kestrel::rpc::DeviceInfo pi;
  pi.name = "pi4";
  pi.hostname = "raspberrypi";
  pi.arch = "aarch64";
  pi.triple = "aarch64-linux-gnu";
  const Target remote = target_for_device(pi);
  CHECK(remote.triple == "aarch64-linux-gnu");
  CHECK(remote.cpu.empty());

  kestrel::rpc::DeviceInfo self;
  self.name = "local";
  self.hostname = hostname();
  self.arch = machine();
  self.triple = parse_target("native").triple;
  const Target local = target_for_device(self);
  CHECK(local.triple == self.triple);
  CHECK(local.cpu == parse_target("native").cpu);

  self.arch = "riscv64";  // same name, other machine: no host CPU
  self.triple = "riscv64-linux-gnu";
  CHECK(target_for_device(self).cpu.empty());

  kestrel::rpc::DeviceInfo odd = pi;
  odd.triple = "unknown-linux-gnu";
  try {
    target_for_device(odd);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK(message.find("pi4") != std::string::npos);
    CHECK(message.find("unknown-linux-gnu") != std::string::npos);
    CHECK(message.find("riscv64-linux-gnu") != std::string::npos);
  }
}
