// The measurement messages as C++ types: how to measure (MeasureSettings), what to
// measure (BatchRequest: the arguments, the reference module and the candidates), and
// how each candidate ended (CandidateResult). One definition shared by the host (which
// sends requests and reads results) and the device runtime (which does the opposite);
// session.capnp is their only wire encoding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kestrel/kernel/machine_state.h"
#include "kestrel/kernel/status.h"
#include "kestrel/wire/session.capnp.h"

namespace kestrel::rpc {

// How each candidate is timed: one untimed warm-up (checked against the reference), then
// `repeat` rounds of `number` calls; `number` 0 grows until a round lasts min_repeat_ms.
struct MeasureSettings {
  std::uint32_t number = 0;
  std::uint32_t repeat = 5;
  std::uint32_t min_repeat_ms = 100;
  std::uint32_t cooldown_ms = 0;      // pause between rounds
  bool flush_cache = false;           // overwrite the caches before each round
  std::uint32_t timeout_ms = 10'000;  // per candidate on the device, warm-up and check included
  std::uint32_t threads = 0;          // threads a CPU kernel may use; 0: all cores
  std::uint64_t seed = 1;             // input data seed

  friend bool operator==(const MeasureSettings&, const MeasureSettings&) = default;
};

// One f32 kernel argument of `elements` elements.
struct TensorArg {
  std::int64_t elements = 0;
  bool is_output = false;

  friend bool operator==(const TensorArg&, const TensorArg&) = default;
};

struct CandidateRequest {
  std::uint64_t id = 0;
  std::string module_hash;  // a module already uploaded to the device
  std::string entry;        // the kernel's entry symbol; empty: the module's only kernel

  friend bool operator==(const CandidateRequest&, const CandidateRequest&) = default;
};

struct BatchRequest {
  std::uint64_t seq = 0;
  std::vector<TensorArg> args;
  std::string reference_hash;  // empty: no correctness check
  std::string reference_entry;
  double tolerance = 1e-4;     // |out - ref| <= tolerance * (1 + |ref|)
  MeasureSettings settings;
  std::vector<CandidateRequest> candidates;

  friend bool operator==(const BatchRequest&, const BatchRequest&) = default;
};

struct CandidateResult {
  std::uint64_t id = 0;
  kernel::Status status = kernel::Status::ok;
  std::string message;
  std::uint32_t number = 0;           // calls per timed round
  std::vector<double> round_seconds;  // per-call seconds of every round
  double max_error = 0;               // largest |out - ref| seen
  double load_ms = 0;
  kernel::MachineState machine;       // set by the device runtime, not the worker

  friend bool operator==(const CandidateResult&, const CandidateResult&) = default;
};

// ---- wire encoding (measure.cpp) --------------------------------------------------
// Encoders write every field; decoders check what a peer could get wrong and return
// false with a one-line reason in `error` (the output is then unspecified).

// Limits a device accepts in a batch.
inline constexpr std::size_t kMaxArgs = 64;
inline constexpr std::int64_t kMaxArgElements = std::int64_t(1) << 34;
inline constexpr std::size_t kMaxCandidates = 100'000;
inline constexpr std::uint32_t kMaxRepeat = 10'000;
inline constexpr std::uint32_t kDefaultTimeoutMs = 10'000;

void to_wire(const MeasureSettings& settings, wire::MeasureSettings::Builder out);
// Never fails: repeat is clamped to [1, kMaxRepeat], a timeout of 0 means kDefaultTimeoutMs.
MeasureSettings from_wire(wire::MeasureSettings::Reader in);

void to_wire(const BatchRequest& batch, wire::MeasureBatch::Builder out);
// Refuses an argument count above kMaxArgs, element counts outside (0, kMaxArgElements],
// a data type other than f32, a negative or non-finite tolerance and more than
// kMaxCandidates candidates.
bool from_wire(wire::MeasureBatch::Reader in, BatchRequest& out, std::string& error);

// The batch's seq is not part of a result: set it on `out` beside this.
void to_wire(const CandidateResult& result, wire::MeasureResult::Builder out);
// Refuses an unknown status.
bool from_wire(wire::MeasureResult::Reader in, CandidateResult& out, std::string& error);

// A result as a standalone message (a MeasureResult root with seq 0): how the device's
// sandboxed worker hands results to the runtime.
std::vector<std::uint8_t> encode_result(const CandidateResult& result);
bool decode_result(std::span<const std::uint8_t> bytes, CandidateResult& out, std::string& error);

}  // namespace kestrel::rpc
