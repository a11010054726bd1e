// A fleet of simulated vLLM instances served from one process: the unit `kvroute-sim` runs
// and integration tests start in-process.
//
//   sim::FleetOptions opts;
//   opts.instances = 2;                      // base_port 0: every instance on an ephemeral port
//   opts.time_scale = 0;                     // answer as fast as possible
//   opts.profile = *sim::LoadProfile("configs/profiles/tiny-test.yaml");
//   sim::Fleet fleet(opts);
//   absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();   // ports[i] of instance i
//   ... talk HTTP to 127.0.0.1:(*ports)[i] ...
//   fleet.Stop();                            // also done by the destructor
//
// Thread-safe: Start/Stop from one controlling thread; gauges()/SetFaults() from any thread.
#pragma once

#include <absl/status/statusor.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sim/faults.h"
#include "sim/instance.h"
#include "sim/kv_fabric.h"
#include "sim/kv_pool.h"
#include "sim/profile.h"

namespace sim {

struct FleetOptions {
  int instances = 1;
  std::string host = "127.0.0.1";
  // Instance i listens on base_port + i; 0 gives every instance an ephemeral port.
  uint16_t base_port = 0;
  Profile profile = DefaultProfile();
  // Wall seconds per modelled second (0: no modelled delay).
  double time_scale = 1;
  uint64_t seed = 0;
  // Threads running the instances (each instance is serialized on its own strand).
  int io_threads = 1;
  // Faults at start, by instance index (missing entries: none).
  std::vector<Faults> faults;
  // KV cache events in vLLM's format: instance i publishes on kv_events_port + i and, with
  // kv_events_replay_port, answers replays on kv_events_replay_port + i (0: ephemeral
  // ports). Off when kv_events_port is unset.
  std::optional<uint16_t> kv_events_port;
  std::optional<uint16_t> kv_events_replay_port;
  std::string kv_events_topic;
  // Responses each instance keeps for the Responses API (InstanceOptions).
  size_t responses_store_capacity = 1024;
  // The fleet-shared KV pool's events (sim/kv_pool.h) on a publisher of their own, when
  // profile.kv_pool is on: kv_pool_events_port (0: ephemeral), replays on
  // kv_pool_events_replay_port. Off when unset.
  std::optional<uint16_t> kv_pool_events_port;
  std::optional<uint16_t> kv_pool_events_replay_port;
};

class Fleet {
 public:
  explicit Fleet(FleetOptions options);
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  // Binds every instance and starts serving. Returns the bound ports, by instance index.
  absl::StatusOr<std::vector<uint16_t>> Start();
  // Stops every instance and joins the threads. Idempotent.
  void Stop();

  int size() const { return static_cast<int>(instances_.size()); }
  std::vector<uint16_t> ports() const;
  // "tcp://host:port" of instance i's KV event sockets once started; empty when off.
  std::string kv_events_endpoint(int index) const { return instances_[index]->kv_events_endpoint(); }
  std::string kv_events_replay_endpoint(int index) const {
    return instances_[index]->kv_events_replay_endpoint();
  }
  // The fleet-shared pool (profile.kv_pool), or null; its event endpoints once started.
  const KvPool* kv_pool() const { return kv_pool_.get(); }
  std::string kv_pool_events_endpoint() const {
    return kv_pool_ ? kv_pool_->kv_events_endpoint() : std::string();
  }
  std::string kv_pool_events_replay_endpoint() const {
    return kv_pool_ ? kv_pool_->kv_events_replay_endpoint() : std::string();
  }
  Instance& instance(int index) { return *instances_[index]; }
  InstanceGauges gauges(int index) const { return instances_[index]->gauges(); }
  void SetFaults(int index, const Faults& faults) { instances_[index]->SetFaults(faults); }
  const FleetOptions& options() const { return options_; }

 private:
  FleetOptions options_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  KvFabric fabric_;
  // Before the instances: they hold pointers to it.
  std::unique_ptr<KvPool> kv_pool_;
  std::vector<std::unique_ptr<Instance>> instances_;
  std::vector<std::thread> threads_;
  bool started_ = false;
};

}  // namespace sim
