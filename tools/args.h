// A small command-line parser shared by the kestrel programs: long options with
// values ("--port 9190" or "--port=9190"), flags, and generated help text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kestrel::tools {

// A user error on the command line; main prints it with a hint to --help.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  Args(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

  // Declares an option taking a value. `fallback` is shown in help when non-empty.
  void option(const std::string& name, const std::string& value_name, const std::string& help,
              const std::string& fallback = "") {
    specs_.push_back({name, value_name, help, fallback, false});
  }
  void flag(const std::string& name, const std::string& help) { specs_.push_back({name, "", help, "", true}); }
  void epilog(std::string text) { epilog_ = std::move(text); }

  // Parses argv[first..]; returns false if --help was given (help text in `help()`).
  // Throws UsageError on unknown options or missing values.
  bool parse(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") return false;
      if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'");
      std::string name = arg.substr(2);
      std::optional<std::string> inline_value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      const Spec* spec = find(name);
      if (!spec) throw UsageError("unknown option '--" + name + "'");
      if (spec->is_flag) {
        if (inline_value) throw UsageError("option '--" + name + "' takes no value");
        values_[name] = "1";
      } else if (inline_value) {
        values_[name] = *inline_value;
      } else {
        if (i + 1 >= argc) throw UsageError("option '--" + name + "' needs a value (" + spec->value_name + ")");
        values_[name] = argv[++i];
      }
    }
    return true;
  }

  bool has(const std::string& name) const { return values_.contains(name); }
  std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  std::int64_t get_int(const std::string& name, std::int64_t fallback, std::int64_t min, std::int64_t max) const {
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    std::size_t used = 0;
    std::int64_t value = 0;
    try {
      value = std::stoll(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != it->second.size() || used == 0) {
      throw UsageError("option '--" + name + "' expects an integer, got '" + it->second + "'");
    }
    if (value < min || value > max) {
      throw UsageError("option '--" + name + "' must be between " + std::to_string(min) + " and " +
                       std::to_string(max) + ", got " + it->second);
    }
    return value;
  }

  std::string help() const {
    std::string out = "usage: " + program_ + " [options]\n\n" + summary_ + "\n\noptions:\n";
    for (const auto& spec : specs_) {
      std::string left = "  --" + spec.name + (spec.is_flag ? "" : " " + spec.value_name);
      if (left.size() < 28) left.resize(28, ' ');
      else left += "\n" + std::string(28, ' ');
      out += left + spec.help;
      if (!spec.fallback.empty()) out += " (default: " + spec.fallback + ")";
      out += "\n";
    }
    out += "  --help                    show this help\n";
    if (!epilog_.empty()) out += "\n" + epilog_ + "\n";
    return out;
  }

 private:
  struct Spec {
    std::string name, value_name, help, fallback;
    bool is_flag;
  };
  const Spec* find(const std::string& name) const {
    for (const auto& spec : specs_) {
      if (spec.name == name) return &spec;
    }
    return nullptr;
  }

  std::string program_, summary_, epilog_;
  std::vector<Spec> specs_;
  std::map<std::string, std::string> values_;
};

}  // namespace kestrel::tools
