#include "router/prefix_hash.h"

#include <xxhash.h>
// On x86-64, Debian's libxxhash exports runtime-dispatched (SSE2/AVX2/
// AVX-512) variants with identical output; the header maps the plain names
// onto them.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

namespace kvroute::router {

std::vector<uint64_t> HashPromptChunks(std::string_view prompt_bytes, size_t chunk_bytes) {
  std::vector<uint64_t> chain;
  if (chunk_bytes == 0) return chain;
  const size_t full = prompt_bytes.size() / chunk_bytes;
  chain.reserve(full);
  uint64_t parent = kPrefixHashRootSeed;
  for (size_t i = 0; i < full; ++i) {
    parent = XXH3_64bits_withSeed(prompt_bytes.data() + i * chunk_bytes, chunk_bytes, parent);
    chain.push_back(parent);
  }
  return chain;
}

}  // namespace kvroute::router
