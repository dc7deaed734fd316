// What is tuned (a Task: one op on one workload for one compile target), and the class
// of devices a leased device's measurements hold for (records::DeviceClass).
#pragma once

#include <string>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/records/device_class.h"
#include "kestrel/rpc/device_info.h"

namespace kestrel::tuner {

// The class of `device`, leased under `key`, when it runs code compiled for `target`:
// the model is the name of the target's GPU (its backend and index on the device) for a
// GPU target, else the device's CPU model. A GPU the device did not register leaves the
// model empty.
records::DeviceClass device_class_of(const std::string& key, const rpc::DeviceInfo& device, const host::Target& target);

// What is tuned: a workload (ops::Workload: its label, the op's variant for the
// target's backend, registry.get(name, target.backend), and its parameters) on one
// compile target. `op` is borrowed and must outlive the task (the registry owns it).
struct Task : ops::Workload {
  host::Target target;
  std::string op_name() const;      // op->name()
  std::string workload() const;     // ops::format_params(params)
  std::string target_name() const;  // target.to_string()
  std::string key() const;          // stable: "<op>/<workload>/<target>"
  double flops() const;
};

}  // namespace kestrel::tuner
