// Export: the best recorded kernel of every task of a model, compiled for one target and
// linked into one library (shared and static) with a generated C header and a dispatcher
// that picks a kernel by shape. See docs/export.md for the library's C interface.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/deploy/program.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"
#include "kestrel/model/tasks.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/records/records.h"

namespace kestrel::deploy {

struct ExportOptions {
  host::Target target;
  std::string out_dir;
  // One plan per bucket (a model with no symbol: one plan). All plans of one model and
  // one block.
  std::vector<model::Plan> plans;
  // Only records of this pool key (empty: any device class of the target).
  std::string device_key;
  // Where the target's runtime library (libkestrel_rt.a/.so, cross-built with the device
  // runtime) is; empty: searched (KESTREL_RUNTIME_DIR, then beside the kestrel binary's
  // build tree: build-device-<triple>/device_runtime; for native also build/device_runtime
  // and build-device-native/device_runtime).
  std::string runtime_dir;
  // The model the plans come from (its path or name), for the manifest.
  std::string model;
  // A cross-workload cost model (tuner/cross_model.h): tasks with no record for the
  // target get its zero-shot pick (origin "zero-shot") instead of the op's default, and
  // a database without any record for the target is then no error. Null: none.
  std::shared_ptr<const tuner::CrossModel> cost_model;
  std::string cost_model_path;  // where it was loaded from, for the manifest
  // The whole model too: per plan, the graph it was planned from (bound at the plan's
  // binding, `bindings`), lowered (program.h) and written as model.kprog (one plan) or
  // model.<binding>.kprog each (several), their weights once in model.weights, with
  // libkestrel_model for the target (found beside libkestrel_rt: <build>/deploy), its
  // header kestrel_model.h and the example program kestrel_model_run.c (and built,
  // kestrel-model-run, when the target's build has it). Empty: kernels only.
  std::vector<const model::Graph*> graphs;
  std::vector<std::map<std::string, std::int64_t>> bindings;
};

// One kernel in the library.
struct ExportedKernel {
  std::string op;
  ops::Params params;                 // at its bucket
  std::vector<model::DynamicParam> dynamic;  // run-time parameters
  std::string config;                 // format_config of what was compiled
  std::string origin;                 // "tuned" (a record), "zero-shot" (the cost model's pick, no
                                      // record) or "default" (no record, no cost model for the op)
  double gflops = 0;                  // the record's, 0 for defaults
  std::string entry;                  // symbol in the library ("kestrel_k3")
};

struct ExportReport {
  std::vector<ExportedKernel> kernels;
  std::vector<std::string> files;     // written, relative to out_dir
  bool runtime_copied = false;        // libkestrel_rt for the target found and copied
  std::string runtime_note;           // why not, and how to build it
  std::vector<std::string> programs;  // model.kprog, or model.<binding>.kprog per bucket (ExportOptions::graphs)
  // Per program: its memory plan's arena against the sum of its activation buffers and
  // the most bytes live at once (program.h's MemoryStats).
  std::vector<MemoryStats> memory;
  // model.weights (kWeightsFile), which the programs share: its bytes, each program's,
  // and the float arrays the programs read against the distinct ones it holds.
  std::uint64_t weights_bytes = 0;
  std::vector<std::uint64_t> program_bytes;
  std::size_t weight_arrays = 0, weight_arrays_stored = 0;
  bool model_runtime_copied = false;  // libkestrel_model.so for the target found and copied
  std::string model_runtime_note;     // where from, or why not and how to build it
  // What the export could not do as asked, and why: parameters that could not be made
  // run-time arguments ("softmax cols: ..., so it is compiled at 768 only"; such a kernel
  // runs for its exact shape only), records whose configuration does not fit the target.
  std::vector<std::string> notes;
};

// Compiles and links. Throws ModelError when the database has no record at all for the
// target and there is no cost model ("no records for aarch64-linux-gnu in tune.db: tune for it first"), on a compile
// or link failure (with the diagnostics), and when out_dir cannot be written. `progress`
// gets (done, total) as kernels compile.
ExportReport export_library(records::RecordStore& records, host::Compiler& compiler, const ExportOptions& options,
                            const std::function<void(std::size_t, std::size_t)>& progress = {});

}  // namespace kestrel::deploy
