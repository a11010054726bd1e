// A small Prometheus registry: labelled counters, gauges and histograms,
// rendered in the text exposition format (version 0.0.4).
//
//   Registry reg;
//   CounterVec* requests = reg.AddCounter("kvroute_requests_total", "Requests.",
//                                         {"route", "status"});
//   requests->Inc({"/v1/chat/completions", "200"});
//   std::string text = reg.Render();
//
// Thread-safety: every method is safe to call from any thread. Each family
// guards its series with one mutex; families are created at start-up and live
// as long as the registry.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace kvroute::proxy::metrics {

using Labels = std::initializer_list<std::string_view>;

// Escapes a label value per the text format (backslash, quote, newline).
std::string EscapeLabelValue(std::string_view v);
// Formats a sample value the way Prometheus expects (+Inf, NaN, integers
// without a fraction).
std::string FormatValue(double v);

class Family {
 public:
  Family(std::string name, std::string help, std::string type, std::vector<std::string> labels);
  virtual ~Family() = default;
  virtual void Render(std::string* out) const = 0;
  const std::string& name() const { return name_; }
  // Appends the series key of `values` (the joined label values).
  void AppendKey(Labels values, std::string* key) const;

 protected:
  std::string Key(Labels values) const;  // joined label values
  std::string LabelText(const std::string& key, std::string_view extra_name = {},
                        std::string_view extra_value = {}) const;
  void RenderHeader(std::string* out) const;

  std::string name_, help_, type_;
  std::vector<std::string> label_names_;
};

// Counters and gauges: one number per label set.
class ScalarVec : public Family {
 public:
  ScalarVec(std::string name, std::string help, std::string type,
            std::vector<std::string> labels);
  double Value(Labels values) const;
  void Render(std::string* out) const override;

 protected:
  void Update(Labels values, double v, bool add);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, double> series_ ABSL_GUARDED_BY(mu_);
};

class CounterVec : public ScalarVec {
 public:
  CounterVec(std::string name, std::string help, std::vector<std::string> labels);
  void Inc(Labels values, double by = 1.0) { Update(values, by, true); }
};

class GaugeVec : public ScalarVec {
 public:
  GaugeVec(std::string name, std::string help, std::vector<std::string> labels);
  void Set(Labels values, double v) { Update(values, v, false); }
  void Add(Labels values, double by) { Update(values, by, true); }
};

class HistogramVec : public Family {
 public:
  // `bounds` are the buckets' upper bounds, ascending; +Inf is implicit.
  HistogramVec(std::string name, std::string help, std::vector<std::string> labels,
               std::vector<double> bounds);
  void Observe(Labels values, double v);
  uint64_t Count(Labels values) const;
  void Render(std::string* out) const override;

 private:
  struct Series {
    std::vector<uint64_t> buckets;  // non-cumulative; one extra for +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Series> series_ ABSL_GUARDED_BY(mu_);
};

// Latency buckets in seconds, from 100 µs to 10 minutes.
std::vector<double> LatencyBuckets();

class Registry {
 public:
  CounterVec* AddCounter(std::string name, std::string help, std::vector<std::string> labels = {});
  GaugeVec* AddGauge(std::string name, std::string help, std::vector<std::string> labels = {});
  HistogramVec* AddHistogram(std::string name, std::string help, std::vector<std::string> labels,
                             std::vector<double> bounds);
  // A collector appends freshly computed families (e.g. gauges read from the
  // router) at render time.
  void AddCollector(std::function<void(std::string*)> collector);
  std::string Render() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(std::string*)>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Helpers for collectors writing one-off gauge families.
void RenderGaugeHeader(std::string* out, std::string_view name, std::string_view help);
void RenderSample(std::string* out, std::string_view name,
                  std::initializer_list<std::pair<std::string_view, std::string_view>> labels,
                  double v);

}  // namespace kvroute::proxy::metrics
