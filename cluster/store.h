// cluster::ClusterStore: what one kvroute replica shares with the others
// through a store, for the state the engines' KV events do not carry
// (docs/design.md, "Several replicas: the cluster store"). RedisStore
// (cluster/redis_store.h) implements it.
//
//   std::unique_ptr<ClusterStore> store = ...;        // RedisStore::Create(options)
//   store->PublishLoad({{"gpu0", {.requests = 3, .prefill_tokens = 9000, .tokens = 41000}}});
//   store->PublishRates({{"gpu0", 1.3}});
//   store->PublishHome("session-17", "gpu0");
//   std::shared_ptr<const PeerView> peers = store->View();   // never blocks
//   ... peers->load["gpu0"]: the other live replicas' in-flight load on gpu0
//   absl::StatusOr<Reservation> r =
//       store->Reserve("gpu0", "session-17", 52000, 180000, /*force=*/false);
//   if (!r.ok()) ...     // Unavailable: decide on local state (fail open)
//   if (!r->admitted) ... // the instance is full across replicas: wait
//   store->Release("gpu0", "session-17");
//   store->PublishPins({{.instance = "gpu0", .id = 8, .footprint_chunks = 900, .chain = ...}}, {});
//   cluster::PeerPinChanges pins = store->TakePeerPins();   // the others', since the last call
//
// What runs where: the Publish* calls and Release only queue their write
// (coalesced: one entry per instance or session, the latest wins) and return;
// the implementation's own thread writes them and rebuilds the PeerView every
// sync interval. Reserve and ReadHomes are the two calls that talk to the
// store on the caller's thread, once, bounded by the op timeout; call them
// with no lock held.
//
// Failing open: while the store is unreachable nothing blocks. Writes stay
// queued (up to max_pending_writes, then dropped and counted), View() keeps
// its last value with `stale` set, Reserve and ReadHomes return Unavailable
// at once. On reconnect the replica writes its lease, load and rates again.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kvroute::cluster {

// One replica's in-flight load on one instance, as the router reserves it.
struct InstanceLoad {
  int64_t requests = 0;           // routed, not completed
  int64_t prefill_tokens = 0;     // prefill tokens queued, not yet past the first token
  int64_t tokens = 0;             // in-flight tokens (prompt + expected output)
  int64_t decoding_requests = 0;  // of `requests`, those past their first token
  // Session turns waiting for room on the instance across replicas (refused
  // by Reserve, asking again): while any does, every replica's gate lets
  // its idle residents go as one gate does for its own waiters.
  int64_t waiting = 0;
  // Sessions the replica's residency gate holds resident on the instance, with
  // their KV footprints in tokens. Session ids with a newline are not shared.
  std::vector<std::pair<std::string, int64_t>> residents = {};

  friend bool operator==(const InstanceLoad&, const InstanceLoad&) = default;
};

// Instance name -> load; instance name -> learned rate factor.
using LoadByInstance = absl::flat_hash_map<std::string, InstanceLoad>;
using RateByInstance = absl::flat_hash_map<std::string, double>;

// What the last successful pull saw of the other replicas. Immutable once
// published: readers hold a shared_ptr to it for as long as they like.
struct PeerView {
  // The other live replicas' load, summed per instance (this replica's own
  // load is not in it: the router already holds it).
  LoadByInstance load;
  // Per instance, the sessions the other live replicas hold resident there
  // (session -> footprint tokens; a session several hold: the largest). The
  // `residents` of `load` above stay empty.
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, int64_t>> residents;
  // Per instance, the mean of the rate factors every live replica (this one
  // included) published for it.
  RateByInstance rate_factors;
  // The live replicas' ids (lease key present), this one included, sorted.
  std::vector<std::string> live_replicas;
  // When the pull that built this view finished; InfinitePast before the
  // first one.
  absl::Time synced_at = absl::InfinitePast();
  // The store was unreachable at the last attempt: the figures above are as
  // of `synced_at`.
  bool stale = true;
};

// What Reserve decided.
struct Reservation {
  bool admitted = false;
  // The instance's live reservations, every replica's, after the call.
  int64_t reserved_tokens = 0;
  // Other reservations a forced admission made yield.
  int64_t evicted = 0;
  // A live reservation was held under the id already (by any replica): a
  // resident session's next turn, admitted whatever the others hold, as the
  // local gate admits it, its footprint replaced by this one.
  bool continued = false;
  // The tokens of the turns refused before this one that wait for room on
  // the instance, still asking: a new reservation is admitted only if they
  // fit beside it.
  int64_t waiting_ahead_tokens = 0;
  // A continued reservation: the turns reserved under the id before this
  // one, through any replica, since it was new (0 for a new one). The
  // residency quantum counts a session's turns across replicas with it.
  int64_t turns_before = 0;
};

// A request in flight as one replica's shadow index holds it on an instance
// (router::ShadowPin, the instance by name): the other replicas reserve it
// in their shadows too.
struct RequestPin {
  std::string instance;
  uint64_t id = 0;  // unique among the publishing replica's pins
  int64_t footprint_chunks = 0;
  std::vector<uint64_t> chain = {};  // the leading chunk hashes it reuses

