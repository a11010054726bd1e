#include "sim/engine.h"

#include <absl/strings/str_cat.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "sim/engine_internal.h"
#include "sim/nic_share.h"

namespace sim {

namespace {
constexpr double kBusyTimeConstantS = 10.0;
}  // namespace

EngineConfig EngineConfig::FromProfile(const Profile& profile) {
  EngineConfig c;
  c.block_size = profile.block_size;
  c.num_gpu_blocks = profile.NumGpuBlocks();
  c.max_num_batched_tokens = profile.max_num_batched_tokens;
  c.max_num_seqs = profile.max_num_seqs;
  c.long_prefill_token_threshold = profile.long_prefill_token_threshold;
  c.admission = profile.admission;
  c.scheduling_policy = profile.scheduling_policy;
  c.cache_generated_blocks = profile.cache_generated_blocks;
  c.num_layers = std::max(1, profile.arch.num_attention_layers);
  c.timing = profile.timing;
  c.link = profile.link;
  c.kv_bytes_per_token = profile.KvBytesPerToken();
  c.kv_hold_timeout_s = profile.kv_hold_timeout_s;
  c.mean_output_tokens = profile.mean_output_tokens;
  c.kv_offloading = profile.kv_offloading.enabled();
  c.host_num_blocks = profile.NumHostBlocks();
  c.host_block_size = profile.OffloadedBlockSize();
  c.tensor_parallel = std::max(1, profile.deployment.tensor_parallel);
  c.host_bandwidth_bytes_per_s = profile.kv_offloading.bandwidth_bytes_per_s * c.tensor_parallel;
  // Each TP rank copies its share of the KV at once (LMCache PR #1413: every rank's store of
  // the same 7,219 tokens took ~6 ms).
  c.lmcache = c.kv_offloading && profile.kv_offloading.lmcache();
  c.lmcache_store_bandwidth_bytes_per_s =
      profile.kv_offloading.lmcache_store_bandwidth_bytes_per_s * c.tensor_parallel;
  c.lmcache_load_bandwidth_bytes_per_s =
      profile.kv_offloading.lmcache_load_bandwidth_bytes_per_s * c.tensor_parallel;
  c.lmcache_store_fixed_s = profile.kv_offloading.lmcache_store_fixed_s;
  c.lmcache_schedule_s = profile.kv_offloading.lmcache_schedule_s;
  return c;
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      break;
  }
  return "";
}

Engine::Engine(EngineConfig config)
    : config_(config),
      blocks_(config.num_gpu_blocks, config.block_size),
      host_to_gpu_(config.host_bandwidth_bytes_per_s),
      gpu_to_host_(config.host_bandwidth_bytes_per_s),
      ttft_(TtftBuckets()),
      itl_(ItlBuckets()),
      e2e_(RequestLatencyBuckets()),
      queue_time_(RequestLatencyBuckets()),
      prefill_time_(RequestLatencyBuckets()) {
  if (config_.kv_offloading) {
    host_ = std::make_unique<HostTier>(config_.host_num_blocks, config_.host_block_size);
  }
}

Engine::~Engine() = default;

void Engine::AdvanceTo(double t) {
  if (t > now_) now_ = t;
  ExpireHolds();
  if (host_) LandStores(now_);
  if (config_.kv_pool != nullptr) LandPoolStores(now_);
}

absl::Status Engine::Validate(int64_t prompt_tokens, int64_t max_tokens) const {
  if (prompt_tokens <= 0) return absl::InvalidArgumentError("The prompt is empty.");
  const int64_t blocks_needed = CeilDiv(prompt_tokens + 1, config_.block_size);
  if (blocks_needed > config_.num_gpu_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "The prompt (", prompt_tokens, " tokens) needs more KV cache than this instance has (",
        config_.num_gpu_blocks * config_.block_size, " tokens)."));
  }
  return absl::OkStatus();
}

int Engine::TargetOutputLength(const RequestSpec& spec) const {
  const int max_tokens = std::max(1, spec.max_tokens);
  if (spec.ignore_eos) return max_tokens;
  // Natural length: geometric with the profile's mean, deterministic in the seed.
  const uint64_t x = XXH3_64bits_withSeed("len", 3, spec.output_seed);
  const double u = static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
  const double p = 1.0 / std::max(1.0, config_.mean_output_tokens);
  const double natural = p >= 1 ? 1 : 1 + std::floor(std::log1p(-u) / std::log1p(-p));
  int len = natural > max_tokens ? max_tokens : static_cast<int>(natural);
  return std::clamp(std::max(len, spec.min_tokens), 1, max_tokens);
}

