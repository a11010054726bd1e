// The host tier's side of sim::Engine (engine.h): vLLM's OffloadingConnector with its CPU
// spec, as --kv-offloading-size sets it up (vllm/config/vllm.py maps the flag to
// OffloadingConnector with cpu_bytes_to_use = size x 2^30). What each function models, with its
// vLLM source, is in sim/README.md, "Host-memory KV tier". In a step:
//   - admission (PlanAdmission, engine.cc): after the GPU prefix hit, LookupHost counts the run
//     of ready offloaded blocks; a request with a hit gets its blocks and parks in
//     WAITING_FOR_REMOTE_KVS (BeginHostLoad) while the copy runs on the host -> GPU stream;
//   - the start of a later step (CompleteHostLoads): a landed load makes the loaded tokens
//     computed and cached, and the request runs;
//   - the end of a step (QueueStores): every offloaded block a request completed is stored,
//     its copy starting when the next step starts; the stored blocks become loadable when the
//     request ends and its copies have landed (LandStores, HoldForStores), and until then an
//     ended request keeps its GPU blocks.
// With --kv-offloading-backend lmcache (LMCacheConnectorV1 over LMCache's local CPU backend)
// the tier is the same manager in blocks of LMCache's chunk, but nothing runs beside the steps:
//   - admission: LookupLmcache counts the stored chunks from the prompt's start; a hit is
//     retrieved inside the step that admits the request (LoadInStep, start_load_kv), which
//     then runs it at once (the connector's load is not asynchronous);
//   - the end of a step (StoreInStep): each prefill's newly completed chunks of prompt are
//     stored before the step returns (wait_for_save), loadable at once; decode tokens are
//     not stored (save_decode_cache is off by default).
#include <algorithm>
#include <iterator>
#include <optional>
#include <span>
#include <vector>

#include "sim/engine.h"
#include "sim/engine_internal.h"

namespace sim {

namespace {

// vLLM's OffloadPromMetrics buckets for vllm:kv_offload_size (bytes).
std::vector<double> OffloadSizeBuckets() {
  return {1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6};
}

}  // namespace

HostCopyStats::HostCopyStats() : size_bytes(OffloadSizeBuckets()) {}

void Engine::EnableKvEvents(bool on) {
  blocks_.EnableKvEvents(on);
  // CPU-medium events are the OffloadingConnector's (OffloadingEventsTracker); the LMCache
  // connector publishes none through vLLM's publisher.
  if (host_ && !config_.lmcache) host_->EnableKvEvents(on);
}

std::vector<KvCacheEvent> Engine::TakeKvEvents() {
  std::vector<KvCacheEvent> events = blocks_.TakeKvEvents();
  if (host_) {
    std::vector<KvCacheEvent> host = host_->TakeKvEvents();
    events.insert(events.end(), std::make_move_iterator(host.begin()),
                  std::make_move_iterator(host.end()));
  }
  return events;
}

int64_t Engine::CachedPromptTokens(std::span<const int32_t> tokens) const {
  const int bs = config_.block_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n <= 0) return 0;
  const std::vector<BlockHash> hashes = HashFullBlocks(tokens, bs);
  const int64_t max_hit = std::min<int64_t>(static_cast<int64_t>(hashes.size()), (n - 1) / bs);
  const int64_t gpu =
      max_hit > 0 ? blocks_.CountCachedPrefix(std::span<const BlockHash>(hashes.data(), max_hit))
                  : 0;
  const int64_t host = host_ ? LookupHost(hashes, gpu).tokens : 0;
  // The pool answers only when the host tier has nothing (engine_pool.cc).
  const int64_t pool =
      host == 0 && config_.kv_pool != nullptr ? LookupPool(hashes, max_hit, gpu) : 0;
  // As after a load: a prompt computed to its end recomputes its last token.
  const int64_t computed = gpu * bs + host + pool;
  return computed >= n ? n - 1 : computed;
}

std::vector<BlockHash> Engine::HostKeys(std::span<const BlockHash> hashes, int64_t first,
                                        int64_t end) const {
  // An offloaded block is named by the hash of the last GPU block it covers.
  const int64_t factor = config_.host_block_size / config_.block_size;
  std::vector<BlockHash> keys;
  keys.reserve(static_cast<size_t>(std::max<int64_t>(0, end - first)));
  for (int64_t j = first; j < end; ++j) keys.push_back(hashes[(j + 1) * factor - 1]);
  return keys;
}

