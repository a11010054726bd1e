// The engine model of one simulated vLLM instance: paged KV with prefix caching, a step
// scheduler with a chunked-prefill token budget, admission that waits on KV blocks,
// preemption, a step-time model (TimingModel, sim/profile.h), a KV-transfer-time model
// in which the pulls into one instance share its NIC (nic_share.h), and, when configured,
// vLLM's native CPU offloading: a host-memory tier written through from the GPU and loaded
// from on admission (host_tier.h, host_copy.h; engine_offload.cc), or the same tier behind
// LMCache's connector, whose stores and loads lengthen the steps that make them; and a
// fleet-shared KV pool that prefills store to and any instance loads from over its NIC
// (kv_pool.h; engine_pool.cc).
//
// Pure code driven by a virtual clock: nothing here sleeps, reads a wall clock or does I/O, so
// a test can drive it step by step and get the same result every time. The real-time driver
// (sim::Instance) maps virtual time to wall time.
//
//   Engine engine(EngineConfig::FromProfile(profile));
//   RequestHandle h = engine.Submit({.request_id = "r1", .prompt = tokens, .max_tokens = 8});
//   while (engine.HasRunnableWork()) {
//     StepResult step = engine.Step();  // advances engine.now() by step.duration
//     for (const TokenEvent& t : step.tokens) ...;
//   }
//   const RequestInfo* info = engine.Info(h);  // usage, cached tokens, timestamps
//
// Not thread-safe: owned by one Instance and used on its strand.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/status/status.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sim/block_manager.h"
#include "sim/host_copy.h"
#include "sim/host_tier.h"
#include "sim/kv_pool.h"
#include "sim/metrics.h"
#include "sim/nic_share.h"
#include "sim/profile.h"

namespace sim {

struct EngineConfig {
  int block_size = 16;
  int64_t num_gpu_blocks = 1024;
  int max_num_batched_tokens = 8192;
  int max_num_seqs = 256;
  int long_prefill_token_threshold = 0;  // Profile::long_prefill_token_threshold
  AdmissionRule admission = AdmissionRule::kFullPrompt;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  bool cache_generated_blocks = true;
  // Attention layers: a pull moves one RDMA descriptor per block, layer and K/V.
  int num_layers = 1;
  TimingModel timing;
  LinkModel link;
  double kv_bytes_per_token = 98304;
  double kv_hold_timeout_s = 480;
  double mean_output_tokens = 256;
  // vLLM's native CPU offloading (--kv-offloading-size): off unless kv_offloading is set.
  bool kv_offloading = false;
  int64_t host_num_blocks = 0;
  int host_block_size = 16;  // tokens per offloaded block, a multiple of block_size
  // Host <-> GPU bandwidth of the whole instance, each direction: every GPU of a tensor-
  // parallel instance copies its share of the KV over its own link.
  double host_bandwidth_bytes_per_s = 50e9;
  int tensor_parallel = 1;
  // --kv-offloading-backend lmcache: LMCache's connector, whose stores and loads block the
  // step that makes them (engine_offload.cc); host_block_size is then its chunk size, and
  // these are the whole instance's rates of those blocking copies.
  bool lmcache = false;
  double lmcache_store_bandwidth_bytes_per_s = 53.6e9;
  double lmcache_store_fixed_s = 4e-3;  // per step that stores, the ranks at once
  double lmcache_load_bandwidth_bytes_per_s = 41.1e9;
  // Seconds the connector's scheduler-side work adds to every step.
  double lmcache_schedule_s = 1.09e-3;
  // The fleet-shared KV pool (--kv-pool-size), shared with the fleet's other engines and
  // outliving this one; null: none.
  KvPool* kv_pool = nullptr;

