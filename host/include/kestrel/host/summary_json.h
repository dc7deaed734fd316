// A tracker's summary as JSON: one form for `kestrel query --json` and the Python
// package's kestrel.query().
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kestrel/rpc/device_info.h"

namespace kestrel::host {

// A device's description: system, caches, CPU features, GPUs and their notes.
nlohmann::json to_json(const rpc::DeviceInfo& info);
// {"tracker": address, "version", "uptime_ms", "clients", "keys": [{key, free, busy,
// queued}], "devices": [{id, key, name, state, address, connected_ms, lease_id,
// lease_holder (null when free), info}]}.
nlohmann::json to_json(const rpc::TrackerSummary& summary, const std::string& address);

}  // namespace kestrel::host
