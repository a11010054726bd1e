// Engine::Step (engine.h): one scheduler step, as vLLM's scheduler runs it. Step() reads as
// its phases in order: holds expire, landed host-tier stores are settled, finished pulls and
// host loads join the running set, running requests are scheduled (decodes and the next
// chunks of prefills, preempting when blocks run short), waiting requests are admitted (those
// with a host hit park while it loads), the step is priced, and its work is applied (KV
// computed, full blocks cached and written through to the host tier, tokens sampled, finished
// requests' blocks freed or held).
#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine.h"
#include "sim/engine_internal.h"
#include "sim/nic_share.h"
#include "sim/tokenizer.h"

namespace sim {

StepResult Engine::Step() {
  StepResult result;
  result.start = now_;
  ExpireHolds();
  CompleteTransfers(result);
  if (host_) {
    LandStores(now_);
    CompleteHostLoads();
  }
  if (config_.kv_pool != nullptr) {
    LandPoolStores(now_);
    CompletePoolLoads();
  }

  StepPlan plan{.scheduled = {}, .budget = config_.max_num_batched_tokens};
  ScheduleRunning(plan, result);
  // A step that had to preempt admits nobody.
  if (result.num_preempted == 0) AdmitWaiting(plan);
  if (plan.scheduled.empty()) return result;

  ++counters_.steps;
  result.duration = PriceStep(plan, result);
  // LMCache's connector works inside the step: its scheduler side before the forward pass
  // (vLLM's engine loop schedules, then runs the model), its loads before the forward pass,
  // its stores after it, before the sampled tokens go out.
  if (config_.lmcache) {
    result.duration += config_.lmcache_schedule_s + plan.blocking_load_s + StoreInStep(plan);
  }
  const double end = now_ + result.duration;
  UpdateBusy(end);
  ApplyStep(plan, end, result);
  now_ = end;
  return result;
}

void Engine::CompleteTransfers(StepResult& result) {
  DrainPulls(now_);
  for (auto it = transferring_.begin(); it != transferring_.end();) {
    Request* r = *it;
    if (r->transfer_done > now_) {
      ++it;
      continue;
    }
    it = transferring_.erase(it);
    r->num_computed = static_cast<int>(r->tokens.size()) - 1;
    CommitFullBlocks(r);
    r->state = Request::State::kRunning;
    running_.push_back(r);
    result.transfers_done.push_back(r->handle);
  }
}

void Engine::ScheduleRunning(StepPlan& plan, StepResult& result) {
  for (size_t i = 0; i < running_.size() && plan.budget > 0;) {
    Request* r = running_[i];
    const int n = std::min<int>(static_cast<int>(r->tokens.size()) - r->num_computed,
                                RequestBudget(plan.budget));
    const int64_t need =
        CeilDiv(r->num_computed + n, config_.block_size) - static_cast<int64_t>(r->blocks.size());
    if (need > blocks_.num_free() && running_.size() == 1) {
      StopOutgrown(r, result);
      break;
    }
    if (!PreemptUntilFree(r, need, i, plan, result)) break;
    if (need > 0) {
      std::optional<std::vector<BlockId>> fresh = blocks_.Allocate(need);
      r->blocks.insert(r->blocks.end(), fresh->begin(), fresh->end());
    }
    plan.scheduled.push_back({r, n});
    plan.budget -= n;
    ++i;
  }
}

void Engine::StopOutgrown(Request* r, StepResult& result) {
  // Stopped the way a length limit would stop it, instead of being preempted forever.
  Finish(r, FinishReason::kLength, now_);
  result.tokens.push_back(TokenEvent{.handle = r->handle,
                                     .token = kNoToken,
                                     .index = r->num_output,
                                     .finish = FinishReason::kLength});
}

bool Engine::PreemptUntilFree(const Request* r, int64_t need, size_t& i, StepPlan& plan,
                              StepResult& result) {
  while (need > blocks_.num_free()) {
    Request* victim = PreemptionVictim();
    const size_t at = static_cast<size_t>(
        std::find(running_.begin(), running_.end(), victim) - running_.begin());
    if (at < i) {
      // Scheduled earlier in this step (kPriority only): undo that, as vLLM does.
      const auto it =
          std::find_if(plan.scheduled.begin(), plan.scheduled.end(),
                       [victim](const StepPlan::Scheduled& s) { return s.r == victim; });
      plan.budget += it->n;
      plan.scheduled.erase(it);
      --i;
    }
    Preempt(victim);
    ++result.num_preempted;
    if (victim == r) return false;
  }
  return true;
}

Engine::Request* Engine::PreemptionVictim() const {
  if (config_.scheduling_policy == SchedulingPolicy::kFcfs) return running_.back();
  return *std::max_element(
      running_.begin(), running_.end(),
      [](const Request* x, const Request* y) { return ServedBefore(*x, *y); });
}

void Engine::Preempt(Request* r) {
  running_.erase(std::find(running_.begin(), running_.end(), r));
  blocks_.Release(r->blocks);
  r->blocks.clear();
  r->num_computed = 0;
  r->num_committed = 0;
  r->state = Request::State::kWaiting;
  if (host_) SettleStoresOnPreempt(r);
  ++r->info.num_preemptions;
  ++counters_.preemptions;
  // A heap has no front: under kPriority the preempted request goes back in its order.
  if (config_.scheduling_policy == SchedulingPolicy::kFcfs) {
    waiting_.push_front(r);
  } else {
    Enqueue(r);
  }
}

void Engine::AdmitWaiting(StepPlan& plan) {
  while (plan.budget > 0 && !waiting_.empty()) {
    Request* r = waiting_.front();
    // vLLM's connector lookup refreshes the request's offloaded blocks before the allocation.
    if (host_ && !r->spec.pull_remote_kv && r->num_computed == 0) TouchHost(*r);
    if (!CanAdmit(*r)) break;
    waiting_.pop_front();
    const AdmissionPlan admission = PlanAdmission(*r, RequestBudget(plan.budget));
    TakeAdmissionBlocks(r, admission);
    r->host_hit_tokens = static_cast<int>(admission.host_hit_tokens);
    RecordPrefixQuery(r);
    if (admission.host_hit_tokens > 0) {
      if (!config_.lmcache) {
        BeginHostLoad(r, admission);
        continue;
      }
      plan.blocking_load_s += LoadInStep(r);
    }
    if (admission.pool_hit_tokens > 0) {
      BeginPoolLoad(r, admission);
      continue;
    }
    RecordFirstSchedule(r);
    if (r->spec.pull_remote_kv && BeginAdmittedPull(r)) continue;
    r->state = Request::State::kRunning;
    running_.push_back(r);
    const int n = std::min(static_cast<int>(r->tokens.size()) - r->num_computed,
                           RequestBudget(plan.budget));
    plan.scheduled.push_back({r, n});
    plan.budget -= n;
  }
}

void Engine::TakeAdmissionBlocks(Request* r, const AdmissionPlan& plan) {
  const std::span<const BlockHash> hashes(r->hashes.data(), MaxHitBlocks(*r));
  const int64_t hit = plan.gpu_hit_blocks;
  r->blocks = blocks_.AcquireCached(hashes, hit);
  std::optional<std::vector<BlockId>> fresh = blocks_.Allocate(plan.blocks - hit);
  r->blocks.insert(r->blocks.end(), fresh->begin(), fresh->end());
  r->num_computed = static_cast<int>(hit * config_.block_size);
  r->num_committed = static_cast<int>(hit);
}

void Engine::RecordPrefixQuery(Request* r) {
  counters_.prefix_cache_queries += r->tokens.size();
  counters_.prefix_cache_hits += r->num_computed;
}

void Engine::RecordFirstSchedule(Request* r) {
  if (r->admitted_once) return;
  r->admitted_once = true;
  const int prompt_len = static_cast<int>(r->tokens.size());
  r->info.first_scheduled = now_;
  r->info.cached_tokens = r->num_computed;
  counters_.prompt_tokens += prompt_len;
  queue_time_.Observe(now_ - r->info.arrival);
  if ((host_ || config_.kv_pool != nullptr) && !r->spec.pull_remote_kv) {
    // vLLM's connector prefix-cache stats: the request's tokens queried, the connector's
    // matched tokens hit (Scheduler._update_connector_prefix_cache_stats).
    counters_.external_prefix_cache_queries += prompt_len;
    counters_.external_prefix_cache_hits += r->host_hit_tokens + r->pool_hit_tokens;
  }
}

bool Engine::BeginAdmittedPull(Request* r) {
  // Pull the rest of the prompt's KV (but the last token) from the prefill instance.
  const int prompt_len = static_cast<int>(r->tokens.size());
  const int pulled = prompt_len - 1 - r->num_computed;
  counters_.external_prefix_cache_queries += prompt_len - r->num_computed;
  counters_.external_prefix_cache_hits += std::max(0, pulled);
  r->spec.pull_remote_kv = false;  // a later preemption recomputes locally
  if (pulled <= 0) return false;
  r->info.pulled_tokens = pulled;
  r->info.cached_tokens += pulled;
  DrainPulls(now_);
  r->pull = SharedTransfer{
      .start = r->spec.await_remote_kv ? kForever : now_ + TransferFixedTime(pulled),
      .bytes = static_cast<double>(pulled) * config_.kv_bytes_per_token,
      .max_rate = SourceRate(r->spec)};
  r->state = Request::State::kTransferring;
  transferring_.push_back(r);
  ProjectPulls();
  return true;
}

double Engine::PriceStep(const StepPlan& plan, StepResult& result) const {
  int64_t kv_read = 0;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (const StepPlan::Scheduled& s : plan.scheduled) {
    if (s.n == 1 && s.r->num_computed + 1 == static_cast<int>(s.r->tokens.size())) {
      ++result.decode_seqs;
      kv_read += s.r->num_computed + 1;
    } else {
      result.prefill_tokens += s.n;
      chunks.emplace_back(s.r->num_computed, s.n);
    }
  }
  return slowdown_ * StepCost(chunks, result.decode_seqs, kv_read);
}

void Engine::ApplyStep(const StepPlan& plan, double end, StepResult& result) {
  for (const StepPlan::Scheduled& s : plan.scheduled) {
    Request* r = s.r;
    if (r->state != Request::State::kRunning) continue;
    r->num_computed += s.n;
    CommitFullBlocks(r);
    if (host_ && !config_.lmcache) QueueStores(r, end);
    if (config_.kv_pool != nullptr) QueuePoolStores(r, end);
    if (r->num_computed == static_cast<int>(r->tokens.size())) AppendToken(r, result, end);
  }
}

void Engine::CommitFullBlocks(Request* r) {
  int full = r->num_computed / config_.block_size;
  if (!config_.cache_generated_blocks) {
    full = std::min(full, r->info.prompt_tokens / config_.block_size);
  }
  while (static_cast<int>(r->hashes.size()) < full) {
    const size_t k = r->hashes.size();
    const BlockHash parent = k == 0 ? 0 : r->hashes[k - 1];
    r->hashes.push_back(ChainBlockHash(parent, std::span<const int32_t>(r->tokens).subspan(
                                                   k * config_.block_size, config_.block_size)));
  }
  // Each run of blocks that enter the prefix cache is one BlockStored, as vLLM's
  // cache_full_blocks reports the blocks a request completed in a step.
  const int bs = config_.block_size;
  int run = -1;  // first block of the current run
  auto record = [&](int end) {
    if (run < 0) return;
    blocks_.RecordStored(run == 0 ? std::nullopt : std::optional<BlockHash>(r->hashes[run - 1]),
                         std::span<const BlockHash>(r->hashes).subspan(run, end - run),
                         std::span<const int32_t>(r->tokens).subspan(run * bs, (end - run) * bs));
    run = -1;
  };
  while (r->num_committed < full && r->num_committed < static_cast<int>(r->blocks.size())) {
    const int k = r->num_committed;
    if (blocks_.Commit(r->blocks[k], r->hashes[k])) {
      if (run < 0) run = k;
    } else {
      record(k);
    }
    ++r->num_committed;
  }
  record(r->num_committed);
}

void Engine::AppendToken(Request* r, StepResult& result, double t) {
  const int index = r->num_output;
  const std::string_view piece = StandInTokenizer::GeneratedPiece(r->spec.output_seed, index);
  const int32_t token = StandInTokenizer::PieceId(piece);
  r->tokens.push_back(token);
  ++r->num_output;
  ++counters_.generation_tokens;
  if (index == 0) {
    CountPromptSources(*r);
    r->info.first_token = t;
    ttft_.Observe(t - r->info.arrival);
    prefill_time_.Observe(t - r->info.first_scheduled);
  } else {
    itl_.Observe(t - r->last_token_time);
  }
  r->last_token_time = t;
  TokenEvent ev{.handle = r->handle, .token = token, .index = index};
  if (r->num_output >= r->target_output) ev.finish = r->natural_finish;
  result.tokens.push_back(ev);
  if (ev.finish != FinishReason::kNone) Finish(r, ev.finish, t);
}

void Engine::Finish(Request* r, FinishReason reason, double t) {
  running_.erase(std::find(running_.begin(), running_.end(), r));
  r->state = Request::State::kFinished;
  r->info.finish = reason;
  r->info.finished = t;
  r->info.completion_tokens = r->num_output;
  ++counters_.requests_finished;
  e2e_.Observe(t - r->info.arrival);
  if (r->spec.hold_for_remote_decode && reason == FinishReason::kLength) {
    // Keep the prompt's blocks pinned for the decode instance to pull.
    const std::string& id = r->spec.request_id;
    ReleaseHold(id);
    r->info.held_blocks = r->blocks;
    holds_[id] = Hold{r->handle, std::move(r->blocks), t + config_.kv_hold_timeout_s};
    if (host_) host_->CompleteStore(r->being_stored);
  } else if (!HoldForStores(r)) {
    blocks_.Release(r->blocks);
  }
  r->blocks.clear();
}

}  // namespace sim
