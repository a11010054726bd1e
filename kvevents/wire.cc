#include "kvevents/wire.h"

#include <algorithm>
#include <msgpack.hpp>


namespace kvroute::kvevents {
namespace {

using msgpack::object;
namespace type = msgpack::type;

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError("kv event batch: " + std::string(what));
}

std::string_view AsString(const object& o) {
  return o.type == type::STR ? std::string_view(o.via.str.ptr, o.via.str.size)
                             : std::string_view();
}

bool IsNil(const object& o) { return o.type == type::NIL; }

std::optional<int64_t> AsInt(const object& o) {
  if (o.type == type::POSITIVE_INTEGER && o.via.u64 <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == type::NEGATIVE_INTEGER) return o.via.i64;
  return std::nullopt;
}

// A block hash: an unsigned (or, from older engines, signed) integer, or
// bytes of which the low 64 bits (the last eight, big-endian) are kept.
std::optional<uint64_t> AsBlockHash(const object& o) {
  switch (o.type) {
    case type::POSITIVE_INTEGER:
      return o.via.u64;
    case type::NEGATIVE_INTEGER:
      return static_cast<uint64_t>(o.via.i64);
    case type::BIN: {
      uint64_t h = 0;
      const uint32_t n = o.via.bin.size;
      for (uint32_t i = n > 8 ? n - 8 : 0; i < n; ++i) {
        h = (h << 8) | static_cast<uint8_t>(o.via.bin.ptr[i]);
      }
      return h;
    }
    default:
      return std::nullopt;
  }
}

absl::Status ReadHashes(const object& o, const DecodeLimits& limits, KvCacheEvent& e) {
  if (o.type != type::ARRAY) return Bad("block_hashes is not an array");
  if (o.via.array.size > limits.max_block_hashes) return Bad("too many block_hashes");
  e.block_hashes.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    std::optional<uint64_t> h = AsBlockHash(o.via.array.ptr[i]);
    if (!h) return Bad("a block hash is neither an integer nor bytes");
    e.block_hashes.push_back(*h);
  }
  return absl::OkStatus();
}

absl::Status ReadOptionalHash(const object& o, std::optional<uint64_t>& out) {
  if (IsNil(o)) return absl::OkStatus();
  out = AsBlockHash(o);
  if (!out) return Bad("parent_block_hash is neither nil, an integer nor bytes");
  return absl::OkStatus();
}

absl::Status ReadTokenIds(const object& o, const DecodeLimits& limits, KvCacheEvent& e) {
  if (o.type != type::ARRAY) return Bad("token_ids is not an array");
  if (o.via.array.size > limits.max_token_ids) return Bad("too many token_ids");
  e.num_token_ids = o.via.array.size;
  return absl::OkStatus();
}

absl::Status ReadBlockSize(const object& o, KvCacheEvent& e) {
  std::optional<int64_t> v = AsInt(o);
  if (!v || *v <= 0) return Bad("block_size is not a positive integer");
  e.block_size = *v;
  return absl::OkStatus();
}

absl::Status ReadMedium(const object& o, KvCacheEvent& e) {
  if (IsNil(o)) return absl::OkStatus();
  if (o.type != type::STR) return Bad("medium is neither nil nor a string");
  e.medium = std::string(AsString(o));
  return absl::OkStatus();
}

absl::Status ReadGroup(const object& o, KvCacheEvent& e) {
  if (IsNil(o)) return absl::OkStatus();
  e.group_idx = AsInt(o);
  if (!e.group_idx) return Bad("group_idx is neither nil nor an integer");
  return absl::OkStatus();
}

absl::StatusOr<EventKind> KindOf(std::string_view tag) {
  if (tag == "BlockStored") return EventKind::kBlockStored;
  if (tag == "BlockRemoved") return EventKind::kBlockRemoved;
  if (tag == "AllBlocksCleared") return EventKind::kAllBlocksCleared;
  return Bad("unknown event tag '" + std::string(tag.substr(0, 64)) + "'");
}

// ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//  lora_id, medium, lora_name, ...], ["BlockRemoved", block_hashes, medium,
//  group_idx?], ["AllBlocksCleared"]: fields after the last one kvroute reads
// are ignored, and so are trailing ones a newer engine appends.
absl::StatusOr<KvCacheEvent> DecodeTaggedArray(const object& o, const DecodeLimits& limits) {
  const uint32_t n = o.via.array.size;
  const object* f = o.via.array.ptr;
  if (n == 0 || f[0].type != type::STR) return Bad("an event array does not start with its tag");
  absl::StatusOr<EventKind> kind = KindOf(AsString(f[0]));
  if (!kind.ok()) return kind.status();
  KvCacheEvent e;
  e.kind = *kind;
  switch (e.kind) {
    case EventKind::kBlockStored: {
      if (n < 5) return Bad("BlockStored array has fewer than 5 fields");
      if (absl::Status st = ReadHashes(f[1], limits, e); !st.ok()) return st;
      if (absl::Status st = ReadOptionalHash(f[2], e.parent_block_hash); !st.ok()) return st;
      if (absl::Status st = ReadTokenIds(f[3], limits, e); !st.ok()) return st;
      if (absl::Status st = ReadBlockSize(f[4], e); !st.ok()) return st;
      if (n > 6) {
        if (absl::Status st = ReadMedium(f[6], e); !st.ok()) return st;
      }
      break;
    }
    case EventKind::kBlockRemoved: {
      if (n < 2) return Bad("BlockRemoved array has no block_hashes");
      if (absl::Status st = ReadHashes(f[1], limits, e); !st.ok()) return st;
      if (n > 2) {
        if (absl::Status st = ReadMedium(f[2], e); !st.ok()) return st;
      }
      if (n > 3) {
        if (absl::Status st = ReadGroup(f[3], e); !st.ok()) return st;
      }
      break;
    }
    case EventKind::kAllBlocksCleared:
      break;
  }
  return e;
}

