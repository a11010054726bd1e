// Inline SVG charts for self-contained HTML reports (no scripts, no external assets): line
// charts, heat maps and histograms.
//
// Usage:
//   ChartOptions o{.title = "TTFT CDF", .x_label = "seconds", .y_label = "fraction"};
//   std::string svg = RenderLineChart(o, {{.name = "v2", .points = {{0.1, 0.5}, {0.2, 1}}}});
//   HeatMapOptions h{.title = "KV usage: v2", .x_label = "modelled s"};
//   std::string map = RenderHeatMap(h, {{.name = "gpu0", .points = {{0, 0.2}, {1, 0.9}}}});
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvroute::bench {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  std::string color;  // empty: from the palette by position
};

struct ChartOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  int width = 620;
  int height = 360;
  bool log_x = false;  // decade ticks; non-positive x values are dropped
  bool markers = false;
  std::optional<double> x_min = std::nullopt, x_max = std::nullopt;
  std::optional<double> y_min = std::nullopt, y_max = std::nullopt;
  bool y_percent = false;  // y values are fractions, labelled as percentages
};

std::string RenderLineChart(const ChartOptions& options, const std::vector<Series>& series);

// A heat map: one row per series (in the given order), its points' x binned into equal-width
// columns over [x_min, x_max] and each cell coloured by the mean y of the points in it on a
// fixed [v_min, v_max] scale (HeatColor), so maps drawn with the same scale compare. A cell
// without points is drawn in kNoDataColor. Each cell carries a <title> tooltip (row, x range,
// mean, point count); a colour bar under the map gives the scale.
struct HeatMapOptions {
  std::string title = "";
  std::string x_label = "";
  std::string value_label = "";  // names the colour bar
  int width = 760;
  int row_height = 18;
  int bins = 60;  // columns; fewer when the x range is shorter than `bins` x min_bin_width
  double min_bin_width = 0;                                          // x units; 0: no minimum
  std::optional<double> x_min = std::nullopt, x_max = std::nullopt;  // default: the data's
  double v_min = 0, v_max = 1;
  bool v_percent = true;  // values are fractions, labelled as percentages
};

inline constexpr char kNoDataColor[] = "#eeeeee";

std::string RenderHeatMap(const HeatMapOptions& options, const std::vector<Series>& rows);

// The bin layout of a heat map's x axis: `bins` equal columns over [lo, hi].
struct HeatBins {
  double lo = 0, hi = 1;
  int bins = 1;
  // Column of x (the last column includes hi); -1 outside [lo, hi] or for non-finite x.
  int Index(double x) const;
};
HeatBins MakeHeatBins(const HeatMapOptions& options, const std::vector<Series>& rows);

// Mean y per column of `points` (NaN where a column has no finite point), and their counts.
std::vector<double> BinMeans(const std::vector<std::pair<double, double>>& points,
                             const HeatBins& bins, std::vector<int>* counts = nullptr);

// A sequential colour (viridis, interpolated in RGB between 9 anchors) for `fraction` in
// [0, 1], clamped; "#rrggbb". NaN gives kNoDataColor.
std::string HeatColor(double fraction);

// A histogram of signed values as vertical bars, one series per colour, bars of each bin side
// by side. `edges` are the bin boundaries (n + 1 for n bins); counts are drawn as shares of
// each series' total so series of different sizes compare.
struct HistogramSeries {
  std::string name = "";
  std::vector<int64_t> counts;  // one per bin
  std::string color;            // empty: from the palette by position
};
struct HistogramOptions {
  std::string title = "";
  std::string x_label = "";
  std::string y_label = "share of requests";
  int width = 620;
  int height = 300;
  bool x_percent = true;  // edges are fractions, labelled as percentages
};
std::string RenderHistogram(const HistogramOptions& options, const std::vector<double>& edges,
                            const std::vector<HistogramSeries>& series);

// Escapes &, <, >, " for XML/HTML text and attributes.
std::string XmlEscape(std::string_view text);

// Color i of a 10-color qualitative palette (Tableau 10).
std::string PaletteColor(size_t i);

// Empirical CDF points of `values`, at most max_points (evenly spaced in rank).
std::vector<std::pair<double, double>> CdfPoints(std::vector<double> values,
                                                 size_t max_points = 200);

}  // namespace kvroute::bench