  static EngineConfig FromProfile(const Profile& profile);
};

using RequestHandle = uint64_t;

enum class FinishReason { kNone, kStop, kLength, kAbort };
// "stop", "length", "abort" or "" for kNone.
const char* FinishReasonName(FinishReason reason);

struct RequestSpec {
  std::string request_id;
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  int min_tokens = 0;
  bool ignore_eos = false;
  // The request's `priority` (lower is served first); orders the waiting queue and picks
  // preemption victims under SchedulingPolicy::kPriority, ignored under kFcfs.
  int64_t priority = 0;
  // Seeds the natural output length and the generated words.
  uint64_t output_seed = 0;
  // Prefill leg of a P/D handoff: when it stops on the token limit, its blocks stay pinned
  // until ReleaseHold() or the hold timeout.
  bool hold_for_remote_decode = false;
  // Decode leg of a P/D handoff: the prompt's KV is available at a prefill instance; the
  // engine pulls what it does not hold locally (modelled transfer time) instead of computing.
  bool pull_remote_kv = false;
  // With pull_remote_kv: the prefill has not finished yet (Mooncake, SGLang). The leg is
  // admitted like a pull and its blocks are allocated and held, but no byte moves until
  // StartPull(); CancelPull() makes it prefill locally in those blocks.
  bool await_remote_kv = false;
  // Pulls sharing the source instance's NIC, this one included (KvHandle::source_pulls).
  int source_pulls = 1;
};

// TokenEvent::token of an event that only ends the request (no new token).
inline constexpr int32_t kNoToken = -1;

struct TokenEvent {
  RequestHandle handle = 0;
  int32_t token = 0;  // kNoToken: the request ended without a new token
  int index = 0;      // 0 for the first output token
  FinishReason finish = FinishReason::kNone;
};

struct StepResult {
  double start = 0;
  double duration = 0;
  int prefill_tokens = 0;
  int decode_seqs = 0;
  int num_preempted = 0;
  std::vector<TokenEvent> tokens;
  // Decode legs whose KV pull completed at the start of this step (the source may release).
  std::vector<RequestHandle> transfers_done;
};

struct RequestInfo {
  std::string request_id;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Prompt tokens not computed here: local prefix hit plus KV pulled from a prefill instance.
  int cached_tokens = 0;
  int pulled_tokens = 0;
  // Prompt tokens the host tier matched and loaded (vLLM's num_external_computed_tokens).
  int host_loaded_tokens = 0;
  // Prompt tokens the fleet-shared pool matched and loaded (external too, to vLLM).
  int pool_loaded_tokens = 0;
  int num_preemptions = 0;
  FinishReason finish = FinishReason::kNone;
  // Non-empty when the request finished holding its blocks for a remote decode.
  std::vector<BlockId> held_blocks;
  double arrival = 0;
  double first_scheduled = -1;
  double first_token = -1;
  double finished = -1;
};

struct EngineCounters {
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;
  uint64_t external_prefix_cache_queries = 0;
  uint64_t external_prefix_cache_hits = 0;
  uint64_t preemptions = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t requests_finished = 0;
  uint64_t steps = 0;
  // Prompt tokens by where their KV came from, counted when a request's first token is
  // sampled (vllm:prompt_tokens_by_source; vllm/v1/metrics/stats.py, PromptTokenStats).
  uint64_t prompt_tokens_local_compute = 0;
  uint64_t prompt_tokens_local_cache_hit = 0;
  uint64_t prompt_tokens_external_kv_transfer = 0;
  uint64_t prompt_tokens_cached = 0;
  // The part of external_kv_transfer loaded from the fleet-shared pool (vLLM does not tell
  // connectors apart; kvroute_sim_pool_prompt_tokens_loaded).
  uint64_t prompt_tokens_pool_loaded = 0;
};

// One instance's traffic with the fleet-shared pool, each direction over its NIC, and one
// duration observation per transfer (vLLM's MooncakeStorePromMetrics times each operation).
struct PoolTransferStats {
  PoolTransferStats();
  void Record(double transfer_bytes, double transfer_seconds);
  uint64_t transfers = 0;
  double bytes = 0;
  double seconds = 0;
  Histogram duration_seconds;
};

// The copies of one direction between GPU and host memory, as vLLM's OffloadPromMetrics
// exports them: bytes, seconds of copying and one size observation per copy.
struct HostCopyStats {
  HostCopyStats();
  uint64_t copies = 0;
  double bytes = 0;
  double seconds = 0;
  Histogram size_bytes;
};

class Engine {
 public:
  explicit Engine(EngineConfig config);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  const EngineConfig& config() const { return config_; }
  double now() const { return now_; }
  // Idle time passes: moves the clock forward (never backwards).
  void AdvanceTo(double t);

