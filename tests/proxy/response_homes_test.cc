#include "proxy/response_homes.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace kvroute::proxy {
namespace {

TEST(ResponseHomesTest, LearnsAndFinds) {
  ResponseHomes homes(4);
  EXPECT_FALSE(homes.Find("resp_a").has_value());
  homes.Learn("resp_a", "gpu0");
  homes.Learn("resp_b", "gpu1");
  EXPECT_EQ(homes.Find("resp_a"), "gpu0");
  EXPECT_EQ(homes.Find("resp_b"), "gpu1");
  EXPECT_FALSE(homes.Find("resp_c").has_value());
  homes.Learn("", "gpu0");  // a response without an id teaches nothing
  EXPECT_EQ(homes.size(), 2u);
}

TEST(ResponseHomesTest, ForgetsTheOldestPastCapacity) {
  ResponseHomes homes(3);
  for (int i = 0; i < 5; ++i) homes.Learn("resp_" + std::to_string(i), "gpu" + std::to_string(i));
  EXPECT_EQ(homes.size(), 3u);
  EXPECT_FALSE(homes.Find("resp_0").has_value());
  EXPECT_FALSE(homes.Find("resp_1").has_value());
  EXPECT_EQ(homes.Find("resp_4"), "gpu4");
  // Learning an id again moves nothing and adds nothing.
  homes.Learn("resp_2", "gpu9");
  EXPECT_EQ(homes.size(), 3u);
  EXPECT_EQ(homes.Find("resp_2"), "gpu9");
  homes.Learn("resp_5", "gpu5");
  EXPECT_FALSE(homes.Find("resp_2").has_value());
}

TEST(ResponseHomesTest, ZeroCapacityLearnsNothing) {
  ResponseHomes homes(0);
  homes.Learn("resp_a", "gpu0");
  EXPECT_FALSE(homes.Find("resp_a").has_value());
}

TEST(ResponseHomesTest, ConcurrentLearnAndFind) {
  ResponseHomes homes(1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&homes, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string id = "resp_" + std::to_string(t) + "_" + std::to_string(i);
        homes.Learn(id, "gpu" + std::to_string(t));
        const std::optional<std::string> home = homes.Find(id);
        // Another thread may have pushed it out already; if found, it is ours.
        if (home) {
          EXPECT_EQ(*home, "gpu" + std::to_string(t));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(homes.size(), 1000u);
}

}  // namespace
}  // namespace kvroute::proxy
