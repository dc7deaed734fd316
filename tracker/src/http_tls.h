// The bridge from the tracker's TLS context (standalone Asio) to the dashboard's
// HTTPS (Boost.Asio): the two Asios cannot share a translation unit, OpenSSL's context
// can be shared.
#pragma once

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace kestrel::rpc {
class TlsContext;
}

namespace kestrel::tracker {

// `tls`'s OpenSSL context with a reference of its own taken (SSL_CTX_up_ref): the
// caller owns that reference (boost::asio::ssl::context's constructor takes it).
ssl_ctx_st* share_ssl_context(const rpc::TlsContext& tls);

}  // namespace kestrel::tracker
