#include "proxy/completion.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <cmath>
#include <functional>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/random/distributions.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proxy/agent_apis.h"
#include "proxy/engine_priority.h"
#include "proxy/relay.h"
#include "proxy/request_clock.h"
#include "proxy/request_log.h"
#include "proxy/residency_hold.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/worker.h"
#include "router/prefix_hash.h"
#include "transfer/handoff.h"

namespace kvroute::proxy {

namespace {

// Tells the router a response completed: served_by, kv_transferred, status, usage.
using CompleteHook = std::function<void(int, bool, int, const Usage&)>;

// Why a failed attempt is retried, as the retries counter labels it.
std::string RetryReason(const RelayResult& r) {
  if (r.status >= 500) return "5xx";
  if (r.timed_out) return "timeout";
  if (absl::StartsWith(r.error, "connect failed")) return "connect";
  return r.ejected ? "ejected" : "upstream_error";
}

// The result of serving one request, co-located or offloaded.
struct LegResult {
  RelayResult r;       // the client-facing leg
  int served_by = -1;  // backend whose usage the client got
  std::string label;   // X-Kvroute-Backend
  int attempts = 0;
  // Whether served_by got the prompt's KV through the connector (so its
  // cached_tokens are not truth about its own prefix cache).
  bool kv_transferred = false;
};

// Arms the relay's completion hook for a client-facing leg on `backend`.
void ArmCompletion(CompleteHook* hook, LegOptions& opts, int backend, bool kv_transferred) {
  opts.before_last_write = [hook, backend, kv_transferred](int status, const Usage& u) {
    if (*hook) (*hook)(backend, kv_transferred, status, u);
  };
}

// A co-located leg on one instance, in two halves around its relay so
// that the request's own coroutine can await Relay itself (a wrapping
// coroutine is a frame and a resumption per request):
//   LegOptions opts = BeginColocated(tmpl, body, backend, decor, ..., out);
//   out.r = co_await Relay(s, backend, tmpl, decor, stream, std::move(opts));
//   EndColocated(tmpl, body, out);
// `body` is lent to the upstream request and handed back, so a retry
// elsewhere needs no copy. A 5xx answer counts as a failure before the
// first byte (the caller may retry it elsewhere).
LegOptions BeginColocated(Session& s, CompleteHook* hook, ClientRequest& tmpl, std::string& body,
                          int backend, Decor& decor, OnFirstByte on_first_byte, bool kv_transferred,
                          LegResult& out) {
  out.served_by = backend;
  out.kv_transferred = kv_transferred;
  out.label = (*s.state().router->Backends())[backend].name;
  decor.backend_label = out.label;
  tmpl.body() = std::move(body);  // Relay sets Host and the framing per leg
  LegOptions opts;
  opts.on_first_byte = std::move(on_first_byte);
  opts.fail_on_5xx = true;
  opts.ask_stream_usage = true;
  ArmCompletion(hook, opts, backend, kv_transferred);
  return opts;
}
void EndColocated(ClientRequest& tmpl, std::string& body, LegResult& out) {
  body = std::move(tmpl.body());
  out.attempts = 1;
}
net::awaitable<LegResult> ServeColocated(Session& s, CompleteHook* hook, ClientRequest& tmpl,
                                         std::string& body, int backend, Decor decor, bool stream,
                                         OnFirstByte on_first_byte, absl::Duration first_token_wait,
                                         bool kv_transferred = false) {
  LegResult out;
  LegOptions opts = BeginColocated(s, hook, tmpl, body, backend, decor, std::move(on_first_byte),
                                   kv_transferred, out);
  opts.first_token_timeout = first_token_wait;
  out.r = co_await Relay(s, backend, tmpl, decor, stream, std::move(opts));
  EndColocated(tmpl, body, out);
  co_return out;
}

// Runs a handoff's legs over HTTP for transfer::Handoff: the prefill leg
// to A with its response captured, the decode leg from B relayed to the
// client. Lives in ServeOffload's frame, which outlives both legs.
class HttpLegRunner final : public transfer::LegRunner {
 public:
  HttpLegRunner(Session& s, CompleteHook* hook, const ClientRequest& tmpl, int a, int b,
                const Decor& decor, bool stream, const OnFirstByte& on_first_byte,
                absl::Duration first_token_wait)
      : s_(s),
        hook_(hook),
        tmpl_(tmpl),
        a_(a),
        b_(b),
        decor_(decor),
        client_wants_stream_(stream),
        on_first_byte_(on_first_byte),
        first_token_wait_(first_token_wait) {}

