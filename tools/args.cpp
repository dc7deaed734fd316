// Args over CLI11.
#include "args.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <stdexcept>

#include "kestrel/base/suggest.h"
#include "kestrel/base/version.h"

namespace kestrel::tools {
namespace {

// CLI11's wording is capitalised and names the option set; ours is lower-case and short.
std::string lower_first(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

}  // namespace

Args::Args(std::string program, std::string summary) : program_(std::move(program)), app_(std::make_unique<CLI::App>()) {
  app_->name(program_);
  app_->description(std::move(summary));
  app_->set_help_flag("-h,--help", "show this help and exit");
  app_->set_version_flag("--version", std::string(software_version()), "print the version and exit");
  app_->get_formatter()->column_width(30);
  app_->get_formatter()->label("REQUIRED", "required");
}

Args::~Args() = default;

std::string Args::long_name(const std::string& name) {
  auto comma = name.find(',');
  return comma == std::string::npos ? name : name.substr(comma + 1);
}

void Args::option(const std::string& name, const std::string& value_name, const std::string& help,
                  const std::string& fallback) {
  const std::string key = long_name(name);
  std::string flags = name.find(',') == std::string::npos ? "--" + name : "-" + name.substr(0, name.find(',')) + ",--" + key;
  std::string text = help;
  if (!fallback.empty()) text += " (default: " + fallback + ")";
  try {
    app_->add_option_function<std::string>(flags, [this, key](const std::string& value) { values_[key] = value; }, text)
        ->type_name(value_name)
        ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  } catch (const CLI::OptionAlreadyAdded& e) {
    throw std::logic_error(program_ + ": option --" + key + " declared twice");
  }
  names_.push_back(key);
}

void Args::flag(const std::string& name, const std::string& help) {
  const std::string key = long_name(name);
  std::string flags = name.find(',') == std::string::npos ? "--" + name : "-" + name.substr(0, name.find(',')) + ",--" + key;
  try {
    app_->add_flag_callback(flags, [this, key] { values_[key] = "1"; }, help)
        ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  } catch (const CLI::OptionAlreadyAdded& e) {
    throw std::logic_error(program_ + ": option --" + key + " declared twice");
  }
  names_.push_back(key);
}

void Args::multi_option(const std::string& name, const std::string& value_name, const std::string& help) {
  const std::string key = long_name(name);
  std::string flags = name.find(',') == std::string::npos ? "--" + name : "-" + name.substr(0, name.find(',')) + ",--" + key;
  try {
    app_->add_option_function<std::vector<std::string>>(
            flags,
            [this, key](const std::vector<std::string>& values) {
              lists_[key] = values;
              if (!values.empty()) values_[key] = values.back();
            },
            help + " (may be given more than once)")
        ->type_name(value_name)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  } catch (const CLI::OptionAlreadyAdded& e) {
    throw std::logic_error(program_ + ": option --" + key + " declared twice");
  }
  names_.push_back(key);
}

void Args::positional(const std::string& name, const std::string& help) {
  try {
    app_->add_option_function<std::string>(name, [this, name](const std::string& value) { values_[name] = value; },
                                           help)
        ->type_name("");
  } catch (const CLI::OptionAlreadyAdded& e) {
    throw std::logic_error(program_ + ": argument " + name + " declared twice");
  }
}

void Args::epilog(std::string text) { app_->footer("\n" + text); }

bool Args::parse(int argc, char** argv, int first) {
  std::vector<std::string> arguments;
  for (int i = argc - 1; i >= first; --i) arguments.emplace_back(argv[i]);  // CLI11 takes them reversed
  try {
    app_->parse(arguments);
  } catch (const CLI::CallForHelp&) {
    output_ = app_->help();
    return false;
  } catch (const CLI::CallForVersion&) {
    output_ = program_ + " " + std::string(software_version()) + "\n";
    return false;
  } catch (const CLI::ExtrasError&) {
    // The first argument CLI11 did not expect: an unknown option, or a stray word.
    std::vector<std::string> extras = app_->remaining();
    std::string word = extras.empty() ? std::string() : extras.front();
    if (word.rfind("--", 0) == 0) {
      std::string name = word.substr(2, word.find('=') == std::string::npos ? std::string::npos : word.find('=') - 2);
      std::vector<std::string> known;
      for (const std::string& n : names_) known.push_back("--" + n);
      throw UsageError("unknown option '--" + name + "'" + did_you_mean("--" + name, known));
    }
    if (word.rfind('-', 0) == 0) throw UsageError("unknown option '" + word + "'");
    throw UsageError("unexpected argument '" + word + "'");
  } catch (const CLI::ArgumentMismatch& e) {
    // "--trials: At Most 1 required but received 2": an option given twice.
    std::string what = e.what();
    std::string option = what.substr(0, what.find(':'));
    if (what.find("At Most 1") != std::string::npos) throw UsageError("option '" + option + "' given twice");
    throw UsageError(lower_first(what));
  } catch (const CLI::ParseError& e) {
    throw UsageError(lower_first(e.what()));
  }
  return true;
}

bool Args::has(const std::string& name) const { return values_.contains(name); }

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = lists_.find(name);
  return it == lists_.end() ? std::vector<std::string>{} : it->second;
}

std::int64_t Args::get_int(const std::string& name, std::int64_t fallback, std::int64_t min, std::int64_t max) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : parse_int_option(name, it->second, min, max);
}

std::string Args::help() const { return output_.empty() ? app_->help() : output_; }

std::string unknown_action(const std::string& word, const std::vector<std::string>& actions) {
  std::string list;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == actions.size() ? " and " : ", ") + actions[i];
  }
  return "unknown action '" + word + "'" + did_you_mean(word, actions) + "; the actions are " + list;
}

}  // namespace kestrel::tools
