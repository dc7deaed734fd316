// Tracker behaviour with real sockets on loopback: registration, leases, queue order,
// timeouts, cancellation, dead clients and devices, relaying, and bad input.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"
#include "support/async.h"
#include "support/pool.h"

using namespace kestrel;
using namespace kestrel::rpc;
using namespace std::chrono_literals;
using test::Pool;

namespace {

const KeySummary* find_key(const TrackerSummary& s, const std::string& key) {
  for (const auto& k : s.keys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

// Waits until the tracker reports `count` devices.
awaitable<void> wait_devices(Pool& pool, std::size_t count) {
  bool ok = co_await test::eventually([&] { return pool.tracker().stats().devices == count; });
  REQUIRE(ok);
}

awaitable<tcp::socket> raw_socket(Pool& pool) {
  auto ex = co_await asio::this_coro::executor;
  co_return co_await connect_to("127.0.0.1", pool.tracker().port(), 2000ms);
  (void)ex;
}

// Writes raw bytes, then reads until the tracker closes the connection; returns what
// the tracker sent (a Failure frame, if it explained itself).
awaitable<std::vector<std::uint8_t>> send_raw_and_drain(tcp::socket& socket, std::vector<std::uint8_t> bytes,
                                                        bool close_write = false) {
  co_await asio::async_write(socket, asio::buffer(bytes), asio::use_awaitable);
  if (close_write) socket.shutdown(tcp::socket::shutdown_send);
  std::vector<std::uint8_t> received;
  std::array<std::uint8_t, 4096> buffer;
  while (true) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(buffer), use_nothrow);
    received.insert(received.end(), buffer.begin(), buffer.begin() + static_cast<long>(n));
    if (ec) break;
  }
  co_return received;
}

// A peer that completed the handshake, for sending hand-made frames.
awaitable<std::shared_ptr<Connection>> raw_peer(Pool& pool, wire::Role role) {
  auto socket = co_await connect_to("127.0.0.1", pool.tracker().port(), 2000ms);
  auto conn = Connection::create(std::move(socket));
  PeerHandshakeOptions options;
  options.role = role;
  options.name = "raw";
  co_await perform_handshake(conn, options);
  co_return conn;
}

}  // namespace

TEST_CASE("devices register under keys and appear in the summary", "[tracker]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("rpi4", "rpi4-a");
    pool.add_device("rpi4", "rpi4-b");
    pool.add_device("x86", "x86-a");
    co_await wait_devices(pool, 3);
    auto client = co_await pool.client();
    TrackerSummary s = co_await client->summary();
    REQUIRE(s.keys.size() == 2);
    CHECK(find_key(s, "rpi4")->free == 2);
    CHECK(find_key(s, "x86")->free == 1);
    REQUIRE(s.devices.size() == 3);
    CHECK(s.devices[0].info.name == "rpi4-a");
    CHECK(s.devices[0].key == "rpi4");
    CHECK(s.devices[0].info.cores > 0);
    CHECK_FALSE(s.devices[0].info.triple.empty());
    CHECK(s.devices[2].info.name == "x86-a");
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a lease relays session traffic and release returns the device", "[tracker]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("k", "dev-1");
    co_await wait_devices(pool, 1);
    auto client = co_await pool.client("holder");
    Lease lease = co_await client->request("k", {0, 2000ms});
    CHECK(lease.info.name == "dev-1");
    auto rtt = co_await client->ping(lease.id);
    CHECK(rtt > 0ns);
    DeviceInfo info = co_await client->device_info(lease.id);
    CHECK(info.name == "dev-1");

    TrackerSummary busy = co_await client->summary();
    CHECK(find_key(busy, "k")->busy == 1);
    REQUIRE(busy.devices.size() == 1);
    CHECK(busy.devices[0].busy);
    CHECK_THAT(busy.devices[0].lease_holder, Catch::Contains("holder"));

    co_await client->release(lease.id);
    TrackerSummary free = co_await client->summary();
    CHECK(find_key(free, "k")->free == 1);
    CHECK_THROWS_AS(client->send(lease.id, {}), RpcError);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("under contention, higher priority is served first, then arrival order", "[tracker][queue]") {
  asio::io_context io;
  Pool pool(io);
  std::vector<std::string> served;
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("k", "only");
    co_await wait_devices(pool, 1);
    auto holder = co_await pool.client("holder");
    Lease first = co_await holder->request("k");

    // Queue: low (0), high-1 (10), high-2 (10), mid (5) in that order of arrival.
    std::vector<std::pair<std::string, int>> waiting = {{"low", 0}, {"high-1", 10}, {"high-2", 10}, {"mid", 5}};
    std::vector<std::shared_ptr<TrackerClient>> clients;
    int done = 0;
    for (auto& [name, priority] : waiting) {
      auto c = co_await pool.client(name);
      clients.push_back(c);
      RequestId id = c->submit("k", {priority, 0ms});
      // Make sure arrival order at the tracker is the submission order.
      co_await test::eventually([&, n = clients.size()] { return pool.tracker().stats().queued == n; });
      asio::co_spawn(io, [&, c, id, who = name]() -> awaitable<void> {
        Lease lease = co_await c->wait_grant(id);
        served.push_back(who);
        co_await test::sleep_for(20ms);
        co_await c->release(lease.id);
        ++done;
      }, asio::detached);
    }
    co_await holder->release(first.id);
    REQUIRE(co_await test::eventually([&] { return done == 4; }));
  }, [&] { pool.shutdown(); });
  CHECK(served == std::vector<std::string>{"high-1", "high-2", "mid", "low"});
}

