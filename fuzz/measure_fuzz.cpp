// Fuzz target: the measurement messages. Input: a relay payload (a session.capnp
// SessionMessage flat array), and the same bytes as what a worker writes on its result
// pipe (a MeasureResult flat array: a candidate kernel runs in that process).
// Guarantees checked: decoding checks never crash; a decoded session message reads as
// its schema says, within the budget its handlers get (see check_reads_fully); a batch
// or a result that passes from_wire encodes (to_wire) and decodes again to the same
// value; the worker's result decoder never throws.
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kestrel/rpc/measure.h"
#include "kestrel/rpc/session.h"
#include "kestrel/wire/session.capnp.h"
#include "support.h"

using namespace kestrel;

namespace {

// Equal, NaNs included (a device may report any double).
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same_result(const rpc::CandidateResult& a, const rpc::CandidateResult& b) {
  if (a.id != b.id || a.status != b.status || a.message != b.message || a.number != b.number ||
      a.round_seconds.size() != b.round_seconds.size() || !same_bits(a.max_error, b.max_error) ||
      !same_bits(a.load_ms, b.load_ms)) {
    return false;
  }
  for (std::size_t i = 0; i < a.round_seconds.size(); ++i) {
    if (!same_bits(a.round_seconds[i], b.round_seconds[i])) return false;
  }
  return true;
}

void check_batch(wire::MeasureBatch::Reader wire_batch) {
  rpc::BatchRequest batch;
  std::string error;
  if (!rpc::from_wire(wire_batch, batch, error)) {
    fuzz::check(!error.empty(), "a refused batch says why");
    return;
  }
  fuzz::check(batch.args.size() <= rpc::kMaxArgs && batch.candidates.size() <= rpc::kMaxCandidates,
              "a decoded batch is within the limits");
  for (const auto& arg : batch.args) {
    fuzz::check(arg.elements >= 1 && arg.elements <= rpc::kMaxArgElements, "argument sizes are checked");
  }
  capnp::MallocMessageBuilder builder;
  rpc::to_wire(batch, builder.initRoot<wire::MeasureBatch>());
  rpc::BatchRequest again;
  fuzz::check(rpc::from_wire(builder.getRoot<wire::MeasureBatch>().asReader(), again, error),
              "a decoded batch encodes to one that decodes: " + error);
  fuzz::check(again.seq == batch.seq && again.args == batch.args && again.reference_hash == batch.reference_hash &&
                  again.reference_entry == batch.reference_entry && same_bits(again.tolerance, batch.tolerance) &&
                  again.settings == batch.settings && again.candidates == batch.candidates,
              "a batch survives encoding and decoding unchanged");
}

void check_result(wire::MeasureResult::Reader wire_result) {
  rpc::CandidateResult result;
  std::string error;
  if (!rpc::from_wire(wire_result, result, error)) {
    fuzz::check(!error.empty(), "a refused result says why");
    return;
  }
  std::vector<std::uint8_t> bytes = rpc::encode_result(result);
  rpc::CandidateResult again;
  fuzz::check(rpc::decode_result(bytes, again, error), "an encoded result decodes: " + error);
  fuzz::check(same_result(result, again), "a result survives encoding and decoding unchanged");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> input(data, size);

  // As a relay payload.
  std::string error;
  auto message = rpc::SessionPayload::decode(input, error);
  if (message) {
    std::vector<capnp::word> words(input.size() / sizeof(capnp::word));
    std::memcpy(words.data(), input.data(), words.size() * sizeof(capnp::word));
    fuzz::check_reads_fully<wire::SessionMessage>(message->root(), {words.data(), words.size()}, "session message");
    // The conversions read through a reader of their own (the handler's budget was spent
    // above), with the decoders' limit: they cannot throw, except the traversal limit for
    // a message that amplifies (they read some lists twice; the device answers an error).
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * 4 + 64;
    options.nestingLimit = 32;
    capnp::FlatArrayMessageReader reader({words.data(), words.size()}, options);
    auto root = reader.getRoot<wire::SessionMessage>();
    try {
      if (root.isMeasureBatch()) check_batch(root.getMeasureBatch());
      if (root.isMeasureResult()) check_result(root.getMeasureResult());
    } catch (const kj::Exception& e) {
      if (!fuzz::is_traversal_limit(e) || !fuzz::amplifies<wire::SessionMessage>({words.data(), words.size()})) {
        fuzz::broken(std::string("from_wire threw on a decoded message: ") + e.getDescription().cStr());
      }
    }
  } else {
    fuzz::check(!error.empty(), "a refused session message says why");
  }

  // As a worker's result (the pipe from a process that ran candidate code).
  rpc::CandidateResult result;
  std::string why;
  try {
    if (rpc::decode_result(input, result, why)) {
      std::vector<std::uint8_t> bytes = rpc::encode_result(result);
      rpc::CandidateResult again;
      fuzz::check(rpc::decode_result(bytes, again, why), "a re-encoded worker result decodes: " + why);
      fuzz::check(same_result(result, again), "a worker result survives encoding and decoding unchanged");
    } else {
      fuzz::check(!why.empty(), "a refused worker result says why");
    }
  } catch (const kj::Exception& e) {
    fuzz::broken(std::string("decode_result threw: ") + e.getDescription().cStr());
  }
  return 0;
}
