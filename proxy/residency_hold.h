// A routed request's residency hold, as the proxy serves it: a co-located
// agent turn the router's residency model holds (router/residency_gate.h)
// waits in residency/residency_wait.h until it is admitted, or until its
// client closes the connection, which gives its place up at once; every
// request is then dispatched (Router::Dispatch).
#pragma once

#include "proxy/http_common.h"
#include "residency/residency_wait.h"
#include "router/router.h"

namespace kvroute::proxy {

class Session;

// Returns once `ticket`'s request may go (Admitted::dispatched says where),
// or `gone` when its client left while it was held.
net::awaitable<residency::ResidencyWait::Admitted> AwaitResidency(Session& s,
                                                                  const router::RouteTicket& ticket);

}  // namespace kvroute::proxy
