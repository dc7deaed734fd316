// libkestrel_model's C interface (kestrel_model.h): an export folder's program run by the
// ProgramRunner on the folder's kernel library, as `kestrel run --kernels` runs it on
// the host.
#include "kestrel/deploy/kestrel_model.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <memory>
#include <string>

#include "kestrel/deploy/dispatch_library.h"
#include "kestrel/deploy/program.h"

using kestrel::deploy::DispatchLibrary;
using kestrel::deploy::Program;
using kestrel::deploy::ProgramRunner;
using kestrel::deploy::ProgramValue;
using kestrel::deploy::Tensor;
using kestrel::model::ElemType;

struct kestrel_model {
  std::shared_ptr<const Program> program;
  std::unique_ptr<DispatchLibrary> kernels;
  std::unique_ptr<ProgramRunner> runner;
  std::string error;
  double last_run_seconds = 0;

  const ProgramValue* value(bool input, int i) const {
    const auto& ids = input ? program->inputs : program->outputs;
    if (i < 0 || static_cast<std::size_t>(i) >= ids.size()) return nullptr;
    return &program->values[ids[static_cast<std::size_t>(i)]];
  }
};

namespace {

void put_error(char* error, size_t error_size, const std::string& text) {
  if (!error || error_size == 0) return;
  const size_t n = std::min(text.size(), error_size - 1);
  std::memcpy(error, text.data(), n);
  error[n] = '\0';
}

int type_of(const ProgramValue* v) {
  if (!v) return -1;
  return v->type == ElemType::f32 ? KESTREL_MODEL_FLOAT32 : KESTREL_MODEL_INT64;
}

int shape_of(const ProgramValue* v, int64_t* dims, int max_dims) {
  if (!v || !v->shape) return -1;
  const int rank = static_cast<int>(v->shape->size());
  for (int d = 0; d < rank && d < max_dims; ++d) dims[d] = (*v->shape)[static_cast<std::size_t>(d)];
  return rank;
}

}  // namespace

extern "C" {

kestrel_model* kestrel_model_open(const char* dir, int threads, char* error, size_t error_size) {
  return kestrel_model_open_program(dir, nullptr, threads, error, error_size);
}

kestrel_model* kestrel_model_open_program(const char* dir, const char* program, int threads, char* error,
                                          size_t error_size) {
  try {
    if (!dir) throw std::invalid_argument("no folder given");
    if (threads < 1) throw std::invalid_argument("threads must be at least 1, got " + std::to_string(threads));
    auto model = std::make_unique<kestrel_model>();
    const std::string program_path =
        (std::filesystem::path(dir) / (program ? program : kestrel::deploy::kProgramFile)).string();
    if (!program && !std::filesystem::exists(program_path)) {
      // A model exported at several sizes of its symbols: say which programs there are.
      std::string found;
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.starts_with("model.") && name.ends_with(".kprog")) found += (found.empty() ? "" : ", ") + name;
      }
      if (!found.empty()) {
        throw std::invalid_argument(program_path + " does not exist: the model was exported at several sizes; open one of " +
                                    found + " (kestrel_model_open_program, kestrel-model-run --program)");
      }
    }
    model->program = std::make_shared<const Program>(kestrel::deploy::load_program(program_path));
    for (const auto* ids : {&model->program->inputs, &model->program->outputs}) {
      for (std::size_t id : *ids) {
        const ProgramValue& v = model->program->values[id];
        if (!v.shape) throw std::invalid_argument(program_path + ": " + v.name + " has no bound shape");
      }
    }
    model->kernels = std::make_unique<DispatchLibrary>(dir, static_cast<unsigned>(threads));
    DispatchLibrary* kernels = model->kernels.get();
    model->runner = std::make_unique<ProgramRunner>(model->program, kernels->bind_all(*model->program), kernels->services(),
                                                    [kernels](std::int32_t code) { return kernels->describe_error(code); });
    put_error(error, error_size, "");
    return model.release();
  } catch (const std::exception& e) {
    put_error(error, error_size, e.what());
  } catch (...) {
    put_error(error, error_size, "unknown error");
  }
  return nullptr;
}

void kestrel_model_close(kestrel_model* model) { delete model; }

int kestrel_model_input_count(const kestrel_model* model) { return static_cast<int>(model->program->inputs.size()); }
int kestrel_model_output_count(const kestrel_model* model) { return static_cast<int>(model->program->outputs.size()); }

const char* kestrel_model_input_name(const kestrel_model* model, int i) {
  const ProgramValue* v = model->value(true, i);
  return v ? v->name.c_str() : nullptr;
}
const char* kestrel_model_output_name(const kestrel_model* model, int i) {
  const ProgramValue* v = model->value(false, i);
  return v ? v->name.c_str() : nullptr;
}
int kestrel_model_input_type(const kestrel_model* model, int i) { return type_of(model->value(true, i)); }
int kestrel_model_output_type(const kestrel_model* model, int i) { return type_of(model->value(false, i)); }
int kestrel_model_input_shape(const kestrel_model* model, int i, int64_t* dims, int max_dims) {
  return shape_of(model->value(true, i), dims, max_dims);
}
int kestrel_model_output_shape(const kestrel_model* model, int i, int64_t* dims, int max_dims) {
  return shape_of(model->value(false, i), dims, max_dims);
}

int kestrel_model_run(kestrel_model* model, const void* const* inputs, void* const* outputs) {
  try {
    model->error.clear();
    const Program& p = *model->program;
    std::map<std::string, Tensor> given;
    for (std::size_t k = 0; k < p.inputs.size(); ++k) {
      const ProgramValue& v = p.values[p.inputs[k]];
      if (!inputs || !inputs[k]) throw std::invalid_argument("no data for input " + v.name);
      const std::int64_t n = kestrel::deploy::element_count(*v.shape);
      Tensor t;
      t.shape = *v.shape;
      if (v.type == ElemType::f32) {
        t.type = ElemType::f32;
        const float* data = static_cast<const float*>(inputs[k]);
        t.f32.assign(data, data + n);
      } else {
        t.type = ElemType::i64;
        const int64_t* data = static_cast<const int64_t*>(inputs[k]);
        t.i64.assign(data, data + n);
      }
      given.emplace(v.name, std::move(t));
    }
    const auto start = std::chrono::steady_clock::now();
    std::map<std::string, Tensor> results = model->runner->run(given);
    model->last_run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (std::size_t k = 0; k < p.outputs.size(); ++k) {
      const ProgramValue& v = p.values[p.outputs[k]];
      if (!outputs || !outputs[k]) throw std::invalid_argument("no room for output " + v.name);
      const Tensor& t = results.at(v.name);
      if (t.shape != *v.shape) {
        throw std::runtime_error("output " + v.name + " came out " + kestrel::deploy::shape_text(t.shape) + ", the program says " +
                                 kestrel::deploy::shape_text(*v.shape));
      }
      if (v.type == ElemType::f32) {
        if (t.type != ElemType::f32) throw std::runtime_error("output " + v.name + " is not float");
        std::memcpy(outputs[k], t.f32.data(), t.f32.size() * sizeof(float));
      } else {
        if (t.type != ElemType::i64) throw std::runtime_error("output " + v.name + " is not integer");
        std::memcpy(outputs[k], t.i64.data(), t.i64.size() * sizeof(int64_t));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    model->error = e.what();
  } catch (...) {
    model->error = "unknown error";
  }
  return -1;
}

double kestrel_model_last_run_seconds(const kestrel_model* model) { return model->last_run_seconds; }

const char* kestrel_model_error(const kestrel_model* model) { return model->error.c_str(); }

}  // extern "C"
