// Priority/FIFO request queues per key.
#include "kestrel/tracker/request_queue.h"

namespace kestrel::tracker {

bool RequestQueue::push(QueuedRequest request) {
  auto ident = std::make_pair(request.client, request.request_id);
  if (index_.contains(ident)) return false;
  request.seq = next_seq_++;
  Order order = order_of(request);
  index_.emplace(ident, std::make_pair(request.key, order));
  auto& queue = by_key_[request.key];
  queue.emplace(order, std::move(request));
  return true;
}

const QueuedRequest* RequestQueue::peek(const std::string& key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end() || it->second.empty()) return nullptr;
  return &it->second.begin()->second;
}

std::optional<QueuedRequest> RequestQueue::pop(const std::string& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end() || it->second.empty()) return std::nullopt;
  QueuedRequest request = std::move(it->second.begin()->second);
  it->second.erase(it->second.begin());
  if (it->second.empty()) by_key_.erase(it);
  index_.erase({request.client, request.request_id});
  return request;
}

std::optional<QueuedRequest> RequestQueue::remove(ConnectionId client, std::uint64_t request_id) {
  auto idx = index_.find({client, request_id});
  if (idx == index_.end()) return std::nullopt;
  auto [key, order] = idx->second;
  index_.erase(idx);
  auto queue = by_key_.find(key);
  QueuedRequest request = std::move(queue->second.at(order));
  queue->second.erase(order);
  if (queue->second.empty()) by_key_.erase(queue);
  return request;
}

std::vector<QueuedRequest> RequestQueue::remove_client(ConnectionId client) {
  std::vector<std::uint64_t> ids;
  for (auto it = index_.lower_bound({client, 0}); it != index_.end() && it->first.first == client; ++it) {
    ids.push_back(it->first.second);
  }
  std::vector<QueuedRequest> removed;
  for (auto id : ids) removed.push_back(*remove(client, id));
  return removed;
}

std::size_t RequestQueue::size(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? 0 : it->second.size();
}

std::size_t RequestQueue::size_of(ConnectionId client) const {
  std::size_t count = 0;
  for (auto it = index_.lower_bound({client, 0}); it != index_.end() && it->first.first == client; ++it) ++count;
  return count;
}

std::vector<std::string> RequestQueue::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, queue] : by_key_) out.push_back(key);
  return out;
}

std::vector<const QueuedRequest*> RequestQueue::queued(const std::string& key) const {
  std::vector<const QueuedRequest*> out;
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return out;
  out.reserve(it->second.size());
  for (const auto& [order, request] : it->second) out.push_back(&request);
  return out;
}

}  // namespace kestrel::tracker