Engine::HostHit Engine::LookupHost(std::span<const BlockHash> hashes,
                                   int64_t gpu_hit_blocks) const {
  if (config_.lmcache) return LookupLmcache(hashes, gpu_hit_blocks);
  HostHit hit;
  const int64_t obs = config_.host_block_size;
  const int64_t num_blocks = static_cast<int64_t>(hashes.size()) * config_.block_size / obs;
  const int64_t computed = gpu_hit_blocks * config_.block_size;
  if (num_blocks * obs - computed < obs) return hit;  // less than a block left to load
  const int64_t start = computed / obs;
  const std::vector<BlockHash> keys = HostKeys(hashes, start, num_blocks);
  const int64_t run = host_->Lookup(keys);
  const int64_t tokens = (start + run) * obs - computed;
  if (run == 0 || tokens < obs) return hit;
  hit.tokens = tokens;
  hit.delayed = host_->AnyLoading(std::span<const BlockHash>(keys.data(), run));
  return hit;
}

Engine::HostHit Engine::LookupLmcache(std::span<const BlockHash> hashes,
                                      int64_t gpu_hit_blocks) const {
  // LMCache looks the whole token sequence up, chunk by chunk from the first; the connector
  // asks to load what lies beyond the GPU's hit. A hit ends on a chunk boundary, or at the
  // prompt's end, whose last token is then recomputed (need_to_allocate - 1): the prompt's
  // own full blocks are all the hashes there are, so the caller caps the hit at prompt - 1.
  HostHit hit;
  const int64_t chunk = config_.host_block_size;
  const int64_t num_chunks = static_cast<int64_t>(hashes.size()) * config_.block_size / chunk;
  const std::vector<BlockHash> keys = HostKeys(hashes, 0, num_chunks);
  const int64_t stored = host_->Lookup(keys) * chunk;
  const int64_t computed = gpu_hit_blocks * config_.block_size;
  if (stored > computed) hit.tokens = stored - computed;
  return hit;
}

void Engine::TouchHost(const Request& r) {
  const int64_t num_blocks =
      static_cast<int64_t>(r.hashes.size()) * config_.block_size / config_.host_block_size;
  host_->Touch(HostKeys(r.hashes, 0, num_blocks));
}

void Engine::BeginHostLoad(Request* r, const AdmissionPlan& plan) {
  const int64_t obs = config_.host_block_size;
  const int64_t computed = r->num_computed;
  const int64_t end = (computed + plan.host_hit_tokens) / obs;
  r->load_keys = HostKeys(r->hashes, computed / obs, end);
  host_->PrepareLoad(r->load_keys);
  // Only the GPU blocks the hit lacks are copied, part of the first offloaded block included.
  r->load = host_to_gpu_.Submit(
      now_, static_cast<double>(plan.host_hit_tokens) * config_.kv_bytes_per_token);
  // The loaded blocks are in host memory already: storing resumes after them.
  r->next_stored_block = static_cast<int>(end);
  r->state = Request::State::kLoading;
  loading_.push_back(r);
}

bool Engine::HostLoadDone(const Request& r) const {
  // Like any waiting request, a loaded one needs a free sequence slot to run.
  return r.load.done <= now_ &&
         static_cast<int>(running_.size() + transferring_.size()) < config_.max_num_seqs;
}

namespace {

void RecordCopy(HostCopyStats& stats, const HostCopy& copy, double bytes, int tensor_parallel) {
  // Each GPU's worker copies its share and reports it; vLLM sums the workers' reports.
  ++stats.copies;
  stats.bytes += bytes;
  stats.seconds += (copy.done - copy.start) * tensor_parallel;
  stats.size_bytes.Observe(bytes / tensor_parallel);
}

}  // namespace

