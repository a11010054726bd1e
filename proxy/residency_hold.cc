#include "proxy/residency_hold.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <tuple>
#include <variant>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "proxy/cluster_sync.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"

namespace kvroute::proxy {
namespace {

// Completes when the client closes its connection (end of stream, reset or
// another error), or when cancelled. Readable with nothing to read is a
// stale readiness event: wait again. A pipelined request leaves nothing to
// tell a close by: wait until cancelled.
net::awaitable<void> ClientLeft(tcp::socket& sock) {
  for (;;) {
    auto [ec] = co_await sock.async_wait(tcp::socket::wait_read, kUseTuple);
    if (ec == net::error::operation_aborted) co_return;
    if (!ec) {
      if (!sock.non_blocking()) sock.non_blocking(true, ec);
      char byte;
      sock.receive(net::buffer(&byte, 1), tcp::socket::message_peek, ec);
      if (ec == net::error::would_block || ec == net::error::try_again) continue;
      if (!ec) {
        net::steady_timer never(sock.get_executor(), std::chrono::steady_clock::time_point::max());
        co_await never.async_wait(kUseTuple);
        co_return;
      }
    }
    co_return;
  }
}

}  // namespace

net::awaitable<residency::ResidencyWait::Admitted> AwaitResidency(
    Session& s, const router::RouteTicket& ticket) {
  residency::ResidencyWait& wait = *s.state().residency;
  if (ticket.residency_wait == 0) co_return co_await wait.Admit(ticket);
  const absl::Time start = wait.clock().Now();
  using namespace net::experimental::awaitable_operators;
  std::variant<residency::ResidencyWait::Admitted, std::monostate> first =
      co_await (wait.Admit(ticket) || ClientLeft(s.client().socket()));
  if (first.index() == 0) co_return std::get<0>(first);
  // The client left first: the cancelled wait gave the request's place up.
  residency::ResidencyWait::Admitted gone;
  gone.dispatched = {ticket.decision, -1};
  gone.gone = true;
  gone.waited_s = absl::ToDoubleSeconds(wait.clock().Now() - start);
  co_return gone;
}

net::awaitable<ClusterAdmission> AwaitClusterAdmission(Session& s, ClusterSync& cluster,
                                                       const router::Router::Dispatched& go,
                                                       const std::string& session,
                                                       absl::Duration bound) {
  const residency::WaitClock& clock = s.state().residency->clock();
  const absl::Time start = clock.Now();
  const absl::Time deadline = start + bound;
  ClusterAdmission out;
  out.fill_tokens = go.resident_fill_tokens;
  const int backend = go.decision.decode_backend;
  // Counted as waiting from its first refusal until it returns.
  struct Waiting {
    ClusterSync& cluster;
    int backend;
    bool counted = false;
    ~Waiting() {
      if (counted) cluster.EndWaiting(backend);
    }
  } waiting{cluster, backend};
  using namespace net::experimental::awaitable_operators;
  for (bool waited = false;; waited = true) {
    const absl::Time now = clock.Now();
    const bool force = now >= deadline;
    const std::optional<cluster::Reservation> r = cluster.Reserve(
        backend, session, go.resident_footprint_tokens, go.resident_fill_tokens, force);
    out.waited_s = absl::ToDoubleSeconds(clock.Now() - start);
    if (!r) {
      out.outcome = "unavailable";
      co_return out;
    }
    if (r->admitted) {
      out.outcome = r->continued              ? "resident"
                    : force && r->evicted > 0 ? "forced"
                    : waited                  ? "waited"
                                              : "admitted";
      out.reserved_tokens = r->reserved_tokens;
      out.resident_turns = r->turns_before;
      co_return out;
    }
    if (!waiting.counted) {
      cluster.BeginWaiting(backend);
      waiting.counted = true;
    }
    const absl::Duration pause =
        std::min(absl::Seconds(cluster.retry_interval_s()), deadline - now);
    net::steady_timer timer(s.client().get_executor(), ToChrono(pause));
    std::variant<std::tuple<boost::system::error_code>, std::monostate> first =
        co_await (timer.async_wait(kUseTuple) || ClientLeft(s.client().socket()));
    if (first.index() == 1) {
      out.gone = true;
      co_return out;
    }
  }
}

}  // namespace kvroute::proxy
