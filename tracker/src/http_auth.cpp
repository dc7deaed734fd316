// The dashboard's token checks: bearer tokens and login cookies (see http_auth.h).
#include "http_auth.h"

#include <cctype>
#include <cstdint>
#include <span>

namespace kestrel::tracker {
namespace {

constexpr char kHex[] = "0123456789abcdef";

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string to_hex(const rpc::Mac& mac) {
  std::string hex;
  hex.reserve(mac.size() * 2);
  for (auto b : mac) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 15]);
  }
  return hex;
}

std::optional<rpc::Mac> from_hex(std::string_view hex) {
  rpc::Mac mac{};
  if (hex.size() != mac.size() * 2) return std::nullopt;
  for (std::size_t i = 0; i < mac.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]);
    const int lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    mac[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return mac;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of cookie `name` in a Cookie header ("a=1; b=2").
std::optional<std::string_view> cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const auto end = header.find(';');
    auto pair = trim(header.substr(0, end));
    header = end == std::string_view::npos ? std::string_view() : header.substr(end + 1);
    const auto eq = pair.find('=');
    if (eq != std::string_view::npos && trim(pair.substr(0, eq)) == name) return trim(pair.substr(eq + 1));
  }
  return std::nullopt;
}

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    const auto a = static_cast<unsigned char>(s[i]);
    const auto b = static_cast<unsigned char>(prefix[i]);
    if (std::tolower(a) != std::tolower(b)) return false;
  }
  return true;
}

}  // namespace

rpc::Mac dashboard_cookie_mac(std::string_view token) {
  const std::span<const std::uint8_t> key(reinterpret_cast<const std::uint8_t*>(token.data()), token.size());
  const std::span<const std::uint8_t> label(reinterpret_cast<const std::uint8_t*>(kDashboardCookieLabel.data()),
                                            kDashboardCookieLabel.size());
  return rpc::hmac_sha256(key, label);
}

HttpAuth::HttpAuth(const std::vector<rpc::Token>& tokens) {
  for (const auto& token : tokens) {
    const auto bytes = token.bytes();
    cookies_.push_back(dashboard_cookie_mac({reinterpret_cast<const char*>(bytes.data()), bytes.size()}));
  }
}

bool HttpAuth::matches(const rpc::Mac& mac) const {
  bool any = false;
  for (const auto& expected : cookies_) any |= rpc::mac_matches(expected, mac);  // no early exit
  return any;
}

bool HttpAuth::allows(std::string_view authorization, std::string_view cookie) const {
  if (!required()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (iequals_prefix(authorization, kBearer)) {
    const auto token = trim(authorization.substr(kBearer.size()));
    if (!token.empty() && matches(dashboard_cookie_mac(token))) return true;
  }
  if (auto value = cookie_value(cookie, kDashboardCookieName)) {
    if (auto mac = from_hex(*value)) return matches(*mac);
  }
  return false;
}

std::optional<std::string> HttpAuth::login(std::string_view token) const {
  if (token.empty()) return std::nullopt;
  const auto mac = dashboard_cookie_mac(token);
  if (!matches(mac)) return std::nullopt;
  return to_hex(mac);
}

std::optional<std::string> form_field(std::string_view body, std::string_view name) {
  while (!body.empty()) {
    const auto end = body.find('&');
    const auto pair = body.substr(0, end);
    body = end == std::string_view::npos ? std::string_view() : body.substr(end + 1);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    if (eq == std::string_view::npos) return std::string();
    std::string value;
    const auto raw = pair.substr(eq + 1);
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        value.push_back(' ');
      } else if (raw[i] == '%') {
        if (i + 2 >= raw.size()) return std::nullopt;
        const int hi = hex_digit(raw[i + 1]);
        const int lo = hex_digit(raw[i + 2]);
        if (hi < 0 || lo < 0) return std::nullopt;
        value.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
      } else {
        value.push_back(raw[i]);
      }
    }
    return value;
  }
  return std::nullopt;
}

}  // namespace kestrel::tracker
