// What `kestrel --version` prints: the software version and the protocol version this
// build speaks (devices and trackers of another protocol version are refused).
#pragma once

#include <string>

namespace kestrel::host {

// "kestrel 0.1.0 (protocol 3)".
std::string version_text();

}  // namespace kestrel::host
