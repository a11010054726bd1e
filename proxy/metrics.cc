#include "proxy/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/absl_compat.h"
#include "wire/prometheus_text.h"

namespace kvroute::proxy::metrics {
namespace {
constexpr char kSep = '\x1f';  // joins label values into one map key
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

namespace {
std::atomic<uint64_t> next_family_id{1};
}  // namespace

Family::Family(std::string name, std::string help, std::string type,
               std::vector<std::string> labels)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(std::move(type)),
      label_names_(std::move(labels)),
      id_(next_family_id.fetch_add(1, std::memory_order_relaxed)) {}

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
                      wire::EscapeLabelValue(i < values.size() ? std::string_view(values[i].data(), values[i].size()) : ""), "\"");
    }
  }
  if (!extra_name.empty()) {
    if (!out.empty()) out.push_back(',');
    absl::StrAppend(&out, ToAbsl(extra_name), "=\"", ToAbsl(extra_value), "\"");
  }
  return out.empty() ? out : absl::StrCat("{", out, "}");
}

void Family::RenderHeader(std::string* out) const {
  wire::AppendHelpAndType(out, name_, type_, help_);
}

ScalarVec::ScalarVec(std::string name, std::string help, std::string type,
                     std::vector<std::string> labels)
    : Family(std::move(name), std::move(help), std::move(type), std::move(labels)) {}

namespace {
// Each thread's recent series: kCacheSets sets of kCacheWays entries, a
// family's entries in set id % kCacheSets. An entry is valid for its family
// id only, and ids are never reused, so entries of a destroyed family are
// never matched again. A request updates ~11 series of ~25 families, so a
// per-thread cache spares each update the family's mutex and map lookup.
constexpr size_t kCacheSets = 64;
constexpr size_t kCacheWays = 8;
struct CacheEntry {
  uint64_t family = 0;
  std::string key;
  void* series = nullptr;
};
struct CacheSet {
  std::array<CacheEntry, kCacheWays> ways;
  size_t next = 0;  // the way replaced next (round robin)
};

// Whether `key` is the joined key of `values` (AppendKey's), without
// joining them: a cache hit then costs no copy of the label values.
bool KeyMatches(const std::string& key, Labels values) {
  size_t pos = 0;
  bool first = true;
  for (std::string_view v : values) {
    if (!first) {
      if (pos >= key.size() || key[pos] != kSep) return false;
      ++pos;
    }
    first = false;
    if (key.compare(pos, v.size(), v.data(), v.size()) != 0) return false;
    pos += v.size();
  }
  return pos == key.size();
}
}  // namespace

void* Family::Series(Labels values, Lookup lookup) {
  thread_local std::string key;
  thread_local std::array<CacheSet, kCacheSets> cache;
  CacheSet& set = cache[id_ % kCacheSets];
  for (CacheEntry& e : set.ways) {
    if (e.family == id_ && KeyMatches(e.key, values)) return e.series;
  }
  key.clear();
  AppendKey(values, &key);
  void* series = lookup(this, key);
  CacheEntry& e = set.ways[set.next];
  set.next = (set.next + 1) % kCacheWays;
  e.family = id_;
  e.key = key;
  e.series = series;
  return series;
}

ScalarVec::Cell* ScalarVec::Find(Labels values) {
  return static_cast<Cell*>(Series(values, [](Family* f, const std::string& key) -> void* {
    auto* self = static_cast<ScalarVec*>(f);
    absl::MutexLock lock(&self->mu_);
    return &self->series_.try_emplace(key, 0.0).first->second;
  }));
}

void ScalarVec::Update(Labels values, double v, bool add) {
  Cell* cell = Find(values);
  if (add) {
    cell->fetch_add(v, std::memory_order_relaxed);
  } else {
    cell->store(v, std::memory_order_relaxed);
  }
}

double ScalarVec::Value(Labels values) const {
  std::string key = Key(values);
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  return it == series_.end() ? 0 : it->second.load(std::memory_order_relaxed);
}

void ScalarVec::Render(std::string* out) const {
  RenderHeader(out);
  absl::MutexLock lock(&mu_);
  if (series_.empty() && label_names_.empty()) {
    absl::StrAppend(out, name_, " 0\n");
    return;
  }
  for (const auto& [key, v] : series_) {
    absl::StrAppend(out, name_, LabelText(key), " ",
                    FormatValue(v.load(std::memory_order_relaxed)), "\n");
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

HistogramVec::Cells* HistogramVec::Find(Labels values) {
  return static_cast<Cells*>(Series(values, [](Family* f, const std::string& key) -> void* {
    auto* self = static_cast<HistogramVec*>(f);
    absl::MutexLock lock(&self->mu_);
    return &self->series_.try_emplace(key, self->bounds_.size() + 1).first->second;
  }));
}

void HistogramVec::Observe(Labels values, double v) {
  size_t b = 0;
  while (b < bounds_.size() && v > bounds_[b]) ++b;
  Cells* s = Find(values);
  s->buckets[b].fetch_add(1, std::memory_order_relaxed);
  s->sum.fetch_add(v, std::memory_order_relaxed);
  // Last, released: a render that reads this count (acquire) sees the bucket
  // and the sum it counts.
  s->count.fetch_add(1, std::memory_order_release);
}

uint64_t HistogramVec::Count(Labels values) const {
  std::string key = Key(values);
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  return it == series_.end() ? 0 : it->second.count.load(std::memory_order_acquire);
}

void HistogramVec::Render(std::string* out) const {
  RenderHeader(out);
  absl::MutexLock lock(&mu_);
  for (const auto& [key, s] : series_) {
    // The count first: every observation it counts is in the buckets read
    // after it. Observations in flight may add to the buckets and not yet to
    // the count; the +Inf bucket is the count, as the text format requires.
    const uint64_t count = s.count.load(std::memory_order_acquire);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      cumulative = i < bounds_.size()
                       ? std::min(count, cumulative + s.buckets[i].load(std::memory_order_relaxed))
                       : count;
      const std::string le = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
      absl::StrAppend(out, name_, "_bucket", LabelText(key, "le", le), " ", cumulative, "\n");
    }
    absl::StrAppend(out, name_, "_sum", LabelText(key), " ",
                    FormatValue(s.sum.load(std::memory_order_relaxed)), "\n");
    absl::StrAppend(out, name_, "_count", LabelText(key), " ", count, "\n");
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
  wire::AppendHelpAndType(out, name, "gauge", help);
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
      absl::StrAppend(out, ToAbsl(k), "=\"", wire::EscapeLabelValue(val), "\"");
    }
    out->push_back('}');
  }
  absl::StrAppend(out, " ", FormatValue(v), "\n");
}

}  // namespace kvroute::proxy::metrics
