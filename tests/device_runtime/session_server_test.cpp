// The device's session handling over an in-memory pipe: encoded session messages in,
// the replies the server sends collected in a queue (no tracker, no sockets).
#include <catch2/catch.hpp>

#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "kestrel/base/log.h"
#include "kestrel/device_runtime/session_server.h"
#include "kestrel/rpc/measure.h"
#include "support/async.h"
#include "support/fixtures.h"

using namespace kestrel;
using namespace kestrel::device;
using namespace std::chrono_literals;

namespace {

std::vector<std::uint8_t> fixture(const std::string& name) { return test::read_fixture(name); }

// Modules go by the SHA-256 of their bytes: 'a' add_ref, 'b' add, 'c' segfault, 'e' hang;
// any other letter a hash no fixture has.
std::string hash_of(char c) {
  static const std::map<char, std::string> fixtures = {{'a', "add_ref"}, {'b', "add"}, {'c', "segfault"}, {'e', "hang"}};
  auto it = fixtures.find(c);
  return it == fixtures.end() ? test::hash_of(c) : ModuleStore::content_hash(fixture(it->second));
}

// The holder's end of the pipe: what it sent and what came back, per lease.
struct Pipe {
  asio::io_context io;
  std::deque<std::pair<LeaseId, rpc::Payload>> replies;
  rpc::DeviceInfo info;
  std::unique_ptr<SessionServer> server;

  Pipe() {
    info.name = "pipe-device";
    info.triple = "x86_64-linux-gnu";
    info.cores = 2;
    server = std::make_unique<SessionServer>(io.get_executor(), info, [this](LeaseId lease, const rpc::Payload& p) {
      replies.emplace_back(lease, p);
    });
  }

  void send(LeaseId lease, capnp::MallocMessageBuilder& message) { server->handle(lease, rpc::encode_session(message)); }

  // The next reply (it must be there), decoded.
  std::unique_ptr<rpc::SessionPayload> take(LeaseId expected_lease = LeaseId(1)) {
    REQUIRE_FALSE(replies.empty());
    auto [lease, bytes] = std::move(replies.front());
    replies.pop_front();
    CHECK(lease == expected_lease);
    std::string error;
    auto message = rpc::SessionPayload::decode(bytes, error);
    REQUIRE(message);
    return message;
  }

  void upload(LeaseId lease, const std::string& hash, const std::vector<std::uint8_t>& image, std::uint64_t seq) {
    capnp::MallocMessageBuilder builder;
    auto up = builder.initRoot<wire::SessionMessage>().initUploadModule();
    up.setSeq(seq);
    up.setHash(hash);
    up.setImage(capnp::Data::Reader(image.data(), image.size()));
    send(lease, builder);
    auto reply = take(lease);
    REQUIRE(reply->root().isModuleStored());
    CHECK(reply->root().getModuleStored().getSeq() == seq);
  }

  void measure(LeaseId lease, const rpc::BatchRequest& batch) {
    capnp::MallocMessageBuilder builder;
    rpc::to_wire(batch, builder.initRoot<wire::SessionMessage>().initMeasureBatch());
    send(lease, builder);
  }

  // Runs the io_context until `count` batches are done (or 60 s pass).
  void await_batches(std::size_t count) {
    auto done = [&] {
      std::size_t n = 0;
      for (const auto& [lease, bytes] : replies) {
        std::string error;
        auto message = rpc::SessionPayload::decode(bytes, error);
        if (message && message->root().isBatchDone()) ++n;
      }
      return n >= count;
    };
    test::run_async(io, [&]() -> rpc::awaitable<void> {
      bool arrived = co_await test::eventually(done, 60s);
      REQUIRE(arrived);
    });
  }
};

rpc::BatchRequest add_batch(std::uint64_t seq, std::int64_t n = 4096) {
  rpc::BatchRequest batch = test::add_batch_request(n, hash_of('a'));
  batch.seq = seq;
  return batch;
}

}  // namespace

