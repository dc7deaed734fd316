// rpc::DeviceSession against a real device agent through an in-process tracker:
// ping and info, module query and upload, a batch as a stream of typed results, and a
// batch the device refuses.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <optional>

#include "kestrel/base/log.h"
#include "kestrel/device_runtime/module_store.h"
#include "kestrel/rpc/device_session.h"
#include "support/async.h"
#include "support/pool.h"
#include "support/fixtures.h"

using namespace kestrel;
using namespace kestrel::rpc;
using namespace std::chrono_literals;

namespace {

std::vector<std::uint8_t> fixture(const std::string& name) { return test::read_fixture(name); }
// Modules go by the SHA-256 of their bytes (the device checks): 'a' add_ref, 'b' add; any
// other letter a hash no fixture has.
std::string hash_of(char c) {
  if (c == 'a') return device::ModuleStore::content_hash(fixture("add_ref"));
  if (c == 'b') return device::ModuleStore::content_hash(fixture("add"));
  return test::hash_of(c);
}
BatchRequest add_batch(std::int64_t n = 4096) { return test::add_batch_request(n, hash_of('a')); }

}  // namespace

TEST_CASE("a device session uploads modules and measures a batch as typed results", "[session][measure][module]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  test::Pool pool(io);
  test::run_async(
      io,
      [&]() -> awaitable<void> {
        pool.add_device("pipe", "session-device");
        auto client = co_await pool.client();
        RequestOptions request{0, 5000ms};
        Lease lease = co_await client->request("pipe", request);
        DeviceSession session(client, lease, 10s);

        auto rtt = co_await session.ping();
        CHECK(rtt.count() > 0);
        DeviceInfo info = co_await session.info();
        CHECK(info.name == "session-device");

        std::vector<std::string> hashes = {hash_of('a'), hash_of('b')};
        const std::vector<bool> none = {false, false};
        const std::vector<bool> both = {true, true};
        std::vector<bool> present = co_await session.query_modules(hashes);
        CHECK(present == none);
        auto ref = fixture("add_ref");
        auto add = fixture("add");
        std::vector<ModuleImage> images = {{hash_of('a'), ref}, {hash_of('b'), add}, {"not-a-hash", add}};
        std::vector<std::string> refused = co_await session.upload(images);
        REQUIRE(refused.size() == 3);
        CHECK(refused[0].empty());
        CHECK(refused[1].empty());
        CHECK_FALSE(refused[2].empty());
        present = co_await session.query_modules(hashes);
        CHECK(present == both);

        BatchRequest batch = add_batch();
        batch.candidates = {{1, hash_of('b'), ""}, {2, hash_of('c'), ""}};
        std::vector<CandidateResult> results;
        auto collect = [&](CandidateResult r) { results.push_back(std::move(r)); };
        BatchDone done = co_await session.measure(batch, collect);
        CHECK(done.message.empty());
        CHECK_FALSE(done.refused);
        REQUIRE(results.size() == 2);
        CHECK(results[0].id == 1);
        CHECK(results[0].status == kernel::Status::ok);
        CHECK(results[0].round_seconds.size() == 2);
        CHECK(results[1].id == 2);
        CHECK(results[1].status == kernel::Status::device_load_error);

        // A batch whose reference the device lacks is refused whole, with the reason.
        BatchRequest orphan = add_batch();
        orphan.reference_hash = hash_of('f');
        orphan.candidates = {{3, hash_of('b'), ""}};
        results.clear();
        done = co_await session.measure(orphan, collect);
        CHECK(done.refused);
        CHECK(done.message == "reference module ffffffffffff is not on this device");
        CHECK(results.empty());
        co_await client->release(lease.id);
      },
      [&] { pool.shutdown(); });
}

TEST_CASE("an error the device cannot tie to a request ends the request in flight at once", "[session][bad-input]") {
  // A payload the device cannot decode is answered with a SessionError of seq 0: the
  // holder's request in flight ends with that error (it used to be skipped, and the
  // request waited out its whole timeout for an answer that was never coming).
  log::set_level(log::Level::error);
  asio::io_context io;
  test::Pool pool(io);
  test::run_async(
      io,
      [&]() -> awaitable<void> {
        pool.add_device("pipe", "error-device");
        auto client = co_await pool.client();
        Lease lease = co_await client->request("pipe", RequestOptions{0, 5000ms});
        DeviceSession session(client, lease, 30s);
        const std::vector<std::uint8_t> garbage(16, std::uint8_t{0xff});
        client->send(lease.id, garbage);
        const auto started = std::chrono::steady_clock::now();
        const std::vector<std::string> one = {hash_of('a')};
        bool failed = false;
        ErrorCode code = ErrorCode::timeout;
        std::string message;
        try {
          co_await session.query_modules(one);
        } catch (const RpcError& e) {
          failed = true;
          code = e.code();
          message = e.what();
        }
        REQUIRE(failed);
        CHECK(code == ErrorCode::protocol_error);
        CHECK_THAT(message, Catch::Contains("bad session message"));
        CHECK_THAT(message, Catch::Contains("error-device"));
        CHECK(std::chrono::steady_clock::now() - started < 5s);
        // The session goes on: the late answer to the failed query is stale and skipped.
        const std::vector<std::string> two = {hash_of('a'), hash_of('b')};
        std::vector<bool> present = co_await session.query_modules(two);
        CHECK(present == std::vector<bool>{false, false});
        co_await client->release(lease.id);
      },
      [&] { pool.shutdown(); });
}