  // The client-facing results of the legs, for the caller.
  const RelayResult& prefill() const { return prefill_; }
  const RelayResult& decode() const { return decode_; }

  double Now() override { return WallSecondsAt(Clock::now()); }

  net::awaitable<std::optional<std::string>> QueryBootstrap(const std::string& host,
                                                            uint16_t port) override {
    BufferedResponse q = co_await FetchOnce(s_.worker().pool.ioc(), host, port, "/query",
                                            s_.config().upstream.connect_timeout, 1 << 20);
    if (q.ec || q.status != 200) co_return std::nullopt;
    co_return std::move(q.body);
  }

  net::awaitable<transfer::LegReport> RunPrefill(std::string body, bool watch_client) override {
    std::string captured;
    ClientRequest pre = tmpl_;
    pre.body() = std::move(body);
    LegOptions opts;
    opts.to_client = false;
    opts.watch_client = watch_client;
    opts.capture = &captured;
    opts.state = prefill_state_;
    opts.first_token_timeout = first_token_wait_;
    prefill_ = co_await Relay(s_, a_, pre, decor_, false, std::move(opts));
    transfer::LegReport report = Report(prefill_);
    report.t_done = WallSecondsAt(Clock::now());
    report.body = std::move(captured);
    co_return report;
  }

  net::awaitable<transfer::LegReport> RunDecode(std::string body, bool kv_transferred) override {
    ClientRequest dec = tmpl_;
    dec.body() = std::move(body);
    LegOptions opts;
    opts.on_first_byte = on_first_byte_;
    opts.state = decode_state_;
    opts.first_token_timeout = first_token_wait_;
    opts.fail_on_5xx = true;
    opts.ask_stream_usage = true;
    ArmCompletion(hook_, opts, b_, kv_transferred);
    decode_ = co_await Relay(s_, b_, dec, decor_, client_wants_stream_, std::move(opts));
    co_return Report(decode_);
  }

  void CancelPrefill() override { prefill_state_->Cancel(); }
  void CancelDecode() override { decode_state_->Cancel(); }

 private:
  static transfer::LegReport Report(const RelayResult& r) {
    transfer::LegReport report;
    report.completed = r.completed;
    report.status = r.status;
    report.headers_sent = r.headers_sent;
    report.client_gone = r.client_gone;
    report.upstream_failed = r.upstream_failed;
    report.t_first_byte = r.t_first_byte;
    return report;
  }

