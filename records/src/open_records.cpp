// Where records live: a PostgreSQL URI opens PgRecords, anything else an SQLite file.
// A location that looks like a URI of another scheme is refused rather than taken as a
// file name, and messages never show a password.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "kestrel/base/suggest.h"
#include "kestrel/records/pg_records.h"
#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"
#include "rows.h"

namespace kestrel::records {
namespace {

// The scheme of "scheme://...", or "" when `location` does not start with one.
std::string scheme_of(const std::string& location) {
  const auto end = location.find("://");
  if (end == std::string::npos || end == 0) return {};
  const std::string scheme = location.substr(0, end);
  if (std::isalpha(static_cast<unsigned char>(scheme[0])) == 0) return {};
  const bool uri_like = std::all_of(scheme.begin(), scheme.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '-' || c == '.';
  });
  return uri_like ? scheme : std::string{};
}

// A URI of a scheme Kestrel does not store records in ("postgresq://", "mysql://") is a
// mistake, not a file name: SQLite would create a file of that name in a directory
// "postgresq:". (SQLite's own "file:" URIs have no "//" after the colon when relative,
// and "file://" is accepted as SQLite's.)
void refuse_unknown_scheme(const std::string& location) {
  const std::string scheme = scheme_of(location);
  if (scheme.empty() || is_postgres_uri(location) || scheme == "file") return;
  throw RecordsError("records location " + detail::in_quotes(without_password(location)) + " has an unknown scheme " +
                     detail::in_quotes(scheme) + did_you_mean(scheme, {"postgresql", "postgres"}) +
                     ": give a postgresql://user@host/database URI for PostgreSQL, or a file path for SQLite");
}

}  // namespace

std::string without_password(const std::string& uri) {
  std::string out = uri;
  const auto scheme = out.find("://");
  if (scheme == std::string::npos) return out;
  const auto start = scheme + 3;
  const auto end = std::min(out.find_first_of("/?", start), out.size());
  const auto at = out.rfind('@', end == 0 ? 0 : end - 1);
  if (at != std::string::npos && at >= start) {
    const auto colon = out.find(':', start);
    if (colon != std::string::npos && colon < at) out.erase(colon, at - colon);
  }
  // A password=... parameter, with the separator before it.
  for (auto q = out.find('?'); q != std::string::npos;) {
    auto param = out.find("password=", q);
    if (param == std::string::npos) break;
    if (out[param - 1] != '?' && out[param - 1] != '&') {
      q = param + 1;
      continue;
    }
    auto stop = out.find('&', param);
    if (out[param - 1] == '?') {
      out.erase(param, stop == std::string::npos ? std::string::npos : stop + 1 - param);
      if (out.back() == '?') out.pop_back();
    } else {
      out.erase(param - 1, stop == std::string::npos ? std::string::npos : stop - (param - 1));
    }
  }
  return out;
}

bool is_postgres_uri(const std::string& location) {
  return location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0;
}

std::unique_ptr<RecordStore> open_records(const std::string& location, OpenMode mode) {
  refuse_unknown_scheme(location);
  if (is_postgres_uri(location)) return std::make_unique<PgRecords>(location, mode);
  return std::make_unique<SqliteRecords>(location, mode);
}

bool records_exist(const std::string& location) {
  refuse_unknown_scheme(location);
  if (is_postgres_uri(location)) return PgRecords::holds_records(location);
  std::error_code ec;
  return std::filesystem::exists(location, ec);
}

}  // namespace kestrel::records
