#include "proxy/metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace kvroute::proxy::metrics {
namespace {

TEST(MetricsTest, CounterWithLabelsRendersTextFormat) {
  Registry reg;
  CounterVec* c = reg.AddCounter("kvroute_requests_total", "Requests.", {"route", "status"});
  c->Inc({"/v1/completions", "200"});
  c->Inc({"/v1/completions", "200"}, 2);
  const std::string text = reg.Render();
  EXPECT_NE(text.find("# HELP kvroute_requests_total Requests.\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvroute_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("kvroute_requests_total{route=\"/v1/completions\",status=\"200\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(c->Value({"/v1/completions", "200"}), 3);
}

// The per-thread series cache compares label values with a series' joined
// key piece by piece: values that join to look alike must stay apart.
TEST(MetricsTest, LabelSetsThatShareBytesAreDistinctSeries) {
  Registry reg;
  CounterVec* c = reg.AddCounter("c_total", "C.", {"a", "b"});
  c->Inc({"x", "yz"});
  c->Inc({"xy", "z"}, 2);
  c->Inc({"x", "y"}, 4);
  c->Inc({"", "xyz"}, 8);
  c->Inc({"x", "yz"}, 16);
  EXPECT_EQ(c->Value({"x", "yz"}), 17);
  EXPECT_EQ(c->Value({"xy", "z"}), 2);
  EXPECT_EQ(c->Value({"x", "y"}), 4);
  EXPECT_EQ(c->Value({"", "xyz"}), 8);
  EXPECT_EQ(c->Value({"xyz", ""}), 0);
  HistogramVec* h = reg.AddHistogram("h_seconds", "H.", {"route"}, {1.0});
  h->Observe({"/v1/completions"}, 0.5);
  h->Observe({"/v1/completion"}, 0.5);
  h->Observe({"/v1/completions"}, 2.0);
  EXPECT_EQ(h->Count({"/v1/completions"}), 2u);
  EXPECT_EQ(h->Count({"/v1/completion"}), 1u);
}

TEST(MetricsTest, UnlabelledFamiliesRenderZero) {
  Registry reg;
  reg.AddCounter("a_total", "A.");
  reg.AddGauge("b", "B.");
  const std::string text = reg.Render();
  EXPECT_NE(text.find("a_total 0\n"), std::string::npos);
  EXPECT_NE(text.find("b 0\n"), std::string::npos);
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Registry reg;
  HistogramVec* h = reg.AddHistogram("lat_seconds", "Latency.", {"class"}, {0.1, 1});
  h->Observe({"WARM"}, 0.05);
  h->Observe({"WARM"}, 0.5);
  h->Observe({"WARM"}, 5);
  const std::string text = reg.Render();
  EXPECT_NE(text.find("lat_seconds_bucket{class=\"WARM\",le=\"0.1\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("lat_seconds_bucket{class=\"WARM\",le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{class=\"WARM\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_sum{class=\"WARM\"} 5.55\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_count{class=\"WARM\"} 3\n"), std::string::npos);
  EXPECT_EQ(h->Count({"WARM"}), 3u);
}

// Each thread remembers its recent series per family (8 per family): more
// label sets than that, several families, and several threads at once still
// count every update once, in its own series.
TEST(MetricsTest, ManySeriesAndThreadsCountExactly) {
  Registry reg;
  CounterVec* c = reg.AddCounter("c_total", "C.", {"k"});
  GaugeVec* g = reg.AddGauge("g", "G.", {"k"});
  HistogramVec* h = reg.AddHistogram("h_seconds", "H.", {"k"}, {1});
  constexpr int kThreads = 4, kKeys = 20, kRounds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        for (int k = 0; k < kKeys; ++k) {
          const std::string key = "key-" + std::to_string(k);
          c->Inc({key}, k);
          g->Add({key}, 1);
          h->Observe({key}, k % 2 == 0 ? 0.5 : 2);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "key-" + std::to_string(k);
    EXPECT_EQ(c->Value({key}), double{kThreads} * kRounds * k) << key;
    EXPECT_EQ(g->Value({key}), double{kThreads} * kRounds) << key;
    EXPECT_EQ(h->Count({key}), uint64_t{kThreads} * kRounds) << key;
  }
  const std::string text = reg.Render();
  EXPECT_NE(text.find("h_seconds_bucket{k=\"key-3\",le=\"1\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_seconds_bucket{k=\"key-4\",le=\"1\"} 200\n"), std::string::npos);
  EXPECT_NE(text.find("h_seconds_bucket{k=\"key-4\",le=\"+Inf\"} 200\n"), std::string::npos);
}

// A thread's remembered series belong to their family: a new registry with
// the same family names starts from zero.
TEST(MetricsTest, NewFamiliesDoNotSeeOldSeries) {
  for (int i = 0; i < 3; ++i) {
    Registry reg;
    CounterVec* c = reg.AddCounter("c_total", "C.", {"k"});
    HistogramVec* h = reg.AddHistogram("h_seconds", "H.", {"k"}, {1});
    c->Inc({"a"});
    h->Observe({"a"}, 0.5);
    EXPECT_EQ(c->Value({"a"}), 1);
    EXPECT_EQ(h->Count({"a"}), 1u);
  }
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  Registry reg;
  GaugeVec* g = reg.AddGauge("g", "G.", {"name"});
  g->Set({"x\"y"}, 1.5);
  EXPECT_NE(reg.Render().find("g{name=\"x\\\"y\"} 1.5\n"), std::string::npos);
}

TEST(MetricsTest, FormatValueSpecials) {
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
}

TEST(MetricsTest, CollectorsAppendAtRenderTime) {
  Registry reg;
  int calls = 0;
  reg.AddCollector([&](std::string* out) {
    ++calls;
    RenderGaugeHeader(out, "dyn", "Dynamic.");
    RenderSample(out, "dyn", {{"backend", "gpu0"}}, 7);
  });
  const std::string text = reg.Render();
  EXPECT_EQ(calls, 1);
  EXPECT_NE(text.find("# TYPE dyn gauge\ndyn{backend=\"gpu0\"} 7\n"), std::string::npos);
}

}  // namespace
}  // namespace kvroute::proxy::metrics