RequestHandle Engine::Submit(RequestSpec spec) {
  auto r = std::make_unique<Request>();
  r->handle = next_handle_++;
  r->tokens = std::move(spec.prompt);
  spec.prompt.clear();
  r->spec = std::move(spec);
  r->hashes = HashFullBlocks(r->tokens, config_.block_size);
  r->target_output = TargetOutputLength(r->spec);
  r->natural_finish = (r->spec.ignore_eos || r->target_output == std::max(1, r->spec.max_tokens))
                          ? FinishReason::kLength
                          : FinishReason::kStop;
  r->info.request_id = r->spec.request_id;
  r->info.prompt_tokens = static_cast<int>(r->tokens.size());
  r->info.arrival = now_;
  Request* raw = r.get();
  requests_.emplace(raw->handle, std::move(r));
  Enqueue(raw);
  return raw->handle;
}

bool Engine::ServedBefore(const Request& a, const Request& b) {
  if (a.spec.priority != b.spec.priority) return a.spec.priority < b.spec.priority;
  if (a.info.arrival != b.info.arrival) return a.info.arrival < b.info.arrival;
  return a.handle < b.handle;
}

void Engine::Enqueue(Request* r) {
  if (config_.scheduling_policy == SchedulingPolicy::kFcfs) {
    waiting_.push_back(r);
    return;
  }
  const auto at = std::upper_bound(waiting_.begin(), waiting_.end(), r,
                                   [](const Request* x, const Request* y) {
                                     return ServedBefore(*x, *y);
                                   });
  waiting_.insert(at, r);
}

void Engine::Abort(RequestHandle handle) {
  auto it = requests_.find(handle);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  switch (r->state) {
    case Request::State::kWaiting:
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
      break;
    case Request::State::kTransferring:
      DrainPulls(now_);
      transferring_.erase(std::find(transferring_.begin(), transferring_.end(), r));
      ProjectPulls();
      break;
    case Request::State::kLoading:
      loading_.erase(std::find(loading_.begin(), loading_.end(), r));
      AbortHostLoad(r);
      break;
    case Request::State::kPoolLoading:
      DrainPulls(now_);
      pool_loading_.erase(std::find(pool_loading_.begin(), pool_loading_.end(), r));
      AbortPoolLoad(r);
      ProjectPulls();
      break;
    case Request::State::kRunning:
      running_.erase(std::find(running_.begin(), running_.end(), r));
      break;
    case Request::State::kFinished:
      break;
  }
  if (r->state != Request::State::kFinished && !HoldForStores(r)) blocks_.Release(r->blocks);
  requests_.erase(it);
}

void Engine::StartPull(RequestHandle handle, int source_pulls) {
  auto it = requests_.find(handle);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  r->spec.source_pulls = source_pulls;
  if (r->state == Request::State::kWaiting) {
    r->spec.await_remote_kv = false;
  } else if (r->state == Request::State::kTransferring && r->pull.start == kForever) {
    DrainPulls(now_);
    r->pull.start = now_ + TransferFixedTime(r->info.pulled_tokens);
    r->pull.max_rate = SourceRate(r->spec);
    ProjectPulls();
  }
}

void Engine::CancelPull(RequestHandle handle) {
  auto it = requests_.find(handle);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  if (r->state == Request::State::kWaiting) {
    r->spec.pull_remote_kv = false;
    r->spec.await_remote_kv = false;
  } else if (r->state == Request::State::kTransferring && r->pull.start == kForever) {
    DrainPulls(now_);
    transferring_.erase(std::find(transferring_.begin(), transferring_.end(), r));
    ProjectPulls();
    counters_.external_prefix_cache_hits -= r->info.pulled_tokens;
    r->info.cached_tokens -= r->info.pulled_tokens;
    r->info.pulled_tokens = 0;
    r->state = Request::State::kRunning;
    running_.push_back(r);
  }
}

int64_t Engine::MaxHitBlocks(const Request& r) const {
  // At least one token is always computed, so a fully cached prompt recomputes its last token.
  return std::min<int64_t>(static_cast<int64_t>(r.hashes.size()),
                           (static_cast<int64_t>(r.tokens.size()) - 1) / config_.block_size);
}

