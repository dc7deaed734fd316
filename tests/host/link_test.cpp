// host/link.h: kernels compiled to objects (CompileRequest::Output::object) linked into
// one shared library with in-process LLD, and written into a static archive.
#include "kestrel/host/link.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kestrel/host/compiler.h"

namespace kestrel::host {
namespace {

constexpr const char* kKernel = R"(#include "kestrel/kernel/abi.h"
KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  if (num_args != 1) return 2;
  float* y = (float*)args[0].data;
  for (int64_t i = 0; i < args[0].i64; ++i) y[i] = VALUE;
  return 0;
}
)";

CompileRequest object_request(const Target& target, const std::string& name, const std::string& value) {
  CompileRequest request;
  request.source.file_name = name + ".c";
  request.source.text = kKernel;
  request.source.defines = {{"KESTREL_KERNEL_NAME", name}, {"VALUE", value}};
  request.target = target;
  request.output = CompileRequest::Output::object;
  return request;
}

// e_type of an ELF file: 1 relocatable, 3 shared object.
int elf_type(const std::vector<std::uint8_t>& image) { return image.size() > 17 ? image[16] | (image[17] << 8) : -1; }

TEST_CASE("kernel objects of every target link into one shared library and one archive", "[link]") {
  Compiler compiler({.threads = 1});
  for (const char* triple : {"x86_64-linux-gnu", "aarch64-linux-gnu", "armv7a-linux-gnueabihf"}) {
    const Target target = parse_target(triple);
    INFO(triple);
    std::vector<ObjectInput> objects;
    for (const auto& [name, value] : {std::pair{"first", "1.0f"}, std::pair{"second", "2.0f"}}) {
      const CompileResult result = compiler.compile(object_request(target, name, value));
      INFO(result.diagnostics);
      REQUIRE(result.ok);
      CHECK(elf_type(result.shared_object) == 1);
      objects.push_back({std::string(name) + ".o", result.shared_object});
    }
    const LinkResult shared = link_shared_library(objects, "libtwo.so");
    INFO(shared.diagnostics);
    REQUIRE(shared.ok);
    CHECK(elf_type(shared.bytes) == 3);
    CHECK(elf_machine(shared.bytes) == elf_machine(objects[0].bytes));
    const std::string so(shared.bytes.begin(), shared.bytes.end());
    CHECK(so.find("libtwo.so") != std::string::npos);
    CHECK(so.find("first") != std::string::npos);
    CHECK(so.find("second") != std::string::npos);

    const LinkResult archive = write_static_archive(objects);
    REQUIRE(archive.ok);
    const std::string ar(archive.bytes.begin(), archive.bytes.end());
    CHECK(ar.starts_with("!<arch>\n"));
    CHECK(ar.find("first.o/") != std::string::npos);
    CHECK(ar.find("second.o/") != std::string::npos);
  }
}

TEST_CASE("an object and a shared object of one source have different cache keys", "[link]") {
  CompileRequest object = object_request(parse_target("x86_64-linux-gnu"), "k", "1.0f");
  CompileRequest shared = object;
  shared.output = CompileRequest::Output::shared_object;
  CHECK(Compiler::hash_of(object) != Compiler::hash_of(shared));
}

TEST_CASE("two kernels of one name or a malformed object are link failures with the linker's message", "[link]") {
  Compiler compiler({.threads = 1});
  const Target target = parse_target("x86_64-linux-gnu");
  const CompileResult a = compiler.compile(object_request(target, "same", "1.0f"));
  const CompileResult b = compiler.compile(object_request(target, "same", "2.0f"));
  REQUIRE(a.ok);
  REQUIRE(b.ok);
  const LinkResult twice = link_shared_library({{"a.o", a.shared_object}, {"b.o", b.shared_object}}, "libx.so");
  CHECK_FALSE(twice.ok);
  CHECK(twice.diagnostics.find("duplicate symbol: same") != std::string::npos);

  const LinkResult garbage = link_shared_library({{"junk.o", {1, 2, 3, 4}}}, "libx.so");
  CHECK_FALSE(garbage.ok);
  CHECK_FALSE(garbage.diagnostics.empty());
}

}  // namespace
}  // namespace kestrel::host
