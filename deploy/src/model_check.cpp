// A model run checked against ONNX Runtime and timed (see model_check.h).
#include "kestrel/deploy/model_check.h"

#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kestrel/base/stats.h"
#include "kestrel/base/usage_error.h"
#include "kestrel/deploy/python_tool.h"

namespace kestrel::deploy {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Uniform in [-1, 1) from a seed (splitmix64), one stream per input.
void fill_random(AlignedFloats& values, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (float& v : values) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v = static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A temporary directory, removed with everything in it when this goes.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "kestrel-run-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      throw ModelRunError("cannot create a temporary directory in " + fs::temp_directory_path().string());
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

OrtRun run_ort_in(const OnnxRuntime& ort, const std::string& model_path, const std::map<std::string, Tensor>& inputs,
                  int threads, int repeat, const fs::path& dir) {
  const std::string& python = ort.python;
  const std::string& script = ort.script;
  std::string command = shell_quote(python) + " " + shell_quote(script) + " " + shell_quote(model_path);
  for (const auto& [name, t] : inputs) {
    const fs::path file = dir / ("input_" + std::to_string(std::distance(inputs.begin(), inputs.find(name))) + ".bin");
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(t.f32.data()), static_cast<std::streamsize>(t.f32.size() * sizeof(float)));
    if (!out) throw ModelRunError("cannot write " + file.string());
    std::string dims;
    for (auto d : t.shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    command += " --input " + shell_quote(name + "=" + file.string() + "@" + dims);
  }
  const fs::path err = dir / "ort_stderr.txt";
  command += " --out-dir " + shell_quote((dir / "ort").string()) + " --threads " + std::to_string(threads) + " --repeat " +
             std::to_string(repeat) + " 2> " + shell_quote(err.string());
  if (!fs::exists(script)) {
    OrtRun missing;
    missing.why = "no script " + script + " (give its path with --ort-script)";
    return missing;
  }
  std::string stdout_text;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw ModelRunError("cannot start " + python);
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) stdout_text.append(buffer, n);
  int status = ::pclose(pipe);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::string err_text = read_text(err);
  while (!err_text.empty() && (err_text.back() == '\n' || err_text.back() == ' ')) err_text.pop_back();
  OrtRun r;
  if (code == 3 || code == 126 || code == 127) {
    r.why = code == 3 ? err_text : python + (code == 127 ? " was not found" : " cannot be run");
    return r;
  }
  if (code != 0) throw ModelRunError("onnxruntime failed (" + script + ", exit " + std::to_string(code) + "): " + err_text);
  json j;
  try {
    j = json::parse(stdout_text);
  } catch (const json::exception&) {
    throw ModelRunError("unexpected output from " + script + ": " + stdout_text.substr(0, 300));
  }
  r.available = true;
  r.version = j.value("onnxruntime", "");
  r.latency.median_ms = j["latency_ms"]["median"].get<double>();
  r.latency.min_ms = j["latency_ms"]["min"].get<double>();
  r.latency.runs = j["latency_ms"]["runs"].get<int>();
  for (const auto& o : j["outputs"]) {
    Tensor t;
    t.shape = o["shape"].get<std::vector<std::int64_t>>();
    t.f32.resize(static_cast<std::size_t>(t.elements()));
    std::ifstream in(o["file"].get<std::string>(), std::ios::binary);
    in.read(reinterpret_cast<char*>(t.f32.data()), static_cast<std::streamsize>(t.f32.size() * sizeof(float)));
    if (!in) throw ModelRunError("cannot read onnxruntime's output " + o["file"].get<std::string>());
    r.outputs[o["name"].get<std::string>()] = std::move(t);
  }
  return r;
}

}  // namespace

std::map<std::string, Tensor> random_inputs(const model::Graph& graph, std::uint64_t seed) {
  std::map<std::string, Tensor> inputs;
  std::uint64_t stream = seed;
  for (const auto& in : graph.inputs) {
    if (in.type != model::ElemType::f32) {
      throw UsageError("model input " + in.name + " is not float: kestrel run feeds random float inputs only");
    }
    std::vector<std::int64_t> shape;
    for (const auto& d : *in.shape) shape.push_back(d.value);
    Tensor t = Tensor::floats(shape);
    fill_random(t.f32, stream++);
    inputs[in.name] = std::move(t);
  }
  return inputs;
}

