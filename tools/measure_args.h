// Command-line options shared by the commands that measure on devices (profile, tune):
// where the devices are, how to measure, which target to compile for.
#pragma once

#include <optional>
#include <string>

#include "args.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/host/target.h"
#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/connection.h"

namespace kestrel::tools {

struct PoolChoice {
  std::optional<rpc::Endpoint> tracker;  // none: a local pool (embedded default)
  std::string key;
  std::optional<rpc::Token> token;
  std::chrono::milliseconds wait{30'000};
};

void add_pool_options(Args& args);
PoolChoice pool_choice(const Args& args);

void add_measure_options(Args& args);
rpc::MeasureSettings measure_options(const Args& args);

// --target auto (the device's CPU, from its registered triple), native, a triple, or a
// GPU target of the device (cuda: its GPU's sm_XX; cuda:sm_XX; opencl); --mcpu/--features
// (for GPU targets they apply to the reference kernel's CPU target).
host::Target resolve_target(const Args& args, const rpc::DeviceInfo& device);

void set_log_level(const Args& args, const std::string& fallback);

}  // namespace kestrel::tools
