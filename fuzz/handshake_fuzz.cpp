// Fuzz target: the tracker's side of the handshake (rpc::accept_handshake), the code every
// unauthenticated peer reaches. Input: byte 0 bit 0 set: the tracker has a token; the rest
// is what the peer sends on a fresh loopback TCP connection (then it shuts its side).
// Guarantees checked: the handshake ends (no hang: the input is all there is) with a
// PeerHello or an RpcError, never another exception, never a crash; with a token it never
// succeeds (the peer cannot know the tracker's fresh nonce in advance, so it cannot
// produce the proof).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "kestrel/base/log.h"
#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "loopback.h"
#include "support.h"

using namespace kestrel;
using namespace std::chrono_literals;

namespace {

struct Listener {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  std::uint16_t port = acceptor.local_endpoint().port();
};

Listener& listener() {
  static Listener* l = new Listener;  // lives as long as the process
  return *l;
}

// A connected client socket with `bytes` written and its sending side shut.
int send_and_shut(std::uint16_t port, std::span<const std::uint8_t> bytes) {
  int fd = fuzz::connect_loopback(port);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the input is small (see the size limit): the buffer takes it all
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;  // loopback buffers hold it without a reader
  const bool with_token = data[0] & 1;
  Listener& l = listener();
  int peer = send_and_shut(l.port, {data + 1, size - 1});
  auto socket = l.acceptor.accept();
  auto conn = rpc::Connection::create(std::move(socket));

  static const rpc::Token token("fuzz-token-0123456789abcdef");
  rpc::TrackerHandshakeOptions options;
  options.token = with_token ? &token : nullptr;
  options.connection_id = ConnectionId(1);
  options.timeout = 5000ms;

  std::optional<rpc::PeerHello> hello;
  std::exception_ptr failure;
  bool done = false;
  asio::co_spawn(
      l.io,
      [&]() -> rpc::awaitable<void> { hello = co_await rpc::accept_handshake(conn, options); },
      [&](std::exception_ptr e) {
        failure = e;
        done = true;
      });
  l.io.restart();
  // The peer's bytes are all there and its side is shut: the handshake ends at once.
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!done && std::chrono::steady_clock::now() < deadline) l.io.run_one_for(100ms);
  fuzz::check(done, "the handshake ends when the peer's input ends");
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const rpc::RpcError&) {
      // refused: what a bad peer gets
    } catch (const std::exception& e) {
      fuzz::broken(std::string("accept_handshake threw something other than RpcError: ") + e.what());
    } catch (const kj::Exception& e) {
      fuzz::broken(std::string("accept_handshake threw a kj::Exception: ") + e.getDescription().cStr());
    } catch (...) {
      fuzz::broken("accept_handshake threw an unknown exception");
    }
  } else {
    fuzz::check(hello.has_value(), "a handshake that ends without an error names its peer");
    fuzz::check(!with_token, "a peer without the token completed the handshake with a tracker that has one");
  }
  conn->close();
  l.io.restart();
  l.io.poll();
  fuzz::close_without_time_wait(peer);
  return 0;
}
