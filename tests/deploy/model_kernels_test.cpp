// Which kernels run a planned model (model_kernels.h): the plan's block from an exported
// library's manifest, and kernels compiled here at the defaults; the refusals.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "kestrel/base/usage_error.h"
#include "kestrel/deploy/model_kernels.h"
#include "kestrel/model/graph.h"
#include "kestrel/records/records.h"

using namespace kestrel;
using namespace kestrel::deploy;

namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("kestrel-model-kernels-" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("model kernels: the plan's block is the exported library's, else the traits' default", "[deploy][model_kernels]") {
  const host::Target native = host::parse_target("native");
  CHECK(plan_block(KernelSource{}, native.traits) == model::default_block(native.traits));

  ScratchDir dir;
  KernelSource exported;
  exported.exported = dir.path.string();
  CHECK_THROWS_WITH(plan_block(exported, native.traits), Catch::Contains("is " + dir.path.string() + " the output of kestrel export?"));
  std::ofstream(dir.path / "manifest.json") << R"({"block": 8})";
  CHECK(plan_block(exported, native.traits) == 8);
  std::ofstream(dir.path / "manifest.json") << R"({"kernels": []})";
  CHECK_THROWS_AS(plan_block(exported, native.traits), UsageError);
}

TEST_CASE("model kernels: compiled here at the defaults, or refused records and libraries", "[deploy][model_kernels]") {
  const host::Target native = host::parse_target("native");
  const ops::Registry ops = ops::builtin_ops();
  const model::Plan plan;
  const ModelKernels defaults = model_kernels(KernelSource{}, plan, native, 1);
  REQUIRE(defaults.provider);
  CHECK(defaults.description == "compiled here at the ops' default configurations (" + native.to_string() + ")");
  CHECK(defaults.notes.empty());

  ScratchDir dir;
  KernelSource records;
  records.records = (dir.path / "none.db").string();
  CHECK_THROWS_AS(model_kernels(records, plan, native, 1), records::RecordsError);
  CHECK_FALSE(fs::exists(dir.path / "none.db"));

  KernelSource exported;
  exported.exported = dir.path.string();
  CHECK_THROWS_AS(model_kernels(exported, plan, native, 1), model::ModelError);
}
