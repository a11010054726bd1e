#include "router/prefix_hash.h"

#include <xxhash.h>

#include <string>

#include "gtest/gtest.h"

namespace kvroute::router {
namespace {

TEST(HashPromptChunksTest, OnlyFullChunksAreHashed) {
  EXPECT_TRUE(HashPromptChunks("", 4).empty());
  EXPECT_TRUE(HashPromptChunks("abc", 4).empty());
  EXPECT_EQ(HashPromptChunks("abcd", 4).size(), 1u);
  EXPECT_EQ(HashPromptChunks("abcdefghi", 4).size(), 2u);
  EXPECT_TRUE(HashPromptChunks("abcd", 0).empty());
}

TEST(HashPromptChunksTest, ChainedOverParent) {
  const std::vector<uint64_t> chain = HashPromptChunks("abcdefgh", 4);
  ASSERT_EQ(chain.size(), 2u);
  const uint64_t first = XXH3_64bits_withSeed("abcd", 4, kPrefixHashRootSeed);
  EXPECT_EQ(chain[0], first);
  EXPECT_EQ(chain[1], XXH3_64bits_withSeed("efgh", 4, first));
}

TEST(HashPromptChunksTest, EqualHashesMeanEqualPrefixes) {
  // Same second chunk after a different first chunk: different hash.
  const auto a = HashPromptChunks("aaaaXXXX", 4);
  const auto b = HashPromptChunks("bbbbXXXX", 4);
  EXPECT_NE(a[1], b[1]);
  // A shared prefix gives shared leading hashes; the tail does not matter.
  const auto c = HashPromptChunks("aaaaXXXXtail-one", 4);
  const auto d = HashPromptChunks("aaaaXXXXother", 4);
  EXPECT_EQ(c[0], d[0]);
  EXPECT_EQ(c[1], d[1]);
  EXPECT_NE(c[2], d[2]);
}

}  // namespace
}  // namespace kvroute::router
