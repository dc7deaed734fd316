#include "kestrel/tracker/dashboard_feed.h"

namespace kestrel::tracker {

void DashboardFeed::publish(DashboardSnapshot snapshot) {
  std::vector<std::function<void()>> listeners;
  {
    std::lock_guard lock(mutex_);
    snapshot.version = ++version_;
    snapshot.made_at = std::chrono::steady_clock::now();
    latest_ = std::make_shared<const DashboardSnapshot>(std::move(snapshot));
    listeners = listeners_;
  }
  for (const auto& listener : listeners) listener();
}

std::shared_ptr<const DashboardSnapshot> DashboardFeed::latest() const {
  std::lock_guard lock(mutex_);
  return latest_;
}

void DashboardFeed::add_listener(std::function<void()> listener) {
  std::lock_guard lock(mutex_);
  listeners_.push_back(std::move(listener));
}

void DashboardFeed::set_refresher(std::function<void()> refresher) {
  std::lock_guard lock(mutex_);
  refresher_ = std::move(refresher);
}

void DashboardFeed::request_refresh() {
  mark_wanted();
  std::function<void()> refresher;
  {
    std::lock_guard lock(mutex_);
    refresher = refresher_;
  }
  if (refresher) refresher();
}

void DashboardFeed::mark_wanted() {
  wanted_at_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void DashboardFeed::viewer_opened() {
  viewers_.fetch_add(1, std::memory_order_relaxed);
  mark_wanted();
}

void DashboardFeed::viewer_closed() {
  viewers_.fetch_sub(1, std::memory_order_relaxed);
  mark_wanted();
}

std::size_t DashboardFeed::viewers() const { return viewers_.load(std::memory_order_relaxed); }

bool DashboardFeed::wanted(std::chrono::steady_clock::time_point now) const {
  if (viewers() > 0) return true;
  auto at = wanted_at_.load(std::memory_order_relaxed);
  if (at == std::numeric_limits<std::int64_t>::min()) return false;
  auto since = now.time_since_epoch() - std::chrono::steady_clock::duration(at);
  return since <= kInterestWindow;
}

}  // namespace kestrel::tracker