  Session& s_;
  CompleteHook* const hook_;
  const ClientRequest& tmpl_;
  const int a_;
  const int b_;
  const Decor& decor_;
  const bool client_wants_stream_;
  const OnFirstByte& on_first_byte_;
  const absl::Duration first_token_wait_;
  const std::shared_ptr<LegState> prefill_state_ = std::make_shared<LegState>();
  const std::shared_ptr<LegState> decode_state_ = std::make_shared<LegState>();
  RelayResult prefill_;
  RelayResult decode_;
};

// A HEAVY request in v2 (or any request in pd_sep): prefill on A, the
// engines move the KV, decode on B (transfer/handoff.h), served co-located
// instead whenever the handoff cannot run, so nothing is lost.
net::awaitable<LegResult> ServeOffload(Session& s, CompleteHook* hook, ClientRequest& tmpl,
                                       std::string& body, int a, int b, Decor decor, bool stream,
                                       OnFirstByte on_first_byte, absl::Duration first_token_wait,
                                       RequestRecord& rec) {
  SharedState& state = s.state();
  const auto fleet = state.router->Backends();
  const auto& backends = *fleet;
  transfer::Handoff& handoff = *state.handoff;
  const std::string conn_name(handoff.connector().name());
  auto count = [&](std::string_view outcome) {
    state.metrics->offloads->Inc({conn_name, outcome});
  };
  LegResult out;
  out.served_by = b;
  out.label = absl::StrCat(backends[a].name, "->", backends[b].name);
  decor.backend_label = out.label;
  transfer::HandoffResult h;
  {
    HttpLegRunner legs(s, hook, tmpl, a, b, decor, stream, on_first_byte, first_token_wait);
    transfer::HandoffRequest request;
    request.request_id = rec.id;
    request.client_body = body;
    request.prefill_backend = a;
    request.prefill_name = backends[a].name;
    request.prefill_host = backends[a].host;
    request.prefill_port = backends[a].port;
    h = co_await handoff.Run(request, legs, s.worker().random);
    out.r = h.decode_ran ? legs.decode() : legs.prefill();
  }
  if (h.no_kv_params) count("no_kv_params");  // B prefilled by itself
  count(h.outcome);
  if (h.prefill_seconds >= 0)
    state.metrics->prefill_seconds->Observe({conn_name}, h.prefill_seconds);
  if (h.fallback != transfer::HandoffResult::Fallback::kNone) {
    const int on = h.fallback == transfer::HandoffResult::Fallback::kOnDecode ? b : a;
    // A leg ran and failed (prefill_failed, decode_failed): the co-located
    // attempt is a retry.
    if (h.attempts > 0) state.metrics->retries->Inc({backends[on].name, h.outcome});
    rec.prefill_backend = backends[on].name;
    rec.decode_backend = backends[on].name;
    LegResult again = co_await ServeColocated(s, hook, tmpl, body, on, decor, stream, on_first_byte,
                                              first_token_wait, h.kv_transferred);
    again.attempts += h.attempts;
    co_return again;
  }
  rec.prefill_backend = backends[a].name;
  rec.decode_backend = backends[b].name;
  out.attempts = h.attempts;
  out.kv_transferred = h.kv_transferred;
  rec.t_prefill_done = h.t_prefill_done;
  if (h.transfer_s >= 0) {
    rec.transfer_s = h.transfer_s;
    state.metrics->transfer_seconds->Observe({conn_name}, rec.transfer_s);
  }
  co_return out;
}

// Answers a request the router shed at admission (router/shed.h): 429 in
// its API's error shape, with Retry-After, before any engine work.
template <typename Refuse>
net::awaitable<bool> Shed(Session& s, const router::RouteTicket& ticket, Endpoint endpoint,
                          std::string_view route, RequestRecord& rec, Refuse& refuse) {
  const router::Decision& d = ticket.decision;
  const router::ShedVerdict& v = ticket.shed;
  rec.request_class = std::string(router::ToString(d.request_class));
  rec.prompt_tokens_est = d.prompt_tokens_est;
  rec.cached_tokens_est = d.cached_tokens_est;
  rec.new_tokens_est = d.new_tokens_est;
  rec.predicted_ttft_s = d.predicted_ttft_s;
  s.state().metrics->shed->Inc({route, rec.request_class, v.running_session ? "running" : "new"});
  co_return co_await refuse(
      429,
      absl::StrCat("kvroute is shedding load: this request's predicted time to first token (",
                   absl::SixDigits(d.predicted_ttft_s), " s) is past its deadline (",
                   absl::SixDigits(v.deadline_s), " s); retry after ",
                   static_cast<int64_t>(v.retry_after_s), " s"),
      std::to_string(static_cast<int64_t>(std::ceil(v.retry_after_s))), "shed");
}

// Records the per-request metrics once a request is served.
void ObserveOutcome(SharedState& state, std::string_view route, const RequestRecord& rec,
                    const RelayResult& r, const LegResult& leg, const router::Decision& d,
                    Clock::time_point t0) {
  const std::string& cls = rec.request_class;
  if (rec.t_first_token >= 0) {
    state.metrics->ttfb->Observe({route, cls}, rec.t_first_token - rec.t_arrival);
  }
  if (r.completed && r.usage.completion_tokens > 1 && rec.t_first_token >= 0) {
    const double decode_s = Since(t0) - (rec.t_first_token - rec.t_arrival);
    state.metrics->tpot->Observe({cls},
                                 decode_s / static_cast<double>(r.usage.completion_tokens - 1));
  }
  if (r.usage.cached_tokens >= 0 && r.usage.prompt_tokens > 0 && leg.served_by >= 0) {
    const std::string name = (*state.router->Backends())[leg.served_by].name;
    state.metrics->cached_tokens_est->Inc({name}, static_cast<double>(d.cached_tokens_est));
    state.metrics->cached_tokens_actual->Inc({name}, static_cast<double>(r.usage.cached_tokens));
    state.metrics->estimate_error->Observe(
        {}, static_cast<double>(d.cached_tokens_est - r.usage.cached_tokens) /
                static_cast<double>(r.usage.prompt_tokens));
  }
}

}  // namespace

// "kvr-" and 32 random hex digits (two zero-padded 64-bit numbers).
std::string NewRequestId(absl::BitGenRef random) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string id(4 + 32, '0');
  id.replace(0, 4, "kvr-");
  for (int half = 0; half < 2; ++half) {
    uint64_t v = absl::Uniform<uint64_t>(random);
    for (int i = 15; i >= 0; --i, v >>= 4) id[4 + 16 * half + i] = kDigits[v & 0xF];
  }
  return id;
}