  friend bool operator==(const RequestPin&, const RequestPin&) = default;
};

// The other replicas' pins taken and given back since the last
// TakePeerPins, in the order they were written.
struct PeerPinChanges {
  // Changes may have been lost since the last call (the store reconnected,
  // or more were read than kept): drop every peer pin held before applying
  // these.
  bool reset = false;
  // The latest pull's view, whose load was read after every change below,
  // and every change taken before, was written: an instance it shows
  // without a peer's request in flight holds none of those pins.
  std::shared_ptr<const PeerView> view = nullptr;
  std::vector<std::pair<std::string, RequestPin>> pinned = {};  // (replica, pin)
  std::vector<std::pair<std::string, uint64_t>> unpinned = {};  // (replica, id)
};

// Counters for /metrics; monotonic except `connected`.
struct ClusterStoreStats {
  bool connected = false;
  uint64_t syncs = 0;           // pulls that built a PeerView
  uint64_t sync_failures = 0;   // cycles that failed (store unreachable or an error reply)
  uint64_t reconnects = 0;      // connections established after the first
  uint64_t writes_dropped = 0;  // new entries refused at max_pending_writes
  uint64_t reserve_admitted = 0;     // forced ones included
  uint64_t reserve_refused = 0;      // the instance's fill reached
  uint64_t reserve_forced = 0;       // admitted by making others yield
  uint64_t reserve_evicted = 0;      // reservations that yielded to forced ones
  uint64_t reserve_over_fill = 0;    // new admissions beyond the fill, a lone one larger than it
                                     // aside (a resident's growing footprint is no admission)
  uint64_t reserve_unavailable = 0;  // store error or unreachable: caller failed open
};

class ClusterStore {
 public:
  virtual ~ClusterStore() = default;

  // This replica's whole in-flight load, replacing what it published before
  // (an instance left out has none). Queued; only the latest call is written.
  virtual void PublishLoad(LoadByInstance load) = 0;

  // This replica's learned rate factors per instance, replacing the previous
  // ones. Queued and coalesced like PublishLoad.
  virtual void PublishRates(RateByInstance rates) = 0;

  // `session_id` lives on `instance`; kept session_ttl_s after the last write.
  // Queued, coalesced per session.
  virtual void PublishHome(std::string session_id, std::string instance) = 0;

  // The homes the store knows of `sessions` (one round trip, bounded by
  // op_timeout_s, on the caller's thread); sessions without one are absent.
  // Unavailable while the store is unreachable or on any store error.
  virtual absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadHomes(
      absl::Span<const std::string> sessions) = 0;

  // The latest PeerView; never null, never blocks.
  virtual std::shared_ptr<const PeerView> View() const = 0;

  // Residency admission, atomic across replicas: reserves `tokens` of
  // `instance`'s KV for `reservation_id` iff the live reservations of every
  // replica plus `tokens` stay within `fill_tokens`, or none is live (so a
  // session larger than the fill still gets its turn, as the local residency
  // gate admits it). Reservations whose owner's lease has expired are dropped
  // first; one already held under the same id (by any replica) is a resident
  // session's next turn: replaced, not counted against itself, and admitted
  // whatever the others hold (Reservation::continued). New reservations go
  // first come, first served across replicas, as in one gate: a refused one
  // keeps its place while it asks again (RedisStore: at least every
  // max(1 s, 10 sync intervals)), and a later one is admitted only if it
  // fits beside those waiting ahead. `force` (a turn whose wait ran out)
  // admits whatever the others hold: their reservations yield, the least
  // recently reserved first, until this one fits, as a local waiter past its
  // bound makes residents yield. One round trip on the caller's thread, bounded
  // by op_timeout_s; Unavailable at once while the store is unreachable,
  // and on any store error: the caller decides on local state.
  virtual absl::StatusOr<Reservation> Reserve(absl::string_view instance,
                                              absl::string_view reservation_id, int64_t tokens,
                                              int64_t fill_tokens, bool force) = 0;

  // Gives back this replica's reservation of `reservation_id` on `instance`
  // as it last made it: one a later Reserve made again, or another replica
  // took over, stays. Queued; written by the next flush.
  virtual void Release(std::string instance, std::string reservation_id) = 0;

  // This replica's pins taken and given back since its last call (a pin
  // given back before it was written is left out of both). Queued and
  // written with the next flush, after the load: publish pins taken before
  // the load they are in. A store that carries no pins ignores them.
  virtual void PublishPins(std::vector<RequestPin> /*pinned*/, std::vector<uint64_t> /*unpinned*/) {
  }

  // The other live replicas' pin changes read since the last call; never
  // blocks. A store that carries no pins has none.
  virtual PeerPinChanges TakePeerPins() { return {.view = View()}; }

  // Whether the last attempt to reach the store succeeded.
  virtual bool connected() const = 0;

  virtual ClusterStoreStats stats() const = 0;
};

}  // namespace kvroute::cluster
