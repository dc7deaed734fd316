// The options shared by the commands that measure on devices (profile, tune, datagen):
// where the devices are, how to measure, which target to compile for. Declared once in
// frontend/options.h (with Python); this file puts them on a command line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "kestrel/frontend/options.h"
#include "kestrel/host/leased_pool.h"
#include "kestrel/host/target.h"

namespace kestrel::tools {

// The frontend's options as a command line gives them: "--wait-ms", integers parsed from
// the text (UsageError "expects an integer" otherwise).
class ArgsSource final : public frontend::OptionSource {
 public:
  explicit ArgsSource(const Args& args) : args_(args) {}
  bool has(const frontend::OptionSpec& spec) override;
  std::string text(const frontend::OptionSpec& spec) override;
  std::int64_t integer(const frontend::OptionSpec& spec) override;
  bool flag(const frontend::OptionSpec& spec) override;
  std::chrono::seconds duration(const frontend::OptionSpec& spec) override;
  std::string spell(const frontend::OptionSpec& spec) const override;

 private:
  const Args& args_;
};

// Declares `specs` on `args` (their help, value names and defaults).
void declare(Args& args, const std::vector<frontend::OptionSpec>& specs);

// The pool and target options (frontend::pool_option_specs, target_option_specs).
void add_pool_options(Args& args);
// The pool the options name; the token read from --token-file.
host::PoolOptions pool_options(const Args& args, std::string client_name);

void add_measure_options(Args& args);
rpc::MeasureSettings measure_options(const Args& args);

// The target policy of --target/--mcpu/--features, applied to the leased device.
host::Target resolve_target(const Args& args, const rpc::DeviceInfo& device);

void set_log_level(const Args& args, const std::string& fallback);

}  // namespace kestrel::tools
