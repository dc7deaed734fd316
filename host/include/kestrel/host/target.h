// Compile targets: a triple plus an optional CPU and feature string, e.g.
// aarch64-linux-gnu with -mcpu=cortex-a72 for a Raspberry Pi 4.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kestrel/rpc/device_info.h"

namespace kestrel::host {

struct Target {
  std::string triple;    // one of supported_triples()
  std::string cpu;       // -mcpu / -march value; empty: the triple's generic baseline
  std::string features;  // extra LLVM features, e.g. "+avx512f"; usually empty
  std::string to_string() const;  // "aarch64-linux-gnu" or "aarch64-linux-gnu (cortex-a72)"
};

// The CPU triples Kestrel can compile for.
const std::vector<std::string>& supported_triples();

// "native" (this host, with its CPU), or a supported triple. Throws std::invalid_argument
// with the list of supported triples for anything else.
Target parse_target(std::string_view triple, std::string_view cpu = "", std::string_view features = "");

// The target matching a device's registered capabilities (its triple; its CPU when the
// device is this very host). Throws std::invalid_argument if the device's triple is not
// supported.
Target target_for_device(const rpc::DeviceInfo& device);

}  // namespace kestrel::host
