// The cost model's learned time factors: convergence, clamping, the pairs'
// fleet-wide prior and growth of the fleet.
#include "router/rate_learner.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kvroute::router {
namespace {

RateLearner Learner(int n, double alpha = 0.2) {
  RateLearner l(Options::RateLearning{.enabled = true, .alpha = alpha, .max_sample_ratio = 20});
  l.Resize(n);
  return l;
}

// An instance twice as slow as its profile: 30 samples bring its factor
// within 1% of 2 (the prior's weight is 0.8^30 ~ 0.1%); the others stay 1.
TEST(RateLearnerTest, ConvergesToASlowInstancesFactor) {
  RateLearner l = Learner(3);
  for (int i = 0; i < 30; ++i) l.ObservePrefill(1, 2.0 * (1 + i), 1 + i);
  EXPECT_NEAR(l.prefill_factor(1), 2.0, 0.02);
  EXPECT_EQ(l.prefill_samples(1), 30);
  EXPECT_EQ(l.prefill_factor(0), 1.0);
  EXPECT_EQ(l.prefill_factor(2), 1.0);
  EXPECT_EQ(l.prefill_samples(0), 0);
}

// One sample moves the factor by alpha in log space: 2^0.2 after a 2x sample.
TEST(RateLearnerTest, OneSampleMovesByAlphaInLogSpace) {
  RateLearner l = Learner(1);
  l.ObservePrefill(0, 4.0, 2.0);
  EXPECT_NEAR(l.prefill_factor(0), std::pow(2.0, 0.2), 1e-12);
  l.ObservePrefill(0, 1.0, 2.0);  // half: back by 0.2 x (log 0.5 - 0.2 log 2)
  EXPECT_NEAR(std::log(l.prefill_factor(0)), 0.8 * 0.2 * std::log(2.0) + 0.2 * std::log(0.5),
              1e-12);
}

// A 1000x outlier counts as 20x: from 2 the factor moves at most to
// 2 x (20 / 2)^0.2; a realised time of 0 counts as 1/20.
TEST(RateLearnerTest, ClampsOutliers) {
  RateLearner l = Learner(1);
  for (int i = 0; i < 60; ++i) l.ObservePrefill(0, 2.0, 1.0);
  const double before = l.prefill_factor(0);
  ASSERT_NEAR(before, 2.0, 1e-4);
  l.ObservePrefill(0, 1000.0, 1.0);
  EXPECT_NEAR(l.prefill_factor(0), before * std::pow(20.0 / before, 0.2), 1e-9);
  EXPECT_LT(l.prefill_factor(0), 3.2);

  RateLearner z = Learner(1);
  z.ObservePrefill(0, 0.0, 1.0);
  EXPECT_NEAR(z.prefill_factor(0), std::pow(1.0 / 20, 0.2), 1e-12);
}

// The host reload factor is its own per instance: loads twice as slow as
// the configured bandwidth say teach 2 on that instance and leave its
// prefill factor and the others' reload factors at 1.
TEST(RateLearnerTest, LearnsAReloadFactorApartFromThePrefillFactor) {
  RateLearner l = Learner(2);
  for (int i = 0; i < 30; ++i) l.ObserveReload(1, 0.4, 0.2);
  EXPECT_NEAR(l.reload_factor(1), 2.0, 0.02);
  EXPECT_EQ(l.reload_samples(1), 30);
  EXPECT_EQ(l.prefill_factor(1), 1.0);
  EXPECT_EQ(l.reload_factor(0), 1.0);
  l.ObserveReload(0, 1.0, 0.0);  // nothing modelled
  l.ObserveReload(7, 1.0, 1.0);  // no such backend
  EXPECT_EQ(l.reload_samples(0), 0);
  EXPECT_EQ(l.reload_factor(7), 1.0);
  l.Resize(3);
  EXPECT_NEAR(l.reload_factor(1), 2.0, 0.02);
  EXPECT_EQ(l.reload_factor(2), 1.0);
}

// The pool reload factor is its own too: pool loads at a third of the
// configured bandwidth teach 3 there and leave the host reload factor at 1.
TEST(RateLearnerTest, LearnsAPoolReloadFactorApartFromTheHostOne) {
  RateLearner l = Learner(2);
  for (int i = 0; i < 30; ++i) l.ObservePoolReload(0, 0.3, 0.1);
  EXPECT_NEAR(l.pool_reload_factor(0), 3.0, 0.03);
  EXPECT_EQ(l.pool_reload_samples(0), 30);
  EXPECT_EQ(l.reload_factor(0), 1.0);
  EXPECT_EQ(l.reload_samples(0), 0);
  EXPECT_EQ(l.pool_reload_factor(1), 1.0);
  l.ObservePoolReload(1, 1.0, 0.0);  // nothing modelled
  l.ObservePoolReload(7, 1.0, 1.0);  // no such backend
  EXPECT_EQ(l.pool_reload_samples(1), 0);
  EXPECT_EQ(l.pool_reload_factor(7), 1.0);
}

TEST(RateLearnerTest, IgnoresSamplesItCannotUse) {
  RateLearner l = Learner(2);
  l.ObservePrefill(0, 1.0, 0.0);   // nothing predicted
  l.ObservePrefill(0, -1.0, 1.0);  // no realised time
  l.ObservePrefill(5, 2.0, 1.0);   // no such backend
  l.ObserveTransfer(0, 7, 2.0, 1.0);
  l.ObserveTransfer(0, 1, 2.0, -1.0);
  EXPECT_EQ(l.prefill_samples(0), 0);
  EXPECT_EQ(l.prefill_factor(0), 1.0);
  EXPECT_EQ(l.transfer_samples(0, 1), 0);
  EXPECT_TRUE(l.transfer_table().empty());
  EXPECT_EQ(l.transfer_version(), 0u);
}

// Transfers 3x slower than modelled on pair (0, 1): the pair converges to
// 3, the fleet-wide factor follows, a pair without samples takes the
// fleet's, and a pair's first sample starts from the fleet's.
TEST(RateLearnerTest, TransferPairsStartFromTheFleetFactor) {
  RateLearner l = Learner(3);
  for (int i = 0; i < 40; ++i) l.ObserveTransfer(0, 1, 0.3, 0.1);
  EXPECT_NEAR(l.transfer_factor(0, 1), 3.0, 0.01);
  EXPECT_NEAR(l.fleet_transfer_factor(), 3.0, 0.01);
  EXPECT_EQ(l.transfer_factor(2, 0), l.fleet_transfer_factor());
  EXPECT_EQ(l.transfer_samples(2, 0), 0);

  const double fleet = l.fleet_transfer_factor();
  l.ObserveTransfer(2, 0, 0.1, 0.1);  // as modelled
  EXPECT_NEAR(std::log(l.transfer_factor(2, 0)), 0.8 * std::log(fleet), 1e-12);

  // The snapshot's table, row-major.
  const std::vector<double>& t = l.transfer_table();
  ASSERT_EQ(t.size(), 9u);
  EXPECT_EQ(t[0 * 3 + 1], l.transfer_factor(0, 1));
  EXPECT_EQ(t[2 * 3 + 0], l.transfer_factor(2, 0));
  EXPECT_EQ(t[1 * 3 + 2], l.fleet_transfer_factor());
}

// A new backend slot keeps the learned factors of the others, starts at 1
// itself, and its pairs take the fleet's transfer factor.
TEST(RateLearnerTest, GrowingTheFleetKeepsWhatWasLearned) {
  RateLearner l = Learner(2);
  for (int i = 0; i < 10; ++i) {
    l.ObservePrefill(1, 3.0, 1.0);
    l.ObserveTransfer(1, 0, 2.0, 1.0);
  }
  const double f1 = l.prefill_factor(1);
  const double g10 = l.transfer_factor(1, 0);
  const uint64_t version = l.transfer_version();
  l.Resize(3);
  EXPECT_EQ(l.size(), 3);
  EXPECT_EQ(l.prefill_factor(1), f1);
  EXPECT_EQ(l.prefill_factor(2), 1.0);
  EXPECT_EQ(l.transfer_factor(1, 0), g10);
  EXPECT_EQ(l.transfer_factor(2, 1), l.fleet_transfer_factor());
  ASSERT_EQ(l.transfer_table().size(), 9u);
  EXPECT_EQ(l.transfer_table()[1 * 3 + 0], g10);
  EXPECT_GT(l.transfer_version(), version);
  l.Resize(2);  // slots never shrink
  EXPECT_EQ(l.size(), 3);
}

}  // namespace
}  // namespace kvroute::router
