// SessionTable: session id -> the instance serving it, an LRU bounded by
// `max_sessions` whose entries expire `ttl` after their last assignment.
// Time is passed in; nothing here reads a clock.
//
// It also keeps each instance's resident session footprint: the KV, in
// tokens, that the sessions homed there need between their turns (the
// footprint of each one's latest request), summed over sessions with a
// request in flight or one that ended within `resident_window`. A session
// idle for that long counts as gone from the instance's memory demand (the
// API has no "session ended"); it keeps its home for affinity until `ttl`.
//
//   SessionTable sessions(100000, absl::Minutes(30), absl::Seconds(60));
//   int b = sessions.Lookup("s1", now);   // -1: none or expired
//   sessions.Assign("s1", 3, now, /*footprint_tokens=*/84000);
//   ... the request ends:  sessions.Finish("s1", later);
//   sessions.AgeResident(now);
//   int64_t demand = sessions.ResidentTokens(3);
//
// Not thread-safe: the Router owns it under its mutex.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace kvroute::router {

class SessionTable {
 public:
  // A zero `resident_window` keeps no resident footprints.
  SessionTable(size_t max_sessions, absl::Duration ttl,
               absl::Duration resident_window = absl::ZeroDuration())
      : max_sessions_(max_sessions), ttl_(ttl), resident_window_(resident_window) {}
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // What the table knows about a session.
  struct Info {
    int backend = -1;
    // Continuation of the session's last completed request on `backend`:
    // the last full chunk hash of its prompt, how many chunks that prompt
    // had, and the tokens the engine held afterwards (prompt + output, from
    // usage). 0 chunks: nothing recorded.
    uint64_t last_chunk_hash = 0;
    int64_t prompt_chunks = 0;
    int64_t held_tokens = 0;
    // KV tokens the session's latest request needs (prompt + output), the
    // figure it adds to its instance's resident footprint.
    int64_t footprint_tokens = 0;
  };

  // The session's entry, or nullptr when unknown or expired (an expired
  // entry is dropped). Does not refresh the entry. The pointer is valid
  // until the next non-const call.
  const Info* Find(std::string_view session, absl::Time now);
  // The session's instance, or -1 when unknown or expired.
  int Lookup(std::string_view session, absl::Time now) {
    const Info* info = Find(session, now);
    return info == nullptr ? -1 : info->backend;
  }
  // Pins the session to `backend` with its latest request's footprint and
  // refreshes it (a new backend forgets the continuation); evicts the least
  // recently assigned session beyond max_sessions, and expired ones.
  void Assign(std::string_view session, int backend, absl::Time now, int64_t footprint_tokens = 0);
  // Records the continuation of a request that completed on `backend`, if
  // the session is still pinned there; `held_tokens` (what the engine held
  // afterwards) becomes the session's footprint.
  void RecordCompletion(std::string_view session, int backend, uint64_t last_chunk_hash,
                        int64_t prompt_chunks, int64_t held_tokens);
  size_t size() const { return index_.size(); }
  // One of the session's requests ended (whatever its outcome): the
  // session is active as of `now`. Each Assign is matched by one Finish.
  void Finish(std::string_view session, absl::Time now);

  // Drops from the resident footprints every session without a request in
  // flight whose last activity was `resident_window` or more before `now`.
  void AgeResident(absl::Time now);
  // Resident footprint of `backend` as of the last AgeResident (0 for an
  // instance no session has had).
  int64_t ResidentTokens(int backend) const {
    return backend >= 0 && backend < static_cast<int>(resident_.size()) ? resident_[backend] : 0;
  }

 private:
  struct Entry {
    std::string session;
    Info info;
    absl::Time last_assigned;  // or finished
    int inflight = 0;          // Assigns not yet Finished
    bool resident = false;     // counted in resident_[info.backend]
  };
  using List = std::list<Entry>;  // front = most recently active

  // Moves `it` to the front, counting it resident.
  void MoveToFront(List::iterator it);

  void Count(Entry& e);
  void Uncount(Entry& e);
  // Unlinks and destroys `it`, keeping the resident bookkeeping.
  void Erase(List::iterator it);

  size_t max_sessions_;
  absl::Duration ttl_;
  absl::Duration resident_window_;
  List lru_;
  absl::flat_hash_map<std::string, List::iterator> index_;
  // Entries before resident_end_ are resident, the rest are not: the list is
  // ordered by last activity, so aging walks back from the boundary (and
  // stops at a session with a request in flight until that request ends).
  List::iterator resident_end_ = lru_.end();
  std::vector<int64_t> resident_;
};

}  // namespace kvroute::router