TEST_CASE("a request for a key nobody serves waits for its timeout, then fails clearly", "[tracker][bad-input]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("rpi4", "a");
    co_await wait_devices(pool, 1);
    auto client = co_await pool.client();
    auto start = std::chrono::steady_clock::now();
    try {
      co_await client->request("gpu", {0, 300ms});
      FAIL("request for an unserved key was granted");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::timeout);
      CHECK_THAT(e.what(), Catch::Contains("no device is registered under key 'gpu'"));
      CHECK_THAT(e.what(), Catch::Contains("rpi4"));
    }
    CHECK(std::chrono::steady_clock::now() - start >= 300ms);
    // A busy key gives a different message.
    Lease lease = co_await client->request("rpi4");
    try {
      co_await client->request("rpi4", {0, 200ms});
      FAIL("second request granted while the only device is leased");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::timeout);
      CHECK_THAT(e.what(), Catch::Contains("all busy"));
    }
    co_await client->release(lease.id);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("queued requests with different timeouts each fail at their own deadline", "[tracker]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("rpi4", "a");
    co_await wait_devices(pool, 1);
    auto client = co_await pool.client();
    auto start = std::chrono::steady_clock::now();
    // The later deadline is submitted first: the tracker's timer must move to the earlier one.
    RequestId slow = client->submit("gpu", {0, 900ms});
    RequestId fast = client->submit("gpu", {0, 150ms});
    try {
      co_await client->wait_grant(fast);
      FAIL("request for an unserved key was granted");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::timeout);
    }
    auto fast_failed = std::chrono::steady_clock::now() - start;
    CHECK(fast_failed >= 150ms);
    CHECK(fast_failed < 900ms);
    CHECK(pool.tracker().stats().queued == 1);
    // A request granted before its deadline never times out.
    Lease held = co_await client->request("rpi4");
    RequestId waiting = client->submit("rpi4", {0, 300ms});
    co_await client->release(held.id);
    Lease granted = co_await client->wait_grant(waiting);
    try {
      co_await client->wait_grant(slow);
      FAIL("request for an unserved key was granted");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::timeout);
    }
    CHECK(std::chrono::steady_clock::now() - start >= 900ms);
    CHECK(pool.tracker().stats().leases == 1);
    co_await client->release(granted.id);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a queued request can be cancelled", "[tracker]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    auto client = co_await pool.client();
    RequestId id = client->submit("later");
    co_await test::eventually([&] { return pool.tracker().stats().queued == 1; });
    client->cancel(id);
    try {
      co_await client->wait_grant(id);
      FAIL("cancelled request was granted");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::cancelled);
    }
    CHECK(co_await test::eventually([&] { return pool.tracker().stats().queued == 0; }));
    // The device that arrives later stays free: nothing is waiting for it.
    pool.add_device("later", "late");
    co_await wait_devices(pool, 1);
    TrackerSummary s = co_await client->summary();
    CHECK(find_key(s, "later")->free == 1);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a client that disconnects while queued or holding a lease is cleaned up", "[tracker][bad-input]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("k", "d");
    co_await wait_devices(pool, 1);
    auto holder = co_await pool.client("holder");
    Lease lease = co_await holder->request("k");
    auto queued = co_await pool.client("queued");
    queued->submit("k");
    co_await test::eventually([&] { return pool.tracker().stats().queued == 1; });
    queued->close();  // disconnect while queued
    CHECK(co_await test::eventually([&] { return pool.tracker().stats().queued == 0; }));
    (void)lease;
    holder->close();  // disconnect while holding the lease
    CHECK(co_await test::eventually([&] { return pool.tracker().stats().leases == 0; }));
    auto observer = co_await pool.client("observer");
    TrackerSummary s = co_await observer->summary();
    CHECK(find_key(s, "k")->free == 1);
    // And the device can be leased again.
    Lease again = co_await observer->request("k", {0, 1000ms});
    CHECK(co_await observer->ping(again.id) > 0ns);
    co_await observer->release(again.id);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a device that disconnects fails its lease with device lost", "[tracker]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    auto& agent = pool.add_device("k", "doomed");
    co_await wait_devices(pool, 1);
    auto client = co_await pool.client();
    Lease lease = co_await client->request("k");
    agent.stop();
    try {
      co_await client->receive(lease.id, 2000ms);
      FAIL("lease survived its device");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::device_lost);
      CHECK_THAT(e.what(), Catch::Contains("device 'doomed'"));
    }
    CHECK(pool.tracker().stats().devices == 0);
    co_await client->release(lease.id);  // releasing a lost lease is harmless
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a device that stops answering heartbeats is dropped within the bound", "[tracker]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    // A device that registers and then never reads or answers again.
    auto conn = co_await raw_peer(pool, wire::Role::DEVICE);
    capnp::MallocMessageBuilder builder;
    auto reg = builder.initRoot<wire::Frame>().initRegister();
    reg.setKey("k");
    reg.getInfo().setName("mute");
    conn->send(builder);
    co_await wait_devices(pool, 1);
    auto client = co_await pool.client();
    Lease lease = co_await client->request("k");
    auto start = std::chrono::steady_clock::now();
    try {
      co_await client->receive(lease.id, 5000ms);
      FAIL("lease survived a mute device");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::device_lost);
      CHECK_THAT(e.what(), Catch::Contains("no heartbeat"));
    }
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took <= pool.tracker().loss_bound() + 200ms);
    conn->close();
  }, [&] { pool.shutdown(); });
}

