#include "bench/kvroute_bench/prompt_sources.h"

#include <map>

#include "absl/strings/str_format.h"

namespace kvroute::bench {

PromptSources SumPromptSources(const std::vector<InstanceSample>& samples) {
  std::map<std::string, const InstanceSample*> last;
  for (const InstanceSample& x : samples) {
    if (x.prompt_local_compute < 0) continue;
    const InstanceSample*& slot = last[x.instance];
    if (slot == nullptr || x.t >= slot->t) slot = &x;
  }
  PromptSources s;
  for (const auto& [instance, x] : last) {
    s.known = true;
    const double external = std::max(0.0, x->prompt_external);
    const double pool = std::max(0.0, x->prompt_pool_loaded);
    s.computed += std::max(0.0, x->prompt_local_compute);
    s.gpu_hit += std::max(0.0, x->prompt_local_cache_hit);
    s.pool_reload += pool;
    s.host_reload += std::max(0.0, external - pool);
  }
  return s;
}

std::vector<std::string> PromptSourceHeader() {
  return {"configuration", "prompt tokens", "GPU hit", "host reload", "pool reload", "computed"};
}

std::vector<std::vector<std::string>> PromptSourceRows(const Report& report) {
  std::vector<std::vector<std::string>> rows;
  for (const RunResult& r : report.runs) {
    const PromptSources s = SumPromptSources(r.samples);
    if (!s.known || s.total() <= 0) continue;
    auto share = [&](double v) {
      return absl::StrFormat("%.0f (%.1f%%)", v, 100.0 * v / s.total());
    };
    rows.push_back({r.name, absl::StrFormat("%.0f", s.total()), share(s.gpu_hit),
                    share(s.host_reload), share(s.pool_reload), share(s.computed)});
  }
  return rows;
}

}  // namespace kvroute::bench
