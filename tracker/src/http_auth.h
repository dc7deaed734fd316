// Who may read the dashboard: a request proves one of the tracker's dashboard tokens by
// `Authorization: Bearer <token>` or by the cookie the login page sets, whose value is
// hex(HMAC-SHA256(token, "kestrel-dashboard-v1 cookie")) (so the cookie never holds the
// token itself). Every comparison runs in constant time.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/rpc/auth.h"

namespace kestrel::tracker {

inline constexpr std::string_view kDashboardCookieName = "kestrel_dashboard";
inline constexpr std::string_view kDashboardCookieLabel = "kestrel-dashboard-v1 cookie";

class HttpAuth {
 public:
  // No tokens: every request is allowed. Keeps only the tokens' cookie MACs.
  explicit HttpAuth(const std::vector<rpc::Token>& tokens);

  bool required() const { return !cookies_.empty(); }
  // The request's `Authorization` and `Cookie` header values (empty when absent).
  bool allows(std::string_view authorization, std::string_view cookie) const;
  // The login form's token: the cookie value (hex) to set when it is one of the tokens.
  std::optional<std::string> login(std::string_view token) const;

 private:
  bool matches(const rpc::Mac& mac) const;  // one of cookies_, in constant time
  std::vector<rpc::Mac> cookies_;
};

// The MAC a token (or a candidate) gives: HMAC-SHA256(token, kDashboardCookieLabel).
rpc::Mac dashboard_cookie_mac(std::string_view token);

// The value of field `name` in an application/x-www-form-urlencoded body ('+' and %XX
// decoded); none when absent or badly encoded.
std::optional<std::string> form_field(std::string_view body, std::string_view name);

}  // namespace kestrel::tracker
