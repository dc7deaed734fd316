// The tuning loop's only contact with the Record type: what it reads back from the
// records of a task and how it writes an Evaluation. Kept in one place so the record
// schema can change without touching the loop.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kestrel/kernel/status.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/task.h"

namespace kestrel::tuner::loop_records {

struct Past {
  ops::Config config;
  kernel::Status status = kernel::Status::ok;
  double cost = 0;  // +inf unless ok
  bool final_measurement = false;
  bool ok() const { return status == kernel::Status::ok; }
};

// Records of the task measured on `device_class` (none: on any class), oldest first.
std::vector<Past> of_task(const records::RecordStore& db, const Task& task, const std::optional<records::DeviceClass>& device_class);

struct Other {
  ops::Params params;
  ops::Config config;
  bool ok = false;
  double cost = 0;
};
// Records of the task's op and target for other workloads (the model's transfer).
std::vector<Other> of_other_workloads(const records::RecordStore& db, const Task& task);

struct Context {
  std::string session;
  std::string device_key;
  std::optional<records::DeviceClass> device_class;  // for evaluations that never reached a device
  ops::Config default_config;  // the op's default configuration for the task
};
// Records one evaluation, committed at once; the op's default config (the context's) is
// marked is_default (how `best` knows the baseline of a final round); `recommended` carries the
// final round's choice (Record::recommended).
void add(records::RecordStore& db, const Task& task, const Evaluation& evaluation, const Context& context,
         bool final_measurement, unsigned recommended = 0);

}  // namespace kestrel::tuner::loop_records
