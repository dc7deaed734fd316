// TEMPORARY: lets the tracker link until the real HttpServer (tracker/src/http_server.cpp)
// is merged; delete this file and its line in tracker/CMakeLists.txt then. Serves
// nothing: port() is 0 and url() empty.
#include "kestrel/tracker/http_server.h"

namespace kestrel::tracker {

struct HttpServer::Impl {
  HttpOptions options;
};

HttpServer::HttpServer(HttpOptions options, std::shared_ptr<DashboardFeed>, std::vector<rpc::Token>,
                       std::shared_ptr<const rpc::TlsContext>)
    : impl_(std::make_unique<Impl>(Impl{std::move(options)})) {}
HttpServer::~HttpServer() = default;
void HttpServer::start() {}
void HttpServer::stop() {}
std::uint16_t HttpServer::port() const { return 0; }
std::string HttpServer::url() const { return {}; }

}  // namespace kestrel::tracker
