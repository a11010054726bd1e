// The ops endpoints a Session serves besides completions: /health (is any
// backend routable), /metrics (Prometheus text of the server's registry),
// /admin/backends (the router's view of every backend; the session has
// checked admin access), /v1/models (relayed from the first healthy backend).
//
//   if (target == "/health") co_return co_await ServeHealth(session, keep_alive);
//
// Each returns whether the connection may be kept alive. They run on the
// session's worker thread.
#pragma once

#include "proxy/client_request.h"
#include "proxy/http_common.h"

namespace kvroute::proxy {

class Session;

net::awaitable<bool> ServeHealth(Session& s, bool keep_alive);
net::awaitable<bool> ServeMetrics(Session& s, bool keep_alive);
net::awaitable<bool> ServeAdminBackends(Session& s, const ClientRequest& req);
net::awaitable<bool> ServeModels(Session& s, const ClientRequest& req);

}  // namespace kvroute::proxy
