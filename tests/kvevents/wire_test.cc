#include "kvevents/wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "tests/kvevents/msgpack_bytes.h"

namespace kvroute::kvevents {
namespace {

using testing::MsgpackBytes;

// A BlockStored as current vLLM (after PR #42892) writes it, keys in its
// declaration order; the values of the capture in docs/kv-events.md.
void CurrentBlockStored(MsgpackBytes& m, uint64_t h1, uint64_t h2) {
  m.Map(11)
      .Str("type").Str("BlockStored")
      .Str("block_hashes").Array(2).UInt(h1).UInt(h2)
      .Str("parent_block_hash").Nil()
      .Str("token_ids").Array(4).UInt(1).UInt(2).UInt(3).UInt(151644)
      .Str("block_size").UInt(2)
      .Str("lora_id").Nil()
      .Str("medium").Str("GPU")
      .Str("lora_name").Nil()
      .Str("extra_keys").Array(2).Nil().Nil()
      .Str("group_idx").UInt(0)
      .Str("kv_cache_spec_kind").Str("full_attention");
}

TEST(KvEventWire, CurrentVllmBatchOfTaggedMaps) {
  MsgpackBytes m;
  m.Array(3).Float64(1789095808.8378847).Array(3);
  CurrentBlockStored(m, 15760518052499183552u, 7);
  m.Map(4)
      .Str("type").Str("BlockRemoved")
      .Str("block_hashes").Array(1).UInt(7)
      .Str("medium").Str("GPU")
      .Str("group_idx").UInt(0);
  m.Map(1).Str("type").Str("AllBlocksCleared");
  m.UInt(0);  // data_parallel_rank

  absl::StatusOr<EventBatch> b = DecodeEventBatch(m.bytes());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->ts, 1789095808.8378847);
  ASSERT_EQ(b->data_parallel_rank, 0);
  ASSERT_EQ(b->events.size(), 3u);
  const KvCacheEvent& s = b->events[0];
  EXPECT_EQ(s.kind, EventKind::kBlockStored);
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{15760518052499183552u, 7}));
  EXPECT_FALSE(s.parent_block_hash.has_value());
  EXPECT_EQ(s.num_token_ids, 4);
  EXPECT_EQ(s.block_size, 2);
  EXPECT_EQ(s.medium, "GPU");
  EXPECT_EQ(s.group_idx, 0);
  EXPECT_EQ(b->events[1].kind, EventKind::kBlockRemoved);
  EXPECT_EQ(b->events[1].block_hashes, (std::vector<uint64_t>{7}));
  EXPECT_EQ(b->events[1].medium, "GPU");
  EXPECT_EQ(b->events[2].kind, EventKind::kAllBlocksCleared);
}

TEST(KvEventWire, MapKeysInAnyOrderAndUnknownKeysIgnored) {
  MsgpackBytes m;
  m.Array(2).Float64(1).Array(1)
      .Map(5)
      .Str("block_size").UInt(16)
      .Str("cache_salt").Str("tenant-a")  // a key kvroute does not know
      .Str("token_ids").Array(0)
      .Str("block_hashes").Array(1).UInt(3)
      .Str("type").Str("BlockStored");
  absl::StatusOr<EventBatch> b = DecodeEventBatch(m.bytes());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->data_parallel_rank.has_value());
  ASSERT_EQ(b->events.size(), 1u);
  EXPECT_EQ(b->events[0].block_size, 16);
  EXPECT_EQ(b->events[0].medium, "");  // omitted: vLLM's GPU pool
}

// The exact bytes of a batch from vLLM before PR #42892 (msgspec
// array_like=True): [2.0, [["BlockStored", [1, 2], 99, [5, 6, 7, 8], 2,
// nil, "GPU"], ["BlockRemoved", [2], "GPU"], ["AllBlocksCleared"]]].
TEST(KvEventWire, LegacyTaggedArrays) {
  const std::string bytes(
      "\x92\xcb\x40\x00\x00\x00\x00\x00\x00\x00\x93"
      "\x97\xab" "BlockStored" "\x92\x01\x02\x63\x94\x05\x06\x07\x08\x02\xc0\xa3" "GPU"
      "\x93\xac" "BlockRemoved" "\x91\x02\xa3" "GPU"
      "\x91\xb0" "AllBlocksCleared",
      77);
  absl::StatusOr<EventBatch> b = DecodeEventBatch(bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->ts, 2.0);
  ASSERT_EQ(b->events.size(), 3u);
  EXPECT_EQ(b->events[0].kind, EventKind::kBlockStored);
  EXPECT_EQ(b->events[0].block_hashes, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(b->events[0].parent_block_hash, 99u);
  EXPECT_EQ(b->events[0].num_token_ids, 4);
  EXPECT_EQ(b->events[0].block_size, 2);
  EXPECT_EQ(b->events[0].medium, "GPU");
  EXPECT_EQ(b->events[1].kind, EventKind::kBlockRemoved);
  EXPECT_EQ(b->events[1].block_hashes, (std::vector<uint64_t>{2}));
  EXPECT_EQ(b->events[2].kind, EventKind::kAllBlocksCleared);
}

TEST(KvEventWire, OldestArrayShapeWithoutMedium) {
  // vLLM before PR #19737: BlockStored has five fields, BlockRemoved one.
  MsgpackBytes m;
  m.Array(2).Float64(0.5).Array(2)
      .Array(6).Str("BlockStored").Array(1).UInt(5).Nil().Array(2).UInt(1).UInt(2).UInt(2).Nil()
      .Array(2).Str("BlockRemoved").Array(1).UInt(5);
  absl::StatusOr<EventBatch> b = DecodeEventBatch(m.bytes());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->events[0].medium, "");
  EXPECT_EQ(b->events[1].block_hashes, (std::vector<uint64_t>{5}));
}

