// The tracker's dashboard state through the real path: an in-process tracker with
// TrackerOptions::http, real device agents and real TrackerClient connections over
// loopback. What the tracker publishes into its DashboardFeed (the documents the HTTP
// server serves) is checked: sessions from client reports, events, metrics, the
// lease-wait histogram, and publishing only while someone looks.
#include <catch2/catch.hpp>

#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kestrel/base/log.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/rpc/session_report.h"
#include "kestrel/tracker/dashboard_state.h"
#include "support/async.h"
#include "support/pool.h"

using namespace kestrel;
using namespace kestrel::rpc;
using namespace std::chrono_literals;
using test::Pool;

namespace {

tracker::TrackerOptions dashboard_options(std::chrono::milliseconds interval = 20ms) {
  tracker::TrackerOptions options = Pool::fast_options();
  tracker::HttpOptions http;
  http.interval = interval;
  options.http = http;
  return options;
}

// Waits (asking for snapshots meanwhile) until the latest published snapshot passes
// `check`, and returns it (null if none did within `limit`).
template <typename Check>
awaitable<std::shared_ptr<const tracker::DashboardSnapshot>> published(Pool& pool, Check check,
                                                                        std::chrono::milliseconds limit = 5s) {
  auto feed = pool.tracker().dashboard_feed();
  std::shared_ptr<const tracker::DashboardSnapshot> found;
  co_await test::eventually(
      [&] {
        feed->mark_wanted();
        auto snapshot = feed->latest();
        if (snapshot && check(*snapshot)) found = snapshot;
        return found != nullptr;
      },
      limit);
  co_return found;
}

awaitable<void> wait_devices(Pool& pool, std::size_t count) {
  bool ok = co_await test::eventually([&] { return pool.tracker().stats().devices == count; });
  REQUIRE(ok);
}

SessionReport report_at(std::uint32_t trials, double best) {
  SessionReport r;
  r.session_id = "host:42:1";
  r.job = 0;
  r.label = "gemm 48x40x32";
  r.op = "gemm";
  r.workload = "K=32,M=48,N=40";
  r.strategy = "sa";
  r.key = "k";
  r.phase = "tuning";
  r.trials = trials;
  r.budget = 16;
  r.this_session = trials;
  r.best_gflops = best;
  r.elapsed = std::chrono::milliseconds(trials * 10);
  r.failures = {{"compile_error", trials / 4}};
  return r;
}

// Events of the latest snapshot of `kind` whose text contains `needle`.
std::size_t count_events(const tracker::DashboardSnapshot& snapshot, const std::string& kind,
                         const std::string& needle) {
  auto events = nlohmann::json::parse(snapshot.events_json);
  std::size_t n = 0;
  for (const auto& e : events) {
    if (e["kind"] == kind && e["text"].get<std::string>().find(needle) != std::string::npos) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("a client's session reports show up in the published sessions with a growing curve",
          "[tracker][dashboard]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io, dashboard_options());
  test::run_async(io, [&]() -> awaitable<void> {
    auto client = co_await pool.client("tuner");
    REQUIRE(client->accepts_reports());
    CHECK(client->report(report_at(4, 1.5)));
    CHECK(client->report(report_at(8, 2.5)));
    CHECK(client->report(report_at(12, 2.5)));
    nlohmann::json sessions;
    auto snapshot = co_await published(pool, [&](const tracker::DashboardSnapshot& s) {
      sessions = nlohmann::json::parse(s.sessions_json);
      return sessions.size() == 1 && sessions[0]["jobs"].size() == 1 && sessions[0]["jobs"][0]["trials"] == 12;
    });
    INFO(sessions.dump(2));
    REQUIRE(snapshot);
    const auto& session = sessions[0];
    CHECK(session["state"] == "running");
    CHECK(session["id"].get<std::string>().find("host:42:1") != std::string::npos);
    CHECK(session["client"].get<std::string>().find("tuner") != std::string::npos);
    const auto& job = session["jobs"][0];
    CHECK(job["op"] == "gemm");
    CHECK(job["workload"] == "K=32,M=48,N=40");
    CHECK(job["best_gflops"].get<double>() == 2.5);
    CHECK(job["failures"]["compile_error"] == 3);
    const auto& curve = job["curve"];
    REQUIRE(curve.size() == 3);
    CHECK(curve[0][0] == 4);
    CHECK(curve[1][0] == 8);
    CHECK(curve[2][0] == 12);
    CHECK(curve[0][2].get<double>() == 1.5);
    CHECK(curve[2][2].get<double>() == 2.5);
    // The same session in /api/state, and its start among the events.
    auto state = nlohmann::json::parse(snapshot->state_json);
    CHECK(state["sessions"] == sessions);
    CHECK(count_events(*snapshot, "session_start", "host:42:1") == 1);

    // Its end: a finished report, then the client leaves; the session stays shown.
    CHECK(job["finished"] == false);
    CHECK(job["outcome"].is_null());
    CHECK(session["outcome"].is_null());
    CHECK(session["stalled"] == false);
    SessionReport done = report_at(16, 3.0);
    done.phase = "done";
    done.finished = true;
    done.final_gflops = 2.75;  // re-measured: below the search's best
    done.final_speedup = 1.4;
    done.final_speedup_low = 1.3;
    done.final_speedup_high = 1.5;
    done.verdict = "faster";
    done.outcome = "done";
    CHECK(client->report(done));
    auto finished = co_await published(pool, [&](const tracker::DashboardSnapshot& s) {
      sessions = nlohmann::json::parse(s.sessions_json);
      return sessions.size() == 1 && sessions[0]["state"] == "finished";
    });
    INFO(sessions.dump(2));
    CHECK(finished);
    CHECK(sessions[0]["jobs"][0]["curve"].size() == 4);
    CHECK(sessions[0]["outcome"] == "done");
    const auto& last = sessions[0]["jobs"][0];
    CHECK(last["outcome"] == "done");
    CHECK(last["best_gflops"].get<double>() == 3.0);
    CHECK(last["final_gflops"].get<double>() == 2.75);
    CHECK(last["final_speedup"].get<double>() == 1.4);
    CHECK(last["final_speedup_low"].get<double>() == 1.3);
    CHECK(last["final_speedup_high"].get<double>() == 1.5);
    CHECK(last["verdict"] == "faster");
    CHECK_THAT(finished->metrics_text, Catch::Contains("kestrel_jobs_ended_total{outcome=\"done\"} 1\n"));
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a tracker without a dashboard does not offer to take session reports", "[tracker][dashboard]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io);
  test::run_async(io, [&]() -> awaitable<void> {
    auto client = co_await pool.client();
    CHECK_FALSE(client->accepts_reports());
    CHECK_FALSE(client->report(report_at(4, 1.0)));
    CHECK(pool.tracker().dashboard_feed() == nullptr);
    CHECK(pool.tracker().http_port() == 0);
    CHECK(pool.tracker().http_url().empty());
    co_return;
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a device that sends a session report is dropped as a protocol violation", "[tracker][dashboard][bad-input]") {
  log::set_level(log::Level::off);
  asio::io_context io;
  Pool pool(io, dashboard_options());
  test::run_async(io, [&]() -> awaitable<void> {
    auto socket = co_await connect_to("127.0.0.1", pool.tracker().port(), 2000ms);
    auto conn = Connection::create(std::move(socket));
    PeerHandshakeOptions options;
    options.role = wire::Role::DEVICE;
    options.name = "reporting-device";
    auto welcomed = co_await perform_handshake(conn, options);
    CHECK_FALSE(welcomed.accepts_reports);  // offered to clients only
    const auto rejected_before = pool.tracker().stats().rejected_connections;
    capnp::MallocMessageBuilder builder;
    to_wire(report_at(4, 1.0), builder.initRoot<wire::Frame>().initSessionReport());
    conn->send(builder);
    std::optional<std::string> failure;
    while (true) {
      ReadResult r = co_await conn->read_within(3000ms);
      if (!r.frame) break;
      if (r.frame->root().isFailure()) failure = r.frame->root().getFailure().getMessage().cStr();
    }
    REQUIRE(failure);
    CHECK_THAT(*failure, Catch::Contains("from a device"));
    CHECK(pool.tracker().stats().rejected_connections == rejected_before + 1);
    bool gone = co_await test::eventually([&] { return pool.tracker().stats().connections == 0; });
    CHECK(gone);
    auto snapshot = pool.tracker().dashboard_snapshot();
    CHECK(nlohmann::json::parse(snapshot.sessions_json).empty());
    conn->close();
  }, [&] { pool.shutdown(); });
}

TEST_CASE("the dashboard's events list devices joining and being lost, newest first", "[tracker][dashboard]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io, dashboard_options());
  test::run_async(io, [&]() -> awaitable<void> {
    auto& agent = pool.add_device("rpi4", "rpi4-a");
    co_await wait_devices(pool, 1);
    auto joined = co_await published(pool, [](const tracker::DashboardSnapshot& s) {
      return count_events(s, "join", "rpi4-a") == 1;
    });
    CHECK(joined);
    agent.stop();
    co_await wait_devices(pool, 0);
    std::string events;
    auto lost = co_await published(pool, [&](const tracker::DashboardSnapshot& s) {
      events = s.events_json;
      return count_events(s, "loss", "rpi4-a") == 1;
    });
    INFO(events);
    REQUIRE(lost);
    auto list = nlohmann::json::parse(events);
    REQUIRE(list.size() >= 2);
    CHECK(list[0]["kind"] == "loss");  // newest first
    CHECK(list[0]["t_ms_ago"].get<std::int64_t>() <= list[1]["t_ms_ago"].get<std::int64_t>());
    CHECK_THAT(lost->metrics_text, Catch::Contains("kestrel_device_losses_total 1"));
  }, [&] { pool.shutdown(); });
}

TEST_CASE("the metrics text has every contracted family with HELP and TYPE, and the lease-wait histogram counts a grant",
          "[tracker][dashboard][metrics]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io, dashboard_options());
  test::run_async(io, [&]() -> awaitable<void> {
    pool.add_device("k", "dev-1");
    co_await wait_devices(pool, 1);
    auto client = co_await pool.client("holder");
    Lease lease = co_await client->request("k", {0, 2000ms});
    CHECK(client->report(report_at(8, 2.0)));
    std::string metrics;
    auto counted = co_await published(pool, [&](const tracker::DashboardSnapshot& s) {
      metrics = s.metrics_text;
      return metrics.find("kestrel_lease_wait_seconds_count{key=\"k\"} 1\n") != std::string::npos &&
             metrics.find("kestrel_trials_total 8\n") != std::string::npos;
    });
    INFO(metrics);
    REQUIRE(counted);
    for (const char* family :
         {"kestrel_devices gauge", "kestrel_queue_depth gauge", "kestrel_lease_wait_seconds histogram",
          "kestrel_grants_total counter", "kestrel_requests_failed_total counter", "kestrel_trials_total counter",
          "kestrel_trials_per_second gauge", "kestrel_measurement_failures_total counter", "kestrel_sessions gauge",
          "kestrel_connections gauge", "kestrel_connections_refused_total counter",
          "kestrel_connections_rejected_total counter", "kestrel_uptime_seconds gauge",
          "kestrel_device_losses_total counter", "kestrel_dashboard_snapshot_seconds gauge",
          "kestrel_sessions_stalled gauge", "kestrel_jobs_ended_total counter"}) {
      std::string type_line = std::string("# TYPE ") + family + "\n";
      std::string name(family, std::string_view(family).find(' '));
      INFO(family);
      CHECK(metrics.find(type_line) != std::string::npos);
      CHECK(metrics.find("# HELP " + name + " ") != std::string::npos);
    }
    CHECK_THAT(metrics, Catch::Contains("kestrel_devices{key=\"k\",state=\"busy\"} 1\n"));
    CHECK_THAT(metrics, Catch::Contains("kestrel_grants_total 1\n"));
    CHECK_THAT(metrics, Catch::Contains("kestrel_lease_wait_seconds_bucket{key=\"k\",le=\"+Inf\"} 1\n"));
    CHECK_THAT(metrics, Catch::Contains("kestrel_measurement_failures_total{status=\"compile_error\"} 2\n"));
    CHECK_THAT(metrics, Catch::Contains("kestrel_connections{role=\"client\"} 1\n"));
    // Every sample line belongs to a family declared above it.
    std::istringstream lines(metrics);
    std::string line, declared;
    while (std::getline(lines, line)) {
      if (line.rfind("# TYPE ", 0) == 0) {
        declared = line.substr(7, line.find(' ', 7) - 7);
      } else if (!line.empty() && line[0] != '#') {
        INFO(line);
        CHECK(line.rfind(declared, 0) == 0);
      }
    }
    co_await client->release(lease.id);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("the tracker publishes snapshots only while someone wants them, and at once when asked",
          "[tracker][dashboard]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io, dashboard_options(20ms));
  test::run_async(io, [&]() -> awaitable<void> {
    auto feed = pool.tracker().dashboard_feed();
    REQUIRE(feed);
    // One at start, so that the first request finds something; then none while nobody looks.
    bool first = co_await test::eventually([&] { return feed->latest() != nullptr; });
    REQUIRE(first);
    const auto at_start = feed->latest()->version;
    co_await test::sleep_for(300ms);
    CHECK(feed->latest()->version == at_start);

    // A live viewer: one each interval (20 ms; allow a loaded machine).
    feed->viewer_opened();
    bool flowing = co_await test::eventually([&] { return feed->latest()->version >= at_start + 3; });
    CHECK(flowing);
    feed->viewer_closed();

    // The refresher: a request that finds a stale snapshot gets a fresh one built at once.
    const auto before = feed->latest()->version;
    feed->request_refresh();
    bool refreshed = co_await test::eventually([&] { return feed->latest()->version > before; }, 2s);
    CHECK(refreshed);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a refresh asked for with a long interval is built at once, not at the next tick", "[tracker][dashboard]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io, dashboard_options(1h));
  test::run_async(io, [&]() -> awaitable<void> {
    auto feed = pool.tracker().dashboard_feed();
    bool first = co_await test::eventually([&] { return feed->latest() != nullptr; });
    REQUIRE(first);
    pool.add_device("k", "late-device");
    co_await wait_devices(pool, 1);
    CHECK(nlohmann::json::parse(feed->latest()->pool_json)["devices"].empty());
    feed->request_refresh();
    bool fresh = co_await test::eventually(
        [&] { return nlohmann::json::parse(feed->latest()->pool_json)["devices"].size() == 1; }, 2s);
    CHECK(fresh);
    auto device = nlohmann::json::parse(feed->latest()->pool_json)["devices"][0];
    CHECK(device["name"] == "late-device");
    CHECK(device["state"] == "free");
    CHECK(device["caps"]["cores"].get<int>() > 0);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("the pool document lists devices by key and name and follows joins and losses between snapshots",
          "[tracker][dashboard]") {
  log::set_level(log::Level::warn);
  asio::io_context io;
  Pool pool(io, dashboard_options());
  test::run_async(io, [&]() -> awaitable<void> {
    auto names = [](const tracker::DashboardSnapshot& s) {
      std::vector<std::string> list;
      const auto document = nlohmann::json::parse(s.pool_json);
      for (const auto& d : document["devices"]) {
        list.push_back(d["key"].get<std::string>() + "/" + d["name"].get<std::string>());
      }
      return list;
    };
    pool.add_device("b", "b-2");
    pool.add_device("a", "a-9");
    auto& b1 = pool.add_device("b", "b-1");
    co_await wait_devices(pool, 3);
    std::vector<std::string> seen;
    auto three = co_await published(pool, [&](const tracker::DashboardSnapshot& s) {
      seen = names(s);
      return seen.size() == 3;
    });
    INFO(Catch::Detail::stringify(seen));
    REQUIRE(three);
    CHECK(seen == std::vector<std::string>{"a/a-9", "b/b-1", "b/b-2"});
    b1.stop();
    co_await wait_devices(pool, 2);
    pool.add_device("a", "a-1");
    co_await wait_devices(pool, 3);
    auto after = co_await published(pool, [&](const tracker::DashboardSnapshot& s) {
      seen = names(s);
      return seen.size() == 3 && seen[1] == "a/a-9";
    });
    INFO(Catch::Detail::stringify(seen));
    CHECK(after);
    CHECK(seen == std::vector<std::string>{"a/a-1", "a/a-9", "b/b-2"});
  }, [&] { pool.shutdown(); });
}

TEST_CASE("a grant timeout and a client asking again after losing its device show up as events and counters",
          "[tracker][dashboard]") {
  log::set_level(log::Level::off);
  asio::io_context io;
  Pool pool(io, dashboard_options());
  test::run_async(io, [&]() -> awaitable<void> {
    auto client = co_await pool.client("asker");
    // Nobody serves "none": the request times out.
    RequestOptions short_wait{0, 100ms};
    bool timed_out = false;
    try {
      co_await client->request("none", short_wait);
    } catch (const RpcError& e) {
      timed_out = e.code() == ErrorCode::timeout;
    }
    CHECK(timed_out);
    // A device under "k" is lost while leased; the client asks for "k" again.
    auto& doomed = pool.add_device("k", "doomed");
    co_await wait_devices(pool, 1);
    Lease lease = co_await client->request("k", {0, 2000ms});
    CHECK(lease.info.name == "doomed");
    doomed.stop();
    co_await wait_devices(pool, 0);
    RequestId again = client->submit("k", {0, 5000ms});
    (void)again;
    std::string events;
    auto seen = co_await published(pool, [&](const tracker::DashboardSnapshot& s) {
      events = s.events_json;
      return count_events(s, "grant_timeout", "for key none") == 1 && count_events(s, "requeue", "doomed") == 1;
    });
    INFO(events);
    REQUIRE(seen);
    CHECK_THAT(seen->metrics_text, Catch::Contains("kestrel_requests_failed_total{reason=\"timeout\"} 1\n"));
    CHECK_THAT(seen->metrics_text, Catch::Contains("kestrel_queue_depth{key=\"k\"} 1\n"));
    // The waiting request in the pool's queue, with its client.
    auto queues = nlohmann::json::parse(seen->pool_json)["queues"];
    REQUIRE(queues.size() == 1);
    CHECK(queues[0]["key"] == "k");
    REQUIRE(queues[0]["waiting"].size() == 1);
    CHECK(queues[0]["waiting"][0]["client"].get<std::string>().find("asker") != std::string::npos);
  }, [&] { pool.shutdown(); });
}

TEST_CASE("with client and device tokens the dashboard takes reports from authenticated clients, over TLS or frame MACs",
          "[tracker][dashboard][auth]") {
  log::set_level(log::Level::warn);
  for (bool no_tls : {false, true}) {
    INFO((no_tls ? "--no-tls" : "TLS"));
    asio::io_context io;
    auto options = dashboard_options();
    options.client_token = Token("client-secret-0123456789");
    options.device_token = Token("device-secret-0123456789");
    options.no_tls = no_tls;
    Pool pool(io, options);
    CHECK(static_cast<bool>(pool.tracker().tls()) == !no_tls);
    test::run_async(io, [&]() -> awaitable<void> {
      ClientOptions client_options;
      client_options.name = "secure tuner";
      client_options.token = Token("client-secret-0123456789");
      client_options.tls.disabled = no_tls;
      auto client = co_await TrackerClient::connect(pool.endpoint(), client_options);
      REQUIRE(client->accepts_reports());
      CHECK(client->report(report_at(4, 1.0)));
      auto seen = co_await published(pool, [](const tracker::DashboardSnapshot& s) {
        return nlohmann::json::parse(s.sessions_json).size() == 1;
      });
      CHECK(seen);
      auto tracker_facts = nlohmann::json::parse(seen->state_json)["tracker"];
      CHECK(tracker_facts["auth"] == true);
      CHECK(tracker_facts["tls"] == !no_tls);
      client->close();
    }, [&] { pool.shutdown(); });
  }
}

// ---- DashboardState alone, with the times given ------------------------------------

namespace {

struct Board {
  tracker::DashboardState state;
  tracker::Pool pool;
  tracker::TrackerFacts facts;
  const tracker::TimePoint t0 = tracker::TimePoint{} + 100h;

  Board() {
    for (std::uint64_t c : {1, 2, 3}) {
      state.client_connected(ConnectionId(c), "tuner-" + std::to_string(c), "127.0.0.1:4444", t0);
    }
  }
  tracker::DashboardSnapshot at(std::chrono::milliseconds after) { return state.snapshot(pool, facts, t0 + after); }
  // The session of `client` in the snapshot taken `after` t0 (null when not shown).
  nlohmann::json session(ConnectionId client, std::chrono::milliseconds after) {
    for (const auto& s : nlohmann::json::parse(at(after).sessions_json)) {
      if (s["id"].get<std::string>().rfind(std::to_string(client.value) + "/", 0) == 0) return s;
    }
    return nullptr;
  }
};

SessionReport last_report(std::uint32_t trials, const std::string& outcome) {
  SessionReport r = report_at(trials, 2.0);
  r.phase = "done";
  r.finished = true;
  r.outcome = outcome;
  return r;
}

}  // namespace

TEST_CASE("an interrupted, a failed and a vanished session are shown as such, in the documents and the metrics",
          "[tracker][dashboard][outcome]") {
  Board b;
  // Client 1: a session interrupted (Ctrl-C); its recommendation is the best recorded.
  CHECK(b.state.report(ConnectionId(1), report_at(4, 1.0), b.t0));
  SessionReport interrupted = last_report(6, "interrupted");
  interrupted.final_gflops = 1.9;
  CHECK(b.state.report(ConnectionId(1), interrupted, b.t0 + 1s));
  // Client 2: two jobs; the first done, the second failed with the error.
  SessionReport first = last_report(16, "done");
  first.final_gflops = 2.5;
  first.final_speedup = 1.2;
  first.final_speedup_low = 1.1;
  first.final_speedup_high = 1.3;
  first.verdict = "faster";
  CHECK(b.state.report(ConnectionId(2), first, b.t0));
  SessionReport second = report_at(4, 1.0);
  second.job = 1;
  CHECK(b.state.report(ConnectionId(2), second, b.t0 + 1s));
  second = last_report(4, "failed");
  second.job = 1;
  second.message = "no device of key k left after 300 s";
  CHECK(b.state.report(ConnectionId(2), second, b.t0 + 2s));
  // Client 3: a session whose client leaves without a last report.
  CHECK(b.state.report(ConnectionId(3), report_at(4, 1.0), b.t0));
  b.state.client_left(ConnectionId(3), "disconnected", b.t0 + 3s);

  auto one = b.session(ConnectionId(1), 5s);
  INFO(one.dump(2));
  CHECK(one["state"] == "finished");
  CHECK(one["outcome"] == "interrupted");
  CHECK(one["stalled"] == false);
  CHECK(one["jobs"][0]["outcome"] == "interrupted");
  CHECK(one["jobs"][0]["final_gflops"].get<double>() == 1.9);
  CHECK(one["jobs"][0]["verdict"] == "");

  auto two = b.session(ConnectionId(2), 5s);
  INFO(two.dump(2));
  CHECK(two["state"] == "finished");
  CHECK(two["outcome"] == "failed");
  REQUIRE(two["jobs"].size() == 2);
  CHECK(two["jobs"][0]["outcome"] == "done");
  CHECK(two["jobs"][0]["verdict"] == "faster");
  CHECK(two["jobs"][0]["final_speedup_low"].get<double>() == 1.1);
  CHECK(two["jobs"][1]["outcome"] == "failed");
  CHECK(two["jobs"][1]["message"] == "no device of key k left after 300 s");
  CHECK(two["jobs"][1]["final_gflops"].get<double>() == 0);

  auto three = b.session(ConnectionId(3), 5s);
  INFO(three.dump(2));
  CHECK(three["state"] == "gone");
  CHECK(three["outcome"].is_null());
  CHECK(three["stalled"] == false);

  auto snapshot = b.at(5s);
  CHECK(count_events(snapshot, "session_end", "(interrupted)") == 1);
  CHECK(count_events(snapshot, "session_end", "(failed): job 1 failed: no device of key k left") == 1);
  CHECK(count_events(snapshot, "session_end", "gone: its client left") == 1);
  // Jobs by outcome: client 2's first done, its second failed; client 3's gone.
  for (const char* line : {"kestrel_jobs_ended_total{outcome=\"done\"} 1\n",
                           "kestrel_jobs_ended_total{outcome=\"interrupted\"} 1\n",
                           "kestrel_jobs_ended_total{outcome=\"failed\"} 1\n",
                           "kestrel_jobs_ended_total{outcome=\"gone\"} 1\n", "kestrel_sessions_stalled 0\n"}) {
    CHECK_THAT(snapshot.metrics_text, Catch::Contains(line));
  }
  CHECK(b.state.ended_jobs().at("failed") == 1);
  // A job's last report counts once, even when sent again.
  CHECK(b.state.report(ConnectionId(1), interrupted, b.t0 + 6s));
  CHECK(b.state.ended_jobs().at("interrupted") == 1);
}

TEST_CASE("an unknown outcome reads as done, and a running job's outcome and message are dropped",
          "[tracker][dashboard][outcome][bad-input]") {
  Board b;
  SessionReport running = report_at(4, 1.0);
  running.outcome = "failed";
  running.message = "not yet";
  running.final_gflops = std::numeric_limits<double>::quiet_NaN();
  CHECK(b.state.report(ConnectionId(1), running, b.t0));
  auto shown = b.session(ConnectionId(1), 1s);
  INFO(shown.dump(2));
  CHECK(shown["jobs"][0]["outcome"].is_null());
  CHECK(shown["jobs"][0]["message"] == "");
  CHECK(shown["jobs"][0]["final_gflops"].get<double>() == 0);
  CHECK(b.state.report(ConnectionId(1), last_report(8, "exploded\"} 1"), b.t0 + 1s));
  shown = b.session(ConnectionId(1), 2s);
  CHECK(shown["outcome"] == "done");
  CHECK(shown["jobs"][0]["outcome"] == "done");
  CHECK_THAT(b.at(2s).metrics_text, Catch::Contains("kestrel_jobs_ended_total{outcome=\"done\"} 1\n"));
}

TEST_CASE("a running session silent past max(60 s, 3 x its typical interval) is stalled, with its last ETA",
          "[tracker][dashboard][stall]") {
  CHECK(tracker::DashboardState::stall_after(0ms) == 60s);
  CHECK(tracker::DashboardState::stall_after(10s) == 60s);
  CHECK(tracker::DashboardState::stall_after(30s) == 90s);

  Board b;
  // Client 1 reports every 10 s (the floor applies); client 2 every 30 s (90 s).
  std::chrono::milliseconds last1{0}, last2{0};
  for (std::uint32_t i = 0; i < 5; ++i) {
    SessionReport r = report_at(4 * (i + 1), 1.0 + i);
    r.eta = std::chrono::milliseconds(40000 - 10000 * i);
    last1 = std::chrono::milliseconds(10000 * i);
    CHECK(b.state.report(ConnectionId(1), r, b.t0 + last1));
  }
  for (std::uint32_t i = 0; i < 4; ++i) {
    SessionReport r = report_at(4 * (i + 1), 1.0 + i);
    r.eta = std::chrono::milliseconds(600000);
    last2 = std::chrono::milliseconds(30000 * i);
    CHECK(b.state.report(ConnectionId(2), r, b.t0 + last2));
  }
  // One report only: no interval known, the floor.
  CHECK(b.state.report(ConnectionId(3), report_at(4, 1.0), b.t0));

  auto one = b.session(ConnectionId(1), last1 + 59s);
  INFO(one.dump(2));
  CHECK(one["stalled"] == false);
  CHECK(one["report_interval_ms"] == 10000);
  CHECK(one["stall_after_ms"] == 60000);
  CHECK(one["eta_ms"] == 0);  // the last report's: nothing left
  CHECK(b.session(ConnectionId(1), last1 + 61s)["stalled"] == true);

  auto two = b.session(ConnectionId(2), last2 + 80s);
  INFO(two.dump(2));
  CHECK(two["stalled"] == false);
  CHECK(two["report_interval_ms"] == 30000);
  CHECK(two["stall_after_ms"] == 90000);
  CHECK(two["eta_ms"] == 600000);
  CHECK(two["jobs"][0]["eta_ms"] == 600000);
  two = b.session(ConnectionId(2), last2 + 91s);
  CHECK(two["stalled"] == true);
  CHECK(two["updated_ms_ago"] == 91000);

  CHECK(b.session(ConnectionId(3), 60s)["stalled"] == false);
  CHECK(b.session(ConnectionId(3), 61s)["report_interval_ms"] == 0);
  CHECK(b.session(ConnectionId(3), 61s)["stalled"] == true);
  CHECK(b.state.stalled_sessions(b.t0 + last2 + 91s) == 3);
  CHECK_THAT(b.at(last2 + 91s).metrics_text, Catch::Contains("kestrel_sessions_stalled 3\n"));

  // A report ends the stall; a finished or gone session is never stalled.
  const auto later = last2 + 100s;
  CHECK(b.state.report(ConnectionId(2), report_at(20, 5.0), b.t0 + later));
  CHECK(b.session(ConnectionId(2), later + 1s)["stalled"] == false);
  CHECK(b.state.report(ConnectionId(1), last_report(24, "done"), b.t0 + later));
  b.state.client_left(ConnectionId(3), "disconnected", b.t0 + later);
  CHECK(b.session(ConnectionId(1), later + 1h)["stalled"] == false);
  CHECK(b.session(ConnectionId(3), later + 1h)["stalled"] == false);
  CHECK(b.state.stalled_sessions(b.t0 + later + 1h) == 1);
}
