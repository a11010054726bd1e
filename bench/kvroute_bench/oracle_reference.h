// The oracle reference: kvroute's `baseline` policy routing from the true cache contents.
//
// For every request kvroute-bench asks kvroute-sim's /sim/oracle/cached_tokens how many prompt
// tokens each instance really holds, passes them to an in-process router::Router running the
// `baseline` policy (as RequestFeatures::reference_cached_tokens), and sends the request
// straight to the chosen instance. Load accounting, session affinity, classification and the
// cost are the router's own, and the instances' gauges come from the run's /metrics samples, so
// a run against kvroute's `baseline` differs only in where the cached-token numbers come from
// (the router's residency model holds sessions back, through residency/residency_wait.h, as
// in kvroute's proxy):
// the gap between the two is what estimation costs, the gap between this and the pooled-LRU
// bound is what the policy leaves.
//
// Kept out of production: it lives in kvroute-bench (the daemon never links this file), the
// router's policy table has no entry for it, and it needs the simulator's oracle endpoint,
// which no real engine serves.
//
// Usage (on the run's io_context):
//   auto ref = OracleReference::Create(instances, time_scale);  // the simulated fleet
//   OracleReference::Routed r = co_await (*ref)->Route(body, messages, session, request_id);
//   ... send to r.endpoint; at first token (*ref)->OnFirstToken(r); at the end
//   (*ref)->OnComplete(r, outcome);
//
// Thread-safety: Router is thread-safe; the coroutine methods run on the caller's executor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "absl/status/statusor.h"
#include "bench/kvroute_bench/http_client.h"
#include "bench/kvroute_bench/metrics_sampler.h"
#include "bench/kvroute_bench/records.h"
#include "residency/residency_wait.h"
#include "router/router.h"

namespace kvroute::bench {

class OracleReference {
 public:
  struct Routed {
    std::string error;  // non-empty: the request was not routed
    router::RouteTicket ticket;
    Endpoint endpoint;
    std::string backend;  // instance name
    std::string klass;    // WARM | MEDIUM | HEAVY
    int64_t cached_tokens_est = -1;  // the oracle's count on the chosen instance
  };

  // Fails when the fleet is empty or larger than the router supports. The router's time
  // windows are scaled by `time_scale` as kvroute's config is for the same run
  // (KvrouteConfigYaml), so the two differ only in where cached-token counts come from.
  static absl::StatusOr<std::unique_ptr<OracleReference>> Create(
      std::vector<NamedEndpoint> instances, double time_scale = 1.0);

  // Asks the oracle (through instance 0, which answers for its whole kvroute-sim process) and
  // routes. `prompt_bytes` is the prompt text the router sizes the request by.
  boost::asio::awaitable<Routed> Route(const std::string& body, std::string prompt_bytes,
                                       const std::string& session_id, int64_t max_tokens,
                                       const std::string& request_id);
  void OnFirstToken(const Routed& routed);
  // `ok` as the run records it, usage from the engine's response.
  void OnComplete(const Routed& routed, bool ok, int64_t prompt_tokens, int64_t cached_tokens,
                  int64_t completion_tokens);
  // The latest /metrics sample of instance `index` (its gauges enter the baseline cost).
  void UpdateGauges(int index, const InstanceSample& sample);
  // Instance `index`'s KV pool in tokens, from its vllm:cache_config_info, as kvroute's
  // backend monitor learns it.
  void SetCapacity(int index, int64_t tokens);
  const std::vector<NamedEndpoint>& instances() const { return instances_; }

 private:
  OracleReference(std::vector<NamedEndpoint> instances, std::unique_ptr<router::Router> router);

  std::vector<NamedEndpoint> instances_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<residency::ResidencyWait> residency_;
};

// Parses an oracle answer into cached tokens by instance index (`instances` entries).
absl::StatusOr<std::vector<int64_t>> ParseOracleAnswer(std::string_view body, size_t instances);

}  // namespace kvroute::bench
