// cluster::RedisStore: the ClusterStore (cluster/store.h) on Redis 7, through
// hiredis's synchronous API. docs/design.md, "Several replicas: the cluster
// store", has the key layout and why Redis.
//
//   cluster::ClusterOptions o;
//   o.store = "redis://10.0.0.7:6379";
//   o.replica_id = "kvroute-a";
//   absl::StatusOr<std::unique_ptr<cluster::RedisStore>> store = cluster::RedisStore::Create(o);
//   if (!store.ok()) ...                 // a bad option or URL (an unreachable store is fine)
//   (*store)->PublishLoad(...);          // queued
//   (*store)->View()->load ...           // the peers, as of the last pull
//   (*store)->Reserve(...);              // one round trip, bounded by op_timeout_s
//
// Pins go through one stream, "<key_prefix>:pins" (XADD, trimmed to about
// kPinStreamLength entries): one entry per flush that has pin changes, read
// by every other replica's pull from where it last read. A replica that
// (re)connects starts at the stream's end and reports a reset: what it
// missed while away is not replayed.
//
// Threads and connections. One I/O thread, owned by the store, holds the
// main connection: every sync_interval_s it connects if needed (backing off
// from sync_interval_s up to lease_s / 3 while the store stays away), writes
// what the Publish* calls and Release queued, renews the lease every
// lease_s / 3, and pulls the peers' state into a new PeerView, swapped in
// under the mutex. Reserve and ReadHomes run on the caller's thread over a
// pool of at most max_admission_connections connections, each used by one
// caller at a time; they never connect while the I/O thread says the store is
// unreachable. Every command is bounded by op_timeout_s (redisSetTimeout); a
// timed-out or broken connection is closed, never reused.
//
// Leaving: the destructor flushes what is queued and deletes this replica's
// lease, load and rates, so peers drop it at their next pull; a replica that
// dies instead is dropped when its lease expires.
//
// The store must be one Redis (a primary, with replicas for failover if
// wanted), not Redis Cluster: the admission script reads the owners' lease
// keys, which it cannot declare in advance.
//
// Thread-safety: every method may be called from any thread; the destructor
// must not run concurrently with other calls.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/options.h"
#include "cluster/store.h"

struct redisContext;
struct redisReply;

namespace kvroute::cluster {

class RedisStore final : public ClusterStore {
 public:
  // Validates `options` (store must be a redis:// URL) and starts the I/O
  // thread, whose first cycle connects. The store being unreachable is not an
  // error: the replica routes on local state until it answers.
  static absl::StatusOr<std::unique_ptr<RedisStore>> Create(const ClusterOptions& options);
  ~RedisStore() override;

  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  void PublishLoad(LoadByInstance load) override;
  void PublishRates(RateByInstance rates) override;
  void PublishHome(std::string session_id, std::string instance) override;
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadHomes(
      absl::Span<const std::string> sessions) override;
  std::shared_ptr<const PeerView> View() const override;
  absl::StatusOr<Reservation> Reserve(absl::string_view instance, absl::string_view reservation_id,
                                      int64_t tokens, int64_t fill_tokens, bool force) override;
  void Release(std::string instance, std::string reservation_id) override;
  void PublishPins(std::vector<RequestPin> pinned, std::vector<uint64_t> unpinned) override;
  PeerPinChanges TakePeerPins() override;
  bool connected() const override;
  ClusterStoreStats stats() const override;

  // Has the I/O thread run one whole cycle now, whatever its timers and
  // backoff say (connect if needed, renew the lease, write everything queued,
  // pull a new PeerView), and waits for it: OK, or why it failed. Tests drive
  // the store with it (ClusterOptions::periodic = false).
  absl::Status SyncNow();

 private:
  // A connection of the admission pool, with the pool generation it was
  // opened in: connections of an older generation predate a disconnect.
  struct AdmissionConnection {
    redisContext* context = nullptr;
    uint64_t generation = 0;
  };
  // (instance, reservation id) -> the serial of this replica's last
  // admitted Reserve of it.
  using ReleaseMap = absl::flat_hash_map<std::pair<std::string, std::string>, uint64_t>;
  // Writes taken off the queues for one flush.
  struct WriteBatch {
    bool lease = false;
    std::optional<LoadByInstance> load;
    std::optional<RateByInstance> rates;
    absl::flat_hash_map<std::string, std::string> homes;
    ReleaseMap releases;
    std::vector<RequestPin> pins;
    std::vector<uint64_t> unpins;
  };

  RedisStore(ClusterOptions options, StoreAddress address);

  void RunIoThread();
  absl::Status RunCycle(bool forced);
  absl::Status Connect();
  void Disconnect(const std::string& why);
  WriteBatch TakeWrites(bool forced);
  void ReturnWrites(WriteBatch batch);
  absl::Status Flush(const WriteBatch& batch);
  absl::Status Pull();
  void LogErrorReply(const char* what, const std::string& why);
  void Leave();

