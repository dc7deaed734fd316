// Frame codec: round trips and every kind of malformed input.
#include <catch2/catch.hpp>

#include <capnp/any.h>
#include <capnp/schema.h>

#include <cstring>
#include <random>

#include "support/malformed.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/framing.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/rpc/schema_check.h"
#include "kestrel/rpc/session.h"
#include "kestrel/rpc/session_report.h"

using namespace kestrel;
using namespace kestrel::rpc;
namespace wire = kestrel::wire;

namespace {
FrameBytes sample_frame() {
  capnp::MallocMessageBuilder builder;
  auto request = builder.initRoot<wire::Frame>().initRequestDevice();
  request.setRequestId(42);
  request.setKey("rpi4");
  request.setPriority(-3);
  request.setTimeoutMs(1500);
  return encode_frame(builder);
}
using test::pointer_of;
using test::set_unterminated;

// Decodes a built frame; returns the error ("" when it decoded).
std::string decode_error(capnp::MessageBuilder& builder) {
  std::string error;
  auto frame = decode_frame_bytes(encode_frame(builder), kDefaultMaxFrameBytes, error);
  if (frame) return "";
  return error.empty() ? "(no error message)" : error;
}
}  // namespace

TEST_CASE("a frame round-trips through encode and decode", "[framing]") {
  FrameBytes bytes = sample_frame();
  REQUIRE(bytes.size() > kFrameHeaderBytes);
  std::string error;
  auto frame = decode_frame_bytes(bytes, kDefaultMaxFrameBytes, error);
  REQUIRE(frame);
  CHECK(error.empty());
  auto root = frame->root();
  REQUIRE(root.isRequestDevice());
  CHECK(root.getRequestDevice().getRequestId() == 42);
  CHECK(std::string(root.getRequestDevice().getKey().cStr()) == "rpi4");
  CHECK(root.getRequestDevice().getPriority() == -3);
  CHECK(frame_kind(root) == "requestDevice");
}

TEST_CASE("the header is the little-endian body length", "[framing]") {
  FrameBytes bytes = sample_frame();
  std::uint32_t length = bytes[0] | (bytes[1] << 8) | (bytes[2] << 16) | (static_cast<std::uint32_t>(bytes[3]) << 24);
  CHECK(length == bytes.size() - kFrameHeaderBytes);
  CHECK(length % 8 == 0);
}

TEST_CASE("oversized frames are rejected from the header alone", "[framing]") {
  std::array<std::uint8_t, 4> header = {0x00, 0x00, 0x00, 0x10};  // 256 MiB
  auto check = check_header(header, kDefaultMaxFrameBytes);
  CHECK(check.error == FrameError::oversized);
  CHECK_THAT(check.detail, Catch::Contains("exceeds"));
  // "GET " read as a length: an HTTP client hitting the port.
  std::array<std::uint8_t, 4> http = {'G', 'E', 'T', ' '};
  CHECK(check_header(http, kDefaultMaxFrameBytes).error == FrameError::oversized);
  // The limit is the receiver's choice.
  FrameBytes bytes = sample_frame();
  std::string error;
  CHECK_FALSE(decode_frame_bytes(bytes, 8, error));
  CHECK_THAT(error, Catch::Contains("exceeds the 8-byte limit"));
}

TEST_CASE("zero and unaligned lengths are malformed", "[framing]") {
  std::array<std::uint8_t, 4> zero = {0, 0, 0, 0};
  CHECK(check_header(zero, kDefaultMaxFrameBytes).error == FrameError::malformed);
  std::array<std::uint8_t, 4> odd = {13, 0, 0, 0};
  CHECK(check_header(odd, kDefaultMaxFrameBytes).error == FrameError::malformed);
  std::array<std::uint8_t, 4> good = {16, 0, 0, 0};
  CHECK(check_header(good, kDefaultMaxFrameBytes).error == FrameError::none);
}