  // Whether a request of this size could ever run here (its KV fits the whole pool).
  absl::Status Validate(int64_t prompt_tokens, int64_t max_tokens) const;
  RequestHandle Submit(RequestSpec spec);
  // Drops a request wherever it is (client went away); no further events for it.
  void Abort(RequestHandle handle);
  // The prefill an await_remote_kv leg waits for has published its KV: the pull starts now
  // (or at admission, if the leg is still queued).
  void StartPull(RequestHandle handle, int source_pulls = 1);
  // No prefill came for an await_remote_kv leg: it computes its prompt here instead.
  void CancelPull(RequestHandle handle);

  // Whether Step() would schedule something now.
  bool HasRunnableWork() const;
  // The earliest future time at which something becomes runnable by itself (a KV pull
  // completing, or a hold expiring while requests wait for blocks).
  std::optional<double> NextTimedEvent() const;
  // Runs one scheduler step starting at now(); advances now() by its duration.
  StepResult Step();

  // Finished requests stay queryable until Forget().
  const RequestInfo* Info(RequestHandle handle) const;
  void Forget(RequestHandle handle);

  // Blocks held for a remote decode, by request id.
  bool ReleaseHold(const std::string& request_id);
  bool HasHold(const std::string& request_id) const { return holds_.contains(request_id); }
  size_t num_holds() const { return holds_.size(); }

  // vLLM's reset_prefix_cache: drops every cached block unless requests hold blocks.
  bool ResetPrefixCache() { return blocks_.ResetPrefixCache(); }
  // KV cache events (sim/kv_events.h) recorded since the last call, when enabled: the GPU
  // pool's, then the host tier's (medium CPU), as vLLM's scheduler appends its connector's.
  void EnableKvEvents(bool on);
  std::vector<KvCacheEvent> TakeKvEvents();

  // The prompt tokens a request with these tokens would find computed if admitted now: the
  // GPU prefix hit and, with a host tier, the run of whole offloaded blocks after it; at most
  // tokens - 1 (what the engine reports as cached_tokens).
  int64_t CachedPromptTokens(std::span<const int32_t> tokens) const;
  // The host tier (engine_offload.cc); null without --kv-offloading-size.
  const HostTier* host_tier() const { return host_.get(); }
  const HostCopyStats& host_loads() const { return load_stats_; }
  const HostCopyStats& host_stores() const { return store_stats_; }
  // The fleet-shared pool (engine_pool.cc); null without --kv-pool-size.
  const KvPool* kv_pool() const { return config_.kv_pool; }
  const PoolTransferStats& pool_loads() const { return pool_load_stats_; }
  const PoolTransferStats& pool_stores() const { return pool_store_stats_; }

  // Modelled time to pull `tokens` tokens of KV over an otherwise idle NIC: handover,
  // descriptors and bytes at the full bandwidth.
  double TransferTime(int64_t tokens) const;
  // The fixed part of a pull (handover and descriptors), before its bytes flow.
  double TransferFixedTime(int64_t tokens) const;
  // Modelled duration of a step that prefills `chunks` (context, new tokens) and decodes
  // `decode_seqs` sequences reading `kv_tokens` tokens of KV, before the slowdown fault.
  double StepCost(std::span<const std::pair<int64_t, int64_t>> chunks, int decode_seqs,
                  int64_t kv_tokens) const;
  // Step-time multiplier (fault injection: "slow down by a factor").
  void set_slowdown(double factor) { slowdown_ = factor > 0 ? factor : 1; }

