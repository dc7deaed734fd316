// Request queue order: priority first, FIFO within a priority; removal.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "kestrel/tracker/request_queue.h"

using namespace kestrel;
using namespace kestrel::tracker;

namespace {
QueuedRequest req(std::uint64_t client, std::uint64_t id, const std::string& key, int priority) {
  return QueuedRequest{ConnectionId(client), id, key, priority, 0};
}
}  // namespace

TEST_CASE("higher priority first, FIFO within a priority", "[queue]") {
  RequestQueue q;
  REQUIRE(q.push(req(1, 1, "k", 0)));
  REQUIRE(q.push(req(2, 1, "k", 5)));
  REQUIRE(q.push(req(3, 1, "k", 0)));
  REQUIRE(q.push(req(4, 1, "k", 5)));
  REQUIRE(q.push(req(5, 1, "k", -1)));
  std::vector<std::uint64_t> order;
  while (auto r = q.pop("k")) order.push_back(r->client.value);
  CHECK(order == std::vector<std::uint64_t>{2, 4, 1, 3, 5});
  CHECK(q.size() == 0);
}

TEST_CASE("keys are independent queues", "[queue]") {
  RequestQueue q;
  q.push(req(1, 1, "a", 0));
  q.push(req(1, 2, "b", 9));
  CHECK(q.size("a") == 1);
  CHECK(q.size("b") == 1);
  CHECK(q.pop("a")->request_id == 1);
  CHECK_FALSE(q.pop("a"));
  CHECK(q.peek("b")->priority == 9);
  CHECK(q.keys() == std::vector<std::string>{"b"});
}

TEST_CASE("duplicate request ids from one client are refused", "[queue]") {
  RequestQueue q;
  CHECK(q.push(req(1, 7, "k", 0)));
  CHECK_FALSE(q.push(req(1, 7, "other", 3)));
  CHECK(q.push(req(2, 7, "k", 0)));  // another client may reuse the number
  CHECK(q.size() == 2);
}

TEST_CASE("cancel and disconnect remove requests", "[queue]") {
  RequestQueue q;
  q.push(req(1, 1, "k", 0));
  q.push(req(1, 2, "j", 0));
  q.push(req(2, 1, "k", 0));
  CHECK(q.remove(ConnectionId(2), 1)->client.value == 2);
  CHECK_FALSE(q.remove(ConnectionId(2), 1));
  auto removed = q.remove_client(ConnectionId(1));
  CHECK(removed.size() == 2);
  CHECK(q.size() == 0);
  CHECK(q.keys().empty());
}

TEST_CASE("queue order matches a reference model under random operations", "[queue]") {
  std::mt19937 rng(99);
  for (int round = 0; round < 50; ++round) {
    RequestQueue q;
    std::vector<QueuedRequest> model;  // arrival order
    std::uint64_t next_id = 1;
    for (int step = 0; step < 200; ++step) {
      int op = static_cast<int>(rng() % 4);
      if (op <= 1) {
        auto r = req(1 + rng() % 5, next_id++, rng() % 2 ? "a" : "b", static_cast<int>(rng() % 4) - 1);
        REQUIRE(q.push(r));
        model.push_back(r);
      } else if (op == 2) {
        std::string key = rng() % 2 ? "a" : "b";
        // Reference: max priority, earliest arrival.
        auto best = model.end();
        for (auto it = model.begin(); it != model.end(); ++it) {
          if (it->key == key && (best == model.end() || it->priority > best->priority)) best = it;
        }
        auto got = q.pop(key);
        if (best == model.end()) {
          CHECK_FALSE(got);
        } else {
          REQUIRE(got);
          CHECK(got->request_id == best->request_id);
          model.erase(best);
        }
      } else if (!model.empty()) {
        auto victim = model.begin() + static_cast<long>(rng() % model.size());
        CHECK(q.remove(victim->client, victim->request_id));
        model.erase(victim);
      }
      REQUIRE(q.size() == model.size());
    }
  }
}