TEST(KvEventWire, MapShapedBatchAndBytesHashes) {
  // A 32-byte hash (sha256 without the integer conversion): its low 64 bits.
  std::string hash(24, '\0');
  hash += std::string("\x00\x00\x00\x00\x00\x00\x01\x02", 8);
  MsgpackBytes m;
  m.Map(3)
      .Str("ts").Float64(3)
      .Str("events").Array(1)
      .Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Array(1).Bin(hash)
      .Str("medium").Nil()
      .Str("data_parallel_rank").UInt(1);
  absl::StatusOr<EventBatch> b = DecodeEventBatch(m.bytes());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data_parallel_rank, 1);
  EXPECT_EQ(b->events[0].block_hashes, (std::vector<uint64_t>{0x0102}));
}

TEST(KvEventWire, MediumAndGroupAreReported) {
  MsgpackBytes m;
  m.Array(2).Float64(1).Array(1)
      .Map(4).Str("type").Str("BlockRemoved").Str("block_hashes").Array(0)
      .Str("medium").Str("CPU").Str("group_idx").UInt(1);
  absl::StatusOr<EventBatch> b = DecodeEventBatch(m.bytes());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->events[0].medium, "CPU");
  EXPECT_EQ(b->events[0].group_idx, 1);
}

absl::Status DecodeError(const std::string& bytes, const DecodeLimits& limits = {}) {
  return DecodeEventBatch(bytes, limits).status();
}

TEST(KvEventWire, RejectsWhatItCannotAccountFor) {
  auto batch_of = [](const std::function<void(MsgpackBytes&)>& event) {
    MsgpackBytes m;
    m.Array(2).Float64(1).Array(1);
    event(m);
    return m.bytes();
  };
  EXPECT_THAT(DecodeError(batch_of([](MsgpackBytes& m) {
                m.Map(1).Str("type").Str("BlockEvicted");
              })).message(),
              ::testing::HasSubstr("unknown event tag 'BlockEvicted'"));
  EXPECT_THAT(DecodeError(batch_of([](MsgpackBytes& m) {
                m.Map(2).Str("type").Str("BlockStored").Str("block_hashes").Array(0);
              })).message(),
              ::testing::HasSubstr("no block_size"));
  EXPECT_THAT(DecodeError(batch_of([](MsgpackBytes& m) {
                m.Map(1).Str("type").Str("BlockRemoved");
              })).message(),
              ::testing::HasSubstr("no block_hashes"));
  EXPECT_THAT(DecodeError(batch_of([](MsgpackBytes& m) {
                m.Array(2).Str("BlockRemoved").Array(1).Str("x");
              })).message(),
              ::testing::HasSubstr("neither an integer nor bytes"));
  EXPECT_THAT(DecodeError(batch_of([](MsgpackBytes& m) { m.UInt(3); })).message(),
              ::testing::HasSubstr("neither an array nor a map"));
}

TEST(KvEventWire, RejectsMalformedAndOversizedPayloads) {
  EXPECT_FALSE(DecodeEventBatch("").ok());
  EXPECT_FALSE(DecodeEventBatch(std::string("\x93\xcb\x3f", 3)).ok());  // truncated
  EXPECT_THAT(DecodeError(std::string("\x92\x01\x90\x01", 4)).message(),
              ::testing::HasSubstr("trailing bytes"));
  EXPECT_THAT(DecodeError(std::string("\x92\xa1x\x90", 4)).message(),
              ::testing::HasSubstr("ts is not a number"));
  // An array header claiming 2^32-1 elements in a few bytes.
  EXPECT_FALSE(DecodeEventBatch(std::string("\x92\x01\xdd\xff\xff\xff\xff", 7)).ok());

  MsgpackBytes m;
  m.Array(2).Float64(1).Array(3);
  for (int i = 0; i < 3; ++i) m.Map(1).Str("type").Str("AllBlocksCleared");
  DecodeLimits two_events;
  two_events.max_events = 2;
  EXPECT_THAT(DecodeError(m.bytes(), two_events).message(), ::testing::HasSubstr("too many"));
  EXPECT_TRUE(DecodeEventBatch(m.bytes()).ok());
}

}  // namespace
}  // namespace kvroute::kvevents
