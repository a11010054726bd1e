#include "sim/fleet.h"

#include <absl/strings/str_cat.h>

namespace sim {

Fleet::Fleet(FleetOptions options) : options_(std::move(options)) {
  if (options_.profile.kv_pool.enabled()) {
    kv_pool_ =
        std::make_unique<KvPool>(options_.profile.NumPoolBlocks(), options_.profile.block_size);
  }
  for (int i = 0; i < options_.instances; ++i) {
    InstanceOptions io;
    io.index = i;
    io.host = options_.host;
    io.port = options_.base_port == 0 ? 0 : static_cast<uint16_t>(options_.base_port + i);
    io.profile = options_.profile;
    io.time_scale = options_.time_scale;
    io.seed = options_.seed;
    io.responses_store_capacity = options_.responses_store_capacity;
    io.kv_pool = kv_pool_.get();
    if (i < static_cast<int>(options_.faults.size())) io.faults = options_.faults[i];
    if (options_.kv_events_port) {
      auto port_of = [i](uint16_t base) {
        return base == 0 ? uint16_t{0} : static_cast<uint16_t>(base + i);
      };
      KvEventPublisherOptions kv;
      kv.host = options_.host;
      kv.port = port_of(*options_.kv_events_port);
      if (options_.kv_events_replay_port) kv.replay_port = port_of(*options_.kv_events_replay_port);
      kv.topic = options_.kv_events_topic;
      io.kv_events = kv;
    }
    instances_.push_back(std::make_unique<Instance>(io_, std::move(io), fabric_, [this](int k) {
      return k >= 0 && k < static_cast<int>(instances_.size()) ? instances_[k].get() : nullptr;
    }));
  }
}

Fleet::~Fleet() { Stop(); }

absl::StatusOr<std::vector<uint16_t>> Fleet::Start() {
  if (started_) return ports();
  if (kv_pool_ && options_.kv_pool_events_port) {
    KvEventPublisherOptions kv;
    kv.host = options_.host;
    kv.port = *options_.kv_pool_events_port;
    kv.replay_port = options_.kv_pool_events_replay_port;
    kv.topic = options_.kv_events_topic;
    if (absl::Status s = kv_pool_->EnableKvEvents(kv); !s.ok()) return s;
  }
  for (auto& inst : instances_) {
    if (absl::Status s = inst->Listen(); !s.ok()) return s;
  }
  work_.emplace(io_.get_executor());
  for (auto& inst : instances_) inst->Start();
  const int n = std::max(1, options_.io_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { io_.run(); });
  started_ = true;
  return ports();
}

void Fleet::Stop() {
  if (!started_) return;
  started_ = false;
  for (auto& inst : instances_) inst->Stop();
  work_.reset();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

std::vector<uint16_t> Fleet::ports() const {
  std::vector<uint16_t> p;
  for (const auto& inst : instances_) p.push_back(inst->port());
  return p;
}

}  // namespace sim
