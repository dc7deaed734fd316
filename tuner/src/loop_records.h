// The tuning loop's only contact with the Record type: what it reads back from the
// records of a task and how it writes an Evaluation. Kept in one place so the record
// schema can change without touching the loop.
#pragma once

#include <string>
#include <vector>

#include "kestrel/kernel/status.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/tuner/records.h"
#include "kestrel/tuner/task.h"

namespace kestrel::tuner::loop_records {

struct Past {
  ops::Config config;
  kernel::Status status = kernel::Status::ok;
  double cost = 0;  // +inf unless ok
  bool final_measurement = false;
  bool ok() const { return status == kernel::Status::ok; }
};

// Records of the task, oldest first; records whose config or status cannot be read are
// skipped.
std::vector<Past> of_task(const RecordsDb& db, const Task& task);

struct Other {
  ops::Params params;
  ops::Config config;
  bool ok = false;
  double cost = 0;
};
// Records of the task's op and target for other workloads (the model's transfer).
std::vector<Other> of_other_workloads(const RecordsDb& db, const Task& task);

struct Context {
  std::string session;
  std::string device_key;
};
// Records one evaluation, committed at once. The default configuration's final
// re-measurement is marked (message "default" when it has no message of its own).
void add(RecordsDb& db, const Task& task, const Evaluation& evaluation, const Context& context,
         bool final_measurement, bool is_default);

}  // namespace kestrel::tuner::loop_records
