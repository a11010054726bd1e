// GateRoom: which room the residency gate gives an instance with a host tier
// (or behind the fleet-shared pool): the tier, or the GPU pool alone.
//
// Why. The two rooms win in different regimes (bench README, "The gate's
// room"). With the tier as the room every session the tier keeps is
// admitted and the engine swaps them through the GPU: where agents
// sometimes pause for long between turns (people reading, builds and test
// runs: the published pauses have a median of 5 s and a tail to 80 s), the
// GPU room a paused session would hold goes to another's turn, and the
// paused one comes back by a reload. Where every agent comes back within
// seconds, the admitted sessions' turns outnumber what the GPU runs at
// once: a running turn needs its whole context in HBM, so each waits in the
// engine for the others' blocks, and the GPU pool as the room (sessions
// rotating in sets the GPU holds, a rotation costing a reload) meets more
// SLOs. Whether any agent pauses for long tells the two apart, and unlike a
// turn's time (which the room itself lengthens or shortens) the pauses are
// the clients', so the choice does not feed back into what it measures.
//
// What. `auto`: the share of the agents' pauses (from a turn's end to the
// session's next turn reaching the router, over turns of sessions with
// nothing else in flight) longer than `long_pause_s`, a slow mean (each new
// pause weighted 1/n up to `share_weight`). The GPU pool until `min_pauses`
// are learned and while the share stays below `tier_at_share`; the tier
// once it reaches that, the GPU pool again once it falls below
// `gpu_below_share` (hysteresis: a share between the two keeps the room).
// It starts at the GPU pool and learns from few pauses because a run's
// first turns decide where its sessions settle: the tier as the room then
// piles a burst of cold first turns onto one instance where the agents come
// back within seconds, and with long pauses a switch to the tier late in
// the run leaves it worse than the tier from the start (bench README, "The
// gate's room"). `tier` and `gpu` fix the room. `auto` is the default: each
// fixed room loses goodput where the other wins it, and auto reads like the
// better of the two on goodput in every regime measured.
//
// Pure and deterministic: the caller passes each pause in. Not thread-safe:
// the Router owns it under its mutex.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace kvroute::router {

class GateRoom {
 public:
  enum class Mode { kTier, kGpu, kAuto };
  struct Options {
    Mode mode = Mode::kAuto;
    double long_pause_s = 10;
    double gpu_below_share = 0.01;
    double tier_at_share = 0.05;
    int64_t min_pauses = 8;
    double share_weight = 0.02;
  };

  explicit GateRoom(Options options)
      : options_(options), tier_(options.mode == Mode::kTier) {}

  // A session's next turn arrived `pause` after its previous turn ended.
  void LearnPause(absl::Duration pause);
  // Whether the room on an instance with a tier is the tier (false: the
  // GPU pool).
  bool tier() const { return tier_; }
  // The share of long pauses learned (0 before any) and how many pauses
  // went into it.
  double long_pause_share() const { return long_share_; }
  int64_t pauses() const { return pauses_; }
  const Options& options() const { return options_; }

 private:
  Options options_;
  bool tier_;
  double long_share_ = 0;
  int64_t pauses_ = 0;
};

}  // namespace kvroute::router