std::unique_ptr<Runner> make_checked_runner(const model::Graph& graph, const model::Plan& plan, KernelProvider& kernels,
                                            std::map<std::string, std::int64_t> symbols) {
  try {
    return std::make_unique<Runner>(graph, plan, kernels, std::move(symbols));
  } catch (const model::ModelError& e) {
    throw ModelRunError(e.what());
  }
}

Latency time_runs(const std::function<void()>& run, int repeat) {
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const stats::Summary s = stats::summarize(ms);
  Latency l;
  l.runs = repeat;
  l.min_ms = s.min;
  l.median_ms = s.median;
  return l;
}

TimedRun run_and_time(Runner& runner, const std::map<std::string, Tensor>& inputs, int repeat) {
  TimedRun r;
  try {
    r.outputs = runner.run(inputs);
    r.latency = time_runs([&] { runner.run(inputs); }, repeat);
  } catch (const model::ModelError& e) {
    throw ModelRunError(e.what());
  }
  return r;
}

std::string default_ort_script() { return (fs::path(KESTREL_SOURCE_DIR) / "scripts" / "ort_run.py").string(); }

std::optional<std::string> ort_unavailable(const OnnxRuntime& ort) {
  if (!fs::exists(ort.script)) return "no script " + ort.script + " (give its path with --ort-script)";
  if (std::system((shell_quote(ort.python) + " -c 'import onnxruntime, numpy' > /dev/null 2>&1").c_str()) != 0) {
    return ort.python + " cannot import onnxruntime and numpy";
  }
  return std::nullopt;
}

OrtRun run_onnxruntime(const OnnxRuntime& ort, const std::string& model_path, const std::map<std::string, Tensor>& inputs,
                       int threads, int repeat) {
  const ScratchDir scratch;
  return run_ort_in(ort, model_path, inputs, threads, repeat, scratch.path());
}

OutputCheck compare_output(const std::string& name, const Tensor& got, const Tensor* want, double tolerance) {
  OutputCheck c;
  c.name = name;
  c.shape = got.shape;
  if (!want) {
    c.problem = "onnxruntime has no output " + name;
    return c;
  }
  if (want->shape != got.shape) {
    c.problem = "shape " + shape_text(got.shape) + ", onnxruntime's is " + shape_text(want->shape);
    return c;
  }
  for (std::size_t i = 0; i < got.f32.size(); ++i) {
    double d = std::abs(static_cast<double>(got.f32[i]) - want->f32[i]);
    c.max_abs = std::isnan(d) ? INFINITY : std::max(c.max_abs, d);
    c.magnitude = std::max(c.magnitude, std::abs(static_cast<double>(want->f32[i])));
  }
  c.relative = c.max_abs / std::max(c.magnitude, 1e-30);
  c.ok = c.relative <= tolerance;
  if (!c.ok) {
    std::ostringstream s;
    s << "max error " << c.max_abs << " is " << c.relative << " of the output's magnitude " << c.magnitude
      << ", above the tolerance " << tolerance;
    c.problem = s.str();
  }
  return c;
}

std::vector<OutputCheck> compare_outputs(const model::Graph& graph, const std::map<std::string, Tensor>& outputs,
                                         const OrtRun& ort, double tolerance) {
  std::vector<OutputCheck> checks;
  if (!ort.available) return checks;
  for (const auto& o : graph.outputs) {
    const auto it = ort.outputs.find(o.name);
    checks.push_back(compare_output(o.name, outputs.at(o.name), it == ort.outputs.end() ? nullptr : &it->second, tolerance));
  }
  return checks;
}

double speedup(const Latency& ours, const Latency& onnxruntime) {
  return ours.median_ms > 0 ? onnxruntime.median_ms / ours.median_ms : 0.0;
}

StepProfile step_profile(const Runner& runner) {
  StepProfile p;
  p.slowest = runner.step_times();
  for (const auto& t : p.slowest) {
    p.total_s += t.seconds;
    if (t.task) p.task_s += t.seconds;
  }
  std::sort(p.slowest.begin(), p.slowest.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return p;
}

std::string machine_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  }
  unsigned cores = std::thread::hardware_concurrency();
  return (model.empty() ? "unknown CPU" : model) + " (" + std::to_string(cores) + (cores == 1 ? " core)" : " cores)");
}

}  // namespace kestrel::deploy
