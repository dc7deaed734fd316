// SHA-256 as lower-case hex: the name of a kernel module is the digest of its bytes
// (the host names what it uploads so; the device checks it on upload).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kestrel::rpc {

std::string sha256_hex(std::span<const std::uint8_t> bytes);
// Lower-case hex of any byte string (a digest).
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace kestrel::rpc
