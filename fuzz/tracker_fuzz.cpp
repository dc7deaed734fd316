// Fuzz target: every tracker message handler, through a real tracker::Tracker (a fresh
// one per input, on its own thread, on a loopback port) and real sockets.
// Input: byte 0 bit 0 picks the fuzzed peer's role (set: device, clear: client), bit 1
// leaves out its handshake (the chunks are then the handshake: the tracker's own handling
// of a failed one); the rest is [u16 length][body] chunks, each sent as one frame after
// that peer's handshake (the body zero-padded to a multiple of 8 bytes, the length header
// set to match).
// Before the fuzzed peer connects, a helper gives it someone to talk to: for a client, a
// device registered under key "fuzz" (granted as lease 1 to a requestDevice{key "fuzz"});
// for a device, a client whose request for key "fuzz" is queued (granted as lease 1 when
// the fuzzed device registers under that key). Ids are deterministic: a fresh tracker.
// Guarantees checked: the tracker never crashes or throws; it keeps answering (after the
// input, the fuzzed peer's summaryRequest is answered or its connection closed, and a new
// client gets a summary); Tracker::stop() finishes promptly with every socket still open
// on the peers' side (no connection left behind).
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "frames.h"
#include "kestrel/base/log.h"
#include "kestrel/tracker/tracker.h"
#include "loopback.h"
#include "support.h"

using namespace kestrel;
using namespace std::chrono_literals;