TEST_CASE("malformed input closes only the offending connection", "[tracker][bad-input]") {
  asio::io_context io;
  Pool pool(io);
  std::vector<std::string> failures;
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("k", "survivor");
    co_await wait_devices(pool, 1);
    auto bystander = co_await pool.client("bystander");
    Lease lease = co_await bystander->request("k");

    auto expect_rejected = [&](std::vector<std::uint8_t> bytes, bool close_write,
                               std::string what) -> awaitable<void> {
      auto socket = co_await raw_socket(pool);
      auto reply = co_await send_raw_and_drain(socket, std::move(bytes), close_write);
      std::string error;
      auto frame = reply.size() > 4 ? decode_frame_bytes(reply, kDefaultMaxFrameBytes, error) : nullptr;
      if (frame && frame->root().isFailure()) {
        failures.push_back(what + ": " + frame->root().getFailure().getMessage().cStr());
      } else {
        failures.push_back(what + ": closed");
      }
    };
    auto before = pool.tracker().stats().rejected_connections;
    // 1. Oversized: an HTTP request line read as a length.
    std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    std::vector<std::uint8_t> http_bytes(http.begin(), http.end());
    co_await expect_rejected(http_bytes, false, "oversized");
    // 2. Truncated: a header promising 64 bytes, 10 bytes, then EOF.
    std::vector<std::uint8_t> truncated(14, 1);
    truncated[0] = 64;
    truncated[1] = truncated[2] = truncated[3] = 0;
    co_await expect_rejected(truncated, true, "truncated");
    // 3. Malformed: a well-sized frame full of garbage.
    std::vector<std::uint8_t> garbage(8 * 6, 0xff);
    co_await expect_rejected(encode_raw(garbage), false, "malformed");
    // 4. Unaligned length.
    std::vector<std::uint8_t> unaligned(9, 1);
    unaligned[0] = 5;
    unaligned[1] = unaligned[2] = unaligned[3] = 0;
    co_await expect_rejected(unaligned, false, "unaligned");
    CHECK(co_await test::eventually([&] { return pool.tracker().stats().rejected_connections >= before + 4; }));

    // 5. After the handshake: a client sending a device-only frame.
    auto rogue = co_await raw_peer(pool, wire::Role::CLIENT);
    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::Frame>().initRegister().setKey("k");
    rogue->send(builder);
    ReadResult r = co_await rogue->read_within(2000ms);
    REQUIRE(r.error == FrameError::none);
    REQUIRE(r.frame->root().isFailure());
    CHECK_THAT(r.frame->root().getFailure().getMessage().cStr(), Catch::Contains("unexpected frame 'register'"));
    rogue->close();

    // 6. After the handshake: an oversized frame from a registered peer.
    auto big = co_await raw_peer(pool, wire::Role::CLIENT);
    FrameBytes huge_header(4, 0xff);
    huge_header[3] = 0x7f;
    big->send(huge_header);
    ReadResult r2 = co_await big->read_within(2000ms);
    REQUIRE(r2.error == FrameError::none);
    CHECK_THAT(r2.frame->root().getFailure().getMessage().cStr(), Catch::Contains("oversized"));
    big->close();

    // Everyone else is unaffected.
    CHECK(co_await bystander->ping(lease.id) > 0ns);
    TrackerSummary s = co_await bystander->summary();
    CHECK(s.devices.size() == 1);
    co_await bystander->release(lease.id);
  }, [&] { pool.shutdown(); });
  REQUIRE(failures.size() == 4);
  CHECK_THAT(failures[0], Catch::Contains("oversized"));
  CHECK_THAT(failures[2], Catch::Contains("malformed"));
}

