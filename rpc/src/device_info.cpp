// Conversions between device/summary structs and their wire form.
#include "kestrel/rpc/device_info.h"

namespace kestrel::rpc {

void to_wire(const DeviceInfo& info, wire::DeviceInfo::Builder out) {
  out.setName(info.name);
  out.setHostname(info.hostname);
  out.setOs(info.os);
  out.setArch(info.arch);
  out.setTriple(info.triple);
  out.setCpuModel(info.cpu_model);
  out.setCores(info.cores);
  auto caches = out.initCaches(static_cast<unsigned>(info.caches.size()));
  for (unsigned i = 0; i < info.caches.size(); ++i) {
    caches[i].setLevel(static_cast<std::uint8_t>(info.caches[i].level));
    caches[i].setKind(info.caches[i].kind);
    caches[i].setSizeBytes(info.caches[i].size_bytes);
    caches[i].setLineBytes(info.caches[i].line_bytes);
  }
  out.setMemoryBytes(info.memory_bytes);
  auto features = out.initCpuFeatures(static_cast<unsigned>(info.cpu_features.size()));
  for (unsigned i = 0; i < info.cpu_features.size(); ++i) features.set(i, info.cpu_features[i]);
  out.setRuntimeVersion(info.runtime_version);
  out.setAbiVersion(info.abi_version);
  auto gpus = out.initGpus(static_cast<unsigned>(info.gpus.size()));
  for (unsigned i = 0; i < info.gpus.size(); ++i) {
    const GpuInfo& g = info.gpus[i];
    gpus[i].setBackend(g.backend);
    gpus[i].setIndex(g.index);
    gpus[i].setName(g.name);
    gpus[i].setVendor(g.vendor);
    gpus[i].setVersion(g.version);
    gpus[i].setDriver(g.driver);
    gpus[i].setMemoryBytes(g.memory_bytes);
    gpus[i].setComputeUnits(g.compute_units);
    gpus[i].setMaxThreadsPerGroup(g.max_threads_per_group);
    gpus[i].setMaxSharedBytes(g.max_shared_bytes);
    gpus[i].setL2Bytes(g.l2_bytes);
  }
  auto notes = out.initGpuNotes(static_cast<unsigned>(info.gpu_notes.size()));
  for (unsigned i = 0; i < info.gpu_notes.size(); ++i) notes.set(i, info.gpu_notes[i]);
  out.setCpuPart(info.cpu_part);
}

DeviceInfo from_wire(wire::DeviceInfo::Reader in) {
  DeviceInfo info;
  info.name = in.getName().cStr();
  info.hostname = in.getHostname().cStr();
  info.os = in.getOs().cStr();
  info.arch = in.getArch().cStr();
  info.triple = in.getTriple().cStr();
  info.cpu_model = in.getCpuModel().cStr();
  info.cores = in.getCores();
  for (auto c : in.getCaches()) {
    info.caches.push_back({c.getLevel(), c.getKind().cStr(), c.getSizeBytes(), c.getLineBytes()});
  }
  info.memory_bytes = in.getMemoryBytes();
  for (auto f : in.getCpuFeatures()) info.cpu_features.emplace_back(f.cStr());
  info.runtime_version = in.getRuntimeVersion().cStr();
  info.abi_version = in.getAbiVersion();
  for (auto g : in.getGpus()) {
    info.gpus.push_back({g.getBackend().cStr(), g.getIndex(), g.getName().cStr(), g.getVendor().cStr(),
                         g.getVersion().cStr(), g.getDriver().cStr(), g.getMemoryBytes(), g.getComputeUnits(),
                         g.getMaxThreadsPerGroup(), g.getMaxSharedBytes(), g.getL2Bytes()});
  }
  for (auto n : in.getGpuNotes()) info.gpu_notes.emplace_back(n.cStr());
  info.cpu_part = in.getCpuPart().cStr();
  return info;
}

TrackerSummary from_wire(wire::Summary::Reader in) {
  TrackerSummary summary;
  summary.tracker_version = in.getTrackerVersion().cStr();
  summary.uptime_ms = in.getUptimeMs();
  summary.clients = in.getClients();
  for (auto k : in.getKeys()) summary.keys.push_back({k.getKey().cStr(), k.getFree(), k.getBusy(), k.getQueued()});
  for (auto d : in.getDevices()) {
    DeviceSummary ds;
    ds.id = DeviceId(d.getDeviceId());
    ds.key = d.getKey().cStr();
    ds.info = from_wire(d.getInfo());
    ds.address = d.getAddress().cStr();
    ds.busy = d.getBusy();
    ds.lease = LeaseId(d.getLeaseId());
    ds.lease_holder = d.getLeaseHolder().cStr();
    ds.connected_ms = d.getConnectedMs();
    summary.devices.push_back(std::move(ds));
  }
  return summary;
}

}  // namespace kestrel::rpc