namespace {

constexpr int kReadTimeoutSeconds = 8;

// One side of a loopback connection to the tracker, blocking, with a read timeout (longer
// than the tracker's 5 s handshake timeout, after which it closes a silent peer).
class RawPeer {
 public:
  explicit RawPeer(std::uint16_t port) {
    fd_ = fuzz::connect_loopback(port);
    timeval tv{kReadTimeoutSeconds, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawPeer() { ::close(fd_); }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  // False once the tracker has closed the connection.
  bool send(std::span<const std::uint8_t> bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  enum class Read { frame, closed, timeout };
  // The next frame; heartbeats are skipped.
  Read read(std::unique_ptr<rpc::InFrame>& out) {
    while (true) {
      std::uint8_t header[rpc::kFrameHeaderBytes];
      if (Read r = read_exactly(header, sizeof header); r != Read::frame) return r;
      auto check = rpc::check_header(std::span<const std::uint8_t, rpc::kFrameHeaderBytes>(header), 1u << 26);
      fuzz::check(check.error == rpc::FrameError::none, "the tracker sends well-formed frame headers");
      std::vector<std::uint8_t> bytes(header, header + sizeof header);
      bytes.resize(sizeof header + check.length);
      if (Read r = read_exactly(bytes.data() + sizeof header, check.length); r != Read::frame) return r;
      std::string error;
      out = rpc::decode_frame_bytes(bytes, 1u << 26, error);
      fuzz::check(out != nullptr, "the tracker sends frames that decode: " + error);
      if (!out->root().isHeartbeat()) return Read::frame;
    }
  }

  // Hello, challenge, authProof, welcome (no token). Empty when welcomed, else what went
  // wrong (the tracker refused, closed or stayed silent).
  std::string handshake(wire::Role role, const std::string& name) {
    if (!send(fuzz::frames::hello(role, name))) return "the hello could not be sent";
    std::unique_ptr<rpc::InFrame> frame;
    if (auto r = read(frame); r != Read::frame) return "no challenge: " + describe(r);
    if (!frame->root().isChallenge()) return "a frame of kind " + std::to_string(int(frame->root().which())) + " instead of the challenge";
    if (!send(fuzz::frames::auth_proof())) return "the proof could not be sent";
    if (auto r = read(frame); r != Read::frame) return "no welcome: " + describe(r);
    if (!frame->root().isWelcome()) return "a frame of kind " + std::to_string(int(frame->root().which())) + " instead of the welcome";
    return {};
  }

  static std::string describe(Read r) {
    return r == Read::closed ? "the tracker closed the connection" : "nothing within " + std::to_string(kReadTimeoutSeconds) + " s";
  }

 private:
  Read read_exactly(std::uint8_t* data, std::size_t size) {
    std::size_t got = 0;
    while (got < size) {
      ssize_t n = ::recv(fd_, data + got, size - got, 0);
      if (n == 0) return Read::closed;
      // libFuzzer's SIGALRM (its -timeout watchdog) interrupts a recv that has a receive
      // timeout, and such a call is never restarted (signal(7)): not the tracker's doing.
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? Read::timeout : Read::closed;
      got += static_cast<std::size_t>(n);
    }
    return Read::frame;
  }

  int fd_ = -1;
};

// A fresh tracker on its own thread.
class TrackerThread {
 public:
  TrackerThread() {
    tracker::TrackerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    tracker_ = std::make_unique<tracker::Tracker>(io_, options);
    tracker_->start();
    port_ = tracker_->port();
    finished_ = done_.get_future();
    // What escapes the tracker's io_context (an exception out of a handler) is not caught
    // here: std::terminate, a crash with the exception's text, for the fuzzer to keep.
    thread_ = std::thread([this] {
      io_.run();
      done_.set_value();
    });
  }
  ~TrackerThread() {
    if (thread_.joinable()) {
      io_.stop();
      thread_.join();
    }
  }
  std::uint16_t port() const { return port_; }

  // Tracker::stop() on its thread; io_context::run must return soon after.
  void stop_within(std::chrono::milliseconds limit) {
    asio::post(io_, [this] { tracker_->stop(); });
    fuzz::check(finished_.wait_for(limit) == std::future_status::ready,
                "Tracker::stop() finishes (every connection closed) within " + std::to_string(limit.count()) + " ms");
    thread_.join();
    tracker_.reset();
  }

 private:
  asio::io_context io_;
  std::unique_ptr<tracker::Tracker> tracker_;
  std::uint16_t port_ = 0;
  std::promise<void> done_;
  std::future<void> finished_;
  std::thread thread_;
};

rpc::FrameBytes as_frame(std::span<const std::uint8_t> body) {
  std::size_t padded = std::max<std::size_t>(8, (body.size() + 7) / 8 * 8);
  std::vector<std::uint8_t> bytes(padded, 0);
  std::copy(body.begin(), body.end(), bytes.begin());
  return rpc::encode_raw(bytes);
}

// Reads until the summary `id` arrives (true) or the connection closes (false).
bool await_summary(RawPeer& peer, std::uint64_t id, const std::string& who) {
  while (true) {
    std::unique_ptr<rpc::InFrame> frame;
    auto r = peer.read(frame);
    fuzz::check(r != RawPeer::Read::timeout,
                "the tracker answers " + who + " within " + std::to_string(kReadTimeoutSeconds) + " s");
    if (r == RawPeer::Read::closed) return false;
    if (frame->root().isSummary() && frame->root().getSummary().getRequestId() == id) return true;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool as_device = data[0] & 1;
  const bool raw = data[0] & 2;
  auto chunks = fuzz::split_chunks({data + 1, size - 1}, 64);
  TrackerThread tracker;
  {
    RawPeer helper(tracker.port());
    if (as_device) {
      auto refused = helper.handshake(wire::Role::CLIENT, "fuzz-helper-client");
      fuzz::check(refused.empty(), "a helper client is accepted: " + refused);
      fuzz::check(helper.send(fuzz::frames::request_device(1, "fuzz")), "the helper asks for a device");
    } else {
      auto refused = helper.handshake(wire::Role::DEVICE, "fuzz-helper-device");
      fuzz::check(refused.empty(), "a helper device is accepted: " + refused);
      fuzz::check(helper.send(fuzz::frames::register_device("fuzz", "fuzz-helper-device")), "the helper registers");
      std::unique_ptr<rpc::InFrame> frame;
      fuzz::check(helper.read(frame) == RawPeer::Read::frame && frame->root().isRegistered(),
                  "the helper device is registered");
    }

    RawPeer peer(tracker.port());
    if (!raw) {
      auto refused = peer.handshake(as_device ? wire::Role::DEVICE : wire::Role::CLIENT, "fuzz-peer");
      fuzz::check(refused.empty(), "the fuzzed peer is accepted: " + refused);
    }
    bool open = true;
    for (auto chunk : chunks) {
      if (!(open = peer.send(as_frame(chunk)))) break;
    }
    // Everything before it on this connection has been handled once this is answered
    // (a device's summaryRequest is a protocol error: the connection closes).
    if (open && peer.send(fuzz::frames::summary_request(0xf00d))) await_summary(peer, 0xf00d, "the fuzzed peer");

    RawPeer probe(tracker.port());
    auto probe_refused = probe.handshake(wire::Role::CLIENT, "fuzz-probe");
    fuzz::check(probe_refused.empty(), "a new client is accepted after the input: " + probe_refused);
    fuzz::check(probe.send(fuzz::frames::summary_request(7)) && await_summary(probe, 7, "a new client"),
                "a new client gets a summary after the input");

    // With every peer's socket still open: the tracker must close them all itself.
    tracker.stop_within(5000ms);
  }
  return 0;
}