TEST_CASE("truncated frames are rejected", "[framing]") {
  FrameBytes bytes = sample_frame();
  std::string error;
  CHECK_FALSE(decode_frame_bytes(std::span(bytes).first(2), kDefaultMaxFrameBytes, error));
  CHECK_THAT(error, Catch::Contains("truncated"));
  CHECK_FALSE(decode_frame_bytes(std::span(bytes).first(bytes.size() - 8), kDefaultMaxFrameBytes, error));
  CHECK_THAT(error, Catch::Contains("announces"));
}

TEST_CASE("random bodies never crash the decoder and are rejected or parsed", "[framing]") {
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::size_t words = 1 + rng() % 16;
    std::vector<std::uint8_t> body(words * 8);
    for (auto& b : body) b = static_cast<std::uint8_t>(rng());
    FrameBytes frame = encode_raw(body);
    std::string error;
    auto decoded = decode_frame_bytes(frame, kDefaultMaxFrameBytes, error);
    if (!decoded) {
      ++rejected;
      CHECK_FALSE(error.empty());
    } else {
      // Whatever parsed must be fully readable without throwing.
      CHECK_NOTHROW(frame_kind(decoded->root()));
    }
  }
  CHECK(rejected > 1000);
}

TEST_CASE("a corrupted pointer inside a valid segment table is rejected eagerly", "[framing]") {
  FrameBytes bytes = sample_frame();
  // Segment table: 1 segment, then its size. Point the root pointer far out of bounds.
  // Word 1 (bytes 8..15 of the message) is the root pointer.
  std::size_t root_pointer = kFrameHeaderBytes + 8;
  bytes[root_pointer + 0] = 0xfc;
  bytes[root_pointer + 1] = 0xff;
  bytes[root_pointer + 2] = 0xff;
  bytes[root_pointer + 3] = 0x0f;
  std::string error;
  CHECK_FALSE(decode_frame_bytes(bytes, kDefaultMaxFrameBytes, error));
  CHECK_THAT(error, Catch::Contains("invalid message"));
}

TEST_CASE("trailing bytes after the message are rejected", "[framing]") {
  FrameBytes bytes = sample_frame();
  std::vector<std::uint8_t> body(bytes.begin() + kFrameHeaderBytes, bytes.end());
  body.resize(body.size() + 8, 0);
  std::string error;
  CHECK_FALSE(decode_frame_bytes(encode_raw(body), kDefaultMaxFrameBytes, error));
  CHECK_THAT(error, Catch::Contains("trailing"));
}

TEST_CASE("failure frames carry code and message", "[framing]") {
  FrameBytes bytes = failure_frame(ErrorCode::device_lost, "device 'a' lost");
  std::string error;
  auto frame = decode_frame_bytes(bytes, kDefaultMaxFrameBytes, error);
  REQUIRE(frame);
  REQUIRE(frame->root().isFailure());
  RpcError e = to_error(frame->root().getFailure());
  CHECK(e.code() == ErrorCode::device_lost);
  CHECK(std::string(e.what()) == "device 'a' lost");
}

TEST_CASE("endpoints parse and reject malformed input", "[framing]") {
  CHECK(parse_endpoint("127.0.0.1:9190").port == 9190);
  CHECK(parse_endpoint("tracker.lan:80").host == "tracker.lan");
  CHECK(parse_endpoint("[::1]:9190").host == "::1");
  CHECK(parse_endpoint("[::1]:9190").to_string() == "[::1]:9190");
  CHECK_THROWS_AS(parse_endpoint("localhost"), RpcError);
  CHECK_THROWS_AS(parse_endpoint("host:0"), RpcError);
  CHECK_THROWS_AS(parse_endpoint("host:70000"), RpcError);
  CHECK_THROWS_AS(parse_endpoint("host:12ab"), RpcError);
  CHECK_THROWS_AS(parse_endpoint(":9190"), RpcError);
}

