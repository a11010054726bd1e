// SessionTable: session id -> the instance serving it, an LRU bounded by
// `max_sessions` whose entries expire `ttl` after their last assignment.
// Time is passed in; nothing here reads a clock.
//
// Which sessions' KV an instance must keep between turns is the residency
// model's (router/residency_gate.h), not this table's.
//
//   SessionTable sessions(100000, absl::Minutes(30));
//   int b = sessions.Lookup("s1", now);   // -1: none or expired
//   sessions.Assign("s1", 3, now);
//   ... the request ends:  sessions.Finish("s1", later);
//
// Not thread-safe: the Router owns it under its mutex.
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace kvroute::router {

class SessionTable {
 public:
  SessionTable(size_t max_sessions, absl::Duration ttl) : max_sessions_(max_sessions), ttl_(ttl) {}
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
    // When one of the session's requests last ended (InfinitePast: none
    // yet); its next turn's KV had to survive from then.
    absl::Time last_finished = absl::InfinitePast();
    // When one of its requests was last routed (Assign), and the
    // last_finished whose pause TakePause returned.
    absl::Time last_routed = absl::InfinitePast();
    absl::Time pause_taken = absl::InfinitePast();
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
  // Pins the session to `backend` and refreshes it (a new backend forgets
  // the continuation); evicts the least recently assigned session beyond
  // max_sessions, and expired ones. `routed`: a request of it is sent now
  // (false: a record taken over from another replica).
  void Assign(std::string_view session, int backend, absl::Time now, bool routed = true);
  // Records the continuation of a request that completed on `backend`, if
  // the session is still pinned there.
  void RecordCompletion(std::string_view session, int backend, uint64_t last_chunk_hash,
                        int64_t prompt_chunks, int64_t held_tokens);
  size_t size() const { return index_.size(); }
  // The agent's pause before this request: the time since the session's
  // last request ended, when none was routed since (a request sent while
  // another runs is no pause), once per ended request (a retry of a shed
  // request pauses no more). nullopt otherwise, or for an unknown session.
  std::optional<absl::Duration> TakePause(std::string_view session, absl::Time now);
  // One of the session's requests ended (whatever its outcome): the
  // session is active as of `now`, which its TTL counts from.
  void Finish(std::string_view session, absl::Time now);

 private:
  struct Entry {
    std::string session;
    Info info;
    absl::Time last_assigned;  // or finished
  };
  using List = std::list<Entry>;  // front = most recently active

  void MoveToFront(List::iterator it) { lru_.splice(lru_.begin(), lru_, it); }
  void Erase(List::iterator it);

  size_t max_sessions_;
  absl::Duration ttl_;
  List lru_;
  absl::flat_hash_map<std::string, List::iterator> index_;
};

}  // namespace kvroute::router
