#include "router/load_ledger.h"

namespace kvroute::router {

void LoadLedger::Resize(int backends) {
  if (backends <= static_cast<int>(load_.size())) return;
  load_.resize(backends);
  epoch_.resize(backends, 0);
}

bool LoadLedger::Live(const Claim& claim, int backend) const {
  if (backend == claim.request.prefill && epoch_[backend] != claim.prefill_epoch) return false;
  if (backend == claim.request.decode && epoch_[backend] != claim.decode_epoch) return false;
  return true;
}

LoadLedger::Claim LoadLedger::Reserve(const Request& r) {
  Load& p = load_[r.prefill];
  Load& q = load_[r.decode];
  p.inflight_requests += 1;
  p.inflight_prefill_tokens += r.prefill_new_tokens;
  if (r.offload) {
    p.inflight_tokens += r.prompt_tokens;
    q.inflight_requests += 1;
  }
  q.inflight_tokens += r.total_tokens;
  if (r.sessionless) q.sessionless_tokens += r.total_tokens;
  return Claim{r, epoch_[r.prefill], epoch_[r.decode]};
}

void LoadLedger::FirstToken(const Claim& c) {
  const Request& r = c.request;
  if (epoch_[r.prefill] == c.prefill_epoch) {
    Load& p = load_[r.prefill];
    p.inflight_prefill_tokens -= r.prefill_new_tokens;
    if (r.offload) {
      p.inflight_requests -= 1;
      p.inflight_tokens -= r.prompt_tokens;
    }
  }
  if (epoch_[r.decode] == c.decode_epoch) load_[r.decode].decoding_requests += 1;
}

void LoadLedger::Release(const Claim& c, bool first_token) {
  const Request& r = c.request;
  const bool p_live = epoch_[r.prefill] == c.prefill_epoch;
  const bool q_live = epoch_[r.decode] == c.decode_epoch;
  Load& p = load_[r.prefill];
  Load& q = load_[r.decode];
  if (first_token) {
    if (q_live) q.decoding_requests -= 1;
  } else if (p_live) {
    p.inflight_prefill_tokens -= r.prefill_new_tokens;
    if (r.offload) {
      p.inflight_requests -= 1;
      p.inflight_tokens -= r.prompt_tokens;
    }
  }
  if (q_live) {
    q.inflight_requests -= 1;
    q.inflight_tokens -= r.total_tokens;
    if (r.sessionless) q.sessionless_tokens -= r.total_tokens;
  }
}

void LoadLedger::Reset(int backend) {
  epoch_[backend] += 1;
  load_[backend] = Load{};
}

}  // namespace kvroute::router
