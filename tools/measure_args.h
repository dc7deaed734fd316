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
host::MeasureOptions measure_options(const Args& args);

// --target auto (from the device's capabilities), native, a triple, or a GPU target
// (cuda, cuda:sm_XX, opencl); --mcpu/--features. `backends`: those the op has kernels
// for (auto picks CUDA only when the op has a CUDA kernel and the device a CUDA GPU).
host::Target resolve_target(const Args& args, const rpc::DeviceInfo& device,
                            const std::vector<ops::Backend>& backends = {ops::Backend::cpu});

// The backends of every variant of an op.
std::vector<ops::Backend> op_backends(const ops::Registry& registry, std::string_view name);

void set_log_level(const Args& args, const std::string& fallback);

}  // namespace kestrel::tools
