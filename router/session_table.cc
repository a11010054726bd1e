#include "router/session_table.h"

#include "absl/strings/string_view.h"

namespace kvroute::router {

const SessionTable::Info* SessionTable::Find(std::string_view session, absl::Time now) {
  if (session.empty()) return nullptr;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end()) return nullptr;
  if (now - it->second->last_assigned >= ttl_) {
    lru_.erase(it->second);
    index_.erase(it);
    return nullptr;
  }
  return &it->second->info;
}

void SessionTable::Assign(std::string_view session, int backend, absl::Time now) {
  if (session.empty() || max_sessions_ == 0) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it != index_.end()) {
    if (it->second->info.backend != backend) it->second->info = Info{};
    it->second->info.backend = backend;
    it->second->last_assigned = now;
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    lru_.push_front(Entry{std::string(session), Info{.backend = backend}, now});
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

void SessionTable::RecordCompletion(std::string_view session, int backend, uint64_t last_chunk_hash,
                                    int64_t prompt_chunks, int64_t held_tokens) {
  if (session.empty()) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end() || it->second->info.backend != backend) return;
  Info& info = it->second->info;
  info.last_chunk_hash = last_chunk_hash;
  info.prompt_chunks = prompt_chunks;
  info.held_tokens = held_tokens;
}

}  // namespace kvroute::router
