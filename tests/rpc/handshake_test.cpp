// Handshake over real loopback sockets: versions, roles, tokens, timeouts, garbage.
#include <catch2/catch.hpp>

#include <optional>

#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"
#include "support/async.h"

using namespace kestrel;
using namespace kestrel::rpc;

namespace {

struct Pair {
  std::shared_ptr<Connection> tracker_side;
  std::shared_ptr<Connection> peer_side;
};

awaitable<Pair> connected_pair() {
  auto ex = co_await asio::this_coro::executor;
  tcp::acceptor acceptor(ex, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  tcp::socket client(ex);
  co_await client.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
  tcp::socket server = co_await acceptor.async_accept(asio::use_awaitable);
  co_return Pair{Connection::create(std::move(server)), Connection::create(std::move(client))};
}

struct Outcome {
  std::optional<PeerHello> tracker_result;
  std::optional<RpcError> tracker_error;
  std::optional<Welcomed> peer_result;
  std::optional<RpcError> peer_error;
};

Outcome handshake(const Token* tracker_token, const Token* peer_token, std::optional<std::uint32_t> version = {}) {
  asio::io_context io;
  Outcome out;
  test::run_async(io, [&]() -> awaitable<void> {
    Pair pair = co_await connected_pair();
    TrackerHandshakeOptions t;
    t.token = tracker_token;
    t.connection_id = ConnectionId(7);
    t.timeout = std::chrono::milliseconds(2000);
    bool tracker_done = false;
    asio::co_spawn(
        io,
        [&, conn = pair.tracker_side]() -> awaitable<void> {
          try {
            out.tracker_result = co_await accept_handshake(conn, t);
          } catch (const RpcError& e) {
            out.tracker_error = e;
          }
          tracker_done = true;
        },
        asio::detached);
    PeerHandshakeOptions p;
    p.role = wire::Role::DEVICE;
    p.name = "test-device";
    p.token = peer_token;
    p.timeout = std::chrono::milliseconds(2000);
    p.announce_version = version;
    try {
      out.peer_result = co_await perform_handshake(pair.peer_side, p);
    } catch (const RpcError& e) {
      out.peer_error = e;
    }
    co_await test::eventually([&] { return tracker_done; });
    pair.tracker_side->close();
    pair.peer_side->close();
  });
  return out;
}

}  // namespace

TEST_CASE("handshake without tokens", "[handshake]") {
  log::set_level(log::Level::off);
  Outcome out = handshake(nullptr, nullptr);
  REQUIRE(out.peer_result);
  REQUIRE(out.tracker_result);
  CHECK(out.peer_result->connection_id == ConnectionId(7));
  CHECK(out.tracker_result->role == wire::Role::DEVICE);
  CHECK(out.tracker_result->name == "test-device");
}

TEST_CASE("handshake with the right token authenticates both sides", "[handshake][auth]") {
  Token token("the-shared-secret-of-this-pool");
  Outcome out = handshake(&token, &token);
  REQUIRE(out.peer_result);
  REQUIRE(out.tracker_result);
}

TEST_CASE("a wrong token is rejected with a clear error on both sides", "[handshake][auth]") {
  Token tracker_token("the-shared-secret-of-this-pool");
  Token peer_token("some-other-secret-entirely-xx");
  Outcome out = handshake(&tracker_token, &peer_token);
  REQUIRE(out.tracker_error);
  CHECK(out.tracker_error->code() == ErrorCode::auth_failed);
  REQUIRE(out.peer_error);
  CHECK(out.peer_error->code() == ErrorCode::auth_failed);
  CHECK_THAT(out.peer_error->what(), Catch::Contains("wrong token"));
}

TEST_CASE("a missing token is rejected and the peer is told to pass one", "[handshake][auth]") {
  Token tracker_token("the-shared-secret-of-this-pool");
  Outcome out = handshake(&tracker_token, nullptr);
  REQUIRE(out.peer_error);
  CHECK(out.peer_error->code() == ErrorCode::auth_failed);
  CHECK_THAT(out.peer_error->what(), Catch::Contains("--token-file"));
  CHECK(out.tracker_error);
}

TEST_CASE("a peer with a token refuses a tracker that cannot prove it", "[handshake][auth]") {
  Token peer_token("the-shared-secret-of-this-pool");
  Outcome out = handshake(nullptr, &peer_token);
  REQUIRE(out.peer_error);
  CHECK(out.peer_error->code() == ErrorCode::auth_failed);
  CHECK_THAT(out.peer_error->what(), Catch::Contains("does not require a token"));
}

TEST_CASE("a wrong protocol version is rejected with both versions named", "[handshake]") {
  Outcome out = handshake(nullptr, nullptr, protocol_version() + 1);
  REQUIRE(out.tracker_error);
  CHECK(out.tracker_error->code() == ErrorCode::version_mismatch);
  REQUIRE(out.peer_error);
  CHECK(out.peer_error->code() == ErrorCode::version_mismatch);
  CHECK_THAT(out.peer_error->what(), Catch::Contains(std::to_string(protocol_version() + 1)));
}

TEST_CASE("a silent peer times out the tracker's handshake", "[handshake]") {
  asio::io_context io;
  std::optional<RpcError> error;
  test::run_async(io, [&]() -> awaitable<void> {
    Pair pair = co_await connected_pair();
    TrackerHandshakeOptions t;
    t.timeout = std::chrono::milliseconds(200);
    try {
      co_await accept_handshake(pair.tracker_side, t);
    } catch (const RpcError& e) {
      error = e;
    }
    pair.peer_side->close();
  });
  REQUIRE(error);
  CHECK(error->code() == ErrorCode::timeout);
}

TEST_CASE("a non-hello first frame is a protocol error", "[handshake]") {
  asio::io_context io;
  std::optional<RpcError> error;
  test::run_async(io, [&]() -> awaitable<void> {
    Pair pair = co_await connected_pair();
    pair.peer_side->send(heartbeat_frame(false, 1));
    TrackerHandshakeOptions t;
    try {
      co_await accept_handshake(pair.tracker_side, t);
    } catch (const RpcError& e) {
      error = e;
    }
    pair.peer_side->close();
  });
  REQUIRE(error);
  CHECK(error->code() == ErrorCode::protocol_error);
  CHECK_THAT(error->what(), Catch::Contains("expected hello, got heartbeat"));
}

TEST_CASE("a token handshake without TLS lifts the pre-auth frame limit and starts frame MACs", "[handshake][auth]") {
  log::set_level(log::Level::off);
  Token token("the-shared-secret-of-this-pool");
  asio::io_context io;
  std::optional<ReadResult> good, forged;
  std::size_t limit_before = 0, limit_after = 0;
  bool tracker_authenticated = false, peer_authenticated = false, macs = false;
  test::run_async(io, [&]() -> awaitable<void> {
    Pair pair = co_await connected_pair();
    limit_before = pair.tracker_side->frame_limit();
    TrackerHandshakeOptions t;
    t.token = &token;
    t.connection_id = ConnectionId(1);
    bool tracker_done = false;
    asio::co_spawn(
        io,
        [&, conn = pair.tracker_side]() -> awaitable<void> {
          co_await accept_handshake(conn, t);
          tracker_done = true;
        },
        asio::detached);
    PeerHandshakeOptions p;
    p.role = wire::Role::CLIENT;
    p.token = &token;
    co_await perform_handshake(pair.peer_side, p);
    co_await test::eventually([&] { return tracker_done; });
    tracker_authenticated = pair.tracker_side->is_authenticated();
    peer_authenticated = pair.peer_side->is_authenticated();
    limit_after = pair.tracker_side->frame_limit();
    macs = pair.tracker_side->frames_authenticated() && pair.peer_side->frames_authenticated();
    pair.peer_side->send(heartbeat_frame(false, 1));
    good = co_await pair.tracker_side->read_within(std::chrono::milliseconds(2000));
    // A sender without the handshake's keys (an injector) cannot make a valid MAC.
    pair.peer_side->set_frame_keys(FrameKeys{});
    pair.peer_side->send(heartbeat_frame(false, 2));
    forged = co_await pair.tracker_side->read_within(std::chrono::milliseconds(2000));
    pair.tracker_side->close();
    pair.peer_side->close();
  });
  CHECK(limit_before == kDefaultPreauthMaxFrameBytes);
  CHECK(limit_after == kDefaultMaxFrameBytes);
  CHECK(tracker_authenticated);
  CHECK(peer_authenticated);
  CHECK(macs);
  REQUIRE(good);
  CHECK(good->error == FrameError::none);
  REQUIRE(forged);
  CHECK(forged->error == FrameError::malformed);
  CHECK_THAT(forged->detail, Catch::Contains("frame authentication failed"));
}

TEST_CASE("a role's own token is required and another role's token is named in the refusal", "[handshake][auth]") {
  log::set_level(log::Level::off);
  Token device_token("device-secret-of-this-pool-xx");
  Token client_token("client-secret-of-this-pool-xx");
  asio::io_context io;
  std::optional<RpcError> tracker_error, peer_error;
  test::run_async(io, [&]() -> awaitable<void> {
    Pair pair = co_await connected_pair();
    TrackerHandshakeOptions t;
    t.device_token = &device_token;
    t.client_token = &client_token;
    bool tracker_done = false;
    asio::co_spawn(
        io,
        [&, conn = pair.tracker_side]() -> awaitable<void> {
          try {
            co_await accept_handshake(conn, t);
          } catch (const RpcError& e) {
            tracker_error = e;
          }
          tracker_done = true;
        },
        asio::detached);
    PeerHandshakeOptions p;
    p.role = wire::Role::DEVICE;
    p.token = &client_token;
    try {
      co_await perform_handshake(pair.peer_side, p);
    } catch (const RpcError& e) {
      peer_error = e;
    }
    co_await test::eventually([&] { return tracker_done; });
    pair.tracker_side->close();
    pair.peer_side->close();
  });
  REQUIRE(tracker_error);
  REQUIRE(peer_error);
  CHECK(peer_error->code() == ErrorCode::auth_failed);
  CHECK_THAT(std::string(peer_error->what()), Catch::Contains("a client token cannot register a device"));
}
