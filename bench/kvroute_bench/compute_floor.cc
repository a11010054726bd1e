#include "bench/kvroute_bench/compute_floor.h"

#include <algorithm>

#include "absl/status/statusor.h"

namespace kvroute::bench {

double PrefillFloorSeconds(const sim::Profile& profile, int64_t prompt_tokens,
                           int64_t cached_tokens) {
  if (prompt_tokens <= 0) return 0;
  const sim::TimingModel& tm = profile.timing;
  const int64_t budget = std::max(1, profile.max_num_batched_tokens);
  int64_t context = std::clamp<int64_t>(cached_tokens, 0, prompt_tokens - 1);
  double seconds = 0;
  while (context < prompt_tokens) {
    const int64_t n = std::min(budget, prompt_tokens - context);
    seconds += tm.step_fixed_s + tm.weight_read_s * tm.WeightFraction(n);
    if (n == 1) {
      // The engine runs a lone last token as a decode: it reads the context's KV.
      seconds += tm.decode_s_per_seq + tm.kv_read_s_per_token * static_cast<double>(context + 1);
    } else {
      seconds += tm.PrefillChunkCost(context, n);
    }
    context += n;
  }
  return seconds;
}

absl::Status UseFleetProfile(const std::string& profile_path, RunOptions& run) {
  sim::Profile profile = sim::DefaultProfile();
  if (!profile_path.empty()) {
    absl::StatusOr<sim::Profile> loaded = sim::LoadProfile(profile_path);
    if (!loaded.ok()) return loaded.status();
    profile = *std::move(loaded);
  }
  run.kv_bytes_per_token = profile.KvBytesPerToken();
  run.prefill_floor = [profile](int64_t prompt_tokens, int64_t cached_tokens) {
    return PrefillFloorSeconds(profile, prompt_tokens, cached_tokens);
  };
  return absl::OkStatus();
}

}  // namespace kvroute::bench
