#include "proxy/response_homes.h"

namespace kvroute::proxy {

void ResponseHomes::Learn(std::string_view response_id, std::string_view backend) {
  if (capacity_ == 0 || response_id.empty()) return;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = home_.insert_or_assign(std::string(response_id), std::string(backend));
  if (inserted) order_.push_back(it->first);
  while (home_.size() > capacity_) {
    home_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<std::string> ResponseHomes::Find(std::string_view response_id) const {
  absl::MutexLock lock(&mu_);
  auto it = home_.find(std::string(response_id));
  if (it == home_.end()) return std::nullopt;
  return it->second;
}

size_t ResponseHomes::size() const {
  absl::MutexLock lock(&mu_);
  return home_.size();
}

}  // namespace kvroute::proxy
