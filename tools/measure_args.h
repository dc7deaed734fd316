// Command-line options shared by the commands that measure on devices (profile, tune):
// where the devices are, how to measure, which target to compile for.
#pragma once

#include <optional>
#include <string>

#include "args.h"
#include "kestrel/host/leased_pool.h"
#include "kestrel/host/target.h"

namespace kestrel::tools {

void add_pool_options(Args& args);
// --tracker (none: the embedded local pool), --key, --token-file, --tls-ca, --no-tls, --wait-ms, --priority.
host::PoolOptions pool_options(const Args& args, std::string client_name);

void add_measure_options(Args& args);
rpc::MeasureSettings measure_options(const Args& args);

// --target auto (the device's CPU, from its registered triple), native, a triple, or a
// GPU target of the device (cuda: its GPU's sm_XX; cuda:sm_XX; opencl); --mcpu/--features
// (for GPU targets they apply to the reference kernel's CPU target).
host::Target resolve_target(const Args& args, const rpc::DeviceInfo& device);

void set_log_level(const Args& args, const std::string& fallback);

}  // namespace kestrel::tools