TEST_CASE("every field is checked against the schema: a wrong-typed pointer never reaches a handler",
          "[framing][schema]") {
  capnp::MallocMessageBuilder builder;
  auto frame = builder.initRoot<wire::Frame>();
  SECTION("a struct that is a text") {
    frame.initHello();
    capnp::AnyStruct::Builder(wire::Frame::Builder(frame)).getPointerSection()[0].initAs<capnp::Text>(3);
    CHECK_THAT(decode_error(builder), Catch::Contains("frame.hello") && Catch::Contains("struct"));
  }
  SECTION("a text without its NUL") {
    auto request = frame.initRequestDevice();
    set_unterminated(pointer_of(request, "key"), "rpi4");
    CHECK_THAT(decode_error(builder), Catch::Contains("frame.requestDevice.key") && Catch::Contains("NUL"));
  }
  SECTION("data that is a struct") {
    auto relay = frame.initRelay();
    pointer_of(relay, "payload").initAsAnyStruct(1, 0);
    CHECK_THAT(decode_error(builder), Catch::Contains("frame.relay.payload"));
  }
  SECTION("a list of text that holds numbers") {
    auto info = frame.initRegister().initInfo();
    pointer_of(info, "cpuFeatures").initAs<capnp::List<std::uint64_t>>(2);
    CHECK_THAT(decode_error(builder), Catch::Contains("frame.register.info.cpuFeatures"));
  }
  SECTION("a wrong-typed element deep in a list of structs") {
    auto devices = frame.initSummary().initDevices(2);
    devices[1].initInfo().initGpus(3);
    set_unterminated(pointer_of(devices[1].getInfo().getGpus()[2], "name"), "gpu");
    CHECK_THAT(decode_error(builder), Catch::Contains("frame.summary.devices[1].info.gpus[2].name"));
  }
  SECTION("an enum value the schema does not name") {
    frame.initFailure().setCode(static_cast<wire::FailureCode>(200));
    CHECK_THAT(decode_error(builder), Catch::Contains("frame.failure.code") && Catch::Contains("200"));
  }
  SECTION("a well-typed frame with every kind of field decodes") {
    auto devices = frame.initSummary().initDevices(1);
    auto info = devices[0].initInfo();
    info.setName("a");
    info.initCaches(1)[0].setKind("data");
    info.initCpuFeatures(1).set(0, "avx2");
    info.initGpus(1)[0].setName("g");
    CHECK(decode_error(builder).empty());
  }
}

TEST_CASE("a session message is checked against the schema before any handler", "[framing][schema]") {
  capnp::MallocMessageBuilder builder;
  auto upload = builder.initRoot<wire::SessionMessage>().initUploadModule();
  upload.setSeq(3);
  pointer_of(upload, "hash").initAs<capnp::List<std::uint64_t>>(4);
  Payload bytes = encode_session(builder);
  std::string error;
  CHECK_FALSE(SessionPayload::decode(bytes, error));
  CHECK_THAT(error, Catch::Contains("session.uploadModule.hash"));

  // Lists of structs are read as capnp reads them (rpc/src/schema_check.cpp walks the
  // raw layout): a list of bits is refused, an element's enum is checked, and a list of
  // words reads as structs of one data word.
  SECTION("a list of bits where a list of structs is declared") {
    capnp::MallocMessageBuilder bits;
    auto batch = bits.initRoot<wire::SessionMessage>().initMeasureBatch();
    pointer_of(batch, "args").initAs<capnp::List<bool>>(3);
    std::string why;
    CHECK_FALSE(SessionPayload::decode(encode_session(bits), why));
    CHECK_THAT(why, Catch::Contains("session.measureBatch.args") && Catch::Contains("bits"));
  }
  SECTION("an enum the schema does not name inside a list of structs") {
    capnp::MallocMessageBuilder unknown;
    auto args = unknown.initRoot<wire::SessionMessage>().initMeasureBatch().initArgs(2);
    args[1].setDtype(static_cast<wire::DataType>(7));
    std::string why;
    CHECK_FALSE(SessionPayload::decode(encode_session(unknown), why));
    CHECK_THAT(why, Catch::Contains("session.measureBatch.args[1].dtype") && Catch::Contains("7"));
  }
  SECTION("a list of 64-bit words reads as a list of structs of one word") {
    capnp::MallocMessageBuilder words;
    auto batch = words.initRoot<wire::SessionMessage>().initMeasureBatch();
    pointer_of(batch, "args").initAs<capnp::List<std::uint64_t>>(2).set(1, 5);
    std::string why;
    CHECK(SessionPayload::decode(encode_session(words), why));
    CHECK(why.empty());
  }

  capnp::MallocMessageBuilder good;
  auto batch = good.initRoot<wire::SessionMessage>().initMeasureBatch();
  batch.initCandidates(1)[0].setModuleHash("abc");
  batch.initArgs(1)[0].setElements(4);
  std::string no_error;
  CHECK(SessionPayload::decode(encode_session(good), no_error));
  CHECK(no_error.empty());
}

