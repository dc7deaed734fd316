// The measurement messages' one wire encoding (session.capnp) and its checks.
#include "kestrel/rpc/measure.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kestrel/base/str.h"

namespace kestrel::rpc {

void to_wire(const MeasureSettings& s, wire::MeasureSettings::Builder out) {
  out.setNumber(s.number);
  out.setRepeat(s.repeat);
  out.setMinRepeatMs(s.min_repeat_ms);
  out.setCooldownMs(s.cooldown_ms);
  out.setFlushCache(s.flush_cache);
  out.setTimeoutMs(s.timeout_ms);
  out.setThreads(s.threads);
  out.setSeed(s.seed);
}

MeasureSettings from_wire(wire::MeasureSettings::Reader in) {
  MeasureSettings s;
  s.number = in.getNumber();
  s.repeat = std::clamp<std::uint32_t>(in.getRepeat(), 1, kMaxRepeat);
  s.min_repeat_ms = in.getMinRepeatMs();
  s.cooldown_ms = in.getCooldownMs();
  s.flush_cache = in.getFlushCache();
  s.timeout_ms = in.getTimeoutMs() ? in.getTimeoutMs() : kDefaultTimeoutMs;
  s.threads = in.getThreads();
  s.seed = in.getSeed();
  return s;
}

void to_wire(const BatchRequest& batch, wire::MeasureBatch::Builder out) {
  out.setSeq(batch.seq);
  auto args = out.initArgs(static_cast<unsigned>(batch.args.size()));
  for (unsigned i = 0; i < batch.args.size(); ++i) {
    args[i].setElements(batch.args[i].elements);
    args[i].setDtype(wire::DataType::F32);
    args[i].setIsOutput(batch.args[i].is_output);
  }
  out.setReferenceHash(batch.reference_hash);
  out.setReferenceEntry(batch.reference_entry);
  out.setTolerance(batch.tolerance);
  to_wire(batch.settings, out.initSettings());
  auto candidates = out.initCandidates(static_cast<unsigned>(batch.candidates.size()));
  for (unsigned i = 0; i < batch.candidates.size(); ++i) {
    candidates[i].setId(batch.candidates[i].id);
    candidates[i].setModuleHash(batch.candidates[i].module_hash);
    candidates[i].setEntry(batch.candidates[i].entry);
  }
}

bool from_wire(wire::MeasureBatch::Reader in, BatchRequest& out, std::string& error) {
  out = BatchRequest{};
  out.seq = in.getSeq();
  if (in.getArgs().size() > kMaxArgs) {
    error = str("batch has ", in.getArgs().size(), " kernel arguments; at most ", kMaxArgs, " are supported");
    return false;
  }
  for (auto arg : in.getArgs()) {
    if (arg.getElements() <= 0 || arg.getElements() > kMaxArgElements) {
      error = str("argument of ", arg.getElements(), " elements is out of range (1 to ", kMaxArgElements, ")");
      return false;
    }
    if (arg.getDtype() != wire::DataType::F32) {
      error = str("argument data type ", static_cast<unsigned>(arg.getDtype()), " is not supported (only f32)");
      return false;
    }
    out.args.push_back({arg.getElements(), arg.getIsOutput()});
  }
  out.reference_hash = in.getReferenceHash();
  out.reference_entry = in.getReferenceEntry();
  out.tolerance = in.getTolerance();
  if (!std::isfinite(out.tolerance) || out.tolerance < 0) {
    // snprintf, not str(): formatting a double with std::to_chars pulls its tables
    // (~100 KB) into kestrel-device, whose size ships to every board.
    char text[64];
    std::snprintf(text, sizeof text, "%g", out.tolerance);
    error = str("tolerance ", text, " is not a finite non-negative number");
    return false;
  }
  out.settings = from_wire(in.getSettings());
  if (in.getCandidates().size() > kMaxCandidates) {
    error = str("batch has ", in.getCandidates().size(), " candidates; at most ", kMaxCandidates, " are supported");
    return false;
  }
  for (auto c : in.getCandidates()) out.candidates.push_back({c.getId(), c.getModuleHash(), c.getEntry()});
  return true;
}

void to_wire(const CandidateResult& r, wire::MeasureResult::Builder out) {
  out.setCandidateId(r.id);
  out.setStatus(static_cast<wire::MeasureStatus>(r.status));
  out.setMessage(r.message);
  out.setNumber(r.number);
  auto rounds = out.initRoundSeconds(static_cast<unsigned>(r.round_seconds.size()));
  for (unsigned i = 0; i < r.round_seconds.size(); ++i) rounds.set(i, r.round_seconds[i]);
  out.setMaxError(r.max_error);
  out.setLoadMs(r.load_ms);
  auto machine = out.initMachine();
  machine.setLoad1(r.machine.load1);
  machine.setCpuMhz(r.machine.cpu_mhz);
  machine.setTemperatureC(r.machine.temperature_c);
  machine.setThrottled(r.machine.throttled);
  machine.setBusyCpus(r.machine.busy_cpus);
}

bool from_wire(wire::MeasureResult::Reader in, CandidateResult& out, std::string& error) {
  out = CandidateResult{};
  out.id = in.getCandidateId();
  auto status = static_cast<unsigned>(in.getStatus());
  if (status > static_cast<unsigned>(kernel::Status::last)) {
    error = str("result of candidate ", out.id, " has unknown status ", status);
    return false;
  }
  out.status = static_cast<kernel::Status>(status);
  out.message = in.getMessage();
  out.number = in.getNumber();
  for (double s : in.getRoundSeconds()) out.round_seconds.push_back(s);
  out.max_error = in.getMaxError();
  out.load_ms = in.getLoadMs();
  if (in.hasMachine()) {
    auto machine = in.getMachine();
    out.machine.load1 = machine.getLoad1();
    out.machine.cpu_mhz = machine.getCpuMhz();
    out.machine.temperature_c = machine.getTemperatureC();
    out.machine.throttled = machine.getThrottled();
    out.machine.busy_cpus = machine.getBusyCpus();
  }
  return true;
}

std::vector<std::uint8_t> encode_result(const CandidateResult& result) {
  capnp::MallocMessageBuilder builder;
  to_wire(result, builder.initRoot<wire::MeasureResult>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  return {bytes.begin(), bytes.end()};
}

bool decode_result(std::span<const std::uint8_t> bytes, CandidateResult& out, std::string& error) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    error = str("result of ", bytes.size(), " bytes is not a positive multiple of 8");
    return false;
  }
  std::vector<capnp::word> words(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.data(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * 4 + 64;
    capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(words.data(), words.size()), options);
    return from_wire(reader.getRoot<wire::MeasureResult>(), out, error);
  } catch (const kj::Exception& e) {
    error = str("invalid result: ", e.getDescription().cStr());
    return false;
  }
}

}  // namespace kestrel::rpc
