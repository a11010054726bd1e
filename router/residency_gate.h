// ResidencyGate: an agent session is sent to its instance only while the KV
// of the sessions resident there fits the instance's pool.
//
// Why. Coding-agent sessions are closed loops: a turn's answer, a few
// seconds of tool time, the next turn with the whole context again. When the
// live sessions' contexts exceed an instance's KV, vLLM admits the head of
// its waiting queue the moment a running request frees its blocks, and that
// head, a session whose prefix is long gone, evicts the least recently freed
// blocks: the prefix of the session that has just finished its turn and is
// about to send the next one. Every turn then finds its prefix evicted and
// prefills its whole context again, which lengthens every queue, which
// evicts more (the working-set thrashing of paged memory). Neither the
// engine's scheduler nor any placement avoids it once every instance's
// sessions exceed its pool; holding the excess sessions back does, as an OS
// suspends processes whose working sets do not fit.
//
// What. Per instance, the resident sessions and their footprints (the KV
// of their last turn: prompt plus output, in tokens). This is the router's
// one model of which sessions' KV an instance must hold: placement reads the
// same residents as its memory demand (resident_tokens). Every turn of a
// session enters it; one that is not held (`Turn::hold` false: an offload,
// or holding switched off) becomes resident at once. A session idle for
// `window` (or `grace`, if longer) leaves: it ended, or thinks longer than
// agents do between turns. A request of a resident session goes at once. A
// request of a session not resident there goes at once if nobody waits and
// the resident footprints plus its own stay within `fill` of the capacity
// (or nothing is resident); else it waits until it fits, in the order its
// wait runs out (below), except that a waiter that fits goes ahead of one
// that does not (backfilling, so the pool stays full). Room is made when
//   - a resident session has been idle for `grace` (it ended, or thinks
//     longer than agents do between turns);
//   - a resident session that has run `quantum_turns` turns since it became
//     resident finishes a turn while others wait: it yields its place and
//     its next turn queues behind them (round-robin residency, so a session
//     waits about (waiting / resident) x quantum turns, not until others end);
//   - a waiter's wait has run out: the residents that have had the most
//     turns yield until it fits, which bounds every request's wait. A turn
//     may bring a shorter bound than `max_wait` (its deadline less its
//     predicted prefill: the wait it can afford); waiters are queued by when
//     their waits run out, so the most urgent goes first among those that fit.
// With `yield_grown`, a resident's next turn whose context has grown past
// what fits beside the other residents does not go at once: the session
// gives its place up and the turn queues as a new session's would. A
// session's context grows every turn, so the residents of a full instance
// outgrow its pool together; vLLM then evicts the prefixes of those between
// turns and every returning turn recomputes part of its context. Yielding
// the one that outgrew keeps the rest within the pool: one long wait of one
// session instead of a recompute for many (bench README, "The grown
// resident's yield").
// A waiter whose prefix its instance no longer holds (`movable`: it will
// prefill cold wherever it goes) is not tied to the instance it was routed
// to: it goes to whichever instance the gate knows has room first (TakeMove
// tells the caller where), so a cold turn does not queue behind one
// instance's residents while another's pool has room. When it enters, of
// the instances with room it takes the one with the least room free that
// fits it (best fit): cold turns fill the crowded instances and leave the
// others' sessions within their pools.
// A session that moves to another instance leaves the first one's residents.
// On an instance with a host-memory KV tier a session's KV is not lost when
// its GPU blocks go: the engine wrote it through to host memory and reloads
// it in well under a second. When the router knows the tier's size it gives
// that as the instance's capacity (Turn::capacity_tokens: the KV that keeps
// the residents without a recompute), so the gate fills the tier and the
// engine swaps sessions between it and the GPU (while the router's room
// for the gate is the tier: router.residency.room, options.h). A
// cold turn there (its prefix nowhere on the instance: `movable`) is
// different: its prefill writes its whole footprint into the GPU, so it
// goes at once only within the GPU pool's room (Turn::gpu_capacity_tokens);
// otherwise it waits, as a waiter within the tier's room, for the next turn
// to end there or for another instance's room. Whatever the capacity, an idle resident there
// that has been idle longer than sessions take to come back (twice the mean
// gap between a resident's turns, learned; at most `grace`) is swapped out
// for a turn that does not fit, rather than held until `grace`: when the
// turn enters, if its own reload (`reload_s`: what only that tier holds of
// its prefix; 0 when nothing is reloaded) is shorter than the wait turns
// meet here (the mean of the waits the gate has seen, `grace` before the
// first), and for waiters once the resident passes that idle time. Residents still within
// it stay: swapping out a session about to send its next turn only moves
// the wait to it and adds a reload for both. Swapped-out sessions are a
// state, not a loss: their next turn is such a reload in turn.
//
// Pure and deterministic: time is passed in, nothing here waits. The router
// owns it under its lock (router/router_impl.h); residency/residency_wait.h
// parks the waiters and wakes the ids each call returns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace kvroute::router {

