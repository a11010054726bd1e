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
// guards its map of series with one mutex; a series' numbers are atomics, and
// a series, once created, stays at its address for the family's life. Each
// thread remembers the series it updated last (a few per family), so the
// request path's updates usually take neither the mutex nor a map lookup.
// Families are created at start-up and live as long as the registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace kvroute::proxy::metrics {

using Labels = std::initializer_list<std::string_view>;

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

  // The series of `values`: from this thread's cache of the family's
  // recent series, else from `lookup` (called with the joined key; it finds
  // or creates the series under the family's mutex and returns its stable
  // address), which the cache then remembers.
  using Lookup = void* (*)(Family* self, const std::string& key);
  void* Series(Labels values, Lookup lookup);

  std::string name_, help_, type_;
  std::vector<std::string> label_names_;
  const uint64_t id_;  // unique in the process: the key of thread caches
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
  using Cell = std::atomic<double>;
  Cell* Find(Labels values);
  mutable absl::Mutex mu_;
  absl::node_hash_map<std::string, Cell> series_ ABSL_GUARDED_BY(mu_);
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
  struct Cells {
    explicit Cells(size_t buckets_size)
        : buckets(std::make_unique<std::atomic<uint64_t>[]>(buckets_size)) {}
    std::unique_ptr<std::atomic<uint64_t>[]> buckets;  // non-cumulative; one extra for +Inf
    std::atomic<double> sum{0};
    std::atomic<uint64_t> count{0};
  };
  Cells* Find(Labels values);
  std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  absl::node_hash_map<std::string, Cells> series_ ABSL_GUARDED_BY(mu_);
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
