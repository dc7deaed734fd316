// The measurement messages' wire encoding: round trips, and what a decoder refuses.
#include <catch2/catch.hpp>

#include <capnp/message.h>

#include <cmath>
#include <limits>

#include "kestrel/rpc/measure.h"

using namespace kestrel;
using namespace kestrel::rpc;

namespace {

BatchRequest sample_batch() {
  BatchRequest batch;
  batch.seq = 42;
  batch.args = {{1000, false}, {2000, false}, {3000, true}};
  batch.reference_hash = std::string(64, 'a');
  batch.reference_entry = "gemm_ref";
  batch.tolerance = 1e-5;
  batch.settings.number = 3;
  batch.settings.repeat = 7;
  batch.settings.min_repeat_ms = 25;
  batch.settings.cooldown_ms = 4;
  batch.settings.flush_cache = true;
  batch.settings.timeout_ms = 1234;
  batch.settings.threads = 2;
  batch.settings.seed = 99;
  batch.candidates = {{1, std::string(64, 'b'), ""}, {2, std::string(64, 'c'), "gemm_tile8"}};
  return batch;
}

// Encodes `batch`, lets `damage` change the wire form, decodes it.
template <typename Damage>
bool decode_damaged(const BatchRequest& batch, Damage damage, BatchRequest& out, std::string& error) {
  capnp::MallocMessageBuilder builder;
  auto wire = builder.initRoot<wire::MeasureBatch>();
  to_wire(batch, wire);
  damage(wire);
  return from_wire(wire.asReader(), out, error);
}

}  // namespace

TEST_CASE("a batch request survives the wire unchanged", "[measure][wire]") {
  BatchRequest batch = sample_batch();
  BatchRequest back;
  std::string error;
  REQUIRE(decode_damaged(batch, [](auto) {}, back, error));
  CHECK(error.empty());
  CHECK(back == batch);
  CHECK(back.candidates[1].entry == "gemm_tile8");
  CHECK(back.reference_entry == "gemm_ref");
}

TEST_CASE("settings from the wire are clamped to what a device runs", "[measure][wire]") {
  capnp::MallocMessageBuilder builder;
  auto wire = builder.initRoot<wire::MeasureSettings>();
  MeasureSettings settings;
  settings.repeat = 0;
  settings.timeout_ms = 0;
  to_wire(settings, wire);
  MeasureSettings back = from_wire(wire.asReader());
  CHECK(back.repeat == 1);
  CHECK(back.timeout_ms == kDefaultTimeoutMs);
  settings.repeat = 1'000'000;
  to_wire(settings, wire);
  CHECK(from_wire(wire.asReader()).repeat == kMaxRepeat);
}

TEST_CASE("malformed batch requests are refused with the reason", "[measure][wire][bad-input]") {
  BatchRequest back;
  std::string error;

  SECTION("too many arguments") {
    BatchRequest batch = sample_batch();
    batch.args.assign(65, TensorArg{10, false});
    CHECK_FALSE(decode_damaged(batch, [](auto) {}, back, error));
    CHECK(error.find("65 kernel arguments") != std::string::npos);
  }
  SECTION("an empty argument") {
    BatchRequest batch = sample_batch();
    batch.args[1].elements = 0;
    CHECK_FALSE(decode_damaged(batch, [](auto) {}, back, error));
    CHECK(error.find("argument of 0 elements is out of range") != std::string::npos);
  }
  SECTION("a negative argument") {
    BatchRequest batch = sample_batch();
    batch.args[0].elements = -5;
    CHECK_FALSE(decode_damaged(batch, [](auto) {}, back, error));
    CHECK(error.find("-5 elements") != std::string::npos);
  }
  SECTION("an argument beyond the limit") {
    BatchRequest batch = sample_batch();
    batch.args[2].elements = kMaxArgElements + 1;
    CHECK_FALSE(decode_damaged(batch, [](auto) {}, back, error));
    CHECK(error.find("out of range") != std::string::npos);
  }
  SECTION("the largest argument is accepted") {
    BatchRequest batch = sample_batch();
    batch.args[2].elements = kMaxArgElements;
    CHECK(decode_damaged(batch, [](auto) {}, back, error));
  }
  SECTION("an unknown data type") {
    CHECK_FALSE(decode_damaged(
        sample_batch(), [](wire::MeasureBatch::Builder w) { w.getArgs()[0].setDtype(static_cast<wire::DataType>(7)); },
        back, error));
    CHECK(error.find("data type 7") != std::string::npos);
  }
  SECTION("a tolerance that is not a number") {
    BatchRequest batch = sample_batch();
    batch.tolerance = std::numeric_limits<double>::quiet_NaN();
    CHECK_FALSE(decode_damaged(batch, [](auto) {}, back, error));
    CHECK(error.find("tolerance") != std::string::npos);
  }
  SECTION("a negative tolerance") {
    BatchRequest batch = sample_batch();
    batch.tolerance = -1;
    CHECK_FALSE(decode_damaged(batch, [](auto) {}, back, error));
    CHECK(error.find("tolerance -1") != std::string::npos);
  }
}

TEST_CASE("a candidate result survives the wire and the worker's byte form", "[measure][wire]") {
  CandidateResult result;
  result.id = 17;
  result.status = kernel::Status::wrong_answer;
  result.message = "element 3 of argument 2 is 1, expected 2";
  result.number = 11;
  result.round_seconds = {1e-3, 2e-3, 1.5e-3};
  result.max_error = 0.25;
  result.load_ms = 0.75;

  capnp::MallocMessageBuilder builder;
  auto wire = builder.initRoot<wire::MeasureResult>();
  to_wire(result, wire);
  CandidateResult back;
  std::string error;
  REQUIRE(from_wire(wire.asReader(), back, error));
  CHECK(back == result);

  CandidateResult from_bytes;
  REQUIRE(decode_result(encode_result(result), from_bytes, error));
  CHECK(from_bytes == result);
}

TEST_CASE("malformed results are refused with the reason", "[measure][wire][bad-input]") {
  CandidateResult back;
  std::string error;
  SECTION("an unknown status") {
    capnp::MallocMessageBuilder builder;
    auto wire = builder.initRoot<wire::MeasureResult>();
    to_wire(CandidateResult{}, wire);
    wire.setCandidateId(5);
    wire.setStatus(static_cast<wire::MeasureStatus>(200));
    CHECK_FALSE(from_wire(wire.asReader(), back, error));
    CHECK(error == "result of candidate 5 has unknown status 200");
  }
  SECTION("bytes that are not a message") {
    std::vector<std::uint8_t> bytes = encode_result(CandidateResult{});
    bytes.pop_back();
    CHECK_FALSE(decode_result(bytes, back, error));
    CHECK(error.find("not a positive multiple of 8") != std::string::npos);
    std::vector<std::uint8_t> garbage(64, 0xff);
    CHECK_FALSE(decode_result(garbage, back, error));
    CHECK(error.find("invalid result") != std::string::npos);
  }
  SECTION("nothing") {
    CHECK_FALSE(decode_result({}, back, error));
  }
}
