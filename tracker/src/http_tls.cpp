// See http_tls.h. Standalone Asio only: no Boost here.
#include "http_tls.h"

#include <openssl/ssl.h>

#include <asio/ssl/context.hpp>

#include "kestrel/rpc/tls.h"

namespace kestrel::tracker {

ssl_ctx_st* share_ssl_context(const rpc::TlsContext& tls) {
  SSL_CTX* ctx = tls.native().native_handle();
  SSL_CTX_up_ref(ctx);
  return ctx;
}

}  // namespace kestrel::tracker