TEST_CASE("session server answers ping and info", "[session]") {
  log::set_level(log::Level::warn);
  Pipe pipe;
  {
    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::SessionMessage>().initPing().setSeq(7);
    pipe.send(LeaseId(1), builder);
    auto reply = pipe.take();
    REQUIRE(reply->root().isPong());
    CHECK(reply->root().getPong().getSeq() == 7);
  }
  {
    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::SessionMessage>().initInfoRequest().setSeq(8);
    pipe.send(LeaseId(1), builder);
    auto reply = pipe.take();
    REQUIRE(reply->root().isInfo());
    CHECK(reply->root().getInfo().getSeq() == 8);
    rpc::DeviceInfo info = rpc::from_wire(reply->root().getInfo().getInfo());
    CHECK(info.name == "pipe-device");
    CHECK(info.cores == 2);
  }
  CHECK(pipe.replies.empty());
}

TEST_CASE("session server reports modules once uploaded and refuses bad ones", "[session][module]") {
  log::set_level(log::Level::warn);
  Pipe pipe;
  auto query = [&](std::uint64_t seq) {
    capnp::MallocMessageBuilder builder;
    auto q = builder.initRoot<wire::SessionMessage>().initQueryModules();
    q.setSeq(seq);
    auto hashes = q.initHashes(2);
    hashes.set(0, hash_of('a'));
    hashes.set(1, hash_of('b'));
    pipe.send(LeaseId(1), builder);
    auto reply = pipe.take();
    REQUIRE(reply->root().isModulesPresent());
    CHECK(reply->root().getModulesPresent().getSeq() == seq);
    std::vector<bool> present;
    for (bool p : reply->root().getModulesPresent().getPresent()) present.push_back(p);
    return present;
  };
  CHECK(query(1) == std::vector<bool>{false, false});
  pipe.upload(LeaseId(1), hash_of('b'), fixture("add"), 2);
  CHECK(query(3) == std::vector<bool>{false, true});

  // Modules belong to the lease that uploaded them: another lease does not see them, and
  // they are gone when the lease ends.
  auto query_in = [&](LeaseId lease, std::uint64_t seq) {
    capnp::MallocMessageBuilder builder;
    auto q = builder.initRoot<wire::SessionMessage>().initQueryModules();
    q.setSeq(seq);
    q.initHashes(1).set(0, hash_of('b'));
    pipe.send(lease, builder);
    auto reply = pipe.take(lease);
    REQUIRE(reply->root().isModulesPresent());
    return bool(reply->root().getModulesPresent().getPresent()[0]);
  };
  CHECK_FALSE(query_in(LeaseId(2), 4));
  CHECK(query_in(LeaseId(1), 4));
  pipe.server->end_lease(LeaseId(1));
  CHECK_FALSE(query_in(LeaseId(1), 4));
  pipe.upload(LeaseId(1), hash_of('b'), fixture("add"), 2);

  // An image under a hash that is not its own is refused.
  {
    capnp::MallocMessageBuilder wrong;
    auto up = wrong.initRoot<wire::SessionMessage>().initUploadModule();
    up.setSeq(6);
    up.setHash(hash_of('a'));
    std::vector<std::uint8_t> image = fixture("segfault");
    up.setImage(capnp::Data::Reader(image.data(), image.size()));
    pipe.send(LeaseId(1), wrong);
    auto refused = pipe.take();
    REQUIRE(refused->root().isError());
    CHECK(refused->root().getError().getSeq() == 6);
    CHECK_THAT(std::string(refused->root().getError().getMessage().cStr()), Catch::Contains("not the SHA-256"));
    CHECK(query(7) == std::vector<bool>{false, true});
  }

  // A malformed hash is refused with an error carrying the upload's seq.
  capnp::MallocMessageBuilder bad;
  auto up = bad.initRoot<wire::SessionMessage>().initUploadModule();
  up.setSeq(5);
  up.setHash("not-a-hash");
  std::vector<std::uint8_t> image = fixture("add");
  up.setImage(capnp::Data::Reader(image.data(), image.size()));
  pipe.send(LeaseId(1), bad);
  auto refused = pipe.take();
  REQUIRE(refused->root().isError());
  CHECK(refused->root().getError().getSeq() == 5);
  CHECK_FALSE(std::string(refused->root().getError().getMessage().cStr()).empty());
}

