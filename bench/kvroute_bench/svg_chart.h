// Inline SVG line charts for self-contained HTML reports (no scripts, no external assets).
//
// Usage:
//   ChartOptions o{.title = "TTFT CDF", .x_label = "seconds", .y_label = "fraction"};
//   std::string svg = RenderLineChart(o, {{.name = "v2", .points = {{0.1, 0.5}, {0.2, 1}}}});
//
// Thread-safety: pure functions.
#pragma once

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

// Escapes &, <, >, " for XML/HTML text and attributes.
std::string XmlEscape(std::string_view text);

// Color i of a 10-color qualitative palette (Tableau 10).
std::string PaletteColor(size_t i);

// Empirical CDF points of `values`, at most max_points (evenly spaced in rank).
std::vector<std::pair<double, double>> CdfPoints(std::vector<double> values,
                                                 size_t max_points = 200);

}  // namespace kvroute::bench
