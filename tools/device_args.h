// The command-line parser of kestrel-device: long options with values ("--key rpi4" or
// "--key=rpi4"), flags, --help, --version, "did you mean" for typos. The host tool uses
// CLI11 (args.h); the device runtime keeps this small one because CLI11 pulls in
// iostreams: linked into kestrel-device it added 217 KB (25%) to the stripped x86_64
// binary, and the runtime's size is a product figure (it ships to boards).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/base/suggest.h"
#include "kestrel/base/version.h"
#include "usage.h"

namespace kestrel::tools {

class DeviceArgs {
 public:
  DeviceArgs(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

  // Declares an option taking a value. `fallback` is shown in help when non-empty.
  // Declaring a name twice is a bug (std::logic_error).
  void option(const std::string& name, const std::string& value_name, const std::string& help,
              const std::string& fallback = "") {
    declare({name, value_name, help, fallback, false});
  }
  void flag(const std::string& name, const std::string& help) { declare({name, "", help, "", true}); }
  void epilog(std::string text) { epilog_ = std::move(text); }

  // Parses argv[first..]; returns false if --help or --version was given (the text to
  // print in `help()`). Throws UsageError on unknown options (naming the closest
  // one), missing values, or an option given twice.
  bool parse(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") return false;
      if (arg == "--version") {
        version_ = program_ + " " + std::string(software_version()) + "\n";
        return false;
      }
      if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'");
      std::string name = arg.substr(2);
      std::optional<std::string> inline_value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      const Spec* spec = find(name);
      if (!spec) {
        std::vector<std::string> names;
        for (const auto& known : specs_) names.push_back("--" + known.name);
        throw UsageError("unknown option '--" + name + "'" + did_you_mean("--" + name, names));
      }
      if (values_.contains(name)) throw UsageError("option '--" + name + "' given twice");
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
    return it == values_.end() ? fallback : parse_int_option(name, it->second, min, max);
  }


  std::string help() const {
    if (!version_.empty()) return version_;
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
    out += "  --version                 print the version and exit\n";
    if (!epilog_.empty()) out += "\n" + epilog_ + "\n";
    return out;
  }

 private:
  struct Spec {
    std::string name, value_name, help, fallback;
    bool is_flag;
  };
  void declare(Spec spec) {
    if (find(spec.name)) throw std::logic_error(program_ + ": option --" + spec.name + " declared twice");
    specs_.push_back(std::move(spec));
  }
  const Spec* find(const std::string& name) const {
    for (const auto& spec : specs_) {
      if (spec.name == name) return &spec;
    }
    return nullptr;
  }

  std::string program_, summary_, epilog_, version_;
  std::vector<Spec> specs_;
  std::map<std::string, std::string> values_;
};

}  // namespace kestrel::tools
