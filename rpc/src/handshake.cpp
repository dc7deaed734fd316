// Handshake: hello -> challenge -> authProof -> welcome (or failure at any step).
#include "kestrel/rpc/handshake.h"

#include "kestrel/rpc/errors.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"

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

  Nonce tracker_nonce = random_nonce();
  {
    capnp::MallocMessageBuilder builder;
    auto challenge = builder.initRoot<wire::Frame>().initChallenge();
    challenge.setProtocolVersion(protocol_version());
    challenge.setNonce(capnp::Data::Reader(tracker_nonce.data(), tracker_nonce.size()));
    challenge.setAuthRequired(options.token != nullptr);
    conn->send(builder);
  }

  auto proof_frame = co_await read_step(*conn, options.timeout, "authProof");
  auto proof_root = proof_frame->root();
  if (!proof_root.isAuthProof()) {
    reject(*conn, ErrorCode::protocol_error, str("handshake: expected authProof, got ", frame_kind(proof_root)));
  }
  Mac tracker_mac{};
  if (options.token) {
    auto received = as_span(proof_root.getAuthProof().getMac());
    if (received.empty()) {
      reject(*conn, ErrorCode::auth_failed, "this tracker requires a token: start the peer with --token-file");
    }
    Mac expected = compute_mac(*options.token, kPeerProofLabel, peer.role, peer_nonce, tracker_nonce);
    if (!mac_matches(expected, received)) {
      reject(*conn, ErrorCode::auth_failed, "wrong token: the peer's proof does not match this tracker's token");
    }
    tracker_mac = compute_mac(*options.token, kTrackerProofLabel, peer.role, tracker_nonce, peer_nonce);
  }

  capnp::MallocMessageBuilder builder;
  auto welcome = builder.initRoot<wire::Frame>().initWelcome();
  welcome.setConnectionId(options.connection_id.value);
  if (options.token) welcome.setMac(capnp::Data::Reader(tracker_mac.data(), tracker_mac.size()));
  welcome.setHeartbeatIntervalMs(static_cast<std::uint32_t>(options.heartbeat_interval.count()));
  welcome.setHeartbeatMisses(options.heartbeat_misses);
  conn->send(builder);
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

  {
    capnp::MallocMessageBuilder builder;
    auto proof = builder.initRoot<wire::Frame>().initAuthProof();
    if (options.token) {
      Mac mac = compute_mac(*options.token, kPeerProofLabel, options.role, peer_nonce, tracker_nonce);
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
    Mac expected = compute_mac(*options.token, kTrackerProofLabel, options.role, tracker_nonce, peer_nonce);
    if (!mac_matches(expected, as_span(welcome.getMac()))) {
      conn->close();
      throw RpcError(ErrorCode::auth_failed,
                     str("the tracker at ", conn->peer(), " failed to prove it knows the token; refusing"));
    }
  }
  Welcomed result;
  result.connection_id = ConnectionId(welcome.getConnectionId());
  result.heartbeat_interval = std::chrono::milliseconds(std::max<std::uint32_t>(welcome.getHeartbeatIntervalMs(), 10));
  result.heartbeat_misses = std::max<std::uint32_t>(welcome.getHeartbeatMisses(), 1);
  co_return result;
}

}  // namespace kestrel::rpc
