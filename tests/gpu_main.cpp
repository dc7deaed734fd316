// Catch2 main of the GPU test executables. ctest runs each test case on its own, named
// on the command line; a test whose name starts with "opencl:" needs an OpenCL device,
// "cuda:" a CUDA GPU, "no-cuda:" a machine without one. When the machine lacks it the
// test is not run: the process says why and exits 77, which ctest reports as Skipped
// (SKIP_RETURN_CODE). What the machine has is what `kestrel-device --print-info` finds.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

namespace {

std::string device_info() {
  std::string command = std::string(KESTREL_DEVICE_BIN) + " --print-info 2>&1";
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    ::pclose(pipe);
  }
  return out;
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// The "gpu: ..." lines of --print-info, for the skip message.
std::string gpu_lines(const std::string& info) {
  std::string out;
  std::size_t at = 0;
  while ((at = info.find("gpu:", at)) != std::string::npos) {
    std::size_t end = info.find('\n', at);
    out += "  " + info.substr(at, end == std::string::npos ? std::string::npos : end - at) + "\n";
    if (end == std::string::npos) break;
    at = end;
  }
  return out.empty() ? "  (kestrel-device --print-info reported no GPU lines)\n" : out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string needs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    if (starts_with(arg, "opencl:")) needs = "opencl";
    if (starts_with(arg, "cuda:")) needs = "cuda";
    if (starts_with(arg, "no-cuda:")) needs = "no-cuda";
  }
  if (!needs.empty()) {
    const std::string info = device_info();
    const bool has_opencl = info.find("gpu:        opencl ") != std::string::npos;
    const bool has_cuda = info.find("gpu:        cuda ") != std::string::npos;
    bool run = needs == "opencl" ? has_opencl : needs == "cuda" ? has_cuda : !has_cuda;
    if (!run) {
      std::printf("skipped: this test needs %s; this machine has:\n%s",
                  needs == "opencl" ? "an OpenCL device" : needs == "cuda" ? "a CUDA GPU" : "no CUDA GPU",
                  gpu_lines(info).c_str());
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
