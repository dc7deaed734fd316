// The helper scripts' Python and shell quoting.
#include "python_tool.h"

#include <cstdlib>
#include <filesystem>

namespace kestrel::tools {

std::string find_python(const Args& args) {
  namespace fs = std::filesystem;
  if (args.has("python")) return args.get("python");
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

}  // namespace kestrel::tools
