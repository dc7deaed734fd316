// Handshake: hello -> challenge -> authProof -> welcome (or failure at any step).
#include "kestrel/rpc/handshake.h"

#include "kestrel/rpc/errors.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/rpc/tls.h"

namespace kestrel::rpc {

std::uint32_t protocol_version() { return wire::PROTOCOL_VERSION; }

namespace {

std::span<const std::uint8_t> as_span(capnp::Data::Reader data) { return {data.begin(), data.size()}; }

[[noreturn]] void reject(Connection& conn, ErrorCode code, const std::string& message) {
  conn.send(failure_frame(code, message));
  conn.close_after_flush();
  throw RpcError(code, message);
}

// Reads the next handshake frame; a failure frame from the other side becomes an
// exception carrying its code and message.
awaitable<std::unique_ptr<InFrame>> read_step(Connection& conn, std::chrono::milliseconds timeout,
                                              std::string_view expecting) {
  ReadResult r = co_await conn.read_within(timeout);
  if (r.error == FrameError::timeout) {
    conn.close();
    throw RpcError(ErrorCode::timeout, str("handshake: no ", expecting, " within ", timeout.count(), " ms"));
  }
  if (r.error == FrameError::closed) {
    conn.close();
    throw RpcError(ErrorCode::connection_lost, str("handshake: connection closed while waiting for ", expecting));
  }
  if (r.error != FrameError::none) {
    reject(conn, ErrorCode::protocol_error, str("handshake: ", to_string(r.error), ": ", r.detail));
  }
  co_return std::move(r.frame);
}

const char* role_name(wire::Role role) { return role == wire::Role::DEVICE ? "device" : "client"; }

// The TLS exporter value the proofs cover (empty without TLS).
std::vector<std::uint8_t> binding_of(const Connection& conn) {
  auto binding = conn.tls_exporter(kTokenBindingLabel);
  if (conn.uses_tls() && binding.empty()) {
    throw RpcError(ErrorCode::protocol_error, "handshake: cannot export the TLS channel binding");
  }
  return binding;
}

// Without TLS, frames after the handshake carry MACs under keys only the two token
// holders of this handshake can derive.
FrameKeys frame_keys(const Token& token, wire::Role role, const Nonce& peer_nonce, const Nonce& tracker_nonce,
                     bool tracker_side) {
  Mac to_tracker = compute_mac(token, kPeerFrameKeyLabel, role, peer_nonce, tracker_nonce);
  Mac to_peer = compute_mac(token, kTrackerFrameKeyLabel, role, peer_nonce, tracker_nonce);
  FrameKeys keys;
  keys.send = tracker_side ? to_peer : to_tracker;
  keys.receive = tracker_side ? to_tracker : to_peer;
  keys.send_direction = tracker_side ? kTrackerToPeer : kPeerToTracker;
  keys.receive_direction = tracker_side ? kPeerToTracker : kTrackerToPeer;
  return keys;
}

}  // namespace

awaitable<PeerHello> accept_handshake(std::shared_ptr<Connection> conn, const TrackerHandshakeOptions& options) {
  auto hello_frame = co_await read_step(*conn, options.timeout, "hello");
  auto root = hello_frame->root();
  if (!root.isHello()) {
    reject(*conn, ErrorCode::protocol_error, str("handshake: expected hello, got ", frame_kind(root)));
  }
  auto hello = root.getHello();
  if (hello.getProtocolVersion() != protocol_version()) {
    reject(*conn, ErrorCode::version_mismatch,
           str("peer speaks protocol version ", hello.getProtocolVersion(), " but this tracker speaks ",
               protocol_version(), "; run the same Kestrel release on both sides"));
  }
  auto role_value = static_cast<unsigned>(hello.getRole());
  if (role_value > static_cast<unsigned>(wire::Role::CLIENT)) {
    reject(*conn, ErrorCode::protocol_error, str("handshake: unknown role ", role_value));
  }
  if (hello.getNonce().size() != kNonceBytes) {
    reject(*conn, ErrorCode::protocol_error,
           str("handshake: nonce of ", hello.getNonce().size(), " bytes, expected ", kNonceBytes));
  }
  PeerHello peer;
  peer.role = hello.getRole();
  peer.name = hello.getName().cStr();
  peer.software_version = hello.getSoftwareVersion().cStr();
  Nonce peer_nonce;
  std::copy(hello.getNonce().begin(), hello.getNonce().end(), peer_nonce.begin());

  const Token* role_token = peer.role == wire::Role::DEVICE ? options.device_token : options.client_token;
  const Token* other_token = peer.role == wire::Role::DEVICE ? options.client_token : options.device_token;
  const Token* token = role_token ? role_token : options.token;
  const std::vector<std::uint8_t> binding = binding_of(*conn);

  Nonce tracker_nonce = random_nonce();
  {
    capnp::MallocMessageBuilder builder;
    auto challenge = builder.initRoot<wire::Frame>().initChallenge();
    challenge.setProtocolVersion(protocol_version());
    challenge.setNonce(capnp::Data::Reader(tracker_nonce.data(), tracker_nonce.size()));
    challenge.setAuthRequired(token != nullptr);
    conn->send(builder);
  }

  auto proof_frame = co_await read_step(*conn, options.timeout, "authProof");
  auto proof_root = proof_frame->root();
  if (!proof_root.isAuthProof()) {
    reject(*conn, ErrorCode::protocol_error, str("handshake: expected authProof, got ", frame_kind(proof_root)));
  }
  Mac tracker_mac{};
  if (token) {
    auto received = as_span(proof_root.getAuthProof().getMac());
    if (received.empty()) {
      reject(*conn, ErrorCode::auth_failed, "this tracker requires a token: start the peer with --token-file");
    }
    Mac expected = compute_mac(*token, kPeerProofLabel, peer.role, peer_nonce, tracker_nonce, binding);
    if (!mac_matches(expected, received)) {
      const Token* proved_other = other_token ? other_token : (role_token ? options.token : nullptr);
      if (proved_other &&
          mac_matches(compute_mac(*proved_other, kPeerProofLabel, peer.role, peer_nonce, tracker_nonce, binding),
                      received)) {
        reject(*conn, ErrorCode::auth_failed,
               peer.role == wire::Role::DEVICE
                   ? "a client token cannot register a device: start kestrel-device with the device token"
                   : "a device token cannot lease devices or query the pool: use the client token");
      }
      reject(*conn, ErrorCode::auth_failed,
             str("wrong token: the peer's proof does not match this tracker's ", role_token ? role_name(peer.role) : "",
                 role_token ? " " : "", "token", binding.empty() ? "" : " on this TLS session"));
    }
    tracker_mac = compute_mac(*token, kTrackerProofLabel, peer.role, tracker_nonce, peer_nonce, binding);
  }
  if (options.admit) {
    std::string refusal = options.admit(peer.role);
    if (!refusal.empty()) reject(*conn, ErrorCode::overloaded, refusal);
  }

  capnp::MallocMessageBuilder builder;
  auto welcome = builder.initRoot<wire::Frame>().initWelcome();
  welcome.setConnectionId(options.connection_id.value);
  if (token) welcome.setMac(capnp::Data::Reader(tracker_mac.data(), tracker_mac.size()));
  welcome.setHeartbeatIntervalMs(static_cast<std::uint32_t>(options.heartbeat_interval.count()));
  welcome.setHeartbeatMisses(options.heartbeat_misses);
  welcome.setAcceptsReports(options.accepts_reports && peer.role == wire::Role::CLIENT);  // a device may not report
  conn->send(builder);
  conn->mark_authenticated();
  if (token && !conn->uses_tls()) conn->set_frame_keys(frame_keys(*token, peer.role, peer_nonce, tracker_nonce, true));
  co_return peer;
}

awaitable<Welcomed> perform_handshake(std::shared_ptr<Connection> conn, const PeerHandshakeOptions& options) {
  Nonce peer_nonce = random_nonce();
  {
    capnp::MallocMessageBuilder builder;
    auto hello = builder.initRoot<wire::Frame>().initHello();
    hello.setProtocolVersion(options.announce_version.value_or(protocol_version()));
    hello.setRole(options.role);
    hello.setNonce(capnp::Data::Reader(peer_nonce.data(), peer_nonce.size()));
    hello.setName(options.name);
    hello.setSoftwareVersion(std::string(software_version()));
    conn->send(builder);
  }

  auto challenge_frame = co_await read_step(*conn, options.timeout, "challenge");
  auto root = challenge_frame->root();
  if (root.isFailure()) {
    conn->close();
    throw to_error(root.getFailure());
  }
  if (!root.isChallenge()) {
    conn->close();
    throw RpcError(ErrorCode::protocol_error, str("handshake: expected challenge, got ", frame_kind(root)));
  }
  auto challenge = root.getChallenge();
  if (challenge.getProtocolVersion() != protocol_version()) {
    conn->close();
    throw RpcError(ErrorCode::version_mismatch,
                   str("tracker speaks protocol version ", challenge.getProtocolVersion(), " but this program speaks ",
                       protocol_version(), "; run the same Kestrel release on both sides"));
  }
  if (challenge.getNonce().size() != kNonceBytes) {
    conn->close();
    throw RpcError(ErrorCode::protocol_error, "handshake: tracker sent a malformed nonce");
  }
  if (options.token && !challenge.getAuthRequired()) {
    conn->close();
    throw RpcError(ErrorCode::auth_failed,
                   str("the tracker at ", conn->peer(),
                       " does not require a token but this program was given one; refusing to talk to an "
                       "unauthenticated tracker (start the tracker with --token-file, or drop --token-file here)"));
  }
  Nonce tracker_nonce;
  std::copy(challenge.getNonce().begin(), challenge.getNonce().end(), tracker_nonce.begin());

  const std::vector<std::uint8_t> binding = binding_of(*conn);
  {
    capnp::MallocMessageBuilder builder;
    auto proof = builder.initRoot<wire::Frame>().initAuthProof();
    if (options.token) {
      Mac mac = compute_mac(*options.token, kPeerProofLabel, options.role, peer_nonce, tracker_nonce, binding);
      proof.setMac(capnp::Data::Reader(mac.data(), mac.size()));
    }
    conn->send(builder);
  }

  auto welcome_frame = co_await read_step(*conn, options.timeout, "welcome");
  auto wroot = welcome_frame->root();
  if (wroot.isFailure()) {
    conn->close();
    throw to_error(wroot.getFailure());
  }
  if (!wroot.isWelcome()) {
    conn->close();
    throw RpcError(ErrorCode::protocol_error, str("handshake: expected welcome, got ", frame_kind(wroot)));
  }
  auto welcome = wroot.getWelcome();
  if (options.token) {
    Mac expected = compute_mac(*options.token, kTrackerProofLabel, options.role, tracker_nonce, peer_nonce, binding);
    if (!mac_matches(expected, as_span(welcome.getMac()))) {
      conn->close();
      throw RpcError(ErrorCode::auth_failed,
                     str("the tracker at ", conn->peer(), " failed to prove it knows the token",
                         binding.empty() ? "" : " on this TLS session (a proxy in between?)", "; refusing"));
    }
  }
  conn->mark_authenticated();
  if (options.token && !conn->uses_tls()) {
    conn->set_frame_keys(frame_keys(*options.token, options.role, peer_nonce, tracker_nonce, false));
  }
  Welcomed result;
  result.connection_id = ConnectionId(welcome.getConnectionId());
  result.heartbeat_interval = std::chrono::milliseconds(std::max<std::uint32_t>(welcome.getHeartbeatIntervalMs(), 10));
  result.heartbeat_misses = std::max<std::uint32_t>(welcome.getHeartbeatMisses(), 1);
  result.accepts_reports = welcome.getAcceptsReports();
  co_return result;
}

}  // namespace kestrel::rpc
