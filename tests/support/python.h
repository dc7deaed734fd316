// The Python the model tests run (scripts/make_models.py, scripts/ort_run.py through
// `kestrel run`): $KESTREL_PYTHON, $KESTREL_VENV's or the source tree's .venv
// (scripts/setup-python.sh), else python3 on the PATH. Tests that need packages skip
// (exit 77, with the reason) when they are missing, unless KESTREL_REQUIRE_PYTHON=1 (CI),
// where a missing package fails the test instead.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

namespace kestrel::test {

inline std::string python() {
  if (const char* env = std::getenv("KESTREL_PYTHON"); env && *env) return env;
  if (const char* env = std::getenv("KESTREL_VENV"); env && *env) {
    std::string python = std::string(env) + "/bin/python";
    if (std::filesystem::exists(python)) return python;
  }
  std::string venv = std::string(KESTREL_SOURCE_DIR) + "/.venv/bin/python";
  if (std::filesystem::exists(venv)) return venv;
  return "python3";
}

// Skips the test (or, under KESTREL_REQUIRE_PYTHON=1, fails it) unless python() imports
// every module of `modules` ("numpy, onnx, onnxruntime").
inline void require_python_modules(const std::string& modules) {
  const std::string py = python();
  const std::string command = "'" + py + "' -c 'import " + modules + "' > /dev/null 2>&1";
  if (std::system(command.c_str()) == 0) return;
  const char* required = std::getenv("KESTREL_REQUIRE_PYTHON");
  const bool must = required && std::string(required) == "1";
  std::cout << (must ? "failed" : "skipped") << ": " << py << " cannot import " << modules
            << " (run scripts/setup-python.sh or set KESTREL_PYTHON)\n";
  std::exit(must ? 1 : 77);
}

}  // namespace kestrel::test
