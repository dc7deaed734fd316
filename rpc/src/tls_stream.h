// The TLS stream a Connection may own (private to kestrel_rpc: it pulls in OpenSSL).
#pragma once

#include <asio/ssl.hpp>
#include <memory>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/tls.h"

namespace kestrel::rpc {

struct TlsStream {
  TlsStream(tcp::socket socket, std::shared_ptr<const TlsContext> ctx)
      : context(std::move(ctx)), stream(std::move(socket), context->native()) {}
  std::shared_ptr<const TlsContext> context;  // keeps the SSL_CTX alive
  asio::ssl::stream<tcp::socket> stream;
};

}  // namespace kestrel::rpc
