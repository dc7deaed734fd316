// Process-wide stderr logger.
#include "kestrel/base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace kestrel::log {
namespace {
std::atomic<Level> g_level{Level::info};
std::mutex g_mutex;

const char* level_name(Level level) {
  switch (level) {
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    case Level::off: return "off";
  }
  return "?";
}
}  // namespace

void set_level(Level level) { g_level.store(level); }
Level level() { return g_level.load(std::memory_order_relaxed); }

bool parse_level(std::string_view text, Level& out) {
  for (Level l : {Level::debug, Level::info, Level::warn, Level::error, Level::off}) {
    if (text == level_name(l)) {
      out = l;
      return true;
    }
  }
  return false;
}

void write(Level lvl, std::string_view component, std::string_view message) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "%s.%03lld %-5s %.*s: %.*s\n", stamp, static_cast<long long>(ms),
               level_name(lvl), static_cast<int>(component.size()), component.data(),
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

}  // namespace kestrel::log
