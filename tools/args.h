// The command-line parser of the `kestrel` subcommands: a thin layer over CLI11 that
// each command declares its options with. CLI11 parses (long and short options,
// "--x=v", repeated-option and duplicate-declaration checks, --help, --version); this
// layer adds values by name, integer ranges, and "did you mean" for mistyped options.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "usage.h"

namespace CLI {
class App;
}

namespace kestrel::tools {

class Args {
 public:
  Args(std::string program, std::string summary);
  ~Args();
  Args(const Args&) = delete;
  Args& operator=(const Args&) = delete;

  // Declares an option taking a value. `name` is the long name ("trials"), optionally
  // preceded by a one-letter short name ("n,trials"). `fallback` is shown in help when
  // non-empty. Declaring a name twice is a bug (std::logic_error).
  void option(const std::string& name, const std::string& value_name, const std::string& help,
              const std::string& fallback = "");
  void flag(const std::string& name, const std::string& help);
  // An option that may be given several times ("--db a.db --db b.db"); get_all() gives
  // its values in order, get() the last one.
  void multi_option(const std::string& name, const std::string& value_name, const std::string& help);
  // A positional argument (a word that is not an option), by its name; optional unless
  // the command checks has().
  void positional(const std::string& name, const std::string& help);
  void epilog(std::string text);

  // Parses argv[first..]; returns false if --help or --version was given (the text to
  // print is then in `help()`). Throws UsageError on unknown options (naming the closest
  // declared one), missing values, or an option given twice.
  bool parse(int argc, char** argv, int first);

  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  std::int64_t get_int(const std::string& name, std::int64_t fallback, std::int64_t min, std::int64_t max) const;

  // The help text (or the version line after --version).
  std::string help() const;

 private:
  static std::string long_name(const std::string& name);

  std::string program_;
  std::unique_ptr<CLI::App> app_;
  std::map<std::string, std::string> values_;  // long name -> value ("1" for flags)
  std::map<std::string, std::vector<std::string>> lists_;  // multi_option values
  std::vector<std::string> names_;             // declared long names
  std::string output_;                         // what --help / --version print
};


// Commands made of actions ("kestrel records export", "kestrel cost-model train"): the
// message for a word that is none of `actions`, naming the closest one and listing
// them all, e.g. "unknown action 'exprot' (did you mean 'export'?); the actions are
// export, import and migrate".
std::string unknown_action(const std::string& word, const std::vector<std::string>& actions);

}  // namespace kestrel::tools
