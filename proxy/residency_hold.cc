#include "proxy/residency_hold.h"

#include <chrono>
#include <variant>

#include <boost/asio/experimental/awaitable_operators.hpp>

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

}  // namespace kvroute::proxy