void Engine::CompleteHostLoads() {
  for (auto it = loading_.begin(); it != loading_.end();) {
    Request* r = *it;
    if (!HostLoadDone(*r)) {
      ++it;
      continue;
    }
    it = loading_.erase(it);
    host_->CompleteLoad(r->load_keys);
    r->load_keys.clear();
    RecordCopy(load_stats_, r->load,
               static_cast<double>(r->host_hit_tokens) * config_.kv_bytes_per_token,
               config_.tensor_parallel);
    // vLLM's _update_waiting_for_remote_kv: the loaded blocks are cached and computed, but a
    // request computed to its end recomputes its last token to sample the next one.
    const int total = static_cast<int>(r->tokens.size());
    int computed = std::min(r->num_computed + r->host_hit_tokens, total);
    if (computed == total) --computed;
    r->num_computed = computed;
    CommitFullBlocks(r);
    r->info.host_loaded_tokens = r->host_hit_tokens;
    r->state = Request::State::kRunning;
    running_.push_back(r);
    RecordFirstSchedule(r);
  }
}

void Engine::AbortHostLoad(Request* r) {
  host_->CompleteLoad(r->load_keys);
  r->load_keys.clear();
  // The copy cannot be called back: it runs to its end, counted now.
  RecordCopy(load_stats_, r->load,
             static_cast<double>(r->host_hit_tokens) * config_.kv_bytes_per_token,
             config_.tensor_parallel);
}

void Engine::QueueStores(Request* r, double start) {
  const int bs = config_.block_size;
  const int obs = config_.host_block_size;
  const int factor = obs / bs;
  const int full = std::min(r->num_computed / obs, static_cast<int>(r->hashes.size()) / factor);
  if (full <= r->next_stored_block) return;
  const int first = r->next_stored_block;
  const std::vector<BlockHash> keys = HostKeys(r->hashes, first, full);
  std::optional<std::vector<BlockHash>> fresh = host_->PrepareStore(keys);
  if (!fresh) return;  // too few idle host blocks to evict: tried again after the next step
  r->next_stored_block = full;
  if (fresh->empty()) return;
  if (host_->kv_events_enabled()) {
    // What the self-describing events say of each new block (OffloadingEventsTracker).
    const std::span<const BlockHash> hashes(r->hashes);
    const std::span<const int32_t> tokens(r->tokens);
    auto next = fresh->begin();
    for (int j = first; j < full && next != fresh->end(); ++j) {
      if (keys[j - first] != *next) continue;
      ++next;
      host_->Describe(keys[j - first],
                      j == 0 ? std::nullopt : std::optional<BlockHash>(hashes[j * factor - 1]),
                      hashes.subspan(static_cast<size_t>(j) * factor, factor),
                      tokens.subspan(static_cast<size_t>(j) * obs, obs), bs);
    }
  }
  host_->Touch(HostKeys(r->hashes, 0, full));
  const double bytes = static_cast<double>(fresh->size()) * obs * config_.kv_bytes_per_token;
  store_jobs_.push_back(StoreJob{r->handle, gpu_to_host_.Submit(start, bytes), bytes});
  ++r->store_jobs;
  r->being_stored.insert(r->being_stored.end(), fresh->begin(), fresh->end());
}

void Engine::LandStores(double t) {
  while (!store_jobs_.empty() && store_jobs_.front().copy.done <= t) {
    const StoreJob job = store_jobs_.front();
    store_jobs_.pop_front();
    RecordCopy(store_stats_, job.copy, job.bytes, config_.tensor_parallel);
    const auto live = requests_.find(job.handle);
    if (live != requests_.end() && live->second->state != Request::State::kFinished) {
      --live->second->store_jobs;
      continue;
    }
    const auto held = store_holds_.find(job.handle);
    if (held == store_holds_.end() || --held->second.jobs > 0) continue;
    host_->CompleteStore(held->second.keys);
    blocks_.Release(held->second.blocks);
    store_holds_.erase(held);
  }
}

bool Engine::HoldForStores(Request* r) {
  if (!host_) return false;
  if (r->store_jobs == 0) {
    host_->CompleteStore(r->being_stored);
    r->being_stored.clear();
    return false;
  }
  // vLLM's request_finished answers "still sending": the blocks are freed when the copies
  // have landed (OffloadingConnectorScheduler.request_finished).
  store_holds_[r->handle] =
      StoreHold{std::move(r->blocks), std::move(r->being_stored), r->store_jobs};
  r->blocks.clear();
  r->being_stored.clear();
  r->store_jobs = 0;
  return true;
}

