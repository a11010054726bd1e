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

std::string PercentTick(double fraction) {
  return absl::StrFormat("%g%%", std::round(fraction * 1000) / 10);
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

int HeatBins::Index(double x) const {
  if (!std::isfinite(x) || x < lo || x > hi) return -1;
  const int i = static_cast<int>((x - lo) / (hi - lo) * bins);
  return std::clamp(i, 0, bins - 1);
}

HeatBins MakeHeatBins(const HeatMapOptions& options, const std::vector<Series>& rows) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Series& s : rows) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x)) continue;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (options.x_min) lo = *options.x_min;
  if (options.x_max) hi = *options.x_max;
  if (!(hi > lo)) hi = lo + 1;
  HeatBins b{.lo = lo, .hi = hi, .bins = std::max(1, options.bins)};
  if (options.min_bin_width > 0) {
    const double fit = std::floor((hi - lo) / options.min_bin_width);
    b.bins = std::clamp(static_cast<int>(std::min(fit, 1e6)), 1, b.bins);
  }
  return b;
}

std::vector<double> BinMeans(const std::vector<std::pair<double, double>>& points,
                             const HeatBins& bins, std::vector<int>* counts) {
  std::vector<double> sum(static_cast<size_t>(bins.bins), 0.0);
  std::vector<int> n(static_cast<size_t>(bins.bins), 0);
  for (auto [x, y] : points) {
    const int i = bins.Index(x);
    if (i < 0 || !std::isfinite(y)) continue;
    sum[static_cast<size_t>(i)] += y;
    ++n[static_cast<size_t>(i)];
  }
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = n[i] > 0 ? sum[i] / n[i] : std::numeric_limits<double>::quiet_NaN();
  }
  if (counts != nullptr) *counts = std::move(n);
  return sum;
}

