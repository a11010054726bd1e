#include "proxy/metrics.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/absl_compat.h"

namespace kvroute::proxy::metrics {
namespace {
constexpr char kSep = '\x1f';  // joins label values into one map key
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

Family::Family(std::string name, std::string help, std::string type,
               std::vector<std::string> labels)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(std::move(type)),
      label_names_(std::move(labels)) {}

std::string Family::Key(Labels values) const {
  std::string key;
  AppendKey(values, &key);
  return key;
}

void Family::AppendKey(Labels values, std::string* key) const {
  bool first = true;
  for (std::string_view v : values) {
    if (!first) key->push_back(kSep);
    first = false;
    key->append(v);
  }
}

std::string Family::LabelText(const std::string& key, std::string_view extra_name,
                              std::string_view extra_value) const {
  std::string out;
  if (!label_names_.empty()) {
    std::vector<absl::string_view> values = absl::StrSplit(key, kSep);
    for (size_t i = 0; i < label_names_.size(); ++i) {
      if (!out.empty()) out.push_back(',');
      absl::StrAppend(&out, label_names_[i], "=\"",
                      EscapeLabelValue(i < values.size() ? std::string_view(values[i].data(), values[i].size()) : ""), "\"");
    }
  }
  if (!extra_name.empty()) {
    if (!out.empty()) out.push_back(',');
    absl::StrAppend(&out, ToAbsl(extra_name), "=\"", ToAbsl(extra_value), "\"");
  }
  return out.empty() ? out : absl::StrCat("{", out, "}");
}

void Family::RenderHeader(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " ", type_, "\n");
}

ScalarVec::ScalarVec(std::string name, std::string help, std::string type,
                     std::vector<std::string> labels)
    : Family(std::move(name), std::move(help), std::move(type), std::move(labels)) {}

namespace {
// The series key of `values` in a per-thread buffer: updates on the request
// path allocate nothing once their series exists.
const std::string& ScratchKey(const Family& f, Labels values) {
  thread_local std::string key;
  key.clear();
  f.AppendKey(values, &key);
  return key;
}
}  // namespace

void ScalarVec::Update(Labels values, double v, bool add) {
  const std::string& key = ScratchKey(*this, values);
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  if (it == series_.end()) it = series_.emplace(key, 0.0).first;
  it->second = add ? it->second + v : v;
}

double ScalarVec::Value(Labels values) const {
  std::string key = Key(values);
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  return it == series_.end() ? 0 : it->second;
}

void ScalarVec::Render(std::string* out) const {
  RenderHeader(out);
  absl::MutexLock lock(&mu_);
  if (series_.empty() && label_names_.empty()) {
    absl::StrAppend(out, name_, " 0\n");
    return;
  }
  for (const auto& [key, v] : series_) {
    absl::StrAppend(out, name_, LabelText(key), " ", FormatValue(v), "\n");
  }
}

CounterVec::CounterVec(std::string name, std::string help, std::vector<std::string> labels)
    : ScalarVec(std::move(name), std::move(help), "counter", std::move(labels)) {}

GaugeVec::GaugeVec(std::string name, std::string help, std::vector<std::string> labels)
    : ScalarVec(std::move(name), std::move(help), "gauge", std::move(labels)) {}

HistogramVec::HistogramVec(std::string name, std::string help, std::vector<std::string> labels,
                           std::vector<double> bounds)
    : Family(std::move(name), std::move(help), "histogram", std::move(labels)),
      bounds_(std::move(bounds)) {}

void HistogramVec::Observe(Labels values, double v) {
  const std::string& key = ScratchKey(*this, values);
  size_t b = 0;
  while (b < bounds_.size() && v > bounds_[b]) ++b;
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  if (it == series_.end()) it = series_.try_emplace(key).first;
  Series& s = it->second;
  if (s.buckets.empty()) s.buckets.assign(bounds_.size() + 1, 0);
  s.buckets[b]++;
  s.sum += v;
  s.count++;
}

uint64_t HistogramVec::Count(Labels values) const {
  std::string key = Key(values);
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  return it == series_.end() ? 0 : it->second.count;
}

void HistogramVec::Render(std::string* out) const {
  RenderHeader(out);
  absl::MutexLock lock(&mu_);
  for (const auto& [key, s] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      cumulative += s.buckets[i];
      const std::string le = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
      absl::StrAppend(out, name_, "_bucket", LabelText(key, "le", le), " ", cumulative, "\n");
    }
    absl::StrAppend(out, name_, "_sum", LabelText(key), " ", FormatValue(s.sum), "\n");
    absl::StrAppend(out, name_, "_count", LabelText(key), " ", s.count, "\n");
  }
}

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    120,  300, 600};
}

CounterVec* Registry::AddCounter(std::string name, std::string help,
                                 std::vector<std::string> labels) {
  auto f = std::make_unique<CounterVec>(std::move(name), std::move(help), std::move(labels));
  CounterVec* raw = f.get();
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(f));
  return raw;
}

GaugeVec* Registry::AddGauge(std::string name, std::string help, std::vector<std::string> labels) {
  auto f = std::make_unique<GaugeVec>(std::move(name), std::move(help), std::move(labels));
  GaugeVec* raw = f.get();
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(f));
  return raw;
}

HistogramVec* Registry::AddHistogram(std::string name, std::string help,
                                     std::vector<std::string> labels, std::vector<double> bounds) {
  auto f = std::make_unique<HistogramVec>(std::move(name), std::move(help), std::move(labels),
                                          std::move(bounds));
  HistogramVec* raw = f.get();
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(f));
  return raw;
}

void Registry::AddCollector(std::function<void(std::string*)> collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) f->Render(&out);
  for (const auto& c : collectors_) c(&out);
  return out;
}

void RenderGaugeHeader(std::string* out, std::string_view name, std::string_view help) {
  absl::StrAppend(out, "# HELP ", ToAbsl(name), " ", ToAbsl(help), "\n# TYPE ", ToAbsl(name), " gauge\n");
}

void RenderSample(std::string* out, std::string_view name,
                  std::initializer_list<std::pair<std::string_view, std::string_view>> labels,
                  double v) {
  out->append(name);
  if (labels.size() > 0) {
    out->push_back('{');
    bool first = true;
    for (const auto& [k, val] : labels) {
      if (!first) out->push_back(',');
      first = false;
      absl::StrAppend(out, ToAbsl(k), "=\"", EscapeLabelValue(val), "\"");
    }
    out->push_back('}');
  }
  absl::StrAppend(out, " ", FormatValue(v), "\n");
}

}  // namespace kvroute::proxy::metrics