class ResidencyGate {
 public:
  struct Options {
    bool enabled = true;
    double fill = 0.9;  // of each instance's KV capacity
    int quantum_turns = 8;
    absl::Duration grace = absl::Seconds(15);
    absl::Duration max_wait = absl::Seconds(120);
    // An idle session stays resident (and counts in its instance's demand)
    // this long; zero: it counts in no demand, and leaves after `grace`.
    absl::Duration window = absl::Seconds(60);
    // A resident whose next turn's grown context no longer fits beside the
    // others gives its place up and queues as a new session's turn would
    // (Enter). Off: it goes at once, whatever its growth.
    bool yield_grown = false;
  };

  struct Counters {
    uint64_t admitted_at_once = 0;  // resident already, or it fitted
    uint64_t waited = 0;            // requests that had to wait
    uint64_t admitted_after_wait = 0;
    uint64_t admitted_by_timeout = 0;  // waited max_wait: others yielded to it
    uint64_t moved = 0;                // admitted on another instance than the one routed to
    uint64_t yielded = 0;              // residents that gave their place up after their quantum
    uint64_t yielded_forced = 0;       // ... to a waiter past max_wait
    uint64_t yielded_grown = 0;        // ... as its next turn outgrew its room (yield_grown)
    uint64_t expired = 0;              // residents idle for the grace time or the window
    uint64_t swapped_in = 0;           // turns admitted at once by swapping idle residents out
                                       // (a waiter admitted so counts as after_wait)
    uint64_t swapped_out = 0;          // idle residents swapped out before the grace time
  };

  explicit ResidencyGate(Options options);

  // One turn asking to go to an instance.
  struct Turn {
    int64_t footprint_tokens = 0;  // its KV there: prompt + expected output
    // The KV that keeps the instance's residents without a recompute: its
    // GPU pool, or a larger tier that holds what the GPU holds.
    int64_t capacity_tokens = 0;
    // With such a tier, the GPU pool (0: capacity_tokens): a `movable`
    // (cold) turn goes at once only within its room.
    int64_t gpu_capacity_tokens = 0;
    // The longest it may wait; zero or more than Options::max_wait:
    // Options::max_wait.
    absl::Duration max_wait = absl::ZeroDuration();
    // Its prefix is gone from the instance: any instance with room will do.
    bool movable = false;
    // False: the turn goes now whatever fits (it only becomes resident).
    bool hold = true;
    // The instance has a host tier: the seconds the turn's reload of what
    // only that tier holds takes (0: nothing to reload, the GPU holds its
    // prefix or it is cold); negative: the instance has no host tier.
    double reload_s = -1;
  };

  // A request of `session` (non-empty) goes to `backend`, whose KV pool is
  // `capacity_tokens`, with `footprint_tokens` of KV (prompt + expected
  // output). Returns 0 when it may go now; else the id of its wait, which a
  // later call returns in `woken` once it may go. Requests of other sessions
  // this admits (room freed by the session moving away) are added to `woken`.
  uint64_t Enter(int backend, std::string_view session, const Turn& turn, absl::Time now,
                 std::vector<uint64_t>* woken);
  uint64_t Enter(int backend, std::string_view session, int64_t footprint_tokens,
                 int64_t capacity_tokens, absl::Time now, std::vector<uint64_t>* woken) {
    return Enter(backend, session, Turn{footprint_tokens, capacity_tokens}, now, woken);
  }
  // The instance a woken waiter was admitted on when that is not the one it
  // entered for (a movable waiter taken by another instance's room); nullopt
  // otherwise. Forgets the move.
  std::optional<int> TakeMove(uint64_t waiter);
  // The request of `session` on `backend` ended, its KV now
  // `footprint_tokens` (prompt + completion; <= 0 keeps the last figure).
  void Leave(int backend, std::string_view session, int64_t footprint_tokens, absl::Time now,
             std::vector<uint64_t>* woken);
  // Time passed: residents idle past the window leave; while someone waits,
  // idle residents past the grace time leave and waiters past max_wait go.
  void Tick(absl::Time now, std::vector<uint64_t>* woken);
  // Residents idle past the window leave (no waiter can be woken by this:
  // the grace time, never longer, already let waiters have their room).
  void Age(absl::Time now);
  // A waiter that no longer wants to go (its client left); a no-op for an
  // id already woken.
  void Abandon(uint64_t waiter, absl::Time now, std::vector<uint64_t>* woken);
  // The earliest time Tick would wake someone, if anyone waits.
  std::optional<absl::Time> NextEvent() const;

