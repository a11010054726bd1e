#include "proxy/completion_legs.h"

#include <memory>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "proxy/request_clock.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/worker.h"
#include "transfer/handoff.h"

namespace kvroute::proxy {

namespace {

// Arms the relay's completion hook for a client-facing leg on `backend`.
void ArmCompletion(CompleteHook* hook, LegOptions& opts, int backend, bool kv_transferred) {
  opts.before_last_write = [hook, backend, kv_transferred](int status, const Usage& u) {
    if (*hook) (*hook)(backend, kv_transferred, status, u);
  };
}

}  // namespace

LegOptions BeginColocated(Session& s, CompleteHook* hook, ClientRequest& tmpl, std::string& body,
                          int backend, Decor& decor, OnFirstByte on_first_byte,
                          absl::Duration first_token_wait, bool kv_transferred, LegResult& out) {
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
  opts.first_token_timeout = first_token_wait;
  return opts;
}

void EndColocated(ClientRequest& tmpl, std::string& body, LegResult& out) {
  body = std::move(tmpl.body());
  out.attempts = 1;
}

namespace {

// The co-located leg as one coroutine, for the handoff's fallbacks.
net::awaitable<LegResult> ServeColocated(Session& s, CompleteHook* hook, ClientRequest& tmpl,
                                         std::string& body, int backend, Decor decor, bool stream,
                                         OnFirstByte on_first_byte, absl::Duration first_token_wait,
                                         bool kv_transferred) {
  LegResult out;
  LegOptions opts = BeginColocated(s, hook, tmpl, body, backend, decor, std::move(on_first_byte),
                                   first_token_wait, kv_transferred, out);
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

}  // namespace

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

}  // namespace kvroute::proxy
