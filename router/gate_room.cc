#include "router/gate_room.h"

#include <algorithm>

namespace kvroute::router {

void GateRoom::LearnPause(absl::Duration pause) {
  if (options_.mode != Mode::kAuto || pause < absl::ZeroDuration()) return;
  ++pauses_;
  const double w = std::max(options_.share_weight, 1.0 / static_cast<double>(pauses_));
  const double long_pause = absl::ToDoubleSeconds(pause) > options_.long_pause_s ? 1 : 0;
  long_share_ += w * (long_pause - long_share_);
  if (pauses_ < options_.min_pauses) return;
  if (!tier_ && long_share_ >= options_.tier_at_share) tier_ = true;
  if (tier_ && long_share_ < options_.gpu_below_share) tier_ = false;
}

}  // namespace kvroute::router