  // Waits until `done` (called with mu_ held) is true or `deadline` passes;
  // false on the deadline. Wake() after changing what a waiter waits for.
  bool WaitUntil(absl::FunctionRef<bool()> done, absl::Time deadline);
  void Wake();

  absl::StatusOr<AdmissionConnection> AcquireAdmission(absl::Time deadline);
  void ReturnAdmission(AdmissionConnection c, bool healthy);

  // The pin stream keeps about this many entries (XADD MAXLEN ~): at a
  // flush every 10 ms from each of several replicas, seconds of changes,
  // more than a connected replica falls behind by between two pulls.
  static constexpr int kPinStreamLength = 4096;
  // Entries one pull reads at most; the rest wait for the next pull.
  static constexpr int kPinReadCount = 512;

  // Key names.
  std::string Key(absl::string_view kind, absl::string_view name) const;
  std::string PinStreamKey() const;
  // Adds the entries of an XREAD reply to `into` (this replica's own left
  // out) and sets `read_through` to the last one's id.
  void ReadPinEntries(const redisReply* xread, PeerPinChanges* into,
                      std::string* read_through) const;
  // How long a refused reservation keeps its place in the instance's queue
  // after it last asked: ten of its callers' retries at the sync interval,
  // at least a second, so a busy replica's late retry does not lose it and
  // a turn whose client left blocks the others no longer than that.
  absl::Duration WaitingPlaceKept() const {
    return std::max(absl::Seconds(1), 10 * sync_interval_);
  }

  const ClusterOptions options_;
  const StoreAddress address_;
  const absl::Duration lease_;
  const absl::Duration sync_interval_;
  const absl::Duration op_timeout_;
  // The I/O thread's own connection and schedule: touched by that thread only.
  redisContext* context_ = nullptr;
  absl::Time next_lease_ = absl::InfinitePast();
  absl::Time next_connect_ = absl::InfinitePast();
  absl::Duration backoff_;
  bool ever_connected_ = false;
  // What the log last said: one line per transition.
  enum class Reachability { kUnknown, kConnected, kUnreachable };
  Reachability reachability_ = Reachability::kUnknown;
  bool warned_replicas_ = false;
  // An error reply is logged once, until a cycle succeeds: a persistent
  // one (a key of another type in the way) would otherwise log every cycle.
  std::string last_error_reply_;
  std::string pull_sha_;
  // The last entry of the pin stream this replica has read ("0-0": none).
  std::string pins_read_through_ = "0-0";
  // Read without the lock on the request path (Reserve's fail-open check).
  std::atomic<bool> connected_{false};

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // SyncNow's requests and the cycles that answered them.
  uint64_t cycles_requested_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cycles_done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_cycle_ ABSL_GUARDED_BY(mu_);
  // What to write. load_ and rates_ are this replica's whole current state
  // (written again after a reconnect); the dirty flags say they changed.
  LoadByInstance load_ ABSL_GUARDED_BY(mu_);
  RateByInstance rates_ ABSL_GUARDED_BY(mu_);
  bool load_dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool rates_dirty_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::string> pending_homes_ ABSL_GUARDED_BY(mu_);
  ReleaseMap pending_releases_ ABSL_GUARDED_BY(mu_);
  // This replica's pin changes to write, in order; and the peers' read since
  // TakePeerPins.
  std::vector<RequestPin> pending_pins_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> pending_unpins_ ABSL_GUARDED_BY(mu_);
  PeerPinChanges peer_pins_ ABSL_GUARDED_BY(mu_);
  // This replica's admitted reservations, by the serial each was last made
  // with: a Release names that serial, so it cannot delete a reservation
  // made again after it was queued.
  ReleaseMap held_ ABSL_GUARDED_BY(mu_);
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 0;
  // The scripts' SHA1s, as SCRIPT LOAD answered on the last connect.
  std::string reserve_sha_ ABSL_GUARDED_BY(mu_);
  std::string release_sha_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const PeerView> view_ ABSL_GUARDED_BY(mu_);
  ClusterStoreStats stats_ ABSL_GUARDED_BY(mu_);
  // The admission pool: idle connections, how many are open (idle or in
  // use), and the generation a disconnect advances.
  std::vector<redisContext*> idle_admission_ ABSL_GUARDED_BY(mu_);
  size_t admission_open_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admission_generation_ ABSL_GUARDED_BY(mu_) = 0;

  // Waits happen on a std::condition_variable, not absl::Mutex::Await:
  // ThreadSanitizer sees std's waits, while sanitize/tsan_absl_mutex.cc
  // covers only absl::Mutex's Lock/Unlock and CondVar::Wait. Lock order:
  // wake_mu_, then mu_.
  std::mutex wake_mu_;
  std::condition_variable wake_;

  std::thread io_thread_;
};

}  // namespace kvroute::cluster