  // The longest `turn` waits before others yield to it: its own max_wait
  // when shorter than Options::max_wait, else Options::max_wait.
  absl::Duration WaitBound(const Turn& turn) const {
    return turn.max_wait > absl::ZeroDuration() ? std::min(turn.max_wait, options_.max_wait)
                                                : options_.max_wait;
  }
  const Options& options() const { return options_; }
  const Counters& counters() const { return counters_; }
  // The wait a held turn meets: the mean of the waits seen (exponentially
  // weighted), `grace` before the first.
  absl::Duration expected_wait() const { return expected_wait_; }
  // The mean gap between a resident session's turns (exponentially
  // weighted), `grace` before the first.
  absl::Duration reuse_gap() const { return reuse_gap_; }
  // How long an idle resident of an instance with a host tier stays before
  // it may be swapped out: twice the reuse gap, at most `grace`.
  absl::Duration swap_after() const { return std::min(options_.grace, 2 * reuse_gap_); }
  size_t waiting() const;
  // Resident sessions and their footprints on `backend`.
  size_t resident_sessions(int backend) const;
  int64_t resident_tokens(int backend) const;
  // The KV `backend` must keep for its resident sessions as of the last
  // Age/Tick: resident_tokens and the other replicas' (peer_resident_tokens),
  // or 0 with a zero window.
  int64_t demand_tokens(int backend) const {
    return options_.window > absl::ZeroDuration()
               ? resident_tokens(backend) + peer_resident_tokens(backend)
               : 0;
  }
  // Several replicas: the sessions `backend` holds resident here (session,
  // footprint), to publish; and those the other replicas hold there (the
  // largest footprint any holds), which count against its fill beside this
  // gate's own: a session resident here as well counts once. A session
  // resident at a peer is admitted here at once, as a resident's next turn.
  // `waiting_turns` turns wait for room on `backend` elsewhere (the other
  // replicas', and this replica's refused by the cluster store): while any
  // does, the instance is contended as if they waited here, so its idle
  // residents leave after the grace time and its residents yield after their
  // quantum (Leave, Tick), freeing room across replicas.
  // After a change, AdmitWaiters runs for `backend` (waiters may fit now).
  std::vector<std::pair<std::string, int64_t>> Residents(int backend) const;
  void SetPeerResidents(int backend, absl::flat_hash_map<std::string, int64_t> sessions,
                        int64_t waiting_turns, absl::Time now, std::vector<uint64_t>* woken);
  // The peers' resident tokens on `backend` not resident here too.
  int64_t peer_resident_tokens(int backend) const;
  // Several replicas: the sessions that have left an instance's residents
  // (ended, yielded, swapped out, moved) since the last call, in order, for
  // the cluster store to release their reservations. Recorded only once
  // this has been called (a single replica never drains them).
  std::vector<std::pair<int, std::string>> TakeDepartures();
  // Several replicas: `session`, resident on `backend` here, has run `turns`
  // turns there since it became resident, through every replica (the
  // cluster store counts them; this gate sees only the turns routed
  // through it, a replica's share). Its quantum counts from them, so a
  // session yields after as many turns as one gate would let it run. A
  // no-op for a session not resident there.
  void SetTurns(int backend, std::string_view session, int64_t turns);
  // Whether `session` is resident on `backend` now.
  bool IsResident(int backend, std::string_view session) const;
  // Where `session` is resident and its footprint there; nullopt if nowhere.
  struct Residence {
    int backend = -1;
    int64_t footprint_tokens = 0;
  };
  std::optional<Residence> Find(std::string_view session) const;

