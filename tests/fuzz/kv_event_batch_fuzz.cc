// Fuzz target: the KV event batch decoder (kvevents/wire.h), which reads the
// msgpack payload every engine's PUB socket sends kvroute.
//
// Input: the payload, as is.
//
// Checks, beyond "no crash, no sanitizer report": an accepted batch
// respects the limits it was decoded with, and every BlockStored it holds
// has a positive block size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kvevents/wire.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("kv_event_batch_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvroute::kvevents::DecodeEventBatch;
  using kvroute::kvevents::DecodeLimits;
  using kvroute::kvevents::EventKind;
  // Tight limits so the bound checks are reached by small inputs.
  DecodeLimits limits;
  limits.max_events = 8;
  limits.max_block_hashes = 16;
  limits.max_token_ids = 64;
  const auto batch =
      DecodeEventBatch(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!batch.ok()) return 0;
  Check(batch->events.size() <= limits.max_events, "events within max_events");
  for (const auto& e : batch->events) {
    Check(e.block_hashes.size() <= limits.max_block_hashes, "hashes within max_block_hashes");
    Check(e.num_token_ids >= 0 && static_cast<size_t>(e.num_token_ids) <= limits.max_token_ids,
          "token ids within max_token_ids");
    if (e.kind == EventKind::kBlockStored) Check(e.block_size > 0, "BlockStored block_size > 0");
    if (e.kind == EventKind::kAllBlocksCleared) Check(e.block_hashes.empty(), "clear has no hashes");
  }
  return 0;
}
