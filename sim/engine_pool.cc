// The fleet-shared pool's side of sim::Engine (engine.h): vLLM's MooncakeStoreConnector as
// kvroute-sim --kv-pool-size models it, behind the host tier when both are on (a
// MultiConnector gives a request to the first connector with a hit). What each function
// models, with its vLLM source, is in sim/README.md, "Fleet-shared KV pool". In a step:
//   - admission (PlanAdmission, engine.cc): after the GPU prefix hit and a host tier without
//     a hit, LookupPool counts the pool's stored prefix; a request with a hit gets its blocks
//     and parks in WAITING_FOR_REMOTE_KVS (BeginPoolLoad) while the bytes come over this
//     instance's NIC, shared with the other pool loads and P/D pulls into it;
//   - the start of a later step (CompletePoolLoads): a landed load makes the loaded tokens
//     computed and cached, and the request runs;
//   - the end of a step (QueuePoolStores): every prompt block a prefill completed is put to
//     the pool, its bytes leaving over this instance's NIC; it becomes loadable by every
//     instance when they land (LandPoolStores), and its GPU block stays pinned until then.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "sim/engine.h"
#include "sim/engine_internal.h"
#include "sim/nic_share.h"

namespace sim {

namespace {

// A pool transfer's fixed part: one RDMA descriptor per block, layer and K/V (the
// link section's per_descriptor_s). There is no P/D handover: the scheduler looked the
// blocks up before admitting the request.
double PoolDescriptorTime(const EngineConfig& c, int64_t blocks) {
  return c.link.per_descriptor_s * static_cast<double>(blocks) * c.num_layers * 2;
}

// vLLM's MooncakeStorePromMetrics buckets for vllm:mooncake_store_operation_time_seconds
// (vllm/backends/distributed/kv_transfer/kv_connector/v1/mooncake/store/metrics.py).
std::vector<double> PoolOperationSecondsBuckets() {
  return {1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0};
}

}  // namespace

PoolTransferStats::PoolTransferStats() : duration_seconds(PoolOperationSecondsBuckets()) {}

void PoolTransferStats::Record(double transfer_bytes, double transfer_seconds) {
  ++transfers;
  bytes += transfer_bytes;
  seconds += transfer_seconds;
  duration_seconds.Observe(transfer_seconds);
}

int64_t Engine::LookupPool(std::span<const BlockHash> hashes, int64_t max_blocks,
                           int64_t gpu_hit_blocks) const {
  const int64_t n = std::min<int64_t>(max_blocks, static_cast<int64_t>(hashes.size()));
  if (n <= gpu_hit_blocks) return 0;
  const int64_t run = config_.kv_pool->Lookup(hashes.first(static_cast<size_t>(n)));
  return std::max<int64_t>(0, run - gpu_hit_blocks) * config_.block_size;
}

void Engine::BeginPoolLoad(Request* r, const AdmissionPlan& plan) {
  const int64_t bs = config_.block_size;
  const int64_t first = r->num_computed / bs;
  const int64_t blocks = plan.pool_hit_tokens / bs;
  r->pool_hit_tokens = static_cast<int>(plan.pool_hit_tokens);
  r->pool_keys.assign(r->hashes.begin() + first, r->hashes.begin() + first + blocks);
  config_.kv_pool->PrepareLoad(r->pool_keys);
  DrainPulls(now_);
  r->pull = SharedTransfer{
      .start = now_ + PoolDescriptorTime(config_, blocks),
      .bytes = static_cast<double>(plan.pool_hit_tokens) * config_.kv_bytes_per_token};
  r->transfer_done = kForever;
  r->pool_load_start = now_;
  r->state = Request::State::kPoolLoading;
  pool_loading_.push_back(r);
  ProjectPulls();
}

void Engine::CompletePoolLoads() {
  for (auto it = pool_loading_.begin(); it != pool_loading_.end();) {
    Request* r = *it;
    // Like any waiting request, a loaded one needs a free sequence slot to run.
    if (r->transfer_done > now_ ||
        static_cast<int>(running_.size() + transferring_.size()) >= config_.max_num_seqs) {
      ++it;
      continue;
    }
    it = pool_loading_.erase(it);
    config_.kv_pool->CompleteLoad(r->pool_keys);
    r->pool_keys.clear();
    pool_load_stats_.Record(static_cast<double>(r->pool_hit_tokens) * config_.kv_bytes_per_token,
                            r->pull.finish - r->pool_load_start);
    // The hit stops at the prompt's last whole block before its last token, so the loaded
    // tokens never complete the prompt: the rest is computed as usual.
    r->num_computed += r->pool_hit_tokens;
    CommitFullBlocks(r);
    // The loaded blocks are in the pool already: puts resume after them.
    r->next_pool_block = r->num_computed / config_.block_size;
    r->info.pool_loaded_tokens = r->pool_hit_tokens;
    r->state = Request::State::kRunning;
    running_.push_back(r);
    RecordFirstSchedule(r);
  }
}

void Engine::AbortPoolLoad(Request* r) {
  config_.kv_pool->CompleteLoad(r->pool_keys);
  r->pool_keys.clear();
}

void Engine::QueuePoolStores(Request* r, double start) {
  // MooncakeStoreConnector saves the prompt's blocks as its prefill computes them, not those
  // of generated tokens (save_decode_cache: false).
  const int bs = config_.block_size;
  const int full = std::min({r->num_computed / bs, r->info.prompt_tokens / bs,
                             static_cast<int>(r->hashes.size())});
  if (full <= r->next_pool_block) return;
  const int first = r->next_pool_block;
  std::vector<PoolBlock> put;
  put.reserve(static_cast<size_t>(full - first));
  const std::span<const int32_t> tokens(r->tokens);
  for (int j = first; j < full; ++j) {
    put.push_back(PoolBlock{
        .key = r->hashes[j],
        .parent = j == 0 ? std::nullopt : std::optional<BlockHash>(r->hashes[j - 1]),
        .token_ids = std::vector<int32_t>(tokens.begin() + static_cast<ptrdiff_t>(j) * bs,
                                          tokens.begin() + static_cast<ptrdiff_t>(j + 1) * bs)});
  }
  std::optional<std::vector<BlockHash>> fresh = config_.kv_pool->PrepareStore(put);
  if (!fresh) return;  // too few idle pool blocks to evict: tried again after the next step
  r->next_pool_block = full;
  if (fresh->empty()) return;
  PoolStore store;
  store.submitted = start;
  auto next = fresh->begin();
  for (int j = first; j < full && next != fresh->end(); ++j) {
    if (r->hashes[j] != *next) continue;
    ++next;
    if (j < static_cast<int>(r->blocks.size())) store.pinned.push_back(r->blocks[j]);
  }
  blocks_.Retain(store.pinned);
  const int64_t n = static_cast<int64_t>(fresh->size());
  store.send = SharedTransfer{
      .start = start + PoolDescriptorTime(config_, n),
      .bytes = static_cast<double>(n * bs) * config_.kv_bytes_per_token};
  store.keys = *std::move(fresh);
  pool_stores_.push_back(std::move(store));
}

void Engine::LandPoolStores(double t) {
  if (pool_stores_.empty()) {
    pool_stores_drained_at_ = std::max(pool_stores_drained_at_, t);
    return;
  }
  if (t > pool_stores_drained_at_) {
    std::vector<SharedTransfer*> flows;
    for (PoolStore& s : pool_stores_) flows.push_back(&s.send);
    RunSharedLink(flows, config_.link.bandwidth_bytes_per_s, pool_stores_drained_at_, t);
    pool_stores_drained_at_ = t;
  }
  for (auto it = pool_stores_.begin(); it != pool_stores_.end();) {
    if (it->send.finish < 0) {
      ++it;
      continue;
    }
    config_.kv_pool->CompleteStore(it->keys);
    blocks_.Release(it->pinned);
    pool_store_stats_.Record(
        static_cast<double>(it->keys.size()) * config_.block_size * config_.kv_bytes_per_token,
        it->send.finish - it->submitted);
    it = pool_stores_.erase(it);
  }
}

std::optional<double> Engine::NextPoolStoreLanding() const {
  if (pool_stores_.empty()) return std::nullopt;
  std::vector<SharedTransfer> copies;
  copies.reserve(pool_stores_.size());
  for (const PoolStore& s : pool_stores_) copies.push_back(s.send);
  std::vector<SharedTransfer*> flows;
  for (SharedTransfer& c : copies) flows.push_back(&c);
  RunSharedLink(flows, config_.link.bandwidth_bytes_per_s, pool_stores_drained_at_, kForever);
  double first = kForever;
  for (const SharedTransfer& c : copies) first = std::min(first, c.finish);
  return first;
}

}  // namespace sim