TEST_CASE("the tracker enforces its token for devices and clients", "[tracker][auth]") {
  asio::io_context io;
  auto options = Pool::fast_options();
  options.token = Token("pool-secret-0123456789");
  Pool pool(io, options);
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("k", "trusted", Token("pool-secret-0123456789"));
    co_await wait_devices(pool, 1);
    try {
      co_await pool.client("no token");
      FAIL("client without a token was accepted");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::auth_failed);
    }
    try {
      co_await pool.client("wrong token", Token("not-the-pool-secret-xx"));
      FAIL("client with a wrong token was accepted");
    } catch (const RpcError& e) {
      CHECK(e.code() == ErrorCode::auth_failed);
    }
    auto good = co_await pool.client("good", Token("pool-secret-0123456789"));
    Lease lease = co_await good->request("k", {0, 1000ms});
    co_await good->release(lease.id);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a device reconnects and re-registers after the tracker restarts", "[tracker]") {
  asio::io_context io;
  auto first_options = Pool::fast_options();
  first_options.port = 0;
  auto tracker = std::make_unique<tracker::Tracker>(io, first_options);
  std::vector<std::unique_ptr<tracker::Tracker>> stopped;  // kept alive until their coroutines end
  tracker->start();
  std::uint16_t port = tracker->port();
  device::AgentOptions options;
  options.tracker = {"127.0.0.1", port};
  options.key = "k";
  options.initial_backoff = 50ms;
  options.max_backoff = 200ms;
  device::DeviceAgent agent(io.get_executor(), options, device::detect_device_info("phoenix"));
  test::run_async(io, [&]() -> awaitable<void> {
    asio::co_spawn(io, agent.run(), asio::detached);
    CHECK(co_await test::eventually([&] { return agent.stats().registered; }));
    tracker->stop();
    CHECK(co_await test::eventually([&] { return !agent.stats().registered; }));
    stopped.push_back(std::move(tracker));
    auto fresh_options = Pool::fast_options();
    fresh_options.port = port;
    tracker = std::make_unique<tracker::Tracker>(io, fresh_options);
    tracker->start();
    CHECK(co_await test::eventually([&] { return agent.stats().registrations == 2 && agent.stats().registered; }));
    CHECK(tracker->stats().devices == 1);
  }, [&] {
    agent.stop();
    tracker->stop();
  });
}

TEST_CASE("a second live device with the same name and key is refused, not swapped in", "[tracker][bad-input]") {
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    auto& original = pool.add_device("k", "twin");
    co_await wait_devices(pool, 1);
    auto impostor = co_await raw_peer(pool, wire::Role::DEVICE);
    capnp::MallocMessageBuilder builder;
    auto reg = builder.initRoot<wire::Frame>().initRegister();
    reg.setKey("k");
    reg.getInfo().setName("twin");
    impostor->send(builder);
    ReadResult r = co_await impostor->read_within(2000ms);
    REQUIRE(r.error == FrameError::none);
    REQUIRE(r.frame->root().isFailure());
    CHECK_THAT(r.frame->root().getFailure().getMessage().cStr(), Catch::Contains("unique --name"));
    impostor->close();
    co_await test::sleep_for(100ms);
    CHECK(original.stats().registered);
    CHECK(original.stats().registrations == 1);
    CHECK(pool.tracker().stats().devices == 1);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("the connection cap fits under the open-file limit, which the tracker raises to its hard limit",
          "[tracker][caps]") {
  log::set_level(log::Level::error);
  asio::io_context io;
  tracker::TrackerOptions options;
  options.port = 0;
  options.limits.max_connections = 100'000'000;
  tracker::Tracker big(io, options);
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  CHECK(limit.rlim_cur == limit.rlim_max);
  if (limit.rlim_cur != RLIM_INFINITY) {
    CHECK(big.max_connections() == limit.rlim_cur - tracker::TrackerLimits::kFdMargin);
  }
  options.limits.max_connections = 10;
  tracker::Tracker small(io, options);
  CHECK(small.max_connections() == 10);
}
