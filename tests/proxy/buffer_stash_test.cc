#include "proxy/buffer_stash.h"

#include <gtest/gtest.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <string>

namespace kvroute::proxy {
namespace {

namespace beast = boost::beast;

TEST(BufferStashTest, ReusesAGivenBufferEmptyWithItsCapacity) {
  BufferStash<beast::flat_buffer> stash(4, 1 << 16, 1 << 20);
  beast::flat_buffer b = stash.Take();
  EXPECT_EQ(b.capacity(), 0u);
  b.reserve(4096);
  b.commit(boost::asio::buffer_copy(b.prepare(5), boost::asio::buffer("hello", 5)));
  const void* memory = b.data().data();
  stash.Give(std::move(b));
  EXPECT_EQ(b.capacity(), 0u);  // the caller's buffer holds nothing now
  EXPECT_EQ(stash.size(), 1u);
  beast::flat_buffer again = stash.Take();
  EXPECT_EQ(stash.size(), 0u);
  EXPECT_EQ(again.size(), 0u);
  EXPECT_GE(again.capacity(), 4096u);
  EXPECT_EQ(again.data().data(), memory);
}

TEST(BufferStashTest, FreesWhatIsOverEitherBound) {
  BufferStash<std::string> stash(2, 1000, 1 << 20);
  std::string big(2000, 'x');
  stash.Give(std::move(big));
  EXPECT_EQ(stash.size(), 0u);
  EXPECT_TRUE(big.empty());  // freed, not left with the caller
  for (int i = 0; i < 3; ++i) {
    std::string s;
    s.reserve(500);
    s = "abc";
    stash.Give(std::move(s));
  }
  EXPECT_EQ(stash.size(), 2u);  // the third was freed
  std::string s = stash.Take();
  EXPECT_TRUE(s.empty());
  EXPECT_GE(s.capacity(), 500u);
  // A string in its inline storage and an empty flat buffer hold nothing
  // worth keeping.
  ASSERT_EQ(stash.size(), 1u);
  stash.Give(std::string("short"));
  EXPECT_EQ(stash.size(), 1u);
  BufferStash<beast::flat_buffer> buffers(2, 1000, 1 << 20);
  buffers.Give(beast::flat_buffer());
  EXPECT_EQ(buffers.size(), 0u);
}

TEST(BufferStashTest, KeepsAtMostMaxBytesInAll) {
  BufferStash<std::string> stash(10, 1000, 1500);
  auto sized = [](size_t n) {
    std::string s;
    s.reserve(n);
    return s;
  };
  stash.Give(sized(600));
  stash.Give(sized(600));
  EXPECT_EQ(stash.size(), 2u);
  const size_t held = stash.bytes();
  EXPECT_GE(held, 1200u);
  stash.Give(sized(600));  // over 1500 bytes together: freed
  EXPECT_EQ(stash.size(), 2u);
  EXPECT_EQ(stash.bytes(), held);
  std::string s = stash.Take();
  EXPECT_EQ(stash.bytes(), held - s.capacity());
  stash.Give(std::move(s));
  EXPECT_EQ(stash.bytes(), held);
}

TEST(BufferStashTest, LeaseGivesTheBufferBackOnEveryExit) {
  BufferStash<beast::flat_buffer> stash(4, 1 << 16, 1 << 20);
  auto use = [&](bool early) {
    BufferStash<beast::flat_buffer>::Lease lease(stash);
    lease->reserve(1024);
    if (early) return 1;
    lease->prepare(10);
    return 2;
  };
  EXPECT_EQ(use(true), 1);
  EXPECT_EQ(stash.size(), 1u);
  EXPECT_EQ(use(false), 2);
  EXPECT_EQ(stash.size(), 1u);  // the same buffer, taken and given back
}

}  // namespace
}  // namespace kvroute::proxy