int Engine::RequestBudget(int step_budget) const {
  const int cap = config_.long_prefill_token_threshold;
  return cap > 0 ? std::min(step_budget, cap) : step_budget;
}

int64_t Engine::BlocksToAdmit(const Request& r, int64_t hit_blocks, int budget) const {
  const int64_t prompt = static_cast<int64_t>(r.tokens.size());
  const int64_t total = CeilDiv(prompt, config_.block_size);
  // A pull needs room for everything it moves, whatever the rule.
  if (config_.admission == AdmissionRule::kFullPrompt || r.spec.pull_remote_kv) return total;
  const int64_t first_chunk_end =
      std::min<int64_t>(prompt, hit_blocks * config_.block_size + std::max(1, budget));
  return std::max(hit_blocks, CeilDiv(first_chunk_end, config_.block_size));
}

Engine::AdmissionPlan Engine::PlanAdmission(const Request& r, int budget) const {
  AdmissionPlan plan;
  const std::span<const BlockHash> hashes(r.hashes.data(), MaxHitBlocks(r));
  plan.gpu_hit_blocks = blocks_.CountCachedPrefix(hashes);
  plan.blocks = BlocksToAdmit(r, plan.gpu_hit_blocks, budget);
  if (host_ && !r.spec.pull_remote_kv) {
    const HostHit host = LookupHost(r.hashes, plan.gpu_hit_blocks);
    plan.host_hit_tokens = host.tokens;
    plan.delayed = host.delayed;
    // The loaded tokens land in blocks of their own.
    plan.blocks = std::max(
        plan.blocks,
        CeilDiv(plan.gpu_hit_blocks * config_.block_size + host.tokens, config_.block_size));
  }
  // A MultiConnector gives the request to its first connector with a hit: the host tier's
  // before the pool's.
  if (config_.kv_pool != nullptr && !r.spec.pull_remote_kv && plan.host_hit_tokens == 0) {
    plan.pool_hit_tokens = LookupPool(r.hashes, MaxHitBlocks(r), plan.gpu_hit_blocks);
    plan.blocks = std::max(plan.blocks, CeilDiv(plan.gpu_hit_blocks * config_.block_size +
                                                    plan.pool_hit_tokens,
                                                config_.block_size));
  }
  return plan;
}

bool Engine::CanAdmit(const Request& r) const {
  if (static_cast<int>(running_.size() + transferring_.size()) >= config_.max_num_seqs) {
    return false;
  }
  const AdmissionPlan plan = PlanAdmission(r, RequestBudget(config_.max_num_batched_tokens));
  if (plan.delayed) return false;
  const std::span<const BlockHash> hashes(r.hashes.data(), MaxHitBlocks(r));
  return blocks_.CanAllocate(hashes, plan.gpu_hit_blocks, plan.blocks - plan.gpu_hit_blocks);
}

bool Engine::HasRunnableWork() const {
  if (!running_.empty()) return true;
  for (const Request* r : transferring_) {
    if (r->transfer_done <= now_) return true;
  }
  for (const Request* r : loading_) {
    if (HostLoadDone(*r)) return true;
  }
  if (static_cast<int>(running_.size() + transferring_.size()) < config_.max_num_seqs) {
    for (const Request* r : pool_loading_) {
      if (r->transfer_done <= now_) return true;
    }
  }
  return !waiting_.empty() && CanAdmit(*waiting_.front());
}

std::optional<double> Engine::NextTimedEvent() const {
  std::optional<double> next;
  auto consider = [&](double t) {
    if (!next || t < *next) next = t;
  };
  for (const Request* r : transferring_) {
    if (r->transfer_done != kForever) consider(r->transfer_done);
  }
  for (const Request* r : loading_) {
    // A load that has landed but waits for a sequence slot waits on the running requests.
    if (r->load.done > now_) consider(r->load.done);
  }
  for (const Request* r : pool_loading_) {
    if (r->transfer_done > now_ && r->transfer_done != kForever) consider(r->transfer_done);
  }
  // A landing put makes blocks loadable by every instance, whether or not this one waits.
  if (const std::optional<double> landing = NextPoolStoreLanding()) consider(*landing);
  if (!waiting_.empty()) {
    for (const auto& [id, hold] : holds_) consider(hold.deadline);
    // A landing store copy may free the blocks of a request that ended before it.
    if (!store_jobs_.empty()) consider(store_jobs_.front().copy.done);
  }
  return next;
}

