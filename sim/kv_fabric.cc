#include "sim/kv_fabric.h"

namespace sim {

void KvFabric::Publish(const std::string& key, KvHandle handle) {
  Waiter waiter;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(key);
    if (it != waiting_.end()) {
      waiter = std::move(it->second.waiter);
      waiting_.erase(it);
      handle.source_pulls = ++pulls_[handle.holder];
    } else {
      if (published_.size() >= kMaxEntries) published_.erase(published_.begin());
      published_[key] = std::move(handle);
      return;
    }
  }
  waiter(std::move(handle));
}

std::optional<KvHandle> KvFabric::Claim(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = published_.find(key);
  if (it == published_.end()) return std::nullopt;
  KvHandle h = std::move(it->second);
  published_.erase(it);
  h.source_pulls = ++pulls_[h.holder];
  return h;
}

uint64_t KvFabric::ClaimOrWait(const std::string& key, Waiter waiter) {
  std::optional<KvHandle> ready;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    ticket = next_ticket_++;
    auto it = published_.find(key);
    if (it != published_.end()) {
      ready = std::move(it->second);
      published_.erase(it);
      ready->source_pulls = ++pulls_[ready->holder];
    } else {
      if (waiting_.size() >= kMaxEntries) waiting_.erase(waiting_.begin());
      waiting_[key] = Pending{ticket, std::move(waiter)};
      return ticket;
    }
  }
  waiter(std::move(*ready));
  return ticket;
}

void KvFabric::CancelWait(const std::string& key, uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto it = waiting_.find(key);
  if (it != waiting_.end() && it->second.ticket == ticket) waiting_.erase(it);
}

void KvFabric::EndPull(const KvHolder* holder) {
  absl::MutexLock lock(&mu_);
  auto it = pulls_.find(holder);
  if (it != pulls_.end() && --it->second <= 0) pulls_.erase(it);
}

void KvFabric::ForgetHolder(const KvHolder* holder) {
  absl::MutexLock lock(&mu_);
  pulls_.erase(holder);
  for (auto it = published_.begin(); it != published_.end();) {
    if (it->second.holder == holder) {
      published_.erase(it++);
    } else {
      ++it;
    }
  }
}

}  // namespace sim
