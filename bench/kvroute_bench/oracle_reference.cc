#include "bench/kvroute_bench/oracle_reference.h"

#include <algorithm>
#include <chrono>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvroute::bench {
namespace json = boost::json;

absl::StatusOr<std::vector<int64_t>> ParseOracleAnswer(std::string_view body, size_t instances) {
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  const json::object* o = !ec ? v.if_object() : nullptr;
  const json::value* list = o != nullptr ? o->if_contains("instances") : nullptr;
  if (list == nullptr || !list->is_array()) {
    return absl::InvalidArgumentError("oracle answer: no \"instances\" array");
  }
  std::vector<int64_t> cached(instances, -1);
  for (const json::value& e : list->as_array()) {
    const json::object* x = e.if_object();
    const json::value* i = x != nullptr ? x->if_contains("instance") : nullptr;
    const json::value* c = x != nullptr ? x->if_contains("cached_tokens") : nullptr;
    if (i == nullptr || c == nullptr || !i->is_int64() || !c->is_int64()) {
      return absl::InvalidArgumentError("oracle answer: malformed instance entry");
    }
    if (i->as_int64() >= 0 && static_cast<size_t>(i->as_int64()) < instances) {
      cached[static_cast<size_t>(i->as_int64())] = c->as_int64();
    }
  }
  for (size_t i = 0; i < instances; ++i) {
    if (cached[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("oracle answer: no count for instance ", i));
    }
  }
  return cached;
}

absl::StatusOr<std::unique_ptr<OracleReference>> OracleReference::Create(
    std::vector<NamedEndpoint> instances, double time_scale) {
  std::vector<router::BackendSpec> specs;
  for (const NamedEndpoint& i : instances) {
    specs.push_back({.name = i.name, .host = i.endpoint.host, .port = i.endpoint.port});
  }
  router::Options options;
  options.mode = "baseline";
  options.session_resident_window *= time_scale;
  options.residency.grace *= time_scale;
  options.residency.max_wait *= time_scale;
  absl::StatusOr<std::unique_ptr<router::Router>> r =
      router::Router::Create(options, std::move(specs));
  if (!r.ok()) return r.status();
  return std::unique_ptr<OracleReference>(
      new OracleReference(std::move(instances), *std::move(r)));
}

OracleReference::OracleReference(std::vector<NamedEndpoint> instances,
                                 std::unique_ptr<router::Router> router)
    : instances_(std::move(instances)),
      router_(std::move(router)),
      residency_(std::make_unique<residency::ResidencyWait>(*router_, residency::SystemClock())) {}

boost::asio::awaitable<OracleReference::Routed> OracleReference::Route(
    const std::string& body, std::string prompt_bytes, const std::string& session_id,
    int64_t max_tokens, const std::string& request_id) {
  Routed out;
  HttpResponse answer = co_await HttpPostJson(instances_.front().endpoint,
                                              "/sim/oracle/cached_tokens", body,
                                              std::chrono::seconds(30));
  if (answer.status != 200) {
    out.error = absl::StrCat("oracle: ", answer.error.empty() ? answer.body.substr(0, 200)
                                                              : answer.error);
    co_return out;
  }
  absl::StatusOr<std::vector<int64_t>> truth = ParseOracleAnswer(answer.body, instances_.size());
  if (!truth.ok()) {
    out.error = std::string(truth.status().message());
    co_return out;
  }
  router::RequestFeatures f;
  f.request_id = request_id;
  f.model = "default";
  f.session_id = session_id;
  f.stream = true;
  f.max_tokens = max_tokens;
  f.prompt_bytes = std::move(prompt_bytes);
  f.reference_cached_tokens = *std::move(truth);
  f.defer_kv_reservation = residency_->enabled() && !session_id.empty();
  absl::StatusOr<router::RouteTicket> t = router_->Route(f, absl::Now());
  if (!t.ok()) {
    out.error = std::string(t.status().message());
    co_return out;
  }
  out.ticket = *t;
  const residency::ResidencyWait::Admitted go = co_await residency_->Admit(*t);
  const router::Decision& d = go.dispatched.decision;
  out.ticket.decision = d;
  const int b = d.decode_backend;
  out.endpoint = instances_[static_cast<size_t>(b)].endpoint;
  out.backend = instances_[static_cast<size_t>(b)].name;
  out.klass = std::string(router::ToString(d.request_class));
  // The oracle's count where it was routed; the shadow's where the model moved it.
  out.cached_tokens_est =
      b == t->decision.decode_backend ? t->decision.cached_tokens_est : d.cached_tokens_est;
  co_return out;
}

void OracleReference::OnFirstToken(const Routed& routed) {
  router_->OnFirstToken(routed.ticket, absl::Now());
}

void OracleReference::OnComplete(const Routed& routed, bool ok, int64_t prompt_tokens,
                                 int64_t cached_tokens, int64_t completion_tokens) {
  router::Outcome o;
  o.ok = ok;
  o.prompt_tokens = prompt_tokens;
  o.cached_tokens = cached_tokens;
  o.completion_tokens = completion_tokens;
  o.served_by = routed.ticket.decision.decode_backend;
  o.kv_transferred = false;
  router_->OnComplete(routed.ticket, o, absl::Now());
}

void OracleReference::SetCapacity(int index, int64_t tokens) {
  router::EngineGauges g;
  g.capacity_tokens = tokens;
  router_->UpdateEngineGauges(index, g);
}

void OracleReference::UpdateGauges(int index, const InstanceSample& sample) {
  router::EngineGauges g;
  g.num_requests_running = sample.running >= 0 ? static_cast<int64_t>(sample.running) : -1;
  g.num_requests_waiting = sample.waiting >= 0 ? static_cast<int64_t>(sample.waiting) : -1;
  g.kv_cache_usage_perc = sample.kv_usage;
  router_->UpdateEngineGauges(index, g);
}

}  // namespace kvroute::bench
