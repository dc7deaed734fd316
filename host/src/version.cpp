// The version line of the host tool.
#include "kestrel/host/version.h"

#include "kestrel/base/str.h"
#include "kestrel/base/version.h"
#include "kestrel/rpc/handshake.h"

namespace kestrel::host {

std::string version_text() {
  return str("kestrel ", software_version(), " (protocol ", rpc::protocol_version(), ")");
}

}  // namespace kestrel::host
