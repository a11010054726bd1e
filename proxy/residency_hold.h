// A routed request's residency hold, as the proxy serves it: a co-located
// agent turn the router's residency model holds (router/residency_gate.h)
// waits in residency/residency_wait.h until it is admitted, or until its
// client closes the connection, which gives its place up at once; every
// request is then dispatched (Router::Dispatch). With several replicas the
// admitted turn then reserves its room in the cluster store, across every
// replica's residents (AwaitClusterAdmission).
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "proxy/http_common.h"
#include "residency/residency_wait.h"
#include "router/router.h"

namespace kvroute::proxy {

class ClusterSync;
class Session;

// Returns once `ticket`'s request may go (Admitted::dispatched says where),
// or `gone` when its client left while it was held.
net::awaitable<residency::ResidencyWait::Admitted> AwaitResidency(Session& s,
                                                                  const router::RouteTicket& ticket);

// What the cluster store said of an admitted turn.
struct ClusterAdmission {
  // "resident" (the session held its reservation already: its next turn),
  // "admitted" (it fitted), "waited" (it fitted after waiting for room),
  // "forced" (its wait ran out: others' reservations yielded),
  // "unavailable" (no store answer: the local admission stands).
  std::string outcome;
  int64_t reserved_tokens = -1;  // the instance's reservations after it, every replica's
  int64_t fill_tokens = -1;
  double waited_s = 0;
  // The turns its session ran resident there before it, through every
  // replica (cluster::Reservation::turns_before); -1: no store answer.
  int64_t resident_turns = -1;
  bool gone = false;  // its client left while it waited
};

// The turn `go` (admitted by this replica's residency gate: a non-zero
// resident_fill_tokens) reserves its room on its instance in the cluster
// store. Refused (the other replicas' residents fill it), it asks again
// every sync interval, as their releases land, until `bound` has passed;
// then it asks with force. Returns at once when the store does not answer.
net::awaitable<ClusterAdmission> AwaitClusterAdmission(Session& s, ClusterSync& cluster,
                                                       const router::Router::Dispatched& go,
                                                       const std::string& session,
                                                       absl::Duration bound);

}  // namespace kvroute::proxy
