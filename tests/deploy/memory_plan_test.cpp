// The lowered program's memory plan (program.h's MemoryPlan) over the zoo's models: no
// two buffers live at the same time overlap, the arena is no larger than the buffers' sum
// nor smaller than the most bytes live at once, and the runner does what the plan
// foresaw (every planned buffer placed at its offset, none refused) with the outputs of
// a run on the allocator; and the weights file the programs of one export share.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "kestrel/deploy/model_check.h"
#include "kestrel/deploy/runner.h"
#include "support/process.h"

using namespace kestrel;
using namespace kestrel::deploy;
using namespace kestrel::model;

namespace {

const std::string kZoo = std::string(KESTREL_SOURCE_DIR) + "/tests/data/zoo/";

Plan task_plan(const Model& model, const std::map<std::string, std::int64_t>& binding = {}) {
  PlanOptions options;
  options.block = 8;
  options.symbols = binding;
  return plan_model(model, options);
}

// The property itself, pair by pair (not memory_plan_conflict's sweep by offset).
void check_sound(const Program& p) {
  const std::vector<MemoryBuffer>& b = p.memory.buffers;
  const auto end = static_cast<std::int64_t>(p.steps.size()) + 1;
  for (std::size_t i = 0; i < b.size(); ++i) {
    REQUIRE(b[i].offset % 64 == 0);
    REQUIRE(b[i].offset + b[i].bytes <= p.memory.arena);
    REQUIRE(0 <= b[i].first);
    REQUIRE(b[i].first <= b[i].last);
    REQUIRE(b[i].last <= end);
    for (std::size_t k = i + 1; k < b.size(); ++k) {
      const bool together = b[i].first <= b[k].last && b[k].first <= b[i].last;
      const bool apart = b[i].offset + b[i].bytes <= b[k].offset || b[k].offset + b[k].bytes <= b[i].offset;
      if (together && !apart) FAIL("buffers " << i << " and " << k << " overlap while both are live");
    }
  }
  CHECK(memory_plan_conflict(p.memory, p.steps.size(), p.values.size()).empty());
  const MemoryStats stats = memory_stats(p.memory);
  CHECK(stats.arena <= stats.sum + 64 * static_cast<std::int64_t>(stats.buffers));
  CHECK(stats.arena >= stats.peak);
  CHECK(stats.arena < stats.sum);
}


struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/kestrel-weights-XXXXXX";
    REQUIRE(::mkdtemp(name));
    path = name;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("model: the memory plans of the zoo's models are sound and smaller than their buffers", "[model][memory]") {
  for (const std::string name : {"mobilenet_v3_small_w025.legacy", "bert_tiny.legacy", "cnn_bn_tiny.legacy"}) {
    INFO(name);
    const Model model = Model::load(kZoo + name + ".onnx");
    const Graph graph = model.bind({});
    for (bool tasks : {true, false}) {
      INFO("tasks " << tasks);
      const Program program = lower_program(graph, tasks ? task_plan(model) : portable_plan(graph));
      REQUIRE(!program.memory.buffers.empty());
      check_sound(program);
    }
  }
  // A model with symbols, at two buckets.
  const Model dynamic = Model::load(kZoo + "bert_tiny_dyn.legacy.onnx");
  for (std::int64_t seq : {8, 16}) {
    const std::map<std::string, std::int64_t> binding = {{"batch", 1}, {"sequence", seq}};
    const Program program = lower_program(dynamic.bind(binding), task_plan(dynamic, binding), binding);
    check_sound(program);
  }
}

TEST_CASE("model: a run on the arena places every planned buffer and matches a run on the allocator", "[model][memory]") {
  for (const std::string name : {"bert_tiny.legacy", "cnn_bn_tiny.legacy"}) {
    INFO(name);
    const Model model = Model::load(kZoo + name + ".onnx");
    const Graph graph = model.bind({});
    const auto planned = std::make_shared<const Program>(lower_program(graph, portable_plan(graph)));
    auto unplanned = std::make_shared<Program>(*planned);
    unplanned->memory = MemoryPlan{};
    auto no_error = [](std::int32_t code) { return std::to_string(code); };
    ProgramRunner arena(planned, std::vector<BoundKernel>(planned->steps.size()), nullptr, no_error);
    ProgramRunner allocator(unplanned, std::vector<BoundKernel>(unplanned->steps.size()), nullptr, no_error);
    CHECK(arena.memory().arena == static_cast<std::size_t>(planned->memory.arena));
    CHECK(allocator.memory().arena == 0);
    const std::map<std::string, Tensor> in = generated_inputs(graph, 3);
    const std::map<std::string, Tensor> want = allocator.run(in);
    // A run after a run: the same outputs, every buffer at its offset again.
    for (int run = 1; run <= 2; ++run) {
      const std::map<std::string, Tensor> got = arena.run(in);
      for (const auto& [output, tensor] : want) {
        CHECK(got.at(output).f32 == tensor.f32);
        CHECK(got.at(output).i64 == tensor.i64);
      }
      CHECK(arena.memory().placed == run * planned->memory.buffers.size());
      CHECK(arena.memory().refused == 0);
    }
  }
}

TEST_CASE("model: a memory plan that does not fit costs memory, not a wrong answer, and a file with one is refused",
          "[model][memory]") {
  const Model model = Model::load(kZoo + "cnn_bn_tiny.legacy.onnx");
  const Graph graph = model.bind({});
  const Program good = lower_program(graph, portable_plan(graph));
  // Every buffer at offset 0: each placement over a live tensor is refused, the tensor
  // then comes from the allocator.
  auto overlapping = std::make_shared<Program>(good);
  std::int64_t largest = 0;
  for (const MemoryBuffer& b : overlapping->memory.buffers) largest = std::max(largest, b.bytes);
  for (MemoryBuffer& b : overlapping->memory.buffers) b.offset = 0;
  overlapping->memory.arena = (largest + 63) / 64 * 64;
  CHECK(!memory_plan_conflict(overlapping->memory, good.steps.size(), good.values.size()).empty());
  auto no_error = [](std::int32_t code) { return std::to_string(code); };
  auto planned = std::make_shared<const Program>(good);
  ProgramRunner right(planned, std::vector<BoundKernel>(good.steps.size()), nullptr, no_error);
  ProgramRunner wrong(overlapping, std::vector<BoundKernel>(good.steps.size()), nullptr, no_error);
  const std::map<std::string, Tensor> in = generated_inputs(graph, 9);
  const std::map<std::string, Tensor> want = right.run(in);
  const std::map<std::string, Tensor> got = wrong.run(in);
  for (const auto& [output, tensor] : want) CHECK(got.at(output).f32 == tensor.f32);
  CHECK(wrong.memory().refused > 0);
  CHECK(right.memory().refused == 0);

  TempDir dir;
  save_program(*overlapping, dir.path + "/model.kprog");
  CHECK_THROWS_WITH(load_program(dir.path + "/model.kprog"),
                    Catch::Contains("corrupt") && Catch::Contains("memory plan") && Catch::Contains("overlap"));
}

TEST_CASE("model: runners on two threads each keep to their own arena", "[model][memory]") {
  // Each thread builds, runs and drops runners (arenas made and destroyed) while the other
  // frees tensors: every run gives the single-threaded answer.
  const Model model = Model::load(kZoo + "cnn_bn_tiny.legacy.onnx");
  const Graph graph = model.bind({});
  const auto program = std::make_shared<const Program>(lower_program(graph, portable_plan(graph)));
  auto no_error = [](std::int32_t code) { return std::to_string(code); };
  const std::map<std::string, Tensor> in = generated_inputs(graph, 11);
  const std::map<std::string, Tensor> want =
      ProgramRunner(program, std::vector<BoundKernel>(program->steps.size()), nullptr, no_error).run(in);
  std::atomic<int> wrong{0}, refused{0};
  auto work = [&] {
    for (int i = 0; i < 20; ++i) {
      ProgramRunner runner(program, std::vector<BoundKernel>(program->steps.size()), nullptr, no_error);
      const std::map<std::string, Tensor> got = runner.run(in);
      for (const auto& [output, tensor] : want) {
        if (got.at(output).f32 != tensor.f32) ++wrong;
      }
      refused += static_cast<int>(runner.memory().refused);
    }
  };
  std::thread other(work);
  work();
  other.join();
  CHECK(wrong == 0);
  CHECK(refused == 0);
}

TEST_CASE("model: MobileNetV3's tasks and blocked steps run on the arena as planned", "[model][memory]") {
  // Convolutions blocked, squeeze-excite steps on blocked values, conversions: every
  // buffer the runner makes is one the plan foresaw, and the outputs are the all-portable
  // execution's.
  const Model model = Model::load(kZoo + "mobilenet_v3_small_w025.legacy.onnx");
  const Graph graph = model.bind({});
  const Plan plan = task_plan(model);
  CompiledKernels kernels(2);
  Runner runner(graph, plan, kernels);
  CompiledKernels none(1);
  Runner portable(graph, portable_plan(graph), none);
  const std::map<std::string, Tensor> in = generated_inputs(graph, 5);
  const std::map<std::string, Tensor> want = portable.run(in);
  const std::size_t buffers = runner.program().memory.buffers.size();
  std::map<std::string, Tensor> first;
  for (int run = 1; run <= 2; ++run) {
    const std::map<std::string, Tensor> got = runner.run(in);
    for (const auto& [output, tensor] : want) {
      const Tensor& g = got.at(output);
      REQUIRE(g.f32.size() == tensor.f32.size());
      double err = 0, mag = 1e-30;
      for (std::size_t i = 0; i < g.f32.size(); ++i) {
        err = std::max(err, static_cast<double>(std::abs(g.f32[i] - tensor.f32[i])));
        mag = std::max(mag, static_cast<double>(std::abs(tensor.f32[i])));
      }
      CHECK(err / mag < 1e-3);
      if (run == 1) first[output] = g;
      else CHECK(g.f32 == first.at(output).f32);
    }
    CHECK(runner.memory().placed == run * buffers);
    CHECK(runner.memory().refused == 0);
  }
}

TEST_CASE("model: the programs of a bucketed export share one weights file", "[model][weights]") {
  const Model model = Model::load(kZoo + "bert_tiny_dyn.legacy.onnx");
  std::vector<Program> programs;
  std::vector<std::string> names;
  for (std::int64_t seq : {8, 16, 32}) {
    const std::map<std::string, std::int64_t> binding = {{"batch", 1}, {"sequence", seq}};
    programs.push_back(lower_program(model.bind(binding), task_plan(model, binding), binding));
    names.push_back(program_file(binding));
  }
  TempDir dir;
  // Each program on its own, its arrays in it: what an export wrote before.
  std::uintmax_t alone = 0;
  for (std::size_t i = 0; i < programs.size(); ++i) {
    save_program(programs[i], dir.path + "/alone-" + names[i]);
    alone += std::filesystem::file_size(dir.path + "/alone-" + names[i]);
  }
  ProgramsWriter writer(dir.path);
  for (std::size_t i = 0; i < programs.size(); ++i) writer.add(programs[i], names[i]);
  const SavedPrograms saved = writer.finish();
  const std::string weights = dir.path + "/" + kWeightsFile;
  std::uintmax_t shared = std::filesystem::file_size(weights);
  CHECK(shared == saved.weights_bytes);
  for (const std::string& name : names) shared += std::filesystem::file_size(dir.path + "/" + name);
  // The buckets' packed weights and constants are the same arrays: stored once.
  CHECK(saved.stored * 3 <= saved.arrays + 2);
  CHECK(shared * 2 < alone);
  WARN("three buckets: " << alone << " bytes each program with its own weights, " << shared << " sharing "
                         << kWeightsFile);

  // Loaded, each program has the arrays it was written with.
  for (std::size_t i = 0; i < programs.size(); ++i) {
    const Program loaded = load_program(dir.path + "/" + names[i]);
    REQUIRE(loaded.packed.size() == programs[i].packed.size());
    for (std::size_t k = 0; k < loaded.packed.size(); ++k) CHECK(loaded.packed[k] == programs[i].packed[k]);
    REQUIRE(loaded.constants.size() == programs[i].constants.size());
    for (std::size_t k = 0; k < loaded.constants.size(); ++k) CHECK(loaded.constants[k].f32 == programs[i].constants[k].f32);
    CHECK(loaded.memory.arena == programs[i].memory.arena);
    const Program alone_loaded = load_program(dir.path + "/alone-" + names[i]);
    CHECK(alone_loaded.packed.size() == loaded.packed.size());
  }

  // A broken weights file: each a ModelError naming it.
  const std::string program = dir.path + "/" + names[0];
  const std::string good = test::file_bytes(weights);
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  test::write_bytes(weights, flipped);
  CHECK_THROWS_WITH(load_program(program), Catch::Contains(weights) && Catch::Contains("checksum"));
  test::write_bytes(weights, good.substr(0, good.size() / 2));
  CHECK_THROWS_WITH(load_program(program), Catch::Contains(weights) && Catch::Contains("corrupt"));
  std::filesystem::remove(weights);
  CHECK_THROWS_WITH(load_program(program), Catch::Contains(weights) && Catch::Contains(names[0]));
  test::write_bytes(weights, "PK\x03\x04 not weights");
  CHECK_THROWS_WITH(load_program(program), Catch::Contains("not a Kestrel weights file"));
  // Another model's weights file, sound in itself: refused as not this program's. (One
  // bucket of this model alone would write the same file, which is then its own.)
  TempDir other;
  ProgramsWriter one(other.path);
  const Model cnn = Model::load(kZoo + "cnn_bn_tiny.legacy.onnx");
  one.add(lower_program(cnn.bind({}), task_plan(cnn)), kProgramFile);
  one.finish();
  std::filesystem::copy_file(other.path + "/" + kWeightsFile, weights, std::filesystem::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(load_program(program), Catch::Contains(weights) && Catch::Contains("is not the weights file"));
  test::write_bytes(weights, good);
  CHECK_NOTHROW(load_program(program));
}
