// The simulated RDMA fabric between the instances of one fleet: where a prefill instance
// publishes the KV it holds for a remote decode, and where a decode instance finds (or waits
// for) it. Keys name the pairing the connector protocol uses:
//   NIXL:      "nixl:<remote_engine_id>:<remote_request_id>"  (published before the decode)
//   Mooncake:  "mooncake:<transfer_id>"                      (legs arrive in either order)
//   SGLang:    "sglang:<bootstrap_room>"                     (legs arrive in either order)
//
// Thread-safe: instances on different threads publish and claim. Callbacks run outside the
// lock, on the calling thread; they must only post to their own instance's executor.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/container/flat_hash_map.h>
#include <absl/synchronization/mutex.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace sim {

// Something that holds KV for a remote decode and can be told to let it go.
class KvHolder {
 public:
  virtual ~KvHolder() = default;
  // Thread-safe. Releases the blocks held under `hold_id` (no-op if already released).
  virtual void ReleaseHeldKv(const std::string& hold_id) = 0;
  virtual int instance_index() const = 0;
};

struct KvHandle {
  KvHolder* holder = nullptr;
  std::string hold_id;
  // Set when claimed: pulls from this holder's NIC claimed and not yet released, this one
  // included. The pull's share of the source NIC is 1 / source_pulls of its bandwidth.
  int source_pulls = 1;
};

class KvFabric {
 public:
  using Waiter = std::function<void(KvHandle)>;
  // Bound on published-but-unclaimed entries and on waiters (oldest dropped beyond it).
  static constexpr size_t kMaxEntries = 65536;

  // A prefill finished holding KV under `key`. Hands it to a waiter if one is registered.
  void Publish(const std::string& key, KvHandle handle);
  // Takes the KV published under `key`, if any.
  std::optional<KvHandle> Claim(const std::string& key);
  // Claims now if published (calls `waiter` synchronously) or calls it at publication.
  // Returns a ticket for CancelWait.
  uint64_t ClaimOrWait(const std::string& key, Waiter waiter);
  void CancelWait(const std::string& key, uint64_t ticket);
  // Drops entries published by `holder` (instance shutting down).
  void ForgetHolder(const KvHolder* holder);
  // A pull claimed from `holder` has ended (its KV was released).
  void EndPull(const KvHolder* holder);

 private:
  struct Pending {
    uint64_t ticket;
    Waiter waiter;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, KvHandle> published_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Pending> waiting_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  // Pulls claimed and not yet ended, per source (bounded by the holders of one fleet).
  absl::flat_hash_map<const KvHolder*, int> pulls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sim
