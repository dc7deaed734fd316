// cpu0's caches from sysfs: size suffixes, and a fake sysfs tree read until an index is
// missing.
#include "kestrel/base/cpu_caches.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "support/process.h"

using namespace kestrel;

TEST_CASE("cache sizes parse with suffixes", "[base][caches]") {
  CHECK(parse_cache_size("32K\n") == 32 * 1024);
  CHECK(parse_cache_size("1024K") == 1024 * 1024);
  CHECK(parse_cache_size("32M") == 32u << 20);
  CHECK(parse_cache_size("512") == 512);
  CHECK(parse_cache_size("") == 0);
}

TEST_CASE("caches are read from a sysfs tree until an index is missing", "[base][caches]") {
  test::TempDir dir;
  auto write = [&](int index, const char* level, const char* type, const char* size) {
    const auto base = std::filesystem::path(dir.path()) / ("index" + std::to_string(index));
    std::filesystem::create_directories(base);
    std::ofstream(base / "level") << level << "\n";
    std::ofstream(base / "type") << type << "\n";
    std::ofstream(base / "size") << size << "\n";
    std::ofstream(base / "coherency_line_size") << "64\n";
  };
  write(0, "1", "Data", "32K");
  write(1, "1", "Instruction", "32K");
  write(2, "2", "Unified", "512K");
  write(4, "3", "Unified", "32768K");  // after a gap: not read
  const auto caches = read_cpu_caches(dir.path());
  REQUIRE(caches.size() == 3);
  CHECK(caches[0].kind == "data");
  CHECK(caches[1].kind == "instruction");
  CHECK(caches[2].level == 2);
  CHECK(caches[2].kind == "unified");
  CHECK(caches[2].size_bytes == 512u << 10);
  CHECK(caches[2].line_bytes == 64);
  CHECK(read_cpu_caches((std::filesystem::path(dir.path()) / "absent").string()).empty());
}
