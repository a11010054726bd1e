#include "bench/kvroute_bench/svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvroute::bench {
namespace {

constexpr int kMarginLeft = 70;
constexpr int kMarginRight = 20;
constexpr int kMarginTop = 34;
constexpr int kMarginBottom = 46;
constexpr int kLegendRow = 18;
constexpr double kCharWidth = 7.0;  // approximate width of a 12px sans-serif character

// "Nice" tick positions covering [lo, hi].
std::vector<double> LinearTicks(double lo, double hi, int target = 6) {
  std::vector<double> ticks;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  // From the last tick at or below lo to the first at or above hi, so the axis ends on a label.
  const double first = std::floor(lo / step + 1e-9) * step;
  const double last = std::ceil(hi / step - 1e-9) * step;
  for (int i = 0; first + i * step <= last + step * 1e-9 && i < 1000; ++i) {
    const double t = first + i * step;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string TickLabel(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a >= 1e4 || a < 1e-3) return absl::StrFormat("%.0e", v);
  return absl::StrFormat("%g", v);
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string PaletteColor(size_t i) {
  static constexpr std::array<const char*, 10> kPalette = {
      "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kPalette[i % kPalette.size()];
}

std::vector<std::pair<double, double>> CdfPoints(std::vector<double> values, size_t max_points) {
  std::vector<std::pair<double, double>> pts;
  values.erase(std::remove_if(values.begin(), values.end(),
                              [](double v) { return !std::isfinite(v); }),
               values.end());
  if (values.empty()) return pts;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const size_t step = std::max<size_t>(1, n / std::max<size_t>(max_points, 2));
  for (size_t i = 0; i < n; i += step) {
    // Unsampled CDFs are drawn as steps: rise vertically at each value.
    if (step == 1) pts.emplace_back(values[i], static_cast<double>(i) / static_cast<double>(n));
    pts.emplace_back(values[i], static_cast<double>(i + 1) / static_cast<double>(n));
  }
  if (pts.back().second < 1.0) pts.emplace_back(values.back(), 1.0);
  return pts;
}

std::string RenderLineChart(const ChartOptions& options, const std::vector<Series>& series) {
  const int width = options.width;
  // Legend layout first: it decides the chart's total height.
  struct LegendItem {
    double x;
    int row;
  };
  std::vector<LegendItem> legend;
  {
    double x = kMarginLeft;
    int row = 0;
    for (const Series& s : series) {
      const double w = 22 + kCharWidth * static_cast<double>(s.name.size()) + 16;
      if (x + w > width - kMarginRight && x > kMarginLeft) {
        x = kMarginLeft;
        ++row;
      }
      legend.push_back({x, row});
      x += w;
    }
  }
  const int legend_rows = legend.empty() ? 0 : legend.back().row + 1;
  // The legend goes below the x-axis label.
  const int height = options.height + (legend_rows > 0 ? legend_rows * kLegendRow + 10 : 0);
  const double plot_w = width - kMarginLeft - kMarginRight;
  const double plot_h = options.height - kMarginTop - kMarginBottom;

  auto tx = [&](double x) { return options.log_x ? std::log10(x) : x; };
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  for (const Series& s : series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || (options.log_x && x <= 0)) continue;
      x_lo = std::min(x_lo, tx(x));
      x_hi = std::max(x_hi, tx(x));
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  const bool empty = !std::isfinite(x_lo);
  if (empty) {
    x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  }
  if (options.x_min) x_lo = tx(*options.x_min);
  if (options.x_max) x_hi = tx(*options.x_max);
  if (options.y_min) y_lo = *options.y_min;
  if (options.y_max) y_hi = *options.y_max;
  if (options.log_x) {
    x_lo = std::floor(x_lo);
    x_hi = std::max(std::ceil(x_hi), x_lo + 1);
  }
  if (!(x_hi > x_lo)) x_hi = x_lo + 1;
  if (!(y_hi > y_lo)) y_hi = y_lo + 1;
  std::vector<double> xticks;
  if (options.log_x) {
    for (double d = x_lo; d <= x_hi + 1e-9; d += 1) xticks.push_back(d);
  } else {
    xticks = LinearTicks(x_lo, x_hi);
    x_lo = std::min(x_lo, xticks.front());
    x_hi = std::max(x_hi, xticks.back());
  }
  std::vector<double> yticks = LinearTicks(y_lo, y_hi, 5);
  y_lo = std::min(y_lo, yticks.front());
  y_hi = std::max(y_hi, yticks.back());
  auto px = [&](double x) { return kMarginLeft + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return kMarginTop + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h; };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" role=\"img\">\n"
      "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
      width, height, width, height, width, height);
  absl::StrAppend(&svg, absl::StrFormat("<text x=\"%d\" y=\"20\" font-size=\"14\" "
                                        "font-weight=\"bold\">%s</text>\n",
                                        kMarginLeft, XmlEscape(options.title)));
  // Grid and ticks.
  for (double t : yticks) {
    const double y = py(t);
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#333\">%s</text>\n",
        px(x_lo), y, px(x_hi), y, kMarginLeft - 6.0, y + 4,
        XmlEscape(options.y_percent ? absl::StrFormat("%g%%", t * 100) : TickLabel(t))));
  }
  for (double t : xticks) {
    const double x = px(t);
    const std::string label = options.log_x ? TickLabel(std::pow(10.0, t)) : TickLabel(t);
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n",
        x, py(y_lo), x, py(y_hi), x, py(y_lo) + 16, XmlEscape(label)));
  }
  absl::StrAppend(&svg, absl::StrFormat(
      "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
      kMarginLeft, kMarginTop, plot_w, plot_h));
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\">%s</text>\n",
      kMarginLeft + plot_w / 2, kMarginTop + plot_h + 36.0, XmlEscape(options.x_label)));
  absl::StrAppend(&svg, absl::StrFormat(
      "<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\" "
      "fill=\"#222\">%s</text>\n",
      kMarginTop + plot_h / 2, XmlEscape(options.y_label)));
  if (empty) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n",
        kMarginLeft + plot_w / 2, kMarginTop + plot_h / 2));
  }
  // Series.
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const std::string color = s.color.empty() ? PaletteColor(i) : s.color;
    std::string pts;
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || (options.log_x && x <= 0)) continue;
      const double cx = std::clamp(px(tx(x)), px(x_lo), px(x_hi));
      const double cy = std::clamp(py(y), py(y_hi), py(y_lo));
      absl::StrAppend(&pts, absl::StrFormat("%.1f,%.1f ", cx, cy));
      if (options.markers) {
        absl::StrAppend(&svg, absl::StrFormat(
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", cx, cy, color));
      }
    }
    if (!pts.empty()) {
      absl::StrAppend(&svg, absl::StrFormat(
          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n", color,
          pts));
    }
    const double ly = options.height + 8.0 + legend[i].row * kLegendRow;
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" fill=\"#222\">%s</text>\n",
        legend[i].x, ly - 4, legend[i].x + 16, ly - 4, color, legend[i].x + 22, ly,
        XmlEscape(s.name)));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kvroute::bench
