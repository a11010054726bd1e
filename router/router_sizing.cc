// The live sizing side of RouterImpl (router/router_impl.h): what the
// router learns about the KV written into each tier and the sessions' reuse
// gaps (router/live_sizing.h), and Sizing(), which sets them against the
// fleet's capacities and the residency model's working set through
// kvsize::ComputeTierPressure, the formula kvroute-size uses.
#include <algorithm>

#include "router/router_impl.h"

namespace kvroute::router {

void RouterImpl::RecordWrites(const InflightRequest& r, const Outcome& outcome, int served) {
  // The tokens new to the serving instance: the prompt beyond what it had
  // cached (or received over a connector) and the output. An engine that
  // publishes KV events for a tier counts that tier's writes itself.
  if (outcome.prompt_tokens <= 0) return;
  const int64_t cached =
      outcome.cached_tokens >= 0 ? outcome.cached_tokens : r.decision.cached_tokens_est;
  const int64_t written = std::max<int64_t>(0, outcome.prompt_tokens - cached) +
                          std::max<int64_t>(0, outcome.completion_tokens);
  const ShadowFeedback::Backend& f = feedback_.at(served);
  if (f.engine_cached_tokens < 0) sizing_.AddWritten(LiveSizing::Tier::kGpu, written);
  // Written through to the host tier (or what one would take).
  if (!feedback_.HasHostTier(served)) sizing_.AddWritten(LiveSizing::Tier::kHost, written);
}

void RouterImpl::RecordStoredEvents(absl::Span<const EngineKvEvent> events) {
  for (const EngineKvEvent& e : events) {
    if (e.kind != EngineKvEvent::Kind::kStored) continue;
    sizing_.AddWritten(e.host ? LiveSizing::Tier::kHost : LiveSizing::Tier::kGpu, e.tokens);
  }
}

void RouterImpl::RecordReuseGap(const InflightRequest& r, absl::Time now) {
  if (r.session.empty()) return;
  const SessionTable::Info* s = sessions_.Find(r.session, now);
  // A request of the same session that ended after this one was sent (a
  // parallel sub-request) is no previous turn.
  if (s == nullptr || s->last_finished == absl::InfinitePast() || s->last_finished > r.routed_at) {
    return;
  }
  sizing_.AddReuseGap(absl::ToDoubleSeconds(now - s->last_finished));
}

KvSizingReport RouterImpl::Sizing(absl::Time now) {
  absl::MutexLock lock(&mu_);
  residency_.Age(now);
  KvSizingReport out;
  kvsize::TierLoad& load = out.load;
  load.instances = 0;
  const double kv_bytes_per_token = options_.offload_cost.kv_bytes_per_token;
  double working_set = 0;
  for (int b = 0; b < static_cast<int>(specs_->size()); ++b) {
    working_set += static_cast<double>(residency_.resident_tokens(b));
    if ((*specs_)[b].retired || !state_[b].healthy) continue;
    ++load.instances;
    load.gpu_capacity_tokens +=
        static_cast<double>(NominalCapacityTokens(b)) * feedback_.at(b).capacity_fraction;
    if (kv_bytes_per_token > 0) {
      load.host_capacity_tokens += state_[b].gauges.host_capacity_bytes / kv_bytes_per_token;
    }
  }
  // Requests without a session are live KV too, for as long as they run.
  for (const auto& [id, r] : inflight_) {
    if (r.session.empty()) working_set += static_cast<double>(r.decision.footprint_tokens_est);
  }
  load.working_set_tokens = working_set;
  const LiveSizing::Reading reading = sizing_.Read(now);
  load.gpu_write_rate_tokens_per_s =
      reading.write_rate_tokens_per_s[static_cast<int>(LiveSizing::Tier::kGpu)];
  load.host_write_rate_tokens_per_s =
      reading.write_rate_tokens_per_s[static_cast<int>(LiveSizing::Tier::kHost)];
  load.reuse_gap_s = reading.reuse_gap_s;
  load.kv_bytes_per_token = kv_bytes_per_token;
  out.reuse_gaps = reading.reuse_gaps;
  out.gate_room_tier = gate_room_.tier();
  out.long_pause_share = gate_room_.long_pause_share();
  out.pauses = gate_room_.pauses();
  out.pressure = kvsize::ComputeTierPressure(load);
  return out;
}

}  // namespace kvroute::router
