#include "bench/kvroute_bench/instance_load.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>

#include "bench/kvroute_bench/session_turns.h"

namespace kvroute::bench {
namespace {

// Sums a gauge's samples per instance; the mean is taken at the end.
struct GaugeSum {
  double sum = 0;
  int64_t n = 0;
  void Add(double v) {
    if (v < 0) return;  // not read
    sum += v;
    ++n;
  }
  double Mean() const { return n > 0 ? sum / static_cast<double>(n) : -1; }
};

struct Gauges {
  GaugeSum running, waiting, gpu_busy;
};

}  // namespace

std::vector<InstanceLoad> InstanceLoads(const std::vector<RequestRecord>& requests,
                                        const std::vector<InstanceSample>& samples) {
  std::map<std::string, InstanceLoad, std::less<>> by_name;
  auto at = [&](std::string_view name) -> InstanceLoad& {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      it = by_name.emplace(std::string(name), InstanceLoad{}).first;
      it->second.instance = std::string(name);
    }
    return it->second;
  };

  // A session starts where its earliest served turn ran (turn order, then send time, as
  // session_turns.h orders a job's turns).
  std::map<int64_t, const RequestRecord*> first_turn;
  for (const RequestRecord& r : requests) {
    if (!r.ok() || r.backend.empty()) continue;
    InstanceLoad& here = at(KvInstance(r.backend));
    ++here.served;
    if (r.prompt_tokens > 0) {
      if (r.offloaded()) {
        at(r.backend.substr(0, r.backend.rfind("->"))).computed_tokens += r.prompt_tokens;
      } else {
        here.computed_tokens +=
            std::max<int64_t>(r.prompt_tokens - std::max<int64_t>(r.cached_tokens, 0), 0);
      }
    }
    if (r.job < 0) continue;
    auto [it, inserted] = first_turn.emplace(r.job, &r);
    if (!inserted &&
        std::tie(r.turn, r.t_start) < std::tie(it->second->turn, it->second->t_start)) {
      it->second = &r;
    }
  }
  for (const auto& [job, r] : first_turn) ++at(KvInstance(r->backend)).sessions_started;

  std::map<std::string, Gauges, std::less<>> gauges;
  for (const InstanceSample& x : samples) {
    if (x.instance.empty()) continue;
    Gauges& g = gauges[x.instance];
    g.running.Add(x.running);
    g.waiting.Add(x.waiting);
    g.gpu_busy.Add(x.gpu_busy);
  }
  for (const auto& [name, g] : gauges) {
    InstanceLoad& load = at(name);
    load.running = g.running.Mean();
    load.waiting = g.waiting.Mean();
    load.gpu_busy = g.gpu_busy.Mean();
  }

  std::vector<InstanceLoad> out;
  out.reserve(by_name.size());
  for (auto& [name, load] : by_name) out.push_back(std::move(load));
  return out;
}

LoadSpread LoadSpreadOf(const std::vector<InstanceLoad>& loads) {
  auto spread = [&](auto figure, auto has) {
    InstanceRange s;
    double sum = 0;
    for (const InstanceLoad& l : loads) {
      if (!has(l)) continue;
      const double v = static_cast<double>(figure(l));
      s.min = s.n == 0 ? v : std::min(s.min, v);
      s.max = s.n == 0 ? v : std::max(s.max, v);
      sum += v;
      ++s.n;
    }
    if (s.n > 0) s.mean = sum / s.n;
    return s;
  };
  // A GPU exporter's entry has neither requests nor a running gauge: it is no instance of
  // the router's.
  const bool any_served =
      std::any_of(loads.begin(), loads.end(), [](const InstanceLoad& l) { return l.served > 0; });
  auto serving = [&](const InstanceLoad& l) {
    return any_served && (l.served > 0 || l.running >= 0);
  };
  LoadSpread out;
  out.sessions_started = spread([](const InstanceLoad& l) { return l.sessions_started; }, serving);
  out.served = spread([](const InstanceLoad& l) { return l.served; }, serving);
  out.computed_tokens = spread([](const InstanceLoad& l) { return l.computed_tokens; }, serving);
  out.running = spread([](const InstanceLoad& l) { return l.running; },
                       [](const InstanceLoad& l) { return l.running >= 0; });
  out.waiting = spread([](const InstanceLoad& l) { return l.waiting; },
                       [](const InstanceLoad& l) { return l.waiting >= 0; });
  out.gpu_busy = spread([](const InstanceLoad& l) { return l.gpu_busy; },
                        [](const InstanceLoad& l) { return l.gpu_busy >= 0; });
  double most = -1;
  for (const InstanceLoad& l : loads) {
    if (l.running > most) {
      most = l.running;
      out.busiest = l.instance;
    }
  }
  return out;
}

}  // namespace kvroute::bench
