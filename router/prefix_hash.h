// Chained chunk hashes of a prompt, the key of the prefix-cache shadow index.
//
//   std::vector<uint64_t> chain = HashPromptChunks(prompt_bytes, 256);
//
// The prompt is cut into fixed-size byte chunks; chunk i's hash is
// XXH3_64bits_withSeed(chunk_i, seed = hash of chunk i-1) (the first chunk is
// seeded with kPrefixHashRootSeed), so equal hashes mean equal prefixes, like
// vLLM's block hashes. Only FULL chunks are hashed: a trailing partial chunk
// is not, as vLLM caches full blocks only. Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvroute::router {

inline constexpr uint64_t kPrefixHashRootSeed = 0x6b76726f75746521ULL;  // "kvroute!"

std::vector<uint64_t> HashPromptChunks(std::string_view prompt_bytes, size_t chunk_bytes);

}  // namespace kvroute::router
