#include "wire/sse.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvroute::wire {
namespace {

TEST(SseTest, FramesOneDataEvent) {
  EXPECT_EQ(SseData(R"({"a":1})"), "data: {\"a\":1}\n\n");
  std::string out = "x";
  AppendSseData(&out, "p");
  out += kSseDone;
  EXPECT_EQ(out, "xdata: p\n\ndata: [DONE]\n\n");
}

std::vector<std::string> ReadAll(const std::vector<std::string>& pieces) {
  SseDataReader reader;
  std::vector<std::string> got;
  for (const std::string& p : pieces) {
    reader.Feed(p, [&](std::string_view payload) { got.emplace_back(payload); });
  }
  return got;
}

TEST(SseTest, ReaderSplitsEventsFedInAnyPieces) {
  const std::string stream = SseData("one") + ": comment\n\nevent: x\n" + SseData("two") +
                             "data:three\r\n\r\n" + std::string(kSseDone);
  const std::vector<std::string> want = {"one", "two", "three", "[DONE]"};
  EXPECT_EQ(ReadAll({stream}), want);
  // Byte by byte, and in every two-piece split.
  std::vector<std::string> bytes;
  for (char c : stream) bytes.emplace_back(1, c);
  EXPECT_EQ(ReadAll(bytes), want);
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    EXPECT_EQ(ReadAll({stream.substr(0, cut), stream.substr(cut)}), want) << cut;
  }
}

TEST(SseTest, ReaderHoldsOnlyTheUnfinishedLine) {
  SseDataReader reader;
  int events = 0;
  reader.Feed("data: a\n\ndata: par", [&](std::string_view) { ++events; });
  EXPECT_EQ(events, 1);
  EXPECT_EQ(reader.pending_bytes(), 9u);
  reader.Feed("tial\n", [&](std::string_view p) {
    ++events;
    EXPECT_EQ(p, "partial");
  });
  EXPECT_EQ(events, 2);
  EXPECT_EQ(reader.pending_bytes(), 0u);
}

}  // namespace
}  // namespace kvroute::wire