double Engine::TransferFixedTime(int64_t tokens) const {
  if (tokens <= 0) return 0;
  const double descriptors =
      static_cast<double>(CeilDiv(tokens, config_.block_size)) * config_.num_layers * 2;
  return config_.link.overhead_s + config_.link.per_descriptor_s * descriptors;
}

double Engine::TransferTime(int64_t tokens) const {
  if (tokens <= 0) return 0;
  return TransferFixedTime(tokens) + static_cast<double>(tokens) * config_.kv_bytes_per_token /
                                         config_.link.bandwidth_bytes_per_s;
}

double Engine::SourceRate(const RequestSpec& spec) const {
  // The fleet's NICs are alike: the source sends at most its bandwidth over its pulls.
  return config_.link.bandwidth_bytes_per_s / std::max(1, spec.source_pulls);
}

void Engine::DrainPulls(double t) {
  std::vector<SharedTransfer*> flows;
  for (Request* r : transferring_) flows.push_back(&r->pull);
  for (Request* r : pool_loading_) flows.push_back(&r->pull);
  if (t > pulls_drained_at_) {
    RunSharedLink(flows, config_.link.bandwidth_bytes_per_s, pulls_drained_at_, t);
  }
  pulls_drained_at_ = std::max(pulls_drained_at_, t);
}

void Engine::ProjectPulls() {
  // Pool loads come in over the same NIC as P/D pulls and share it with them.
  std::vector<Request*> inbound(transferring_.begin(), transferring_.end());
  inbound.insert(inbound.end(), pool_loading_.begin(), pool_loading_.end());
  std::vector<SharedTransfer> copies;
  copies.reserve(inbound.size());
  for (const Request* r : inbound) copies.push_back(r->pull);
  std::vector<SharedTransfer*> flows;
  for (SharedTransfer& c : copies) flows.push_back(&c);
  RunSharedLink(flows, config_.link.bandwidth_bytes_per_s, pulls_drained_at_, kForever);
  for (size_t i = 0; i < inbound.size(); ++i) {
    // A pull whose source has not published yet never finishes by itself.
    inbound[i]->transfer_done = copies[i].finish >= 0 ? copies[i].finish : kForever;
  }
}

double Engine::StepCost(std::span<const std::pair<int64_t, int64_t>> chunks, int decode_seqs,
                        int64_t kv_tokens) const {
  const TimingModel& tm = config_.timing;
  int64_t tokens = decode_seqs;
  double prefill = 0;
  for (const auto& [context, n] : chunks) {
    tokens += n;
    prefill += tm.PrefillChunkCost(context, n);
  }
  return tm.step_fixed_s + tm.weight_read_s * tm.WeightFraction(tokens) + prefill +
         tm.decode_s_per_seq * decode_seqs +
         tm.kv_read_s_per_token * static_cast<double>(kv_tokens);
}

void Engine::ExpireHolds() {
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (it->second.deadline <= now_) {
      blocks_.Release(it->second.blocks);
      holds_.erase(it++);
    } else {
      ++it;
    }
  }
}

bool Engine::ReleaseHold(const std::string& request_id) {
  auto it = holds_.find(request_id);
  if (it == holds_.end()) return false;
  blocks_.Release(it->second.blocks);
  holds_.erase(it);
  return true;
}

void Engine::UpdateBusy(double busy_until) {
  // Idle gap since the last update decays the average towards 0, the step pulls it to 1.
  const double idle = std::max(0.0, now_ - busy_updated_at_);
  busy_ewma_ *= std::exp(-idle / kBusyTimeConstantS);
  const double busy = std::max(0.0, busy_until - now_);
  const double decay = std::exp(-busy / kBusyTimeConstantS);
  busy_ewma_ = busy_ewma_ * decay + (1 - decay);
  busy_updated_at_ = busy_until;
}

double Engine::BusyFractionAt(double t) const {
  const double idle = std::max(0.0, std::max(t, now_) - busy_updated_at_);
  return busy_ewma_ * std::exp(-idle / kBusyTimeConstantS);
}

const RequestInfo* Engine::Info(RequestHandle handle) const {
  auto it = requests_.find(handle);
  if (it == requests_.end()) return nullptr;
  return &it->second->info;
}

void Engine::Forget(RequestHandle handle) {
  auto it = requests_.find(handle);
  if (it == requests_.end()) return;
  if (it->second->state != Request::State::kFinished) return;
  requests_.erase(it);
}

}  // namespace sim