std::string HeatColor(double fraction) {
  if (std::isnan(fraction)) return kNoDataColor;
  // Viridis at 0, 1/8, ..., 1 (matplotlib's _viridis_data).
  static constexpr std::array<std::array<int, 3>, 9> kViridis = {{{68, 1, 84},
                                                                  {71, 44, 122},
                                                                  {59, 81, 139},
                                                                  {44, 113, 142},
                                                                  {33, 144, 141},
                                                                  {39, 173, 129},
                                                                  {92, 200, 99},
                                                                  {170, 220, 50},
                                                                  {253, 231, 37}}};
  const double f = std::clamp(fraction, 0.0, 1.0) * (kViridis.size() - 1);
  const size_t lo = std::min(static_cast<size_t>(f), kViridis.size() - 2);
  const double t = f - static_cast<double>(lo);
  int rgb[3];
  for (int c = 0; c < 3; ++c) {
    rgb[c] = static_cast<int>(
        std::lround(kViridis[lo][c] + (kViridis[lo + 1][c] - kViridis[lo][c]) * t));
  }
  return absl::StrFormat("#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

std::string RenderHeatMap(const HeatMapOptions& options, const std::vector<Series>& rows) {
  size_t longest = 0;
  for (const Series& s : rows) longest = std::max(longest, s.name.size());
  const double left = std::max<double>(kMarginLeft, kCharWidth * static_cast<double>(longest) + 14);
  const double plot_w = std::max(40.0, options.width - left - kMarginRight);
  const int n_rows = std::max<int>(1, static_cast<int>(rows.size()));
  const double plot_h = static_cast<double>(n_rows) * options.row_height;
  const double axis_y = kMarginTop + plot_h;
  const double bar_y = axis_y + 56;
  const int height = static_cast<int>(bar_y + 12 + 24);
  const HeatBins bins = MakeHeatBins(options, rows);
  const double cell_w = plot_w / bins.bins;
  auto px = [&](double x) { return left + (x - bins.lo) / (bins.hi - bins.lo) * plot_w; };
  auto scaled = [&](double v) {
    return options.v_max > options.v_min ? (v - options.v_min) / (options.v_max - options.v_min)
                                         : 0.0;
  };
  auto value_text = [&](double v) {
    return options.v_percent ? absl::StrFormat("%.1f%%", v * 100) : absl::StrFormat("%.3g", v);
  };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" role=\"img\">\n"
      "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n"
      "<text x=\"%.1f\" y=\"20\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
      options.width, height, options.width, height, options.width, height, left,
      XmlEscape(options.title));
  if (rows.empty()) {
    absl::StrAppend(
        &svg,
        absl::StrFormat(
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n",
            left + plot_w / 2, kMarginTop + plot_h / 2 + 4));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = kMarginTop + static_cast<double>(r) * options.row_height;
    absl::StrAppend(
        &svg,
        absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">%s</text>\n",
                        left - 6, y + options.row_height / 2.0 + 4, XmlEscape(rows[r].name)));
    std::vector<int> counts;
    const std::vector<double> means = BinMeans(rows[r].points, bins, &counts);
    for (int b = 0; b < bins.bins; ++b) {
      const double m = means[static_cast<size_t>(b)];
      const double x0 = bins.lo + b * (bins.hi - bins.lo) / bins.bins;
      const double x1 = bins.lo + (b + 1) * (bins.hi - bins.lo) / bins.bins;
      const std::string tip =
          absl::StrFormat("%s, %s to %s: %s", rows[r].name, TickLabel(x0), TickLabel(x1),
                          std::isnan(m) ? std::string("no sample")
                                        : absl::StrFormat("mean %s of %d samples", value_text(m),
                                                          counts[static_cast<size_t>(b)]));
      // Cells overlap by a fraction of a pixel so no background seams show between them.
      absl::StrAppend(
          &svg, absl::StrFormat(
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>%s"
                    "</title></rect>\n",
                    left + b * cell_w, y, cell_w + 0.3, options.row_height,
                    HeatColor(std::isnan(m) ? m : scaled(m)), XmlEscape(tip)));
    }
  }
  absl::StrAppend(&svg, absl::StrFormat("<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" "
                                        "fill=\"none\" stroke=\"#888\"/>\n",
                                        left, kMarginTop, plot_w, plot_h));
  for (double t : LinearTicks(bins.lo, bins.hi)) {
    if (t < bins.lo - 1e-9 * (bins.hi - bins.lo) || t > bins.hi + 1e-9 * (bins.hi - bins.lo)) {
      continue;
    }
    absl::StrAppend(
        &svg, absl::StrFormat(
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n",
                  px(t), axis_y, px(t), axis_y + 4, px(t), axis_y + 16, XmlEscape(TickLabel(t))));
  }
  absl::StrAppend(
      &svg, absl::StrFormat(
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\">%s</text>\n",
                left + plot_w / 2, axis_y + 34, XmlEscape(options.x_label)));
  // Colour bar: the scale drawn in 50 steps, ticks at quarters, and the empty-cell swatch.
  const double bar_w = std::min(300.0, plot_w * 0.6);
  constexpr int kSteps = 50;
  absl::StrAppend(
      &svg,
      absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">%s</text>\n",
                      left - 6, bar_y + 10, XmlEscape(options.value_label)));
  for (int i = 0; i < kSteps; ++i) {
    absl::StrAppend(
        &svg,
        absl::StrFormat("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"12\" fill=\"%s\"/>\n",
                        left + i * bar_w / kSteps, bar_y, bar_w / kSteps + 0.3,
                        HeatColor((i + 0.5) / kSteps)));
  }
  for (int q = 0; q <= 4; ++q) {
    const double v = options.v_min + (options.v_max - options.v_min) * q / 4.0;
    absl::StrAppend(
        &svg, absl::StrFormat(
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n",
                  left + bar_w * q / 4.0, bar_y + 24,
                  XmlEscape(options.v_percent ? PercentTick(v) : TickLabel(v))));
  }
  absl::StrAppend(
      &svg,
      absl::StrFormat(
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\" stroke=\"#ccc\"/>\n"
          "<text x=\"%.1f\" y=\"%.1f\" fill=\"#222\">no sample</text>\n",
          left + bar_w + 24, bar_y, kNoDataColor, left + bar_w + 42, bar_y + 10));
  svg += "</svg>\n";
  return svg;
}

