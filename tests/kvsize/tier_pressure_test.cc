// kvsize::ComputeTierPressure against hand-computed cases: the spill, each tier's retention
// clock, and the two remedies. The "Promtool*" cases feed the same figures as the promtool
// tests of deploy/prometheus/kvroute-alerts.yml, whose recording rules must give these numbers.
#include "kvsize/tier_pressure.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kvsize {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(RetentionSecondsTest, CapacityOverWriteRate) {
  EXPECT_DOUBLE_EQ(RetentionSeconds(1e6, 1e4), 100);
  EXPECT_EQ(RetentionSeconds(0, 1e4), 0);  // no tier keeps nothing
  EXPECT_EQ(RetentionSeconds(1e6, 0), std::numeric_limits<double>::infinity());
}

TEST(TierPressureTest, FitsAndRetainsLongEnough) {
  const TierPressure p = ComputeTierPressure({.instances = 4,
                                              .working_set_tokens = 3e6,
                                              .gpu_capacity_tokens = 4e6,
                                              .gpu_write_rate_tokens_per_s = 1e4,
                                              .host_write_rate_tokens_per_s = 1e4,
                                              .reuse_gap_s = 60});
  EXPECT_DOUBLE_EQ(p.gpu_retention_s, 400);
  EXPECT_EQ(p.host_retention_s, 0);
  EXPECT_DOUBLE_EQ(p.retention_s, 400);
  EXPECT_TRUE(p.retention_ok);
  EXPECT_EQ(p.spill_tokens, 0);
  EXPECT_FALSE(p.thrash_ahead);
  EXPECT_EQ(p.add_instances, 0);
  EXPECT_EQ(p.add_host_gib_per_instance, 0);
}

// The working set exceeds HBM + host: the spill alone sizes both remedies.
TEST(TierPressureTest, SpillNeedsInstancesOrHost) {
  const TierPressure p = ComputeTierPressure({.instances = 4,
                                              .working_set_tokens = 10e6,
                                              .gpu_capacity_tokens = 4e6,
                                              .host_capacity_tokens = 4e6,
                                              .gpu_write_rate_tokens_per_s = 1e4,
                                              .host_write_rate_tokens_per_s = 1e4,
                                              .reuse_gap_s = 60,
                                              .kv_bytes_per_token = 65536});
  EXPECT_TRUE(p.retention_ok);  // host: 400 s
  EXPECT_DOUBLE_EQ(p.spill_tokens, 2e6);
  EXPECT_TRUE(p.thrash_ahead);
  // Each instance brings 2e6 tokens of HBM + host: one more holds the 2e6 spilled.
  EXPECT_EQ(p.add_instances, 1);
  EXPECT_DOUBLE_EQ(p.add_host_tokens, 2e6);
  // 2e6 x 64 KiB = 122.07 GiB over 4 instances: 30.5 -> 31 GiB each.
  EXPECT_EQ(p.add_host_gib_per_instance, std::ceil(2e6 * 65536 / kGiB / 4));
}

// Everything fits, but blocks are overwritten before the sessions come back.
TEST(TierPressureTest, ShortRetentionNeedsTheTierThatGetsThereFirst) {
  const TierPressure p = ComputeTierPressure({.instances = 2,
                                              .working_set_tokens = 1e6,
                                              .gpu_capacity_tokens = 1e6,
                                              .host_capacity_tokens = 2e6,
                                              .gpu_write_rate_tokens_per_s = 1e5,
                                              .host_write_rate_tokens_per_s = 5e4,
                                              .reuse_gap_s = 100,
                                              .kv_bytes_per_token = 32768});
  EXPECT_DOUBLE_EQ(p.gpu_retention_s, 10);
  EXPECT_DOUBLE_EQ(p.host_retention_s, 40);
  EXPECT_FALSE(p.retention_ok);
  EXPECT_EQ(p.spill_tokens, 0);
  // HBM would need 1e7 tokens: 18 more instances of 5e5; host 5e6: 3 more of 1e6.
  EXPECT_EQ(p.add_instances, 3);
  // Host alone: 5e4 x 100 - 2e6 = 3e6 tokens x 32 KiB = 91.55 GiB, 46 GiB per instance.
  EXPECT_DOUBLE_EQ(p.add_host_tokens, 3e6);
  EXPECT_EQ(p.add_host_gib_per_instance, std::ceil(3e6 * 32768 / kGiB / 2));
}

// Without a host tier every computed token would be written to one: the host remedy is the
// write rate times the gap.
TEST(TierPressureTest, NoHostTierYet) {
  const TierPressure p = ComputeTierPressure({.instances = 8,
                                              .working_set_tokens = 6e6,
                                              .gpu_capacity_tokens = 8e6,
                                              .gpu_write_rate_tokens_per_s = 2e5,
                                              .host_write_rate_tokens_per_s = 2e5,
                                              .reuse_gap_s = 50,
                                              .kv_bytes_per_token = 98304});
  EXPECT_DOUBLE_EQ(p.gpu_retention_s, 40);
  EXPECT_FALSE(p.retention_ok);
  EXPECT_EQ(p.add_instances, 2);  // (1e7 - 8e6) / 1e6
  EXPECT_DOUBLE_EQ(p.add_host_tokens, 1e7);
  EXPECT_EQ(p.add_host_gib_per_instance, std::ceil(1e7 * 98304 / kGiB / 8));
}

// The figures of deploy/prometheus/kvroute-alerts.test.yml ("thrash ahead" cases).
TEST(TierPressureTest, PromtoolCaseRetention) {
  const TierPressure p = ComputeTierPressure({.instances = 4,
                                              .working_set_tokens = 6e6,
                                              .gpu_capacity_tokens = 4e6,
                                              .host_capacity_tokens = 8e6,
                                              .gpu_write_rate_tokens_per_s = 1e5,
                                              .host_write_rate_tokens_per_s = 1e5,
                                              .reuse_gap_s = 120,
                                              .kv_bytes_per_token = 131072});
  EXPECT_DOUBLE_EQ(p.retention_s, 80);
  EXPECT_TRUE(p.thrash_ahead);
  EXPECT_EQ(p.add_instances, 2);                // host: (1.2e7 - 8e6) / 2e6
  EXPECT_EQ(p.add_host_gib_per_instance, 123);  // 4e6 x 128 KiB / 4 = 122.07 GiB
}

TEST(TierPressureTest, PromtoolCaseSpill) {
  const TierPressure p = ComputeTierPressure({.instances = 4,
                                              .working_set_tokens = 15e6,
                                              .gpu_capacity_tokens = 4e6,
                                              .host_capacity_tokens = 8e6,
                                              .gpu_write_rate_tokens_per_s = 2e4,
                                              .host_write_rate_tokens_per_s = 2e4,
                                              .reuse_gap_s = 120,
                                              .kv_bytes_per_token = 131072});
  EXPECT_TRUE(p.retention_ok);
  EXPECT_DOUBLE_EQ(p.spill_tokens, 3e6);
  EXPECT_EQ(p.add_instances, 1);               // 3e6 / 3e6
  EXPECT_EQ(p.add_host_gib_per_instance, 92);  // 3e6 x 128 KiB / 4 = 91.55 GiB
}

}  // namespace
}  // namespace kvsize