// {"type": tag, "block_hashes": ..., ...}: fields by name, in any order;
// omitted fields keep their defaults (msgspec's omit_defaults).
absl::StatusOr<KvCacheEvent> DecodeTaggedMap(const object& o, const DecodeLimits& limits) {
  const object* tag = nullptr;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    if (AsString(o.via.map.ptr[i].key) == "type") tag = &o.via.map.ptr[i].val;
  }
  if (tag == nullptr || tag->type != type::STR) return Bad("an event map has no string 'type'");
  absl::StatusOr<EventKind> kind = KindOf(AsString(*tag));
  if (!kind.ok()) return kind.status();
  KvCacheEvent e;
  e.kind = *kind;
  if (e.kind == EventKind::kAllBlocksCleared) return e;
  bool has_hashes = false;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const std::string_view key = AsString(o.via.map.ptr[i].key);
    const object& val = o.via.map.ptr[i].val;
    absl::Status st;
    if (key == "block_hashes") {
      st = ReadHashes(val, limits, e);
      has_hashes = true;
    } else if (key == "medium") {
      st = ReadMedium(val, e);
    } else if (key == "group_idx") {
      st = ReadGroup(val, e);
    } else if (e.kind == EventKind::kBlockStored && key == "parent_block_hash") {
      st = ReadOptionalHash(val, e.parent_block_hash);
    } else if (e.kind == EventKind::kBlockStored && key == "token_ids") {
      st = ReadTokenIds(val, limits, e);
    } else if (e.kind == EventKind::kBlockStored && key == "block_size") {
      st = ReadBlockSize(val, e);
    }
    if (!st.ok()) return st;
  }
  if (!has_hashes) return Bad(std::string(EventKindName(e.kind)) + " map has no block_hashes");
  if (e.kind == EventKind::kBlockStored && e.block_size == 0) {
    return Bad("BlockStored map has no block_size");
  }
  return e;
}

absl::StatusOr<KvCacheEvent> DecodeEvent(const object& o, const DecodeLimits& limits) {
  if (o.type == type::ARRAY) return DecodeTaggedArray(o, limits);
  if (o.type == type::MAP) return DecodeTaggedMap(o, limits);
  return Bad("an event is neither an array nor a map");
}

absl::StatusOr<EventBatch> DecodeBatch(const object& root, const DecodeLimits& limits) {
  const object* ts = nullptr;
  const object* events = nullptr;
  const object* rank = nullptr;
  if (root.type == type::ARRAY) {
    const uint32_t n = root.via.array.size;
    if (n < 2) return Bad("the batch array has fewer than 2 fields");
    ts = &root.via.array.ptr[0];
    events = &root.via.array.ptr[1];
    if (n > 2) rank = &root.via.array.ptr[2];
  } else if (root.type == type::MAP) {
    for (uint32_t i = 0; i < root.via.map.size; ++i) {
      const std::string_view key = AsString(root.via.map.ptr[i].key);
      if (key == "ts") ts = &root.via.map.ptr[i].val;
      if (key == "events") events = &root.via.map.ptr[i].val;
      if (key == "data_parallel_rank") rank = &root.via.map.ptr[i].val;
    }
    if (ts == nullptr || events == nullptr) return Bad("the batch map lacks 'ts' or 'events'");
  } else {
    return Bad("the batch is neither an array nor a map");
  }
  EventBatch batch;
  switch (ts->type) {
    case type::FLOAT32:
    case type::FLOAT64:
      batch.ts = ts->via.f64;
      break;
    case type::POSITIVE_INTEGER:
      batch.ts = static_cast<double>(ts->via.u64);
      break;
    default:
      return Bad("ts is not a number");
  }
  if (events->type != type::ARRAY) return Bad("events is not an array");
  if (events->via.array.size > limits.max_events) return Bad("too many events");
  if (rank != nullptr && !IsNil(*rank)) {
    batch.data_parallel_rank = AsInt(*rank);
    if (!batch.data_parallel_rank) return Bad("data_parallel_rank is not an integer");
  }
  batch.events.reserve(events->via.array.size);
  for (uint32_t i = 0; i < events->via.array.size; ++i) {
    absl::StatusOr<KvCacheEvent> e = DecodeEvent(events->via.array.ptr[i], limits);
    if (!e.ok()) return e.status();
    batch.events.push_back(*std::move(e));
  }
  return batch;
}

}  // namespace

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kBlockStored:
      return "BlockStored";
    case EventKind::kBlockRemoved:
      return "BlockRemoved";
    case EventKind::kAllBlocksCleared:
      return "AllBlocksCleared";
  }
  return "?";
}

absl::StatusOr<EventBatch> DecodeEventBatch(std::string_view payload, const DecodeLimits& limits) {
  // msgpack-c reports malformed input by throwing; the exceptions stop here.
  const size_t max_array =
      std::max({limits.max_events, limits.max_block_hashes, limits.max_token_ids});
  const msgpack::unpack_limit bounds(
      /*array=*/max_array, /*map=*/256, /*str=*/payload.size(), /*bin=*/payload.size(),
      /*ext=*/payload.size(), /*depth=*/8);
  try {
    size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(payload.data(), payload.size(), offset, nullptr, nullptr, bounds);
    if (offset != payload.size()) return Bad("trailing bytes after the batch");
    return DecodeBatch(handle.get(), limits);
  } catch (const std::exception& e) {
    return Bad(std::string("malformed msgpack (") + e.what() + ")");
  }
}

}  // namespace kvroute::kvevents
