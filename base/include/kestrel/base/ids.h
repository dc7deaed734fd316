// Distinct id types for the things the tracker hands out, so a lease id can never be
// passed where a device id is expected.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace kestrel {

template <typename Tag>
struct Id {
  std::uint64_t value = 0;

  constexpr Id() = default;
  constexpr explicit Id(std::uint64_t v) : value(v) {}
  constexpr explicit operator bool() const { return value != 0; }
  friend constexpr auto operator<=>(Id, Id) = default;
};

using DeviceId = Id<struct DeviceIdTag>;
using LeaseId = Id<struct LeaseIdTag>;
using ConnectionId = Id<struct ConnectionIdTag>;
using RequestId = Id<struct RequestIdTag>;

}  // namespace kestrel

template <typename Tag>
struct std::hash<kestrel::Id<Tag>> {
  std::size_t operator()(kestrel::Id<Tag> id) const noexcept {
    return std::hash<std::uint64_t>{}(id.value);
  }
};
