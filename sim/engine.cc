#include "sim/engine.h"

#include <absl/strings/str_cat.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "sim/nic_share.h"
#include "sim/tokenizer.h"

namespace sim {

namespace {
constexpr double kBusyTimeConstantS = 10.0;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

EngineConfig EngineConfig::FromProfile(const Profile& profile) {
  EngineConfig c;
  c.block_size = profile.block_size;
  c.num_gpu_blocks = profile.NumGpuBlocks();
  c.max_num_batched_tokens = profile.max_num_batched_tokens;
  c.max_num_seqs = profile.max_num_seqs;
  c.admission = profile.admission;
  c.scheduling_policy = profile.scheduling_policy;
  c.cache_generated_blocks = profile.cache_generated_blocks;
  c.num_layers = std::max(1, profile.arch.num_attention_layers);
  c.timing = profile.timing;
  c.link = profile.link;
  c.kv_bytes_per_token = profile.KvBytesPerToken();
  c.kv_hold_timeout_s = profile.kv_hold_timeout_s;
  c.mean_output_tokens = profile.mean_output_tokens;
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

struct Engine::Request {
  enum class State { kWaiting, kTransferring, kRunning, kFinished };
  RequestHandle handle = 0;
  RequestSpec spec;
  std::vector<int32_t> tokens;    // prompt + generated
  std::vector<BlockHash> hashes;  // chained hashes of the full blocks of `tokens`
  std::vector<BlockId> blocks;
  int num_computed = 0;
  int num_committed = 0;  // blocks registered in the prefix cache
  int num_output = 0;
  int target_output = 1;
  FinishReason natural_finish = FinishReason::kLength;
  bool admitted_once = false;
  double transfer_done = 0;
  SharedTransfer pull;  // the byte phase of a KV pull on this instance's NIC
  double last_token_time = 0;
  State state = State::kWaiting;
  RequestInfo info;
};

Engine::Engine(EngineConfig config)
    : config_(config),
      blocks_(config.num_gpu_blocks, config.block_size),
      ttft_(TtftBuckets()),
      itl_(ItlBuckets()),
      e2e_(RequestLatencyBuckets()),
      queue_time_(RequestLatencyBuckets()),
      prefill_time_(RequestLatencyBuckets()) {}

Engine::~Engine() = default;

void Engine::AdvanceTo(double t) {
  if (t > now_) now_ = t;
  ExpireHolds();
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
    case Request::State::kRunning:
      running_.erase(std::find(running_.begin(), running_.end(), r));
      break;
    case Request::State::kFinished:
      break;
  }
  if (r->state != Request::State::kFinished) blocks_.Release(r->blocks);
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

int64_t Engine::BlocksToAdmit(const Request& r, int64_t hit_blocks, int budget) const {
  const int64_t prompt = static_cast<int64_t>(r.tokens.size());
  const int64_t total = CeilDiv(prompt, config_.block_size);
  // A pull needs room for everything it moves, whatever the rule.
  if (config_.admission == AdmissionRule::kFullPrompt || r.spec.pull_remote_kv) return total;
  const int64_t first_chunk_end =
      std::min<int64_t>(prompt, hit_blocks * config_.block_size + std::max(1, budget));
  return std::max(hit_blocks, CeilDiv(first_chunk_end, config_.block_size));
}

bool Engine::CanAdmit(const Request& r) const {
  if (static_cast<int>(running_.size() + transferring_.size()) >= config_.max_num_seqs) {
    return false;
  }
  const std::span<const BlockHash> hashes(r.hashes.data(), MaxHitBlocks(r));
  const int64_t hit = blocks_.CountCachedPrefix(hashes);
  const int64_t blocks = BlocksToAdmit(r, hit, config_.max_num_batched_tokens);
  return blocks_.CanAllocate(hashes, hit, blocks - hit);
}

bool Engine::HasRunnableWork() const {
  if (!running_.empty()) return true;
  for (const Request* r : transferring_) {
    if (r->transfer_done <= now_) return true;
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
  if (!waiting_.empty()) {
    for (const auto& [id, hold] : holds_) consider(hold.deadline);
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
  if (t > pulls_drained_at_) {
    RunSharedLink(flows, config_.link.bandwidth_bytes_per_s, pulls_drained_at_, t);
  }
  pulls_drained_at_ = std::max(pulls_drained_at_, t);
}

void Engine::ProjectPulls() {
  std::vector<SharedTransfer> copies;
  copies.reserve(transferring_.size());
  for (const Request* r : transferring_) copies.push_back(r->pull);
  std::vector<SharedTransfer*> flows;
  for (SharedTransfer& c : copies) flows.push_back(&c);
  RunSharedLink(flows, config_.link.bandwidth_bytes_per_s, pulls_drained_at_, kForever);
  for (size_t i = 0; i < transferring_.size(); ++i) {
    // A pull whose source has not published yet never finishes by itself.
    transferring_[i]->transfer_done = copies[i].finish >= 0 ? copies[i].finish : kForever;
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

void Engine::Preempt(Request* r) {
  running_.erase(std::find(running_.begin(), running_.end(), r));
  blocks_.Release(r->blocks);
  r->blocks.clear();
  r->num_computed = 0;
  r->num_committed = 0;
  r->state = Request::State::kWaiting;
  ++r->info.num_preemptions;
  ++counters_.preemptions;
  // A heap has no front: under kPriority the preempted request goes back in its order.
  if (config_.scheduling_policy == SchedulingPolicy::kFcfs) {
    waiting_.push_front(r);
  } else {
    Enqueue(r);
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

void Engine::AppendToken(Request* r, StepResult& result, double t) {
  const int index = r->num_output;
  const std::string_view piece = StandInTokenizer::GeneratedPiece(r->spec.output_seed, index);
  const int32_t token = StandInTokenizer::PieceId(piece);
  r->tokens.push_back(token);
  ++r->num_output;
  ++counters_.generation_tokens;
  if (index == 0) {
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
  } else {
    blocks_.Release(r->blocks);
  }
  r->blocks.clear();
}

StepResult Engine::Step() {
  StepResult result;
  result.start = now_;
  ExpireHolds();
  CompleteTransfers(result);

  struct Scheduled {
    Request* r;
    int n;
  };
  std::vector<Scheduled> scheduled;
  int budget = config_.max_num_batched_tokens;

  // 1. Running requests first: decodes and unfinished chunked prefills.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int n = std::min<int>(static_cast<int>(r->tokens.size()) - r->num_computed, budget);
    const int64_t need =
        CeilDiv(r->num_computed + n, config_.block_size) - static_cast<int64_t>(r->blocks.size());
    if (need > blocks_.num_free() && running_.size() == 1) {
      // Alone and still out of blocks: the sequence outgrew the whole pool. Stop it the way a
      // length limit would instead of preempting it forever.
      const double t = now_;
      Finish(r, FinishReason::kLength, t);
      result.tokens.push_back(TokenEvent{.handle = r->handle,
                                         .token = kNoToken,
                                         .index = r->num_output,
                                         .finish = FinishReason::kLength});
      break;
    }
    bool self_preempted = false;
    while (need > blocks_.num_free()) {
      Request* victim =
          config_.scheduling_policy == SchedulingPolicy::kFcfs
              ? running_.back()
              : *std::max_element(running_.begin(), running_.end(),
                                  [](const Request* x, const Request* y) {
                                    return ServedBefore(*x, *y);
                                  });
      const size_t at = static_cast<size_t>(
          std::find(running_.begin(), running_.end(), victim) - running_.begin());
      if (at < i) {
        // Scheduled earlier in this step (kPriority only): undo that, as vLLM does.
        const auto it = std::find_if(scheduled.begin(), scheduled.end(),
                                     [victim](const Scheduled& s) { return s.r == victim; });
        budget += it->n;
        scheduled.erase(it);
        --i;
      }
      Preempt(victim);
      ++result.num_preempted;
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    if (need > 0) {
      std::optional<std::vector<BlockId>> fresh = blocks_.Allocate(need);
      r->blocks.insert(r->blocks.end(), fresh->begin(), fresh->end());
    }
    scheduled.push_back({r, n});
    budget -= n;
    ++i;
  }

  // 2. Admit waiting requests while their blocks fit, in queue order (the head blocks the
  //    queue).
  while (result.num_preempted == 0 && budget > 0 && !waiting_.empty()) {
    Request* r = waiting_.front();
    if (!CanAdmit(*r)) break;
    waiting_.pop_front();
    const std::span<const BlockHash> hashes(r->hashes.data(), MaxHitBlocks(*r));
    const int64_t hit = blocks_.CountCachedPrefix(hashes);
    const int64_t blocks = BlocksToAdmit(*r, hit, budget);
    r->blocks = blocks_.AcquireCached(hashes, hit);
    std::optional<std::vector<BlockId>> fresh = blocks_.Allocate(blocks - hit);
    r->blocks.insert(r->blocks.end(), fresh->begin(), fresh->end());
    r->num_computed = static_cast<int>(hit * config_.block_size);
    r->num_committed = static_cast<int>(hit);
    const int prompt_len = static_cast<int>(r->tokens.size());
    counters_.prefix_cache_queries += prompt_len;
    counters_.prefix_cache_hits += r->num_computed;
    if (!r->admitted_once) {
      r->admitted_once = true;
      r->info.first_scheduled = now_;
      r->info.cached_tokens = r->num_computed;
      counters_.prompt_tokens += prompt_len;
      queue_time_.Observe(now_ - r->info.arrival);
    }
    if (r->spec.pull_remote_kv) {
      // Pull the rest of the prompt's KV (but the last token) from the prefill instance.
      const int pulled = prompt_len - 1 - r->num_computed;
      counters_.external_prefix_cache_queries += prompt_len - r->num_computed;
      counters_.external_prefix_cache_hits += std::max(0, pulled);
      r->spec.pull_remote_kv = false;  // a later preemption recomputes locally
      if (pulled > 0) {
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
        continue;
      }
    }
    r->state = Request::State::kRunning;
    running_.push_back(r);
    const int n = std::min(prompt_len - r->num_computed, budget);
    scheduled.push_back({r, n});
    budget -= n;
  }

  // 3. Step time.
  int64_t kv_read = 0;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (const Scheduled& s : scheduled) {
    if (s.n == 1 && s.r->num_computed + 1 == static_cast<int>(s.r->tokens.size())) {
      ++result.decode_seqs;
      kv_read += s.r->num_computed + 1;
    } else {
      result.prefill_tokens += s.n;
      chunks.emplace_back(s.r->num_computed, s.n);
    }
  }
  if (scheduled.empty()) return result;
  ++counters_.steps;
  result.duration = slowdown_ * StepCost(chunks, result.decode_seqs, kv_read);
  const double end = now_ + result.duration;
  UpdateBusy(end);

  // 4. Apply: KV computed, full blocks cached, a token sampled where the sequence is complete.
  for (const Scheduled& s : scheduled) {
    Request* r = s.r;
    if (r->state != Request::State::kRunning) continue;
    r->num_computed += s.n;
    CommitFullBlocks(r);
    if (r->num_computed == static_cast<int>(r->tokens.size())) AppendToken(r, result, end);
  }
  now_ = end;
  return result;
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
