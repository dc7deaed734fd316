// The helper scripts' Python and shell quoting (see python_tool.h).
#include "kestrel/deploy/python_tool.h"

#include <cstdlib>
#include <filesystem>

namespace kestrel::deploy {

std::string find_python(const std::optional<std::string>& given) {
  namespace fs = std::filesystem;
  if (given) return *given;
  if (const char* env = std::getenv("KESTREL_PYTHON"); env && *env) return env;
  if (const char* env = std::getenv("KESTREL_VENV"); env && *env) {
    fs::path python = fs::path(env) / "bin" / "python";
    if (fs::exists(python)) return python.string();
  }
  fs::path venv = fs::path(KESTREL_SOURCE_DIR) / ".venv" / "bin" / "python";
  if (fs::exists(venv)) return venv.string();
  return "python3";
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace kestrel::deploy