// check_schema walks any struct of the layout tables (rpc/src/wire_layout.inc) by its type
// id, roots or not, and refuses one the tables do not hold rather than passing it.
TEST_CASE("the schema check walks a nested struct by its type id and refuses an id the layout tables lack",
          "[framing][schema]") {
  capnp::MallocMessageBuilder builder;
  auto info = builder.initRoot<wire::DeviceInfo>();
  info.setName("board");
  info.initGpus(1)[0].setName("g");
  capnp::AnyStruct::Reader reader = info.asReader();
  CHECK(check_schema(reader, capnp::typeId<wire::DeviceInfo>(), "info").empty());
  set_unterminated(pointer_of(info.getGpus()[0], "name"), "gpu");
  CHECK_THAT(check_schema(info.asReader(), capnp::typeId<wire::DeviceInfo>(), "info"),
             Catch::Contains("info.gpus[0].name") && Catch::Contains("NUL"));
  std::string unknown = check_schema(reader, 0x1234, "mystery");
  CHECK_THAT(unknown, Catch::Contains("mystery") && Catch::Contains("no layout"));
}

TEST_CASE("a session report's result, outcome and ETA survive the frame codec; an older report reads as none",
          "[framing][session-report]") {
  using namespace std::chrono_literals;
  SessionReport report;
  report.session_id = "host:1:1";
  report.job = 2;
  report.phase = "done";
  report.trials = 64;
  report.best_gflops = 21.5;
  report.finished = true;
  report.final_gflops = 19.25;
  report.final_speedup = 1.25;
  report.final_speedup_low = 1.125;
  report.final_speedup_high = 1.375;
  report.verdict = "too noisy";
  report.outcome = "failed";
  report.eta = 90500ms;
  report.message = std::string(SessionReport::kMaxText + 40, 'x');  // cut on encoding
  capnp::MallocMessageBuilder builder;
  to_wire(report, builder.initRoot<wire::Frame>().initSessionReport());
  std::string error;
  auto frame = decode_frame_bytes(encode_frame(builder), kDefaultMaxFrameBytes, error);
  REQUIRE(frame);
  REQUIRE(frame->root().isSessionReport());
  SessionReport back = from_wire(frame->root().getSessionReport());
  CHECK(back.session_id == "host:1:1");
  CHECK(back.job == 2);
  CHECK(back.trials == 64);
  CHECK(back.best_gflops == 21.5);
  CHECK(back.finished);
  CHECK(back.final_gflops == 19.25);
  CHECK(back.final_speedup == 1.25);
  CHECK(back.final_speedup_low == 1.125);
  CHECK(back.final_speedup_high == 1.375);
  CHECK(back.verdict == "too noisy");
  CHECK(back.outcome == "failed");
  CHECK(back.eta == 90500ms);
  CHECK(back.message == std::string(SessionReport::kMaxText, 'x'));

  // A report that sets none of them (a client from before them): none, no outcome, no ETA.
  capnp::MallocMessageBuilder old;
  auto older = old.initRoot<wire::Frame>().initSessionReport();
  older.setSessionId("old:1:1");
  older.setTrials(8);
  older.setFinished(true);
  auto old_frame = decode_frame_bytes(encode_frame(old), kDefaultMaxFrameBytes, error);
  REQUIRE(old_frame);
  SessionReport plain = from_wire(old_frame->root().getSessionReport());
  CHECK(plain.finished);
  CHECK(plain.final_gflops == 0);
  CHECK(plain.final_speedup == 0);
  CHECK(plain.verdict.empty());
  CHECK(plain.outcome.empty());
  CHECK(plain.eta == 0ms);
  CHECK(plain.message.empty());
}