// Full jitter: uniform in [0, min(max, base x 2^(attempt-1))].
absl::Duration RetryBackoff(const UpstreamOptions& options, int attempt, absl::BitGenRef random) {
  absl::Duration cap = options.retry_backoff;
  for (int i = 1; i < attempt && cap < options.retry_backoff_max; ++i) cap *= 2;
  cap = std::min(cap, options.retry_backoff_max);
  if (cap <= absl::ZeroDuration()) return absl::ZeroDuration();
  return absl::Nanoseconds(absl::Uniform<int64_t>(random, 0, absl::ToInt64Nanoseconds(cap) + 1));
}

// Serves a completion request: features, route, relay (retried elsewhere
// while nothing has reached the client), then its record and metrics.
net::awaitable<bool> ServeCompletion(Session& s, ClientRequest& req, Endpoint endpoint,
                                     std::string_view route) {
  SharedState& state = s.state();
  const Config& cfg = s.config();
  // Set while an attempt is served: tells the router the response
  // completed (served_by, kv_transferred, status, usage).
  CompleteHook complete_hook;
  CompleteHook* const hook = &complete_hook;
  const auto t0 = Clock::now();
  RequestRecord rec;
  rec.t_arrival = WallSecondsAt(t0);
  rec.route = std::string(route);
  rec.mode = cfg.router.mode;
  std::string_view rid_header = req.request_id();
  rec.id = rid_header.empty() || rid_header.size() > 256 ? NewRequestId(s.worker().random)
                                                         : std::string(rid_header);
  state.inflight.fetch_add(1);
  state.metrics->inflight->Add({}, 1);
  // Whichever way the request ends (after its answer is written): the
  // record's end, the metrics, the log line. One coroutine for the whole
  // request, not a wrapper around another (each is a frame and a resumption).
  absl::Cleanup finish = [&] {
    const auto t_done = Clock::now();
    rec.t_done = WallSecondsAt(t_done);
    const std::string status = std::to_string(rec.status);
    const std::string cls = rec.request_class.empty() ? "none" : rec.request_class;
    if (rec.outcome.empty()) {
      rec.outcome = rec.status >= 200 && rec.status < 300 && rec.error.empty() ? "ok"
                    : rec.error == "client disconnected"                      ? "client_gone"
                                                                             : "failed";
    }
    state.metrics->requests->Inc({route, cfg.router.mode, cls, status});
    state.metrics->duration->Observe({route, cls}, Seconds(t_done - t0));
    state.request_log->Write(rec);
    // Last: a drain waits for this, so the log and metrics are complete.
    state.inflight.fetch_sub(1);
    state.metrics->inflight->Add({}, -1);
  };
  const bool keep_alive = req.keep_alive();
  // Refused before any engine work: `retry_after` is the Retry-After value
  // (empty: none).
  auto refuse = [&](int status, std::string msg, std::string retry_after,
                    std::string_view outcome) -> net::awaitable<bool> {
    rec.status = status;
    rec.error = msg;
    rec.outcome = std::string(outcome);
    Headers extra;
    extra.emplace_back("X-Request-Id", rec.id);
    if (!rec.request_class.empty()) extra.emplace_back("X-Kvroute-Class", rec.request_class);
    if (!retry_after.empty()) extra.emplace_back("Retry-After", std::move(retry_after));
    co_return co_await s.SendApiError(endpoint, status, msg, keep_alive, std::move(extra));
  };
  auto reject = [&](int status, std::string msg, bool retry_after = false) {
    return refuse(status, std::move(msg), retry_after ? s.RetryAfterValue() : std::string(),
                  "rejected");
  };
  // A Responses follow-up whose conversation kvroute cannot reach: vLLM's own 404.
  std::string previous_response_id;
  auto response_gone = [&](std::string why) -> net::awaitable<bool> {
    rec.status = 404;
    rec.error = std::move(why);
    Headers extra;
    extra.emplace_back("X-Request-Id", rec.id);
    co_return co_await s.SendBody(404, "application/json",
                                  ResponseNotFoundBody(previous_response_id), keep_alive,
                                  std::move(extra));
  };
  if (state.draining.load()) {
    co_return co_await reject(503, "kvroute is shutting down", /*retry_after=*/true);
  }
  if (!state.admission->TryAcquire() &&
      !co_await state.admission->Acquire(cfg.limits.queue_timeout)) {
    state.metrics->admission_rejections->Inc({});
    co_return co_await reject(
        429,
        absl::StrCat("kvroute is at its limit of ", cfg.limits.max_inflight_requests,
                     " requests in flight; retry later"),
        /*retry_after=*/true);
  }
  struct SlotGuard {
    Admission* admission;
    ~SlotGuard() { admission->Release(); }
  } slot{state.admission.get()};
  // Like vLLM's server, the body is read as JSON whatever Content-Type
  // says (curl -d sends form encoding); a non-JSON body is a 400 below.
  absl::StatusOr<router::RequestFeatures> features =
      ExtractFeatures(endpoint, req.body(), req.session_id());
  if (!features.ok()) co_return co_await reject(400, std::string(features.status().message()));
  features->request_id = rec.id;
  if (cfg.request_log_prompts) rec.prompt = features->prompt_bytes;
  rec.session = features->session_id;
  rec.stream = features->stream;
  const router::Options& ropts = state.router->options();
  features->chunk_hashes = router::HashPromptChunks(features->prompt_bytes, ropts.chunk_bytes);
  features->defer_kv_reservation = state.residency->enabled() && !features->session_id.empty();
  features->allow_shed = true;
  // A Responses follow-up goes to the backend storing its conversation and
  // nowhere else (not even on a retry: any other instance answers 404).
  previous_response_id = features->previous_response_id;
  const ResponsePin pin = PinToHome(features->previous_response_id, *state.response_homes,
                                    *state.router->Backends());
  if (pin.kind == ResponsePin::kGone) {
    co_return co_await response_gone("the backend holding previous_response_id left the fleet");
  }
  if (pin.kind == ResponsePin::kHome) features->avoid_backends = pin.avoid;

  // The upstream request is the client's: Relay writes its header from
  // the client's fields (AppendUpstreamHeader: hop-by-hop and framing
  // fields out, kvroute's request id, Host and Content-Length in).
  ClientRequest& tmpl = req;
  std::string body = std::move(req.body());
  // Back into the request at the end, for the worker's stash (Run).
  absl::Cleanup body_back = [&body, &req] { req.body() = std::move(body); };
  const int max_attempts = std::max(1, cfg.upstream.max_attempts);

  // Route, serve, and while nothing has reached the client and the
  // failure was the instance's (connect error, timeout, 5xx), route again
  // avoiding the instances that failed, after a jittered backoff.
  LegResult leg;
  router::Decision d;
  Decor decor;
  int attempts = 0;
  std::string retry_reason;  // why this attempt is a retry; empty on the first
  for (int attempt = 1;; ++attempt) {
    const auto td0 = Clock::now();
    absl::StatusOr<router::RouteTicket> ticket = state.router->Route(*features, WallAt(td0));
    const auto td1 = Clock::now();
    state.metrics->decision_time->Observe({}, Seconds(td1 - td0));
    if (!ticket.ok()) {
      if (attempt > 1) break;  // nowhere else to go: answer with the last failure
      if (pin.kind == ResponsePin::kHome &&
          ticket.status().code() != absl::StatusCode::kResourceExhausted) {
        co_return co_await response_gone(
            "the backend holding previous_response_id is not routable");
      }
      // ResourceExhausted: too many requests in flight (429, retry soon);
      // Unavailable: no healthy backend (503).
      const bool busy = ticket.status().code() == absl::StatusCode::kResourceExhausted;
      co_return co_await reject(busy ? 429 : 503, std::string(ticket.status().message()),
                                /*retry_after=*/true);
    }
    if (attempt == 1) rec.t_routed = WallSecondsAt(td1);
    const auto fleet = state.router->Backends();  // includes the decision's slots
    const auto& backends = *fleet;
    d = ticket->decision;
    if (ticket->shed.shed) {
      if (attempt > 1) break;  // a retry past its deadline: answer with the last failure
      co_return co_await Shed(s, *ticket, endpoint, route, rec, refuse);
    }
    if (!retry_reason.empty()) {
      state.metrics->retries->Inc({backends[d.decode_backend].name, retry_reason});
    }
    rec.request_class = std::string(router::ToString(d.request_class));
    rec.prompt_tokens_est = d.prompt_tokens_est;
    rec.cached_tokens_est = d.cached_tokens_est;
    rec.new_tokens_est = d.new_tokens_est;
    state.metrics->decisions->Inc(
        {cfg.router.mode, rec.request_class, std::string(router::ToString(d.mode))});
    if (d.affinity_hit) state.metrics->affinity->Inc({"hit"});
    if (d.affinity_broken) state.metrics->affinity->Inc({"broken"});
    const bool offload = d.mode == router::DecisionMode::kOffload && d.prefill_backend >= 0 &&
                         d.prefill_backend != d.decode_backend &&
                         HandoffServes(endpoint, state.handoff->connector().name());
    rec.decode_backend = backends[d.decode_backend].name;
    rec.prefill_backend = backends[offload ? d.prefill_backend : d.decode_backend].name;
    rec.predicted_ttft_s = d.predicted_ttft_s;
    const absl::Duration first_token_wait = FirstTokenTimeout(cfg.upstream, d.predicted_ttft_s);
    rec.predicted_transfer_s = offload ? d.predicted_transfer_s : -1;
    if (offload) state.ObserveOffload(d.new_tokens_est);
    decor = Decor{rec.id, backends[d.decode_backend].name, rec.request_class, endpoint,
                  DeadlinePriority(d, ropts, rec.t_arrival)};

    const router::RouteTicket& tk = *ticket;
    auto on_first_byte = [&state, &tk](Clock::time_point at) {
      state.router->OnFirstToken(tk, WallAt(at));
    };
    // A co-located turn of an agent session goes once its KV fits its
    // instance (router/residency_gate.h), which may be another instance's
    // room; every request is dispatched here.
    const residency::ResidencyWait::Admitted go = co_await AwaitResidency(s, tk);
    if (tk.residency_wait != 0) {
      rec.residency_wait_s = go.waited_s;
      state.metrics->residency_wait->Observe({}, rec.residency_wait_s);
    }
    if (go.dispatched.decision.decode_backend != d.decode_backend) {
      d = go.dispatched.decision;
      rec.decode_backend = rec.prefill_backend = backends[d.decode_backend].name;
      decor.backend_label = rec.decode_backend;
    }
    // A held request's estimate is the one as it is sent (the instance may
    // have evicted part of its prefix meanwhile).
    if (go.dispatched.cached_tokens_est >= 0) rec.cached_tokens_est = go.dispatched.cached_tokens_est;
    bool reported = false;
    auto report = [&](int served_by, bool transferred, bool ok, const Usage& u) {
      if (reported) return;
      reported = true;
      router::Outcome o;
      o.served_by = served_by;
      o.ok = ok;
      o.prompt_tokens = u.prompt_tokens;
      o.cached_tokens = u.cached_tokens;
      o.completion_tokens = u.completion_tokens;
      o.kv_transferred = transferred;
      state.router->OnComplete(tk, o, WallAt(Clock::now()));
    };
    if (go.gone) {
      // Its client left while it was held: nothing was sent.
      leg = LegResult{};
      leg.r.client_gone = true;
      leg.r.error = "client disconnected";
      report(-1, false, false, Usage{});
      break;
    }
    complete_hook = [&](int served_by, bool transferred, int status, const Usage& u) {
      report(served_by, transferred, status >= 200 && status < 300, u);
    };
    if (offload) {
      rec.transfer_s = -1;  // the record's transfer is the answering attempt's
      leg = co_await ServeOffload(s, hook, tmpl, body, d.prefill_backend, d.decode_backend, decor,
                                  rec.stream, on_first_byte, first_token_wait, rec);
      if (rec.transfer_s >= 0) state.router->OnTransfer(tk, rec.transfer_s);
    } else {
      leg = LegResult{};
      LegOptions opts =
          BeginColocated(s, hook, tmpl, body, d.decode_backend, decor, on_first_byte, false, leg);
      opts.first_token_timeout = first_token_wait;
      leg.r = co_await Relay(s, d.decode_backend, tmpl, decor, rec.stream, std::move(opts));
      EndColocated(tmpl, body, leg);
    }
    complete_hook = nullptr;
    // Normally reported by the relay before the response's last bytes;
    // here for responses that never completed.
    report(leg.served_by, leg.kv_transferred,
           leg.r.completed && leg.r.status >= 200 && leg.r.status < 300, leg.r.usage);
    attempts += leg.attempts;

    const RelayResult& r = leg.r;
    const bool retryable = !r.headers_sent && !r.client_gone && r.upstream_failed;
    if (!retryable || attempt >= max_attempts || state.draining.load()) break;
    features->avoid_backends.push_back(d.decode_backend);
    if (offload) features->avoid_backends.push_back(d.prefill_backend);
    retry_reason = RetryReason(r);
    spdlog::debug("request {}: attempt {} on {} failed ({}); retrying elsewhere", rec.id, attempt,
                  leg.label, r.error);
    if (const absl::Duration pause = RetryBackoff(cfg.upstream, attempt, s.worker().random);
        pause > absl::ZeroDuration()) {
      net::steady_timer timer(s.client().get_executor(), ToChrono(pause));
      co_await timer.async_wait(kUseTuple);
    }
  }

  const RelayResult& r = leg.r;
  rec.attempts = attempts;
  rec.status = r.status;
  rec.error = r.error;
  rec.t_first_token = r.t_first_byte;
  rec.prompt_tokens = r.usage.prompt_tokens;
  rec.cached_tokens = r.usage.cached_tokens;
  rec.completion_tokens = r.usage.completion_tokens;
  ObserveOutcome(state, route, rec, r, leg, d, t0);

  if (!r.headers_sent) {
    if (r.client_gone) co_return false;
    // The engine's own 5xx status when it answered one; else 502/504.
    const int status = r.status >= 500 ? r.status : r.timed_out ? 504 : 502;
    rec.status = status;
    Headers extra;
    extra.emplace_back("X-Request-Id", rec.id);
    extra.emplace_back("X-Kvroute-Backend", leg.label);
    extra.emplace_back("X-Kvroute-Class", decor.request_class);
    std::string msg = absl::StrCat("backend ", leg.label, ": ", r.error);
    if (attempts > 1) absl::StrAppend(&msg, " (", attempts, " attempts)");
    co_return co_await s.SendApiError(endpoint, status, msg, keep_alive, std::move(extra));
  }
  co_return r.completed&& keep_alive && !state.draining.load();
}

}  // namespace kvroute::proxy
