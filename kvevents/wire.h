// kvevents wire format: decodes the msgpack payload of one vLLM KV cache
// event message (vllm/distributed/kv_events.py, docs/kv-events.md) into plain
// structs.
//
//   absl::StatusOr<EventBatch> batch = DecodeEventBatch(payload);
//   for (const KvCacheEvent& e : batch->events) ...
//
// Both encodings vLLM has published are accepted, so one kvroute fronts a
// fleet in the middle of an engine upgrade: the batch as a positional array
// `[ts, events, data_parallel_rank?]` or as a map with those keys; each event
// as a tagged array (`["BlockStored", block_hashes, parent_block_hash,
// token_ids, block_size, lora_id, medium, ...]`, before vLLM PR #42892) or as
// a tagged map (`{"type": "BlockStored", "block_hashes": ..., ...}`, after
// it). Unknown map keys and trailing array fields are ignored; an unknown
// event tag is an error for the whole batch (a newer engine's event kvroute
// cannot account for).
//
// kvroute does not tokenize, so token ids are counted, not kept. Pure
// functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvroute::kvevents {

enum class EventKind { kBlockStored, kBlockRemoved, kAllBlocksCleared };

// "BlockStored", "BlockRemoved", "AllBlocksCleared".
const char* EventKindName(EventKind kind);

struct KvCacheEvent {
  EventKind kind = EventKind::kAllBlocksCleared;
  // BlockStored, BlockRemoved: the engine's block hashes (the low 64 bits
  // when the engine sends bytes).
  std::vector<uint64_t> block_hashes;
  // BlockStored only.
  std::optional<uint64_t> parent_block_hash;
  int64_t num_token_ids = 0;
  int64_t block_size = 0;  // 0: absent
  // "GPU", "CPU", ...; empty when nil or absent (vLLM's GPU block pool).
  std::string medium;
  // KV cache group of a hybrid model; nullopt when nil or absent.
  std::optional<int64_t> group_idx;
};

struct EventBatch {
  double ts = 0;  // engine wall clock, seconds since the epoch
  std::vector<KvCacheEvent> events;
  std::optional<int64_t> data_parallel_rank;
};

// Bounds on one payload; beyond them the batch is rejected.
struct DecodeLimits {
  size_t max_events = 65536;
  size_t max_block_hashes = 1 << 20;  // per event
  size_t max_token_ids = 1 << 24;     // per event
};

// InvalidArgument saying what is wrong (malformed msgpack, wrong shape,
// unknown tag, a bound exceeded).
absl::StatusOr<EventBatch> DecodeEventBatch(std::string_view payload,
                                            const DecodeLimits& limits = {});

}  // namespace kvroute::kvevents