TEST_CASE("session server answers a module query of 1,000 hashes once a lease holds modules", "[session][module]") {
  // A full batch asks about its candidates' modules at once; 13 or more used to exceed the
  // message's traversal budget once the lease held any module (a handler reading the list
  // element by element), and the error carried no sequence number.
  log::set_level(log::Level::warn);
  Pipe pipe;
  pipe.upload(LeaseId(1), hash_of('a'), fixture("add_ref"), 1);
  for (unsigned n : {13u, 64u, 1000u}) {
    capnp::MallocMessageBuilder builder;
    auto query = builder.initRoot<wire::SessionMessage>().initQueryModules();
    query.setSeq(100 + n);
    auto hashes = query.initHashes(n);
    for (unsigned i = 0; i < n; ++i) hashes.set(i, i == 0 ? hash_of('a') : test::hash_of(static_cast<char>('f' + i % 16)));
    pipe.send(LeaseId(1), builder);
    auto reply = pipe.take();
    INFO(n << " hashes");
    REQUIRE(reply->root().isModulesPresent());
    CHECK(reply->root().getModulesPresent().getSeq() == 100 + n);
    auto present = reply->root().getModulesPresent().getPresent();
    REQUIRE(present.size() == n);
    CHECK(present[0]);
    CHECK_FALSE(present[n - 1]);
  }
}

TEST_CASE("session server measures a batch and streams its results", "[session][measure]") {
  log::set_level(log::Level::warn);
  Pipe pipe;
  pipe.upload(LeaseId(1), hash_of('a'), fixture("add_ref"), 1);
  pipe.upload(LeaseId(1), hash_of('b'), fixture("add"), 2);
  pipe.upload(LeaseId(1), hash_of('c'), fixture("segfault"), 3);

  rpc::BatchRequest first = add_batch(10);
  first.candidates = {{1, hash_of('b'), ""}, {2, hash_of('c'), ""}, {3, hash_of('d'), ""}};
  rpc::BatchRequest second = add_batch(11);
  second.candidates = {{4, hash_of('b'), ""}, {5, hash_of('b'), "kestrel_kernel"}, {6, hash_of('b'), "gemm_tile8"}};
  pipe.measure(LeaseId(1), first);
  pipe.measure(LeaseId(1), second);  // queued behind the first
  CHECK(pipe.server->pending_batches() == 2);
  pipe.await_batches(2);  // 3 results + done, 3 results + done, with progress between

  std::vector<rpc::CandidateResult> results;
  for (std::uint64_t seq : {10, 11}) {
    std::set<std::uint64_t> announced;  // candidates announced as started
    while (true) {
      auto reply = pipe.take();
      auto root = reply->root();
      if (root.isBatchProgress()) {
        // Each step is announced with the limit the device enforces on it.
        auto progress = root.getBatchProgress();
        CHECK(progress.getSeq() == seq);
        if (progress.getStarted()) {
          announced.insert(progress.getCandidateId());
          CHECK(progress.getLimitMs() == first.settings.timeout_ms);
        } else {
          CHECK(progress.getLimitMs() > first.settings.timeout_ms);  // preparing gets the setup allowance
        }
        continue;
      }
      if (root.isMeasureResult() && root.getMeasureResult().getStatus() == wire::MeasureStatus::OK) {
        CHECK(announced.contains(root.getMeasureResult().getCandidateId()));
      }
      if (root.isBatchDone()) {
        CHECK(root.getBatchDone().getSeq() == seq);
        CHECK(std::string(root.getBatchDone().getMessage().cStr()).empty());
        break;
      }
      REQUIRE(root.isMeasureResult());
      CHECK(root.getMeasureResult().getSeq() == seq);
      rpc::CandidateResult r;
      std::string error;
      REQUIRE(rpc::from_wire(root.getMeasureResult(), r, error));
      results.push_back(r);
    }
  }
  REQUIRE(results.size() == 6);
  CHECK(results[0].id == 1);
  CHECK(results[0].status == kernel::Status::ok);
  CHECK(results[0].round_seconds.size() == 2);
  CHECK(results[0].number > 0);
  // The runtime attaches the machine's state to every result (Linux: the load at least).
  CHECK(results[0].machine.load1 >= 0);
  CHECK(results[0].machine.known());
  CHECK(results[1].id == 2);
  CHECK(results[1].status == kernel::Status::runtime_error);
  CHECK(results[1].message.find("SIGSEGV") != std::string::npos);
  CHECK(results[2].id == 3);
  CHECK(results[2].status == kernel::Status::device_load_error);
  CHECK(results[2].message.find("not on this device") != std::string::npos);
  CHECK(results[3].id == 4);
  CHECK(results[3].status == kernel::Status::ok);
  // A named entry reaches the worker, which looks that symbol up.
  CHECK(results[4].id == 5);
  CHECK(results[4].status == kernel::Status::ok);
  CHECK(results[5].id == 6);
  CHECK(results[5].status == kernel::Status::device_load_error);
  CHECK(results[5].message == "module " + hash_of('b').substr(0, 12) + " does not export the kernel 'gemm_tile8'");
  CHECK(pipe.server->pending_batches() == 0);
}

