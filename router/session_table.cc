#include "router/session_table.h"

#include "absl/strings/string_view.h"

namespace kvroute::router {

int SessionTable::Lookup(std::string_view session, absl::Time now) {
  if (session.empty()) return -1;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end()) return -1;
  if (now - it->second->last_assigned >= ttl_) {
    lru_.erase(it->second);
    index_.erase(it);
    return -1;
  }
  return it->second->backend;
}

void SessionTable::Assign(std::string_view session, int backend, absl::Time now) {
  if (session.empty() || max_sessions_ == 0) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it != index_.end()) {
    it->second->backend = backend;
    it->second->last_assigned = now;
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    lru_.push_front(Entry{std::string(session), backend, now});
    index_.emplace(lru_.front().session, lru_.begin());
  }
  // The tail is the least recently assigned: drop it while over the bound
  // or expired.
  while (!lru_.empty() &&
         (index_.size() > max_sessions_ || now - lru_.back().last_assigned >= ttl_)) {
    index_.erase(lru_.back().session);
    lru_.pop_back();
  }
}

}  // namespace kvroute::router
