#include "proxy/completion.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/random/distributions.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proxy/agent_apis.h"
#include "proxy/completion_legs.h"
#include "proxy/engine_priority.h"
#include "proxy/relay.h"
#include "proxy/request_clock.h"
#include "proxy/request_log.h"
#include "proxy/residency_hold.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/worker.h"
#include "router/prefix_hash.h"

namespace kvroute::proxy {

namespace {

// Why a failed attempt is retried, as the retries counter labels it.
std::string RetryReason(const RelayResult& r) {
  if (r.status >= 500) return "5xx";
  if (r.timed_out) return "timeout";
  if (absl::StartsWith(r.error, "connect failed")) return "connect";
  return r.ejected ? "ejected" : "upstream_error";
}

// One completion request while ServeCompletion serves it: what its steps
// share, from the record opened on arrival to the answering attempt's leg.
// Lives in ServeCompletion's frame.
struct Completion {
  // Opens the request's record and counts the request in flight
  // (CloseRecord ends both).
  Completion(Session& session, ClientRequest& request, Endpoint api, std::string_view path)
      : s(session),
        state(session.state()),
        cfg(session.config()),
        req(request),
        endpoint(api),
        route(path),
        t0(Clock::now()) {
    rec.t_arrival = WallSecondsAt(t0);
    rec.route = std::string(route);
    rec.mode = cfg.router.mode;
    std::string_view rid_header = req.request_id();
    rec.id = rid_header.empty() || rid_header.size() > 256 ? NewRequestId(s.worker().random)
                                                           : std::string(rid_header);
    state.inflight.fetch_add(1);
    state.metrics->inflight->Add({}, 1);
    keep_alive = req.keep_alive();
  }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  Session& s;
  SharedState& state;
  const Config& cfg;
  // The client's request, which is also the upstream request: Relay writes
  // its header from the client's fields (AppendUpstreamHeader: hop-by-hop
  // and framing fields out, kvroute's request id, Host and Content-Length in).
  ClientRequest& req;
  const Endpoint endpoint;
  const std::string_view route;
  const Clock::time_point t0;
  RequestRecord rec;
  bool keep_alive = false;
  // Set while an attempt is served: tells the router the response
  // completed (served_by, kv_transferred, status, usage).
  CompleteHook complete_hook;
  router::RequestFeatures features;
  ResponsePin pin;
  // The request's body while attempts are served: lent to each leg's
  // upstream request and handed back.
  std::string body;
  // The last attempt's decision and leg, which the request's answer and
  // record report.
  router::Decision d;
  Decor decor;
  LegResult leg;
  int attempts = 0;          // upstream attempts, over all the legs
  std::string retry_reason;  // why this attempt is a retry; empty on the first
};

// One attempt: its ticket, where it goes, and whether its outcome has
// reached the router. Lives for the attempt, in ServeCompletion's frame.
struct Attempt {
  absl::StatusOr<router::RouteTicket> ticket;
  std::shared_ptr<const std::vector<router::BackendSpec>> fleet;  // includes the decision's slots
  bool offload = false;
  bool reported = false;
  absl::Duration first_token_wait;
  OnFirstByte on_first_byte;
};

// The record's end, the metrics, the log line, whichever way the request
// ends (after its answer is written).
void CloseRecord(Completion& c) {
  RequestRecord& rec = c.rec;
  const auto t_done = Clock::now();
  rec.t_done = WallSecondsAt(t_done);
  const std::string status = std::to_string(rec.status);
  const std::string cls = rec.request_class.empty() ? "none" : rec.request_class;
  if (rec.outcome.empty()) {
    rec.outcome = rec.status >= 200 && rec.status < 300 && rec.error.empty() ? "ok"
                  : rec.error == "client disconnected"                       ? "client_gone"
                                                                             : "failed";
  }
  c.state.metrics->requests->Inc({c.route, c.cfg.router.mode, cls, status});
  c.state.metrics->duration->Observe({c.route, cls}, Seconds(t_done - c.t0));
  c.state.request_log->Write(rec);
  // Last: a drain waits for this, so the log and metrics are complete.
  c.state.inflight.fetch_sub(1);
  c.state.metrics->inflight->Add({}, -1);
}

// Holds one of the admission's slots until the request is done.
struct AdmissionSlot {
  Admission* admission;
  ~AdmissionSlot() { admission->Release(); }
};

// Refused before any engine work, advising `retry_after` as the wait before
// a retry (Retry-After and retry-after-ms) when set.
net::awaitable<bool> Refuse(Completion& c, int status, std::string msg,
                            std::optional<absl::Duration> retry_after, std::string_view outcome) {
  c.rec.status = status;
  c.rec.error = msg;
  c.rec.outcome = std::string(outcome);
  Headers extra;
  extra.emplace_back("X-Request-Id", c.rec.id);
  if (!c.rec.request_class.empty()) extra.emplace_back("X-Kvroute-Class", c.rec.request_class);
  if (retry_after) {
    extra.emplace_back("Retry-After", std::to_string(RetryAfterSeconds(*retry_after)));
    extra.emplace_back("retry-after-ms",
                       std::to_string(std::llround(absl::ToDoubleMilliseconds(*retry_after))));
  }
  co_return co_await c.s.SendApiError(c.endpoint, status, msg, c.keep_alive, std::move(extra));
}

net::awaitable<bool> Reject(Completion& c, int status, std::string msg, bool retry_after = false) {
  return Refuse(c, status, std::move(msg),
                retry_after ? std::optional(c.cfg.limits.retry_after) : std::nullopt, "rejected");
}

net::awaitable<bool> RejectOverLimit(Completion& c) {
  c.state.metrics->admission_rejections->Inc({});
  return Reject(c, 429,
                absl::StrCat("kvroute is at its limit of ", c.cfg.limits.max_inflight_requests,
                             " requests in flight; retry later"),
                /*retry_after=*/true);
}

// A Responses follow-up whose conversation kvroute cannot reach: vLLM's own 404.
net::awaitable<bool> ResponseGone(Completion& c, std::string why) {
  c.rec.status = 404;
  c.rec.error = std::move(why);
  Headers extra;
  extra.emplace_back("X-Request-Id", c.rec.id);
  co_return co_await c.s.SendBody(404, "application/json",
                                  ResponseNotFoundBody(c.features.previous_response_id),
                                  c.keep_alive, std::move(extra));
}

// Answers a request the router shed at admission (router/shed.h): 429 in
// its API's error shape, before any engine work, advising the predicted
// excess as its wait (to the millisecond in retry-after-ms, which the OpenAI
// and Anthropic SDKs read first, so their retries come when it has drained).
net::awaitable<bool> Shed(Completion& c, const router::RouteTicket& ticket) {
  RequestRecord& rec = c.rec;
  const router::Decision& d = ticket.decision;
  const router::ShedVerdict& v = ticket.shed;
  rec.request_class = std::string(router::ToString(d.request_class));
  rec.prompt_tokens_est = d.prompt_tokens_est;
  rec.cached_tokens_est = d.cached_tokens_est;
  rec.new_tokens_est = d.new_tokens_est;
  rec.predicted_ttft_s = d.predicted_ttft_s;
  c.state.metrics->shed->Inc({c.route, rec.request_class, v.running_session ? "running" : "new"});
  co_return co_await Refuse(
      c, 429,
      absl::StrCat("kvroute is shedding load: this request's predicted time to first token (",
                   absl::SixDigits(d.predicted_ttft_s), " s) is past its deadline (",
                   absl::SixDigits(v.deadline_s), " s); retry after ",
                   absl::SixDigits(v.retry_after_s), " s"),
      absl::Seconds(v.retry_after_s), "shed");
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

// Tells the router how the attempt ended, once (a session's turn leaves
// the residency model there with its tokens).
void Report(Completion& c, Attempt& a, int served_by, bool transferred, bool ok, const Usage& u) {
  if (a.reported) return;
  a.reported = true;
  router::Outcome o;
  o.served_by = served_by;
  o.ok = ok;
  o.prompt_tokens = u.prompt_tokens;
  o.cached_tokens = u.cached_tokens;
  o.completion_tokens = u.completion_tokens;
  o.kv_transferred = transferred;
  const absl::Time now = WallAt(Clock::now());
  c.state.router->OnComplete(*a.ticket, o, now);
  if (ClusterSync* cluster = c.state.cluster.load(std::memory_order_acquire);
      ok && cluster != nullptr && !c.features.session_id.empty()) {
    cluster->PublishSession(c.features.session_id, now);
  }
}

// Reads the request's features into `c` (the prompt's chunk hashes among
// them) and pins a Responses follow-up to the backend storing its
// conversation. Like vLLM's server, the body is read as JSON whatever
// Content-Type says (curl -d sends form encoding). Not ok: the body is no
// request of its endpoint, and the status says why (a 400).
absl::Status ReadFeatures(Completion& c) {
  absl::StatusOr<router::RequestFeatures> parsed =
      ExtractFeatures(c.endpoint, c.req.body(), c.req.session_id());
  if (!parsed.ok()) return parsed.status();
  c.features = *std::move(parsed);
  router::RequestFeatures& f = c.features;
  f.request_id = c.rec.id;
  if (c.cfg.request_log_prompts) c.rec.prompt = f.prompt_bytes;
  c.rec.session = f.session_id;
  c.rec.stream = f.stream;
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, c.state.router->options().chunk_bytes);
  f.defer_kv_reservation = c.state.residency->enabled() && !f.session_id.empty();
  f.allow_shed = true;
  // A Responses follow-up goes to the backend storing its conversation and
  // nowhere else (not even on a retry: any other instance answers 404).
  c.pin = PinToHome(f.previous_response_id, *c.state.response_homes, *c.state.router->Backends());
  if (c.pin.kind == ResponsePin::kHome) f.avoid_backends = c.pin.avoid;
  return absl::OkStatus();
}

// Takes the router's decision for the attempt: the record's estimates and
// backends, the decision metrics, the leg's decor and first-token wait,
// and whether it is an offload.
void TakeDecision(Completion& c, Attempt& a) {
  SharedState& state = c.state;
  RequestRecord& rec = c.rec;
  const router::Decision& d = c.d;
  const auto& backends = *a.fleet;
  if (!c.retry_reason.empty()) {
    state.metrics->retries->Inc({backends[d.decode_backend].name, c.retry_reason});
  }
  rec.request_class = std::string(router::ToString(d.request_class));
  rec.prompt_tokens_est = d.prompt_tokens_est;
  rec.cached_tokens_est = d.cached_tokens_est;
  rec.new_tokens_est = d.new_tokens_est;
  state.metrics->decisions->Inc(
      {c.cfg.router.mode, rec.request_class, std::string(router::ToString(d.mode))});
  if (d.affinity_hit) state.metrics->affinity->Inc({"hit"});
  if (d.affinity_broken) state.metrics->affinity->Inc({"broken"});
  if (d.shed_averted_home) state.metrics->shed_averted->Inc({c.route, rec.request_class});
  if (d.kept_home) state.metrics->kept_home->Inc({c.route, rec.request_class});
  a.offload = d.mode == router::DecisionMode::kOffload && d.prefill_backend >= 0 &&
              d.prefill_backend != d.decode_backend &&
              HandoffServes(c.endpoint, state.handoff->connector().name());
  rec.decode_backend = backends[d.decode_backend].name;
  rec.prefill_backend = backends[a.offload ? d.prefill_backend : d.decode_backend].name;
  rec.predicted_ttft_s = d.predicted_ttft_s;
  a.first_token_wait = FirstTokenTimeout(c.cfg.upstream, d.predicted_ttft_s);
  rec.predicted_transfer_s = a.offload ? d.predicted_transfer_s : -1;
  if (a.offload) state.ObserveOffload(d.new_tokens_est);
  c.decor = Decor{rec.id, backends[d.decode_backend].name, rec.request_class, c.endpoint,
                  DeadlinePriority(d, state.router->options(), rec.t_arrival)};
  const router::RouteTicket& tk = *a.ticket;
  a.on_first_byte = [&state, &tk](Clock::time_point at) {
    state.router->OnFirstToken(tk, WallAt(at));
  };
}

// How routing an attempt came out.
enum class Routed {
  kRouted,
  kRefused,      // the first attempt: refused or shed, AnswerUnrouted answers
  kLastFailure,  // a retry with nowhere to go: the last attempt's failure answers
};

// Asks the router where the attempt goes (avoiding the backends earlier
// attempts failed on) and takes its decision.
Routed RouteAttempt(Completion& c, int attempt, Attempt& a) {
  // Another replica may have routed this session's last turn: its record
  // (one store round trip) tells the router where that turn left its KV.
  if (ClusterSync* cluster = c.state.cluster.load(std::memory_order_acquire);
      attempt == 1 && cluster != nullptr && !c.features.session_id.empty()) {
    c.features.peer_session = cluster->ReadSession(c.features.session_id);
  }
  const auto td0 = Clock::now();
  a.ticket = c.state.router->Route(c.features, WallAt(td0));
  const auto td1 = Clock::now();
  c.state.metrics->decision_time->Observe({}, Seconds(td1 - td0));
  if (!a.ticket.ok()) return attempt > 1 ? Routed::kLastFailure : Routed::kRefused;
  if (attempt == 1) c.rec.t_routed = WallSecondsAt(td1);
  a.fleet = c.state.router->Backends();
  c.d = a.ticket->decision;
  // A retry past its deadline answers with the last failure too.
  if (a.ticket->shed.shed) return attempt > 1 ? Routed::kLastFailure : Routed::kRefused;
  TakeDecision(c, a);
  return Routed::kRouted;
}

// Answers a first attempt the router refused: ResourceExhausted is too
// many requests in flight (429, retry soon), Unavailable no healthy backend
// (503); a Responses follow-up whose home cannot take it gets vLLM's 404; a
// shed request its 429.
net::awaitable<bool> AnswerUnrouted(Completion& c, const Attempt& a) {
  if (a.ticket.ok()) return Shed(c, *a.ticket);
  const absl::Status& refusal = a.ticket.status();
  if (c.pin.kind == ResponsePin::kHome && refusal.code() != absl::StatusCode::kResourceExhausted) {
    return ResponseGone(c, "the backend holding previous_response_id is not routable");
  }
  const bool busy = refusal.code() == absl::StatusCode::kResourceExhausted;
  return Reject(c, busy ? 429 : 503, std::string(refusal.message()), /*retry_after=*/true);
}

// The attempt as the router dispatched it: on another instance's room when
// the residency model moved it there (the record and decor follow), with its
// cached-token estimate as it is sent (the instance may have evicted part of
// its prefix while it was held).
void TakeDispatch(Completion& c, const Attempt& a, const router::Router::Dispatched& go) {
  if (go.decision.decode_backend != c.d.decode_backend) {
    c.d = go.decision;
    c.rec.decode_backend = c.rec.prefill_backend = (*a.fleet)[c.d.decode_backend].name;
    c.decor.backend_label = c.rec.decode_backend;
  }
  if (go.cached_tokens_est >= 0) c.rec.cached_tokens_est = go.cached_tokens_est;
}

// A co-located turn of an agent session waits while the router holds it
// until its KV fits its instance (router/residency_gate.h,
// proxy/residency_hold.h), then is dispatched; with several replicas it then
// reserves that room across them, which may wait too. False: its client
// left while it was held, and nothing is sent.
net::awaitable<bool> HoldForResidency(Completion& c, Attempt& a) {
  const residency::ResidencyWait::Admitted go = co_await AwaitResidency(c.s, *a.ticket);
  c.rec.residency_wait_s = go.waited_s;
  bool gone = go.gone;
  ClusterSync* cluster = c.state.cluster.load(std::memory_order_acquire);
  if (!gone) TakeDispatch(c, a, go.dispatched);
  if (!gone && cluster != nullptr && cluster->enabled() && go.dispatched.resident_fill_tokens > 0) {
    const absl::Duration bound = std::max(
        absl::ZeroDuration(), go.dispatched.resident_wait_bound - absl::Seconds(go.waited_s));
    const ClusterAdmission held =
        co_await AwaitClusterAdmission(c.s, *cluster, go.dispatched, c.features.session_id, bound);
    c.rec.cluster_admission = held.outcome;
    c.rec.cluster_footprint_tokens = go.dispatched.resident_footprint_tokens;
    c.rec.cluster_reserved_tokens = held.reserved_tokens;
    c.rec.cluster_fill_tokens = held.fill_tokens;
    c.rec.residency_wait_s += held.waited_s;
    gone = held.gone;
    // Its TTFT, which teaches the prefill rate, counts from here, not from
    // before the store's answer; its session's residency quantum counts its
    // turns through every replica.
    if (!gone) c.state.router->Sent(*a.ticket, WallAt(Clock::now()), held.resident_turns);
  }
  c.state.metrics->residency_wait->Observe({}, c.rec.residency_wait_s);
  if (gone) {
    c.leg = LegResult{};
    c.leg.r.client_gone = true;
    c.leg.r.error = "client disconnected";
    co_return false;
  }
  co_return true;
}

// Sends the attempt off: the hook through which the relay reports its
// outcome to the router.
void Dispatch(Completion& c, Attempt& a) {
  c.complete_hook = [&c, &a](int served_by, bool transferred, int status, const Usage& u) {
    Report(c, a, served_by, transferred, status >= 200 && status < 300, u);
  };
}

// The attempt's prefill/decode handoff (ServeOffload); the transfer it
// measured teaches the router.
net::awaitable<void> ServeOffloadAttempt(Completion& c, const Attempt& a) {
  c.rec.transfer_s = -1;  // the record's transfer is the answering attempt's
  c.leg = co_await ServeOffload(c.s, &c.complete_hook, c.req, c.body, c.d.prefill_backend,
                                c.d.decode_backend, c.decor, c.rec.stream, a.on_first_byte,
                                a.first_token_wait, c.rec);
  if (c.rec.transfer_s >= 0) c.state.router->OnTransfer(*a.ticket, c.rec.transfer_s);
}

// Ends the attempt: its outcome to the router when the relay did not
// report it, its legs counted. True: it failed before anything reached the
// client and the failure was the instance's (connect error, timeout, 5xx),
// so another attempt goes elsewhere, avoiding the backends this one used.
bool EndAttempt(Completion& c, Attempt& a, int attempt) {
  c.complete_hook = nullptr;
  // Normally reported by the relay before the response's last bytes;
  // here for responses that never completed.
  const RelayResult& r = c.leg.r;
  Report(c, a, c.leg.served_by, c.leg.kv_transferred,
         r.completed && r.status >= 200 && r.status < 300, r.usage);
  c.attempts += c.leg.attempts;
  const bool retryable = !r.headers_sent && !r.client_gone && r.upstream_failed;
  const int max_attempts = std::max(1, c.cfg.upstream.max_attempts);
  if (!retryable || attempt >= max_attempts || c.state.draining.load()) return false;
  c.features.avoid_backends.push_back(c.d.decode_backend);
  if (a.offload) c.features.avoid_backends.push_back(c.d.prefill_backend);
  c.retry_reason = RetryReason(r);
  spdlog::debug("request {}: attempt {} on {} failed ({}); retrying elsewhere", c.rec.id, attempt,
                c.leg.label, r.error);
  return true;
}

// The jittered pause before attempt `attempt + 1` (RetryBackoff).
net::awaitable<void> PauseBeforeRetry(Completion& c, int attempt) {
  if (const absl::Duration pause = RetryBackoff(c.cfg.upstream, attempt, c.s.worker().random);
      pause > absl::ZeroDuration()) {
    net::steady_timer timer(c.s.client().get_executor(), ToChrono(pause));
    co_await timer.async_wait(kUseTuple);
  }
}

// The answering attempt's outcome into the record and the per-request metrics.
void RecordOutcome(Completion& c) {
  const RelayResult& r = c.leg.r;
  RequestRecord& rec = c.rec;
  rec.attempts = c.attempts;
  rec.status = r.status;
  rec.error = r.error;
  rec.t_first_token = r.t_first_byte;
  rec.prompt_tokens = r.usage.prompt_tokens;
  rec.cached_tokens = r.usage.cached_tokens;
  rec.completion_tokens = r.usage.completion_tokens;
  ObserveOutcome(c.state, c.route, rec, r, c.leg, c.d, c.t0);
}

// Nothing reached the client and no attempt succeeded: the engine's own
// 5xx status when it answered one, else 502 (504 when it timed out).
net::awaitable<bool> AnswerFailure(Completion& c) {
  const RelayResult& r = c.leg.r;
  const int status = r.status >= 500 ? r.status : r.timed_out ? 504 : 502;
  c.rec.status = status;
  Headers extra;
  extra.emplace_back("X-Request-Id", c.rec.id);
  extra.emplace_back("X-Kvroute-Backend", c.leg.label);
  extra.emplace_back("X-Kvroute-Class", c.decor.request_class);
  std::string msg = absl::StrCat("backend ", c.leg.label, ": ", r.error);
  if (c.attempts > 1) absl::StrAppend(&msg, " (", c.attempts, " attempts)");
  co_return co_await c.s.SendApiError(c.endpoint, status, msg, c.keep_alive, std::move(extra));
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
// while nothing has reached the client), then its record and metrics. One
// coroutine for the whole request, which awaits each leg's relay itself
// (a wrapping coroutine is a frame and a resumption per request).
net::awaitable<bool> ServeCompletion(Session& s, ClientRequest& req, Endpoint endpoint,
                                     std::string_view route) {
  Completion c(s, req, endpoint, route);
  absl::Cleanup close_record = [&c] { CloseRecord(c); };
  if (c.state.draining.load()) {
    co_return co_await Reject(c, 503, "kvroute is shutting down", /*retry_after=*/true);
  }
  if (!c.state.admission->TryAcquire() &&
      !co_await c.state.admission->Acquire(c.cfg.limits.queue_timeout)) {
    co_return co_await RejectOverLimit(c);
  }
  AdmissionSlot slot{c.state.admission.get()};
  if (const absl::Status read = ReadFeatures(c); !read.ok()) {
    co_return co_await Reject(c, 400, std::string(read.message()));
  }
  if (c.pin.kind == ResponsePin::kGone) {
    co_return co_await ResponseGone(c, "the backend holding previous_response_id left the fleet");
  }
  c.body = std::move(req.body());
  // Back into the request at the end, for the worker's stash (Run).
  absl::Cleanup body_back = [&c] { c.req.body() = std::move(c.body); };

  // Route, serve, and while nothing has reached the client and the
  // failure was the instance's, route again avoiding the instances that
  // failed, after a jittered backoff.
  for (int attempt = 1;; ++attempt) {
    Attempt a;
    const Routed routed = RouteAttempt(c, attempt, a);
    if (routed == Routed::kLastFailure) break;
    if (routed == Routed::kRefused) co_return co_await AnswerUnrouted(c, a);
    if (!a.ticket->residency_gated) {
      TakeDispatch(c, a, c.state.router->Dispatch(*a.ticket, WallAt(Clock::now())));
    } else if (!co_await HoldForResidency(c, a)) {
      EndAttempt(c, a, attempt);
      break;
    }
    Dispatch(c, a);
    if (a.offload) {
      co_await ServeOffloadAttempt(c, a);
    } else {
      c.leg = LegResult{};
      LegOptions opts = BeginColocated(s, &c.complete_hook, req, c.body, c.d.decode_backend,
                                       c.decor, a.on_first_byte, a.first_token_wait,
                                       /*kv_transferred=*/false, c.leg);
      c.leg.r = co_await Relay(s, c.d.decode_backend, req, c.decor, c.rec.stream, std::move(opts));
      EndColocated(req, c.body, c.leg);
    }
    if (!EndAttempt(c, a, attempt)) break;
    co_await PauseBeforeRetry(c, attempt);
  }

  RecordOutcome(c);
  const RelayResult& r = c.leg.r;
  if (!r.headers_sent) {
    if (r.client_gone) co_return false;
    co_return co_await AnswerFailure(c);
  }
  co_return r.completed&& c.keep_alive && !c.state.draining.load();
}

}  // namespace kvroute::proxy