void Engine::SettleStoresOnPreempt(Request* r) {
  host_->CompleteStore(r->being_stored);
  r->being_stored.clear();
}

double Engine::LoadInStep(Request* r) {
  const int64_t chunk = config_.host_block_size;
  const int total = static_cast<int>(r->tokens.size());
  const int gpu_computed = r->num_computed;
  const int hit_end = gpu_computed + r->host_hit_tokens;
  // The retrieve masks only the whole chunks the GPU computed (start_load_kv's token_mask):
  // the chunk the GPU hit ends inside is copied again, in whole.
  const int64_t first = gpu_computed / chunk * chunk;
  const double bytes = static_cast<double>(hit_end - first) * config_.kv_bytes_per_token;
  r->num_computed = std::min(hit_end, total - 1);
  r->host_hit_tokens = r->num_computed - gpu_computed;
  r->info.host_loaded_tokens = r->host_hit_tokens;
  // Its chunks are stored already (the tracker's num_saved_tokens starts at the hit).
  r->next_stored_block = static_cast<int>(hit_end / chunk);
  const double seconds = bytes / config_.lmcache_load_bandwidth_bytes_per_s;
  RecordCopy(load_stats_, HostCopy{.start = now_, .done = now_ + seconds}, bytes,
             config_.tensor_parallel);
  return seconds;
}

double Engine::StoreInStep(const StepPlan& plan) {
  const int chunk = config_.host_block_size;
  double bytes = 0;
  for (const StepPlan::Scheduled& s : plan.scheduled) {
    Request* r = s.r;
    if (r->state != Request::State::kRunning) continue;
    // Whole chunks of prompt only: a chunked prefill's partial chunk waits for its next step
    // and the last one is dropped (save_unfull_chunk off), decode tokens are not saved.
    const int prompt_done = std::min(r->num_computed + s.n, r->info.prompt_tokens);
    const int full = std::min(prompt_done / chunk,
                              static_cast<int>(r->hashes.size()) * config_.block_size / chunk);
    if (full <= r->next_stored_block) continue;
    const std::vector<BlockHash> keys = HostKeys(r->hashes, r->next_stored_block, full);
    std::optional<std::vector<BlockHash>> fresh = host_->PrepareStore(keys);
    if (!fresh) continue;  // nothing idle to evict: the chunks stay unsaved, tried next step
    r->next_stored_block = full;
    host_->CompleteStore(*fresh);
    host_->Touch(HostKeys(r->hashes, 0, full));
    bytes += static_cast<double>(fresh->size()) * chunk * config_.kv_bytes_per_token;
  }
  if (bytes <= 0) return 0;
  // One copy per step: the step's stores run back to back after its bookkeeping.
  const double seconds =
      config_.lmcache_store_fixed_s + bytes / config_.lmcache_store_bandwidth_bytes_per_s;
  RecordCopy(store_stats_, HostCopy{.start = now_, .done = now_ + seconds}, bytes,
             config_.tensor_parallel);
  return seconds;
}

void Engine::CountPromptSources(const Request& r) {
  // vLLM's PromptTokenStats.update_from_output: a prompt cached but for its last token counts
  // that token as recomputed, so the sources add up to the prompt.
  const int64_t prompt = r.info.prompt_tokens;
  const int64_t cached = r.info.cached_tokens;
  const int64_t external =
      r.info.host_loaded_tokens + r.info.pulled_tokens + r.info.pool_loaded_tokens;
  counters_.prompt_tokens_pool_loaded += static_cast<uint64_t>(r.info.pool_loaded_tokens);
  const int64_t recomputed = cached + 1 == prompt ? 1 : 0;
  counters_.prompt_tokens_local_compute +=
      static_cast<uint64_t>(std::max<int64_t>(0, prompt - cached));
  counters_.prompt_tokens_external_kv_transfer += static_cast<uint64_t>(external);
  counters_.prompt_tokens_local_cache_hit +=
      static_cast<uint64_t>(std::max<int64_t>(0, cached + recomputed - external));
  counters_.prompt_tokens_cached += static_cast<uint64_t>(cached);
}

}  // namespace sim
