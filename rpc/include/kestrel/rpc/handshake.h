// The connection handshake (see tracker.capnp for the exchange): protocol version
// check, role, and mutual challenge-response authentication with a shared token.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/base/ids.h"
#include "kestrel/base/version.h"

namespace kestrel::rpc {

// The protocol version this build speaks (tracker.capnp `protocolVersion`).
std::uint32_t protocol_version();

struct TrackerHandshakeOptions {
  // The token a peer must prove, by the role it announces: device_token / client_token
  // when set, else `token` (any role). A role with no token is not authenticated.
  const Token* token = nullptr;
  const Token* device_token = nullptr;
  const Token* client_token = nullptr;
  ConnectionId connection_id;
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds heartbeat_interval{1000};
  std::uint32_t heartbeat_misses = 3;
  // Told in a client's welcome: it may send sessionReport frames (the tracker shows
  // sessions). A device's welcome never offers it.
  bool accepts_reports = false;
  // Asked once the peer has proved its token, before the welcome: an empty answer
  // admits it; otherwise the peer gets `failure {overloaded}` with that message (a
  // connection cap of its role or address). Unset: every peer is admitted.
  std::function<std::string(wire::Role)> admit;
};

// Who completed the handshake with the tracker.
struct PeerHello {
  wire::Role role = wire::Role::CLIENT;
  std::string name;
  std::string software_version;
};

// Tracker side. On any failure it sends the peer a Failure frame saying why, closes
// the connection after flushing, and throws RpcError (code: protocol_error,
// version_mismatch, auth_failed or timeout) for the caller to log. On success the
// connection is marked authenticated and, with a token and no TLS, carries frame MACs
// from the first frame after welcome.
awaitable<PeerHello> accept_handshake(std::shared_ptr<Connection> conn, const TrackerHandshakeOptions& options);

struct PeerHandshakeOptions {
  wire::Role role = wire::Role::CLIENT;
  std::string name;
  const Token* token = nullptr;  // null: no authentication
  std::chrono::milliseconds timeout{5000};
  // For tests: the version announced in hello (defaults to protocol_version()).
  std::optional<std::uint32_t> announce_version;
};

// What the tracker told a peer that it accepted.
struct Welcomed {
  ConnectionId connection_id;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::uint32_t heartbeat_misses = 3;
  bool accepts_reports = false;  // the tracker takes sessionReport frames (older ones do not)
};

// Device or client side; on success the connection is marked authenticated (and frame
// MACs start as on the tracker side). Throws RpcError: version_mismatch and auth_failed (permanent:
// retrying will not help; the message says what to change), protocol_error, timeout
// or connection_lost.
awaitable<Welcomed> perform_handshake(std::shared_ptr<Connection> conn, const PeerHandshakeOptions& options);

}  // namespace kestrel::rpc
