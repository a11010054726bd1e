#include "proxy/ops_handlers.h"

#include <boost/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

namespace kvroute::proxy {

namespace {

int FirstHealthyBackend(const router::Router& router) {
  const auto report = router.Report();
  for (size_t i = 0; i < report.size(); ++i) {
    if (report[i].healthy) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

net::awaitable<bool> ServeHealth(Session& s, bool keep_alive) {
  SharedState& state = s.state();
  int healthy = 0;
  for (const auto& b : state.router->Report()) healthy += b.healthy ? 1 : 0;
  boost::json::object o;
  o["status"] = healthy > 0 ? "ok" : "no healthy backend";
  o["healthy_backends"] = healthy;
  int configured = 0;
  for (const auto& b : *state.router->Backends()) configured += b.retired ? 0 : 1;
  o["backends"] = configured;
  co_return co_await s.SendBody(healthy > 0 ? 200 : 503, "application/json",
                                boost::json::serialize(o), keep_alive);
}

net::awaitable<bool> ServeMetrics(Session& s, bool keep_alive) {
  co_return co_await s.SendBody(200, "text/plain; version=0.0.4; charset=utf-8",
                                s.state().registry->Render(), keep_alive);
}

// The session has checked the caller (proxy/admin_auth.h).
net::awaitable<bool> ServeAdminBackends(Session& s, const ClientRequest& req) {
  SharedState& state = s.state();
  boost::json::array arr;
  for (const router::BackendReport& b : state.router->Report()) {
    boost::json::object o;
    o["name"] = b.name;
    o["role"] = router::ToString(b.role);
    o["retired"] = b.retired;
    o["healthy"] = b.healthy;
    o["inflight_requests"] = b.inflight_requests;
    o["inflight_prefill_tokens"] = b.inflight_prefill_tokens;
    o["decoding_requests"] = b.decoding_requests;
    o["inflight_tokens"] = b.inflight_tokens;
    o["shadow_tokens"] = b.shadow_tokens;
    o["capacity_tokens"] = b.capacity_tokens;
    o["kv_usage"] = b.kv_usage < 0 ? boost::json::value(nullptr) : boost::json::value(b.kv_usage);
    o["engine_running"] = b.engine_running;
    o["engine_waiting"] = b.engine_waiting;
    o["effective_capacity_tokens"] = b.effective_capacity_tokens;
    o["shadow_corrections"] = b.shadow_corrections;
    o["estimated_cached_tokens_total"] = b.est_tokens_sum;
    o["actual_cached_tokens_total"] = b.actual_cached_tokens_sum;
    o["last_estimate_error_tokens"] = b.last_est_error_tokens;
    o["estimates"] = b.est_requests;
    o["mean_abs_estimate_error_tokens"] =
        b.est_requests > 0 ? b.est_abs_error_tokens_sum / static_cast<double>(b.est_requests) : 0.0;
    arr.push_back(std::move(o));
  }
  boost::json::object root;
  root["mode"] = s.config().router.mode;
  root["backends"] = std::move(arr);
  co_return co_await s.SendBody(200, "application/json", boost::json::serialize(root),
                                req.keep_alive());
}

net::awaitable<bool> ServeModels(Session& s, const ClientRequest& req) {
  SharedState& state = s.state();
  const int backend = FirstHealthyBackend(*state.router);
  if (backend < 0) co_return co_await s.SendError(503, "no healthy backend", req.keep_alive());
  s.worker().Ensure(*state.router, backend);
  http::request<http::string_body> up{http::verb::get, "/v1/models", 11};
  BufferedResponse r = co_await FetchBuffered(s.worker().pool, backend, std::move(up),
                                              s.config().upstream.idle_timeout, 4 << 20);
  if (r.ec) {
    co_return co_await s.SendError(
        r.timed_out ? 504 : 502,
        absl::StrCat("backend ", s.worker().pool.backend(backend).name, ": ", r.ec.message()),
        req.keep_alive());
  }
  Headers extra;
  extra.emplace_back("X-Kvroute-Backend", s.worker().pool.backend(backend).name);
  std::string content_type =
      r.content_type.empty() ? std::string("application/json") : r.content_type;
  co_return co_await s.SendBody(r.status, content_type, std::move(r.body), req.keep_alive(),
                                std::move(extra));
}

}  // namespace kvroute::proxy