 private:
  struct Resident {
    int64_t footprint = 0;
    int turns = 0;   // completed since it became resident
    int active = 0;  // requests in flight
    absl::Time last_done = absl::InfinitePast();
  };
  struct Waiter {
    uint64_t id = 0;
    std::string session;
    int64_t footprint = 0;
    absl::Time since;
    absl::Time due;  // since + its wait bound: it goes then, others yielding
    bool movable = false;
  };
  struct Instance {
    absl::flat_hash_map<std::string, Resident> residents;
    int64_t resident_tokens = 0;
    int64_t capacity_tokens = 0;
    std::deque<Waiter> waiting;
    bool tiered = false;  // turns here carry a reload time: it has a host tier
    // Other replicas' residents here, and the sum of their footprints.
    absl::flat_hash_map<std::string, int64_t> peer_residents;
    int64_t peer_tokens = 0;
    int64_t peer_waiting = 0;  // turns waiting for room here elsewhere
  };
  // Someone waits for room on the instance, here or across replicas.
  static bool Contended(const Instance& in) { return !in.waiting.empty() || in.peer_waiting > 0; }
  int64_t PeerTokens(const Instance& in) const;

  Instance& At(int backend);
  // Makes `session` resident on `backend` with one request in flight.
  void Admit(int backend, Instance& in, const std::string& session, int64_t footprint);
  void Evict(Instance& in, const std::string& session);
  // The same for a resident already found; `it` is invalid afterwards.
  void Evict(Instance& in, absl::flat_hash_map<std::string, Resident>::iterator it);
  // One more request of a resident in flight, or one fewer (at `now`): an
  // idle resident is kept in idle_, by when it went idle.
  void Activate(int backend, const std::string& session, Resident& r);
  void Deactivate(int backend, const std::string& session, Resident& r, absl::Time now);
  // Whether `footprint` fits beside the residents, this gate's and the
  // other replicas', within the instance's capacity (or `capacity`);
  // FitsBesideOwn counts this gate's alone.
  bool Fits(const Instance& in, int64_t footprint) const {
    return Fits(in, footprint, in.capacity_tokens);
  }
  bool Fits(const Instance& in, int64_t footprint, int64_t capacity) const;
  bool FitsBesideOwn(const Instance& in, int64_t footprint) const;
  bool MovableWaiting() const;
  // Idle residents past the grace time leave (only while someone waits:
  // otherwise nothing needs their room and they may still come back).
  void ExpireIdle(Instance& in, absl::Time now);
  // Wakes the waiters of `backend` that fit, the earliest due first (one that
  // does not fit is passed over), and those past their bound (others yield
  // to them).
  void AdmitWaiters(int backend, absl::Time now, std::vector<uint64_t>* woken);
  // Admits `w` (of instance `from`'s queue) on `backend`, whose room it fits.
  void AdmitWaiter(int backend, const Waiter& w, bool timed_out, absl::Time now,
                   std::vector<uint64_t>* woken);
  // Whether a turn that does not fit may have idle residents swapped out.
  bool Swappable(double reload_s) const {
    return reload_s >= 0 && absl::Seconds(reload_s) < expected_wait_;
  }
  // How long an idle resident of `in` stays while others wait.
  absl::Duration IdleLimit(const Instance& in) const {
    return in.tiered ? swap_after() : options_.grace;
  }
  // Swaps `backend`'s residents idle for swap_after() out, the longest idle
  // first, until `footprint` fits within `capacity`; false (and nothing
  // changes) when the others alone leave it no room.
  bool SwapIn(int backend, Instance& in, int64_t footprint, int64_t capacity, absl::Time now);
  // Fills `backend`'s free room with movable waiters of other instances, the
  // earliest due first.
  void AdmitMovable(int backend, absl::Time now, std::vector<uint64_t>* woken);

  Options options_;
  std::vector<Instance> instances_;
  absl::flat_hash_map<std::string, int> home_;  // resident session -> backend
  absl::flat_hash_map<uint64_t, int> moved_;    // woken waiter -> the instance that took it
  // Departures since TakeDepartures last ran, once it has (track_departures_).
  std::vector<std::pair<int, std::string>> departed_;
  bool track_departures_ = false;
  // Idle residents, the longest idle first: (last_done, backend, session).
  std::set<std::tuple<absl::Time, int, std::string>> idle_;
  uint64_t next_waiter_ = 1;
  Counters counters_;
  absl::Duration expected_wait_;
  absl::Duration reuse_gap_;
};

}  // namespace kvroute::router