  int num_running() const { return static_cast<int>(running_.size()); }
  // Requests loading from the host tier wait too (WAITING_FOR_REMOTE_KVS).
  int num_waiting() const {
    return static_cast<int>(waiting_.size() + transferring_.size() + loading_.size() +
                            pool_loading_.size());
  }
  double KvUsage() const { return blocks_.Usage(); }
  // Exponentially weighted fraction of virtual time spent in steps (10 s time constant), as of
  // now() or of a later idle time t.
  double BusyFraction() const { return BusyFractionAt(now_); }
  double BusyFractionAt(double t) const;
  const BlockManager& blocks() const { return blocks_; }
  const EngineCounters& counters() const { return counters_; }
  const Histogram& ttft() const { return ttft_; }
  const Histogram& itl() const { return itl_; }
  const Histogram& e2e() const { return e2e_; }
  const Histogram& queue_time() const { return queue_time_; }
  const Histogram& prefill_time() const { return prefill_time_; }

 private:
  struct Request;    // engine_internal.h
  struct StepPlan;   // engine_step.cc
  struct Hold {
    RequestHandle handle;
    std::vector<BlockId> blocks;
    double deadline;
  };

  // What admitting a waiting request takes: its GPU prefix hit, the tokens the host tier
  // adds after it, and the blocks to allocate (cached ones included).
  struct AdmissionPlan {
    int64_t gpu_hit_blocks = 0;
    int64_t host_hit_tokens = 0;
    // Tokens the fleet-shared pool adds after the GPU hit, when the host tier adds none.
    int64_t pool_hit_tokens = 0;
    int64_t blocks = 0;
    // Some host blocks of the hit are being loaded for another request: vLLM's lookup
    // answers "later" (OffloadingConnectorScheduler._blocks_being_loaded).
    bool delayed = false;
  };
  // The tokens one request may compute in a step with `step_budget` left: the budget, capped
  // at long_prefill_token_threshold when that is set.
  int RequestBudget(int step_budget) const;
  // The plan when admitted with `budget` tokens of this step left.
  AdmissionPlan PlanAdmission(const Request& r, int budget) const;
  bool CanAdmit(const Request& r) const;
  // Blocks (cached ones included) a waiting request takes when admitted with `budget` tokens
  // of this step left: the whole prompt, or its first chunk under AdmissionRule::kFirstChunk.
  int64_t BlocksToAdmit(const Request& r, int64_t hit_blocks, int budget) const;
  int64_t MaxHitBlocks(const Request& r) const;
  // Queues a waiting request: at the back (kFcfs), or after every request that goes before it
  // in (priority, arrival, submission) order (kPriority).
  void Enqueue(Request* r);
  // Whether a is served before b under kPriority: vLLM's Request ordering.
  static bool ServedBefore(const Request& a, const Request& b);
  void ExpireHolds();

