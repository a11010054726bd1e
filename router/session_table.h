// SessionTable: session id -> the instance serving it, an LRU bounded by
// `max_sessions` whose entries expire `ttl` after their last assignment.
// Time is passed in; nothing here reads a clock.
//
//   SessionTable sessions(100000, absl::Minutes(30));
//   int b = sessions.Lookup("s1", now);   // -1: none or expired
//   sessions.Assign("s1", 3, now);
//
// Not thread-safe: the Router owns it under its mutex.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace kvroute::router {

class SessionTable {
 public:
  SessionTable(size_t max_sessions, absl::Duration ttl)
      : max_sessions_(max_sessions), ttl_(ttl) {}
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // The session's instance, or -1 when unknown or expired (an expired entry
  // is dropped). Does not refresh the entry.
  int Lookup(std::string_view session, absl::Time now);
  // Pins the session to `backend` and refreshes it; evicts the least
  // recently assigned session beyond max_sessions, and expired ones.
  void Assign(std::string_view session, int backend, absl::Time now);
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    std::string session;
    int backend;
    absl::Time last_assigned;
  };
  using List = std::list<Entry>;  // front = most recently assigned

  size_t max_sessions_;
  absl::Duration ttl_;
  List lru_;
  absl::flat_hash_map<std::string, List::iterator> index_;
};

}  // namespace kvroute::router
