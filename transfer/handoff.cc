#include "transfer/handoff.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "absl/random/distributions.h"
#include "absl/strings/string_view.h"

namespace kvroute::transfer {

namespace net = boost::asio;

InflightBound::Slot InflightBound::TryAcquire() {
  int64_t held = inflight_.load(std::memory_order_relaxed);
  do {
    if (held >= limit_) return Slot();
  } while (!inflight_.compare_exchange_weak(held, held + 1, std::memory_order_acq_rel,
                                            std::memory_order_relaxed));
  return Slot(this);
}

void BootstrapDirectory::SetPorts(absl::flat_hash_map<std::string, uint16_t> ports,
                                  uint16_t fallback) {
  absl::MutexLock lock(&mu_);
  ports_ = std::move(ports);
  fallback_port_ = fallback;
}

uint16_t BootstrapDirectory::Port(std::string_view backend) const {
  absl::MutexLock lock(&mu_);
  // Debian's abseil has its own string_view type.
  auto it = ports_.find(absl::string_view(backend.data(), backend.size()));
  return it == ports_.end() ? fallback_port_ : it->second;
}

std::optional<std::string> BootstrapDirectory::EngineId(int backend) const {
  absl::MutexLock lock(&mu_);
  auto it = engine_ids_.find(backend);
  if (it == engine_ids_.end()) return std::nullopt;
  return it->second;
}

void BootstrapDirectory::RememberEngineId(int backend, std::string engine_id) {
  absl::MutexLock lock(&mu_);
  engine_ids_[backend] = std::move(engine_id);
}

void BootstrapDirectory::ForgetEngineId(int backend) {
  absl::MutexLock lock(&mu_);
  engine_ids_.erase(backend);
}

namespace {

HandoffResult FallBack(HandoffResult::Fallback where, std::string_view outcome) {
  HandoffResult r;
  r.fallback = where;
  r.outcome = outcome;
  return r;
}

bool Succeeded(const LegReport& prefill) { return prefill.completed && prefill.status == 200; }

// A's top-level kv_transfer_params from its prefill response, if any.
std::optional<boost::json::object> KvTransferParams(const std::string& prefill_response) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(prefill_response, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const boost::json::value* kv = v.get_object().if_contains("kv_transfer_params");
  if (kv == nullptr || !kv->is_object()) return std::nullopt;
  return kv->get_object();
}

}  // namespace

net::awaitable<std::string> Handoff::PrefillEngineId(const HandoffRequest& request,
                                                     uint16_t bootstrap_port, LegRunner& legs) {
  if (std::optional<std::string> known = bootstrap_.EngineId(request.prefill_backend)) {
    co_return *std::move(known);
  }
  std::optional<std::string> answer =
      co_await legs.QueryBootstrap(std::string(request.prefill_host), bootstrap_port);
  if (!answer) co_return std::string();
  absl::StatusOr<std::string> id = EngineIdFromQuery(*answer);
  if (!id.ok() || id->empty()) co_return std::string();
  bootstrap_.RememberEngineId(request.prefill_backend, *id);
  co_return *std::move(id);
}

net::awaitable<HandoffResult> Handoff::Run(const HandoffRequest& request, LegRunner& legs,
                                           absl::BitGenRef random) {
  using Fallback = HandoffResult::Fallback;
  // Held until both legs are over; released before the caller serves a
  // fallback, which is an ordinary co-located request.
  InflightBound::Slot slot = bound_.TryAcquire();
  if (!slot) co_return FallBack(Fallback::kOnDecode, "over_bound");
  boost::system::error_code ec;
  boost::json::value parsed = boost::json::parse(request.client_body, ec);
  if (ec || !parsed.is_object()) co_return FallBack(Fallback::kOnDecode, "bad_body");
  const boost::json::object& client = parsed.get_object();

  HandoffPlan plan;
  plan.request_id = std::string(request.request_id);
  plan.prefill_host = std::string(request.prefill_host);
  plan.prefill_port = request.prefill_port;
  plan.bootstrap_port = bootstrap_.Port(request.prefill_name);
  plan.bootstrap_room = absl::Uniform<uint64_t>(random) & 0x7fffffffffffffffULL;
  if (connector_->needs_engine_id()) {
    plan.engine_id = co_await PrefillEngineId(request, plan.bootstrap_port, legs);
    if (plan.engine_id.empty()) co_return FallBack(Fallback::kOnDecode, "bootstrap_failed");
  }
  absl::StatusOr<std::string> prefill_body = connector_->PrefillBody(client, plan);
  if (!prefill_body.ok()) co_return FallBack(Fallback::kOnDecode, "bad_body");

  HandoffResult out;
  const double t0 = legs.Now();
  bool prefill_failed = false;
  bool decode_failed = false;
  double t_prefill_done = -1;
  LegReport decode;
  // B gets the client's own body when the connector cannot shape one: it
  // then prefills by itself.
  auto decode_body = [&](absl::StatusOr<std::string> shaped) {
    return shaped.ok() ? *std::move(shaped) : std::string(request.client_body);
  };

  if (connector_->sequential()) {
    LegReport p = co_await legs.RunPrefill(*std::move(prefill_body), /*watch_client=*/true);
    out.attempts = 1;
    if (p.client_gone) {
      out.outcome = "client_gone";
      co_return out;
    }
    if (!Succeeded(p)) {
      prefill_failed = true;
    } else {
      t_prefill_done = p.t_done;
      out.prefill_seconds = p.t_done - t0;
      const std::optional<boost::json::object> params = KvTransferParams(p.body);
      out.no_kv_params = !params.has_value();
      out.kv_transferred = params.has_value();
      decode = co_await legs.RunDecode(decode_body(connector_->DecodeBody(client, plan, params)),
                                       out.kv_transferred);
      out.decode_ran = true;
      out.attempts = 2;
      decode_failed = !decode.headers_sent && !decode.client_gone && decode.upstream_failed;
    }
  } else {
    // Both legs at once. The prefill leg runs as a coroutine of its own on
    // this executor; the decode leg waits for the KV, so a failed prefill
    // cuts it short, and a decode leg that ends early cuts the prefill short.
    struct Join {
      explicit Join(net::any_io_executor ex)
          : timer(std::move(ex), net::steady_timer::time_point::max()) {}
      bool done = false;
      bool prefill_cancelled = false;
      bool decode_cancelled = false;
      LegReport prefill;
      net::steady_timer timer;
    };
    std::string db = decode_body(connector_->DecodeBody(client, plan, std::nullopt));
    auto join = std::make_shared<Join>(co_await net::this_coro::executor);
    net::co_spawn(
        join->timer.get_executor(),
        [&legs, join, body = *std::move(prefill_body)]() mutable -> net::awaitable<void> {
          join->prefill = co_await legs.RunPrefill(std::move(body), /*watch_client=*/false);
          join->done = true;
          // The decode leg would wait for KV that never comes.
          if (!Succeeded(join->prefill) && !join->prefill_cancelled) {
            join->decode_cancelled = true;
            legs.CancelDecode();
          }
          join->timer.cancel();
        },
        net::detached);
    decode = co_await legs.RunDecode(std::move(db), /*kv_transferred=*/true);
    out.decode_ran = true;
    out.attempts = 2;
    out.kv_transferred = true;
    if (!decode.completed && !join->done) {
      join->prefill_cancelled = true;
      legs.CancelPrefill();
    }
    while (!join->done) co_await join->timer.async_wait(net::as_tuple(net::use_awaitable));
    if (Succeeded(join->prefill)) {
      t_prefill_done = join->prefill.t_done;
      out.prefill_seconds = join->prefill.t_done - t0;
    }
    if (!decode.headers_sent && !decode.client_gone) {
      if (join->decode_cancelled) {
        prefill_failed = true;
      } else if (decode.upstream_failed) {
        decode_failed = true;
      }
    }
    if (decode.client_gone) {
      out.outcome = "client_gone";
      co_return out;
    }
  }
  slot.Release();

  if (prefill_failed) {
    // A's engine id may be what failed (A restarted with a new one).
    if (connector_->needs_engine_id()) bootstrap_.ForgetEngineId(request.prefill_backend);
    HandoffResult r = FallBack(Fallback::kOnDecode, "prefill_failed");
    r.attempts = out.attempts;
    r.prefill_seconds = out.prefill_seconds;
    co_return r;
  }
  if (decode_failed) {
    // A computed the prompt's KV: it is the cheapest place to serve it now.
    HandoffResult r = FallBack(Fallback::kOnPrefill, "decode_failed");
    r.attempts = out.attempts;
    r.kv_transferred = true;
    r.prefill_seconds = out.prefill_seconds;
    co_return r;
  }
  out.t_prefill_done = t_prefill_done;
  if (out.t_prefill_done >= 0 && decode.t_first_byte >= 0) {
    out.transfer_s = std::max(0.0, decode.t_first_byte - out.t_prefill_done);
  }
  if (decode.headers_sent && !decode.completed) {
    out.outcome = decode.client_gone ? "client_gone" : "stream_error";
  } else {
    out.outcome = decode.completed ? "ok" : "failed";
  }
  co_return out;
}

}  // namespace kvroute::transfer