  // The phases of Step() (engine_step.cc), in the order it runs them.
  // Decode legs whose pull has completed join the running set.
  void CompleteTransfers(StepResult& result);
  // Running requests first, in order: decodes and the next chunks of unfinished prefills,
  // each taking the blocks its new tokens need.
  void ScheduleRunning(StepPlan& plan, StepResult& result);
  // A request alone and still out of blocks has outgrown the whole pool: it ends as on its
  // length limit.
  void StopOutgrown(Request* r, StepResult& result);
  // Preempts running requests until `need` blocks are free for r (at running_[i]), undoing
  // the schedule of a victim scheduled earlier in the step (then i moves back). False when r
  // itself was preempted.
  bool PreemptUntilFree(const Request* r, int64_t need, size_t& i, StepPlan& plan,
                        StepResult& result);
  // The running request a preemption takes: the latest admitted (kFcfs), or the one served
  // last (kPriority).
  Request* PreemptionVictim() const;
  // Drops a running request's blocks and queues it again; it recomputes what is not cached.
  void Preempt(Request* r);
  // Then waiting requests in queue order while their blocks fit (the head blocks the queue).
  void AdmitWaiting(StepPlan& plan);
  // The blocks an admitted request takes: its cached prefix, then fresh ones.
  void TakeAdmissionBlocks(Request* r, const AdmissionPlan& plan);
  // Prefix-cache counters of an admission.
  void RecordPrefixQuery(Request* r);
  // When a request first starts running: queue time, cached tokens, prompt and connector
  // counters.
  void RecordFirstSchedule(Request* r);
  // An admitted decode leg starts pulling the prompt's KV it does not hold. False when there
  // is nothing to pull: it then runs like any admitted request.
  bool BeginAdmittedPull(Request* r);
  // Counts the step's decodes and prefill tokens into `result` and returns its duration.
  double PriceStep(const StepPlan& plan, StepResult& result) const;
  // KV computed, full blocks cached, a token sampled where the sequence is complete.
  void ApplyStep(const StepPlan& plan, double end, StepResult& result);
  void CommitFullBlocks(Request* r);
  void AppendToken(Request* r, StepResult& result, double t);
  // Frees the request's blocks, or holds them for a remote decode.
  void Finish(Request* r, FinishReason reason, double t);

  // vLLM's OffloadingConnector (engine_offload.cc): the host tier's side of each phase.
  struct HostHit {
    int64_t tokens = 0;
    bool delayed = false;
  };
  // The host tier's hit after `gpu_hit_blocks` GPU blocks of a sequence with these block
  // hashes (vLLM's get_num_new_matched_tokens): the run of ready offloaded blocks from the
  // one holding the first uncomputed token, in tokens; none unless one whole offloaded block.
  HostHit LookupHost(std::span<const BlockHash> hashes, int64_t gpu_hit_blocks) const;
  // The keys of offloaded blocks [first, end) of a sequence with these block hashes.
  std::vector<BlockHash> HostKeys(std::span<const BlockHash> hashes, int64_t first,
                                  int64_t end) const;
  // The recency a lookup gives: every offloaded block of the request.
  void TouchHost(const Request& r);
  // LMCache's lookup (LMCacheConnectorV1.get_num_new_matched_tokens): the run of stored
  // chunks from the prompt's start, less what the GPU computed; none unless it goes further.
  HostHit LookupLmcache(std::span<const BlockHash> hashes, int64_t gpu_hit_blocks) const;
  // An admitted request with a host hit waits (WAITING_FOR_REMOTE_KVS) while its blocks load.
  void BeginHostLoad(Request* r, const AdmissionPlan& plan);
  // LMCache: an admitted request's hit is retrieved inside the step that schedules it
  // (start_load_kv) and it runs at once; returns the seconds the copy adds to that step.
  double LoadInStep(Request* r);
  // LMCache: each scheduled prefill's newly completed chunks of prompt are stored at the end
  // of the step (wait_for_save); returns the seconds the copies add to the step.
  double StoreInStep(const StepPlan& plan);
  bool HostLoadDone(const Request& r) const;
  // Loaded requests join the running set with the loaded tokens computed.
  void CompleteHostLoads();
  // Write-through: the offloaded blocks r completed become store copies that start at
  // `start`, the end of the step (vLLM submits them at the start of the next one).
  void QueueStores(Request* r, double start);
  // Store copies that have landed by `t`: their requests' counts, and held blocks freed.
  void LandStores(double t);
  // A request ending (finished or aborted): its stored blocks become loadable, or, with
  // copies still in flight, its GPU blocks stay held until they land (returns true).
  bool HoldForStores(Request* r);
  // A preempted request's pending stores count as landed, as vLLM completes them then.
  void SettleStoresOnPreempt(Request* r);
  // An aborted request that was loading: its host blocks are unpinned.
  void AbortHostLoad(Request* r);
  void CountPromptSources(const Request& r);

