// Fuzz target: frame decoding, what every byte from the network meets first.
// Input: one frame as it arrives on a socket ([u32 length][body]).
// Guarantees checked: decoding never crashes and only reports errors; a frame that
// decodes can be read field by field as the schema says (a malformed pointer never
// reaches a handler), within the traversal budget its handlers get (see
// check_reads_fully); its bytes re-frame and decode to the same.
#include <capnp/message.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kestrel/rpc/framing.h"
#include "kestrel/wire/tracker.capnp.h"
#include "support.h"

using namespace kestrel;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> input(data, size);
  constexpr std::size_t kMax = 1u << 20;
  if (input.size() >= rpc::kFrameHeaderBytes) {
    auto header = rpc::check_header(input.first<rpc::kFrameHeaderBytes>(), kMax);
    if (header.error == rpc::FrameError::none) fuzz::check(header.length % 8 == 0 && header.length > 0, "header check");
  }
  std::string error;
  auto frame = rpc::decode_frame_bytes(input, kMax, error);
  if (!frame) {
    fuzz::check(!error.empty(), "a refused frame says why");
    return 0;
  }
  {
    auto bytes = frame->bytes();
    std::vector<capnp::word> words(bytes.size() / sizeof(capnp::word));
    std::memcpy(words.data(), bytes.data(), bytes.size());
    fuzz::check_reads_fully<wire::Frame>(frame->root(), {words.data(), words.size()}, "frame");
    (void)rpc::frame_kind(frame->root());
  }
  // The relay path re-frames the bytes it received.
  auto again = rpc::encode_raw(frame->bytes());
  std::string error2;
  auto copy = rpc::decode_frame_bytes(again, kMax, error2);
  fuzz::check(copy != nullptr, "a re-framed frame decodes: " + error2);
  fuzz::check(copy->bytes().size() == frame->bytes().size() &&
                  std::memcmp(copy->bytes().data(), frame->bytes().data(), frame->bytes().size()) == 0,
              "a re-framed frame keeps its bytes");
  return 0;
}
