#include "router/session_table.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/string_view.h"

namespace kvroute::router {

void SessionTable::Count(Entry& e) {
  if (resident_window_ <= absl::ZeroDuration() || e.info.backend < 0) return;
  if (e.info.backend >= static_cast<int>(resident_.size())) resident_.resize(e.info.backend + 1);
  resident_[e.info.backend] += e.info.footprint_tokens;
  e.resident = true;
}

void SessionTable::Uncount(Entry& e) {
  if (!e.resident) return;
  resident_[e.info.backend] -= e.info.footprint_tokens;
  e.resident = false;
}

void SessionTable::Erase(List::iterator it) {
  if (it == resident_end_) ++resident_end_;
  Uncount(*it);
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

void SessionTable::Assign(std::string_view session, int backend, absl::Time now,
                          int64_t footprint_tokens) {
  if (session.empty() || max_sessions_ == 0) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it != index_.end()) {
    Entry& e = *it->second;
    Uncount(e);
    if (e.info.backend != backend) e.info = Info{};
    e.info.backend = backend;
    e.info.footprint_tokens = std::max<int64_t>(0, footprint_tokens);
    e.last_assigned = now;
    e.inflight += 1;
    MoveToFront(it->second);
  } else {
    lru_.push_front(Entry{std::string(session), Info{.backend = backend}, now, 1});
    index_.emplace(lru_.front().session, lru_.begin());
    lru_.front().info.footprint_tokens = std::max<int64_t>(0, footprint_tokens);
    Count(lru_.front());
  }
  // The tail is the least recently assigned: drop it while over the bound
  // or expired.
  while (!lru_.empty() &&
         (index_.size() > max_sessions_ || now - lru_.back().last_assigned >= ttl_)) {
    Erase(std::prev(lru_.end()));
  }
}

void SessionTable::MoveToFront(List::iterator it) {
  if (it == resident_end_) ++resident_end_;
  lru_.splice(lru_.begin(), lru_, it);
  // The front lies before resident_end_ whatever moved.
  if (!it->resident) Count(*it);
}

void SessionTable::Finish(std::string_view session, absl::Time now) {
  if (session.empty()) return;
  auto it = index_.find(absl::string_view(session.data(), session.size()));
  if (it == index_.end()) return;
  Entry& e = *it->second;
  e.inflight = std::max(0, e.inflight - 1);
  e.last_assigned = std::max(e.last_assigned, now);
  MoveToFront(it->second);
}

void SessionTable::AgeResident(absl::Time now) {
  if (resident_window_ <= absl::ZeroDuration()) return;
  while (resident_end_ != lru_.begin()) {
    auto last = std::prev(resident_end_);
    if (last->inflight > 0 || now - last->last_assigned < resident_window_) break;
    Uncount(*last);
    resident_end_ = last;
  }
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
  if (held_tokens > 0) {
    const bool resident = e.resident;
    Uncount(e);
    e.info.footprint_tokens = held_tokens;
    if (resident) Count(e);
  }
}

}  // namespace kvroute::router
