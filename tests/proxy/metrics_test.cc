#include "proxy/metrics.h"

#include <gtest/gtest.h>

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

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
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
