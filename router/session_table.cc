#include "router/session_table.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/string_view.h"

namespace kvroute::router {

void SessionTable::Erase(List::iterator it) {
  index_.erase(it->session);
  lru_.erase(it);
}

const SessionTable::Info* SessionTable::Find(std::string_view session, absl::Time now) {
  if (session.empty()) return nullptr;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end()) return nullptr;
  if (now - it->second->last_assigned >= ttl_) {
    Erase(it->second);
    return nullptr;
  }
  return &it->second->info;
}

void SessionTable::Assign(std::string_view session, int backend, absl::Time now, bool routed) {
  if (session.empty() || max_sessions_ == 0) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it != index_.end()) {
    Entry& e = *it->second;
    if (e.info.backend != backend) {
      e.info = Info{.last_finished = e.info.last_finished,
                    .last_routed = e.info.last_routed,
                    .pause_taken = e.info.pause_taken};
    }
    e.info.backend = backend;
    if (routed) e.info.last_routed = now;
    e.last_assigned = now;
    MoveToFront(it->second);
  } else {
    Info info{.backend = backend};
    if (routed) info.last_routed = now;
    lru_.push_front(Entry{std::string(session), info, now});
    index_.emplace(lru_.front().session, lru_.begin());
  }
  // The tail is the least recently assigned: drop it while over the bound
  // or expired.
  while (!lru_.empty() &&
         (index_.size() > max_sessions_ || now - lru_.back().last_assigned >= ttl_)) {
    Erase(std::prev(lru_.end()));
  }
}

std::optional<absl::Duration> SessionTable::TakePause(std::string_view session, absl::Time now) {
  if (session.empty()) return std::nullopt;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end() || now - it->second->last_assigned >= ttl_) return std::nullopt;
  Info& info = it->second->info;
  if (info.last_finished == absl::InfinitePast() || info.last_finished < info.last_routed ||
      info.last_finished <= info.pause_taken) {
    return std::nullopt;
  }
  info.pause_taken = info.last_finished;
  return now - info.last_finished;
}

void SessionTable::Finish(std::string_view session, absl::Time now) {
  if (session.empty()) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end()) return;
  Entry& e = *it->second;
  e.last_assigned = std::max(e.last_assigned, now);
  e.info.last_finished = std::max(e.info.last_finished, now);
  MoveToFront(it->second);
}

void SessionTable::RecordCompletion(std::string_view session, int backend, uint64_t last_chunk_hash,
                                    int64_t prompt_chunks, int64_t held_tokens) {
  if (session.empty()) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end() || it->second->info.backend != backend) return;
  Entry& e = *it->second;
  e.info.last_chunk_hash = last_chunk_hash;
  e.info.prompt_chunks = prompt_chunks;
  e.info.held_tokens = held_tokens;
}

}  // namespace kvroute::router
