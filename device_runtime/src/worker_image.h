// The measurement worker as a program of its own: the runtime's child execs the
// registered worker image (measure.h, set_worker_image) so that the worker starts from a
// fresh image, without the runtime's memory (the device token, TLS keys) or environment.
// Private to the runtime.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kestrel/device_runtime/measure.h"

namespace kestrel::device::worker {

// The program workers exec, and the environment they get: empty but for a fixed list of
// loader and GPU driver variables (no secret is ever among them).
struct Image {
  std::string path;
  std::vector<std::string> environment;  // "NAME=value"
};

// The registered image; null when this program registered none (workers are then forks).
const Image* image();
// Why there is none, e.g. "this program registered no worker image".
const std::string& no_image_reason();

// Execs the registered image once (its worker mode, given nothing to do, exits at once);
// when the exec fails (qemu-user without binfmt_misc) the image is dropped, with the
// reason. Blocks for the few milliseconds that takes.
void check_image();

// The batch as the exec'd worker reads it from its spec fd.
std::vector<std::uint8_t> encode_batch(const rpc::BatchRequest& request);

// In the forked child, before anything else: keeps only the result socket, `spec_fd` (an
// empty memfd) and the batch's module fds (sandbox::keep_only), writes the batch to
// `spec_fd` (`wire`: encode_batch's bytes) and execs `image` in its worker mode. Returns
// only when that fails, with the reason; `result_fd` and `spec`'s fds then hold their
// new numbers and the fork goes on as the worker.
std::string exec_image(const Image& image, int& result_fd, int spec_fd, BatchSpec& spec, std::size_t first,
                       std::span<const std::uint8_t> wire);

}  // namespace kestrel::device::worker
