// host::MeasureClient::report over a real loopback connection to a stand-in tracker
// (the real handshake, then frames read as the tracker reads them): a report reaches a
// tracker that offered to take them, and nothing is sent to one that did not.
#include <catch2/catch.hpp>

#include <optional>

#include "kestrel/base/log.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/rpc/session_report.h"
#include "kestrel/rpc/tracker_client.h"
#include "support/async.h"

using namespace kestrel;
using namespace std::chrono_literals;

namespace {

// Runs a client against a stand-in tracker that welcomes it (offering reports or not)
// and returns the session report it read, if any arrived within a moment.
std::optional<rpc::SessionReport> send_one(bool tracker_accepts, bool& sent) {
  asio::io_context io;
  std::optional<rpc::SessionReport> received;
  bool tracker_done = false;
  test::run_async(io, [&]() -> rpc::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    rpc::tcp::acceptor acceptor(ex, rpc::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    const std::uint16_t port = acceptor.local_endpoint().port();
    std::shared_ptr<rpc::Connection> tracker_side;
    asio::co_spawn(
        ex,
        [&]() -> rpc::awaitable<void> {
          rpc::tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
          tracker_side = rpc::Connection::create(std::move(socket));
          rpc::TrackerHandshakeOptions options;
          options.connection_id = ConnectionId(1);
          options.accepts_reports = tracker_accepts;
          co_await rpc::accept_handshake(tracker_side, options);
          for (;;) {
            rpc::ReadResult r = co_await tracker_side->read_within(1500ms);
            if (!r.frame) break;
            if (r.frame->root().isSessionReport()) {
              received = rpc::from_wire(r.frame->root().getSessionReport());
              break;
            }
          }
          tracker_done = true;
        },
        asio::detached);
    rpc::Endpoint endpoint{"127.0.0.1", port};  // (GCC 12: no braced lists inside co_await)
    rpc::ClientOptions client_options;
    auto client = co_await rpc::TrackerClient::connect(endpoint, client_options);
    host::MeasureClient measurer(client, {});
    rpc::SessionReport report;
    report.session_id = "test-host:1:1";
    report.op = "gemm";
    report.workload = "K=32,M=48,N=40";
    report.phase = "tuning";
    report.trials = 8;
    report.budget = 16;
    report.best_gflops = 12.5;
    report.failures = {{"compile_error", 2}};
    sent = measurer.report(report);
    co_await test::eventually([&] { return tracker_done; }, 5s);
    client->close();
    if (tracker_side) tracker_side->close();
  });
  return received;
}

}  // namespace

TEST_CASE("a session report reaches a tracker that takes reports, fire and forget", "[host][session-report]") {
  log::set_level(log::Level::off);
  bool sent = false;
  auto received = send_one(true, sent);
  CHECK(sent);
  REQUIRE(received);
  CHECK(received->session_id == "test-host:1:1");
  CHECK(received->op == "gemm");
  CHECK(received->workload == "K=32,M=48,N=40");
  CHECK(received->trials == 8);
  CHECK(received->budget == 16);
  CHECK(received->best_gflops == 12.5);
  REQUIRE(received->failures.size() == 1);
  CHECK(received->failures[0].first == "compile_error");
}

TEST_CASE("no session report is sent to a tracker that did not offer to take them", "[host][session-report]") {
  log::set_level(log::Level::off);
  bool sent = true;
  auto received = send_one(false, sent);
  CHECK_FALSE(sent);
  CHECK_FALSE(received);
}