  // vLLM's MooncakeStoreConnector (engine_pool.cc), behind the host tier in a MultiConnector.
  // The pool's hit after `gpu_hit_blocks` GPU blocks: its leading run of stored blocks among
  // the prompt's first `max_blocks`, in tokens beyond the GPU hit (0 when it ends there).
  int64_t LookupPool(std::span<const BlockHash> hashes, int64_t max_blocks,
                     int64_t gpu_hit_blocks) const;
  // An admitted request with a pool hit waits (WAITING_FOR_REMOTE_KVS) while the blocks come
  // over this instance's NIC, shared with the other loads and pulls into it.
  void BeginPoolLoad(Request* r, const AdmissionPlan& plan);
  // Loaded requests join the running set with the loaded tokens computed.
  void CompletePoolLoads();
  void AbortPoolLoad(Request* r);
  // The prompt blocks r's prefill completed are put to the pool, their bytes leaving over this
  // instance's NIC from `start`; the blocks stay pinned here until they land.
  void QueuePoolStores(Request* r, double start);
  // Moves the stores' bytes forward to `t`; landed ones become loadable fleet-wide.
  void LandPoolStores(double t);
  // When the next store lands, if any.
  std::optional<double> NextPoolStoreLanding() const;

  // The most a pull's source NIC sends it (its bandwidth split over the source's pulls).
  double SourceRate(const RequestSpec& spec) const;
  // Moves the byte phase of every pull forward to `t` on the shared NIC.
  void DrainPulls(double t);
  // Recomputes every pull's transfer_done from the current state (no later arrivals).
  void ProjectPulls();
  void UpdateBusy(double busy_until);
  int TargetOutputLength(const RequestSpec& spec) const;

  EngineConfig config_;
  BlockManager blocks_;
  double now_ = 0;
  double slowdown_ = 1;
  RequestHandle next_handle_ = 1;
  absl::flat_hash_map<RequestHandle, std::unique_ptr<Request>> requests_;
  // Admission order; preemption takes from the back (kFcfs) or the request served last in
  // priority order (kPriority).
  std::vector<Request*> running_;
  // kFcfs: FIFO, preempted requests go to the front; kPriority: sorted by ServedBefore.
  std::deque<Request*> waiting_;
  std::vector<Request*> transferring_;  // decode legs pulling KV
  double pulls_drained_at_ = 0;
  absl::flat_hash_map<std::string, Hold> holds_;
  // The host tier and its copies; host_ is null when offloading is off.
  struct StoreJob {
    RequestHandle handle;
    HostCopy copy;
    double bytes;
  };
  struct StoreHold {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> keys;
    int jobs;
  };
  std::unique_ptr<HostTier> host_;
  HostCopyStream host_to_gpu_;
  HostCopyStream gpu_to_host_;
  std::vector<Request*> loading_;    // parked in WAITING_FOR_REMOTE_KVS, in admission order
  std::deque<StoreJob> store_jobs_;  // in submission order, which is landing order
  absl::flat_hash_map<RequestHandle, StoreHold> store_holds_;  // ended with copies in flight
  HostCopyStats load_stats_;
  HostCopyStats store_stats_;
  // The fleet-shared pool's transfers (engine_pool.cc).
  struct PoolStore {
    SharedTransfer send;  // its bytes on this instance's outbound NIC
    double submitted = 0;
    std::vector<BlockHash> keys;
    std::vector<BlockId> pinned;  // GPU blocks being read, released when it lands
  };
  std::vector<Request*> pool_loading_;  // parked while their pool blocks arrive
  std::vector<PoolStore> pool_stores_;  // in submission order
  double pool_stores_drained_at_ = 0;
  PoolTransferStats pool_load_stats_;
  PoolTransferStats pool_store_stats_;
  EngineCounters counters_;
  double busy_ewma_ = 0;
  double busy_updated_at_ = 0;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram queue_time_;
  Histogram prefill_time_;
};

}  // namespace sim
