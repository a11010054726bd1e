#include "bench/kvroute_bench/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvroute::bench {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(HeatMapTest, BinsCoverTheRangeAndAverage) {
  HeatMapOptions o{.bins = 4, .x_min = 0, .x_max = 8};
  const HeatBins b = MakeHeatBins(o, {});
  EXPECT_EQ(b.bins, 4);
  EXPECT_EQ(b.Index(0), 0);
  EXPECT_EQ(b.Index(1.99), 0);
  EXPECT_EQ(b.Index(2), 1);
  EXPECT_EQ(b.Index(8), 3);  // the last column includes its right edge
  EXPECT_EQ(b.Index(-0.1), -1);
  EXPECT_EQ(b.Index(8.1), -1);
  EXPECT_EQ(b.Index(NAN), -1);

  std::vector<int> counts;
  const std::vector<double> means =
      BinMeans({{0, 0.2}, {1, 0.4}, {5, 1.0}, {8, 0.5}, {7, NAN}, {9, 1.0}}, b, &counts);
  ASSERT_EQ(means.size(), 4u);
  EXPECT_DOUBLE_EQ(means[0], 0.3);
  EXPECT_TRUE(std::isnan(means[1]));  // no sample in [2, 4)
  EXPECT_DOUBLE_EQ(means[2], 1.0);
  EXPECT_DOUBLE_EQ(means[3], 0.5);  // the NaN value and the point past x_max are left out
  EXPECT_EQ(counts, (std::vector<int>{2, 0, 1, 1}));
}

TEST(HeatMapTest, RangeFromDataAndMinimumBinWidth) {
  // 10 s of samples every 2 s: 60 columns would leave most of them empty.
  std::vector<Series> rows = {{"gpu0", {{0, 0.1}, {2, 0.2}, {4, 0.3}, {6, 0.4}, {10, 0.5}}, ""}};
  HeatMapOptions o{.bins = 60, .min_bin_width = 2};
  const HeatBins b = MakeHeatBins(o, rows);
  EXPECT_DOUBLE_EQ(b.lo, 0);
  EXPECT_DOUBLE_EQ(b.hi, 10);
  EXPECT_EQ(b.bins, 5);
  // A degenerate range still gives one usable column.
  const HeatBins one = MakeHeatBins(HeatMapOptions{}, {{"gpu0", {{3, 0.5}}, ""}});
  EXPECT_GT(one.hi, one.lo);
  EXPECT_EQ(one.Index(3), 0);
}

TEST(HeatMapTest, ColoursFollowTheScale) {
  EXPECT_EQ(HeatColor(0), "#440154");  // viridis' ends
  EXPECT_EQ(HeatColor(1), "#fde725");
  EXPECT_EQ(HeatColor(-3), HeatColor(0));  // clamped
  EXPECT_EQ(HeatColor(7), HeatColor(1));
  EXPECT_EQ(HeatColor(0.5), "#21908d");  // the middle anchor
  EXPECT_EQ(HeatColor(NAN), kNoDataColor);
  // Brighter (larger green channel) as usage rises.
  auto green = [](const std::string& c) { return std::stoi(c.substr(3, 2), nullptr, 16); };
  for (int i = 0; i < 10; ++i)
    EXPECT_LT(green(HeatColor(i / 10.0)), green(HeatColor((i + 1) / 10.0)));
}

TEST(HeatMapTest, RendersRowsCellsScaleAndEscapes) {
  HeatMapOptions o{.title = "KV <usage> & more",
                   .x_label = "modelled s",
                   .value_label = "KV in use",
                   .bins = 4,
                   .x_min = 0,
                   .x_max = 8};
  const std::vector<Series> rows = {{"gpu<0>", {{0, 0.0}, {7, 1.0}}, ""}, {"gpu1", {{3, 0.5}}, ""}};
  const std::string svg = RenderHeatMap(o, rows);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("KV &lt;usage&gt; &amp; more"), std::string::npos);
  EXPECT_NE(svg.find(">gpu&lt;0&gt;</text>"), std::string::npos);
  EXPECT_EQ(svg.find("gpu<0>"), std::string::npos);
  EXPECT_NE(svg.find("modelled s"), std::string::npos);
  // 2 rows x 4 columns of cells, each with a tooltip.
  EXPECT_EQ(Count(svg, "<title>"), 8u);
  EXPECT_NE(svg.find("fill=\"#440154\"><title>gpu&lt;0&gt;, 0 to 2: mean 0.0% of 1 samples"),
            std::string::npos);
  EXPECT_NE(svg.find("fill=\"#fde725\"><title>gpu&lt;0&gt;, 6 to 8: mean 100.0%"),
            std::string::npos);
  EXPECT_NE(svg.find("fill=\"#21908d\"><title>gpu1, 2 to 4: mean 50.0%"), std::string::npos);
  EXPECT_EQ(Count(svg, "no sample</title>"), 5u);  // the empty cells
  // The colour bar's labels and the empty-cell swatch.
  EXPECT_NE(svg.find(">0%</text>"), std::string::npos);
  EXPECT_NE(svg.find(">50%</text>"), std::string::npos);
  EXPECT_NE(svg.find(">100%</text>"), std::string::npos);
  EXPECT_NE(svg.find(">no sample</text>"), std::string::npos);
  EXPECT_NE(svg.find(">KV in use</text>"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(HeatMapTest, EmptyInputSaysNoData) {
  const std::string svg = RenderHeatMap(HeatMapOptions{.title = "empty"}, {});
  EXPECT_NE(svg.find("no data"), std::string::npos);
  EXPECT_EQ(Count(svg, "<title>"), 0u);
  // A row without points is drawn, all of it "no sample".
  const std::string blank = RenderHeatMap(HeatMapOptions{.bins = 3}, {{"gpu0", {}, ""}});
  EXPECT_EQ(Count(blank, "no sample</title>"), 3u);
}

TEST(HistogramTest, BarsAreSharesOfEachSeries) {
  const std::vector<double> edges = {-0.1, 0.0, 0.1, 0.2};
  HistogramOptions o{.title = "err <signed>", .x_label = "error"};
  const std::string svg =
      RenderHistogram(o, edges, {{"WARM & co", {1, 3, 0}, ""}, {"HEAVY", {0, 0, 2}, ""}});
  EXPECT_NE(svg.find("err &lt;signed&gt;"), std::string::npos);
  // One bar per non-empty (series, bin); its tooltip gives the share of its series.
  EXPECT_EQ(Count(svg, "<title>"), 3u);
  EXPECT_NE(svg.find("<title>WARM &amp; co: 25.0%</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>WARM &amp; co: 75.0%</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>HEAVY: 100.0%</title>"), std::string::npos);
  EXPECT_NE(svg.find(">0%</text>"), std::string::npos);  // an x tick at 0
  EXPECT_EQ(svg.find("no data"), std::string::npos);
  EXPECT_NE(RenderHistogram(o, edges, {}).find("no data"), std::string::npos);
  EXPECT_NE(RenderHistogram(o, {}, {{"x", {}, ""}}).find("no data"), std::string::npos);
}

}  // namespace
}  // namespace kvroute::bench
