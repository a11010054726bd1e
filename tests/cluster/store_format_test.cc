// How RedisStore writes its values: pins and pin ids, binary, round trip and
// refusal of a value cut short.
#include "cluster/store_format.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvroute::cluster {
namespace {

TEST(StoreFormatTest, PinsRoundTripWithAnyHashAndName) {
  const std::vector<RequestPin> pins = {
      {.instance = "gpu0", .id = 1, .footprint_chunks = 900, .chain = {0, ~uint64_t{0}, 42}},
      {.instance = "", .id = ~uint64_t{0}, .footprint_chunks = 0, .chain = {}},
      {.instance = std::string("a\0b", 3), .id = 7, .footprint_chunks = 3, .chain = {1ull << 63}}};
  std::vector<RequestPin> back;
  ASSERT_TRUE(ParsePins(FormatPins(pins), &back));
  EXPECT_EQ(back, pins);

  std::vector<uint64_t> ids;
  ASSERT_TRUE(ParsePinIds(FormatPinIds({3, 0, ~uint64_t{0}}), &ids));
  EXPECT_EQ(ids, (std::vector<uint64_t>{3, 0, ~uint64_t{0}}));
}

TEST(StoreFormatTest, AValueCutShortIsRefusedAfterTheWholePinsBeforeIt) {
  const std::vector<RequestPin> pins = {
      {.instance = "gpu0", .id = 1, .footprint_chunks = 9, .chain = {4, 5}},
      {.instance = "gpu1", .id = 2, .footprint_chunks = 9, .chain = {6, 7, 8}}};
  const std::string bytes = FormatPins(pins);
  for (size_t cut = 1; cut < bytes.size() / 2; ++cut) {
    std::vector<RequestPin> back;
    EXPECT_FALSE(ParsePins(absl::string_view(bytes).substr(0, bytes.size() - cut), &back)) << cut;
    ASSERT_EQ(back.size(), 1u) << cut;
    EXPECT_EQ(back[0], pins[0]);
  }
  // A chain count larger than what follows.
  std::string lying = FormatPins({{.instance = "g", .id = 1, .footprint_chunks = 1, .chain = {1}}});
  lying[8 + 8 + 4 + 1] = '\x7f';
  std::vector<RequestPin> back;
  EXPECT_FALSE(ParsePins(lying, &back));
  EXPECT_TRUE(back.empty());

  std::vector<uint64_t> ids;
  EXPECT_FALSE(ParsePinIds(std::string(12, '\0'), &ids));
}

}  // namespace
}  // namespace kvroute::cluster
