// A tracker's summary as JSON (host/summary_json.h).
#include "kestrel/host/summary_json.h"

namespace kestrel::host {

nlohmann::json to_json(const rpc::DeviceInfo& info) {
  nlohmann::json caches = nlohmann::json::array();
  for (const auto& c : info.caches) {
    caches.push_back({{"level", c.level}, {"kind", c.kind}, {"size_bytes", c.size_bytes}, {"line_bytes", c.line_bytes}});
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : info.gpus) {
    gpus.push_back({{"backend", g.backend},
                    {"index", g.index},
                    {"name", g.name},
                    {"vendor", g.vendor},
                    {"version", g.version},
                    {"driver", g.driver},
                    {"memory_bytes", g.memory_bytes},
                    {"compute_units", g.compute_units},
                    {"max_threads_per_group", g.max_threads_per_group},
                    {"max_shared_bytes", g.max_shared_bytes},
                    {"l2_bytes", g.l2_bytes}});
  }
  return {{"name", info.name},           {"hostname", info.hostname},   {"os", info.os},
          {"arch", info.arch},           {"triple", info.triple},       {"cpu_model", info.cpu_model},
          {"cores", info.cores},         {"caches", caches},            {"memory_bytes", info.memory_bytes},
          {"cpu_features", info.cpu_features}, {"runtime_version", info.runtime_version},
          {"abi_version", info.abi_version}, {"gpus", gpus}, {"gpu_notes", info.gpu_notes}};
}

nlohmann::json to_json(const rpc::TrackerSummary& summary, const std::string& address) {
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& k : summary.keys) {
    keys.push_back({{"key", k.key}, {"free", k.free}, {"busy", k.busy}, {"queued", k.queued}});
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : summary.devices) {
    devices.push_back({{"id", d.id.value},
                       {"key", d.key},
                       {"name", d.info.name},
                       {"state", d.busy ? "busy" : "free"},
                       {"address", d.address},
                       {"connected_ms", d.connected_ms},
                       {"lease_id", d.busy ? nlohmann::json(d.lease.value) : nlohmann::json()},
                       {"lease_holder", d.busy ? nlohmann::json(d.lease_holder) : nlohmann::json()},
                       {"info", to_json(d.info)}});
  }
  return {{"tracker", address}, {"version", summary.tracker_version}, {"uptime_ms", summary.uptime_ms},
          {"clients", summary.clients}, {"keys", keys}, {"devices", devices}};
}

}  // namespace kestrel::host
