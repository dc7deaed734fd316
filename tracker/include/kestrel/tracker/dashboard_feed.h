// What the tracker's dashboard shows, handed from the tracker's thread to the HTTP
// server's thread. The tracker builds a snapshot of its state (JSON documents and the
// Prometheus text) on its own thread while someone is looking, and publishes it here;
// the HTTP server serves the latest one and streams each new one to live pages. See
// docs/dashboard.md for the documents' fields.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kestrel::tracker {

struct DashboardSnapshot {
  std::uint64_t version = 0;  // set by publish(): 1, 2, ...
  std::chrono::steady_clock::time_point made_at{};
  std::string state_json;     // GET /api/state and each `state` event of /api/stream
  std::string pool_json;      // GET /api/pool
  std::string sessions_json;  // GET /api/sessions
  std::string events_json;    // GET /api/events
  std::string metrics_text;   // GET /metrics (Prometheus text format 0.0.4)
};

class DashboardFeed {
 public:
  // Someone looked within this long (or a live page is open): the tracker keeps
  // publishing. Past it, the tracker stops building snapshots nobody reads.
  static constexpr std::chrono::seconds kInterestWindow{10};

  // The tracker: replaces the latest snapshot (its version and time are set here) and
  // calls every listener.
  void publish(DashboardSnapshot snapshot);
  // The latest snapshot; null before the first publish.
  std::shared_ptr<const DashboardSnapshot> latest() const;

  // The HTTP server: called after each publish, on the publishing thread; it must only
  // hand the news over (post to its own executor), never block.
  void add_listener(std::function<void()> listener);
  // The tracker: what the HTTP server calls to ask for a fresh snapshot now (it posts
  // a build onto the tracker's thread). Set before the HTTP server starts.
  void set_refresher(std::function<void()> refresher);
  // The HTTP server: a request wants a snapshot no older than the tracker's interval;
  // counts as interest and asks the tracker for a fresh one.
  void request_refresh();

  // Interest: each request marks it; live pages (SSE streams) hold it while open.
  void mark_wanted();
  void viewer_opened();
  void viewer_closed();
  std::size_t viewers() const;
  bool wanted(std::chrono::steady_clock::time_point now) const;

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const DashboardSnapshot> latest_;
  std::uint64_t version_ = 0;
  std::vector<std::function<void()>> listeners_;
  std::function<void()> refresher_;
  std::atomic<std::size_t> viewers_{0};
  std::atomic<std::int64_t> wanted_at_{std::numeric_limits<std::int64_t>::min()};  // steady ticks
};

}  // namespace kestrel::tracker
