// The Asio pieces the rpc layer uses, in one place: standalone Asio with C++20
// coroutines, expected outcomes (EOF, timeouts, cancellation) returned as values.
#pragma once

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

namespace kestrel::rpc {

// Completion token for operations whose errors are expected outcomes: returns
// (error_code, results...) instead of throwing.
inline constexpr auto use_nothrow = asio::experimental::as_tuple(asio::use_awaitable);

using asio::awaitable;
using tcp = asio::ip::tcp;

}  // namespace kestrel::rpc
