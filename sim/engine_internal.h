// Shared by the files of sim::Engine: engine.cc (requests' life cycle, queues, holds, the
// pull and busy models), engine_step.cc (one scheduler step) and engine_offload.cc (the host
// tier's side of a step). Private to sim/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/block_manager.h"
#include "sim/engine.h"
#include "sim/host_copy.h"
#include "sim/nic_share.h"

namespace sim {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One request inside the engine, owned by Engine::requests_; the queues hold raw pointers.
struct Engine::Request {
  // kLoading: admitted, waiting for its host-tier blocks (WAITING_FOR_REMOTE_KVS).
  // kPoolLoading: the same, for blocks of the fleet-shared pool.
  enum class State { kWaiting, kTransferring, kLoading, kPoolLoading, kRunning, kFinished };
  RequestHandle handle = 0;
  RequestSpec spec;
  std::vector<int32_t> tokens;    // prompt + generated
  std::vector<BlockHash> hashes;  // chained hashes of the full blocks of `tokens`
  std::vector<BlockId> blocks;
  int num_computed = 0;
  int num_committed = 0;  // blocks registered in the prefix cache
  int num_output = 0;
  int target_output = 1;
  FinishReason natural_finish = FinishReason::kLength;
  bool admitted_once = false;
  double transfer_done = 0;
  SharedTransfer pull;  // the byte phase of a KV pull on this instance's NIC
  double last_token_time = 0;
  // The host tier (engine_offload.cc).
  int host_hit_tokens = 0;              // tokens the current admission loads from host memory
  std::vector<BlockHash> load_keys;     // host blocks the load pins
  HostCopy load;                        // its copy on the host -> GPU stream
  int next_stored_block = 0;            // offloaded blocks already handed to the host tier
  int store_jobs = 0;                   // store copies in flight
  std::vector<BlockHash> being_stored;  // stored keys that become loadable when it ends
  // The fleet-shared pool (engine_pool.cc).
  int pool_hit_tokens = 0;              // tokens the current admission loads from the pool
  std::vector<BlockHash> pool_keys;     // pool blocks the load pins
  int next_pool_block = 0;              // prompt blocks already put to the pool
  double pool_load_start = 0;           // when its pool load was admitted
  State state = State::kWaiting;
  RequestInfo info;
};

// The work one step takes on: each scheduled request with its number of new tokens, in
// scheduling order, and what is left of the token budget.
struct Engine::StepPlan {
  struct Scheduled {
    Request* r;
    int n;
  };
  std::vector<Scheduled> scheduled;
  int budget = 0;
  // LMCache: seconds of retrieves the step runs before its forward pass (start_load_kv).
  double blocking_load_s = 0;
};

}  // namespace sim