TEST_CASE("session server answers bad messages with an error", "[session][bad-input]") {
  log::set_level(log::Level::error);
  Pipe pipe;
  auto error_of = [&](std::uint64_t seq) {
    auto reply = pipe.take();
    REQUIRE(reply->root().isError());
    CHECK(reply->root().getError().getSeq() == seq);
    return std::string(reply->root().getError().getMessage().cStr());
  };

  SECTION("bytes that are not a session message") {
    std::vector<std::uint8_t> garbage(13, 0x5a);
    pipe.server->handle(LeaseId(1), garbage);
    CHECK(error_of(0).find("bad session message") != std::string::npos);
    std::vector<std::uint8_t> words(64, 0xff);
    pipe.server->handle(LeaseId(1), words);
    CHECK(error_of(0).find("bad session message") != std::string::npos);
  }
  SECTION("a message kind only a holder receives") {
    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::SessionMessage>().initBatchDone().setSeq(3);
    pipe.send(LeaseId(1), builder);
    CHECK(error_of(0).find("not supported by this runtime") != std::string::npos);
  }
  SECTION("a batch with too many arguments") {
    rpc::BatchRequest batch = add_batch(20);
    batch.reference_hash.clear();
    batch.args.assign(65, rpc::TensorArg{16, false});
    batch.candidates = {{1, hash_of('b'), ""}};
    pipe.measure(LeaseId(1), batch);
    CHECK(error_of(20).find("65 kernel arguments") != std::string::npos);
    CHECK(pipe.server->pending_batches() == 0);
  }
  SECTION("a batch whose reference is not on the device") {
    rpc::BatchRequest batch = add_batch(21);
    batch.candidates = {{1, hash_of('b'), ""}};
    pipe.measure(LeaseId(1), batch);
    CHECK(error_of(21) == "reference module " + hash_of('a').substr(0, 12) + " is not on this device");
    CHECK(pipe.server->pending_batches() == 0);
  }
  CHECK(pipe.replies.empty());
}

TEST_CASE("session server stops a lease's batches when the lease ends", "[session][measure]") {
  log::set_level(log::Level::warn);
  Pipe pipe;
  pipe.upload(LeaseId(1), hash_of('a'), fixture("add_ref"), 1);
  pipe.upload(LeaseId(1), hash_of('e'), fixture("hang"), 2);
  rpc::BatchRequest batch = add_batch(30);
  batch.settings.timeout_ms = 20'000;
  batch.candidates = {{1, hash_of('e'), ""}};
  pipe.measure(LeaseId(1), batch);
  pipe.measure(LeaseId(1), batch);
  CHECK(pipe.server->pending_batches() == 2);
  pipe.server->end_lease(LeaseId(1));
  CHECK(pipe.server->pending_batches() == 0);
  test::run_async(pipe.io, [&]() -> rpc::awaitable<void> { co_await test::sleep_for(200ms); });
  CHECK(pipe.replies.empty());
}