std::string RenderHistogram(const HistogramOptions& options, const std::vector<double>& edges,
                            const std::vector<HistogramSeries>& series) {
  const int width = options.width;
  const double plot_w = width - kMarginLeft - kMarginRight;
  const double plot_h = options.height - kMarginTop - kMarginBottom;
  const size_t n_bins = edges.size() >= 2 ? edges.size() - 1 : 0;
  std::vector<std::vector<double>> shares;
  double y_hi = 0;
  for (const HistogramSeries& s : series) {
    int64_t total = 0;
    for (int64_t c : s.counts) total += c;
    std::vector<double> share(n_bins, 0.0);
    for (size_t b = 0; b < n_bins && b < s.counts.size(); ++b) {
      share[b] = total > 0 ? static_cast<double>(s.counts[b]) / static_cast<double>(total) : 0;
      y_hi = std::max(y_hi, share[b]);
    }
    shares.push_back(std::move(share));
  }
  const bool empty = n_bins == 0 || y_hi <= 0;
  std::vector<double> yticks = LinearTicks(0, empty ? 1 : y_hi, 5);
  y_hi = std::max(empty ? 1.0 : y_hi, yticks.back());
  const double x_lo = n_bins > 0 ? edges.front() : 0;
  const double x_hi = n_bins > 0 && edges.back() > x_lo ? edges.back() : x_lo + 1;
  auto px = [&](double x) { return kMarginLeft + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return kMarginTop + plot_h - y / y_hi * plot_h; };
  const int legend_rows = series.empty() ? 0 : 1;
  const int height = options.height + legend_rows * kLegendRow + (legend_rows ? 10 : 0);
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" role=\"img\">\n"
      "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n"
      "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
      width, height, width, height, width, height, kMarginLeft, XmlEscape(options.title));
  for (double t : yticks) {
    absl::StrAppend(
        &svg, absl::StrFormat(
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#333\">%s</text>\n",
                  px(x_lo), py(t), px(x_hi), py(t), kMarginLeft - 6.0, py(t) + 4, PercentTick(t)));
  }
  // Bars: each bin's width is shared by the series, side by side.
  const double slots = static_cast<double>(std::max<size_t>(1, series.size()));
  for (size_t i = 0; i < series.size(); ++i) {
    const std::string color = series[i].color.empty() ? PaletteColor(i) : series[i].color;
    for (size_t b = 0; b < n_bins; ++b) {
      const double share = shares[i][b];
      if (share <= 0) continue;
      const double x0 = px(edges[b]), x1 = px(edges[b + 1]);
      const double w = (x1 - x0) / slots;
      absl::StrAppend(
          &svg,
          absl::StrFormat(
              "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>%s: "
              "%s</title></rect>\n",
              x0 + w * static_cast<double>(i), py(share), std::max(0.5, w - 0.5), py(0) - py(share),
              color, XmlEscape(series[i].name), absl::StrFormat("%.1f%%", share * 100)));
    }
  }
  // X ticks at round values inside the bins' range.
  for (double t : LinearTicks(x_lo, x_hi)) {
    if (n_bins == 0 || t < x_lo || t > x_hi) continue;
    const std::string label = options.x_percent ? PercentTick(t) : TickLabel(t);
    absl::StrAppend(
        &svg, absl::StrFormat(
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n",
                  px(t), py(0), px(t), py(0) + 4, px(t), py(0) + 16, XmlEscape(label)));
  }
  absl::StrAppend(
      &svg,
      absl::StrFormat(
          "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n"
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\">%s</text>\n"
          "<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\" "
          "fill=\"#222\">%s</text>\n",
          kMarginLeft, kMarginTop, plot_w, plot_h, kMarginLeft + plot_w / 2,
          kMarginTop + plot_h + 36.0, XmlEscape(options.x_label), kMarginTop + plot_h / 2,
          XmlEscape(options.y_label)));
  if (empty) {
    absl::StrAppend(
        &svg,
        absl::StrFormat(
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n",
            kMarginLeft + plot_w / 2, kMarginTop + plot_h / 2));
  }
  double lx = kMarginLeft;
  for (size_t i = 0; i < series.size(); ++i) {
    const std::string color = series[i].color.empty() ? PaletteColor(i) : series[i].color;
    const double ly = options.height + 8.0;
    absl::StrAppend(
        &svg,
        absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" fill=\"#222\">%s</text>\n",
                        lx, ly - 9, color, lx + 20, ly, XmlEscape(series[i].name)));
    lx += 36 + kCharWidth * static_cast<double>(series[i].name.size());
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kvroute::bench
