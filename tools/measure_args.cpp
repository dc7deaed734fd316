// The shared options on a command line (see measure_args.h).
#include "measure_args.h"

#include "kestrel/base/log.h"

namespace kestrel::tools {

bool ArgsSource::has(const frontend::OptionSpec& spec) { return args_.has(std::string(spec.name)); }
std::string ArgsSource::text(const frontend::OptionSpec& spec) { return args_.get(std::string(spec.name)); }
std::int64_t ArgsSource::integer(const frontend::OptionSpec& spec) {
  const std::string name(spec.name);
  return parse_int_option(name, args_.get(name), INT64_MIN, INT64_MAX);
}
bool ArgsSource::flag(const frontend::OptionSpec& spec) { return args_.has(std::string(spec.name)); }
std::chrono::seconds ArgsSource::duration(const frontend::OptionSpec& spec) {
  return frontend::parse_duration(spell(spec), args_.get(std::string(spec.name)));
}
std::string ArgsSource::spell(const frontend::OptionSpec& spec) const { return "--" + std::string(spec.name); }

void declare(Args& args, const std::vector<frontend::OptionSpec>& specs) {
  for (const frontend::OptionSpec& spec : specs) {
    if (spec.kind == frontend::OptionKind::flag) {
      args.flag(std::string(spec.name), std::string(spec.help));
    } else {
      args.option(std::string(spec.name), std::string(spec.value_name), std::string(spec.help),
                  std::string(spec.fallback));
    }
  }
}

void add_pool_options(Args& args) {
  declare(args, frontend::pool_option_specs());
  declare(args, frontend::target_option_specs());
}

host::PoolOptions pool_options(const Args& args, std::string client_name) {
  ArgsSource source(args);
  std::optional<rpc::Token> token;
  if (args.has("token-file")) token = rpc::Token::from_file(args.get("token-file"));
  return frontend::pool_options(source, std::move(token), std::move(client_name));
}

void add_measure_options(Args& args) { declare(args, frontend::measure_option_specs()); }

rpc::MeasureSettings measure_options(const Args& args) {
  ArgsSource source(args);
  return frontend::measure_settings(source);
}

host::Target resolve_target(const Args& args, const rpc::DeviceInfo& device) {
  ArgsSource source(args);
  return frontend::target_policy(source).resolve(device);
}

void set_log_level(const Args& args, const std::string& fallback) {
  log::Level level;
  if (!log::parse_level(args.get("log-level", fallback), level)) {
    throw UsageError("--log-level must be debug, info, warn, error or off");
  }
  log::set_level(level);
}

}  // namespace kestrel::tools
