// One direction of the host <-> GPU link of a simulated instance (GPU -> host for stores,
// host -> GPU for loads), as vLLM's offloading worker drives it: copies in one direction run
// one after another in the order they are submitted, each at the direction's full bandwidth,
// so copies submitted together share that direction's bandwidth and the later ones wait.
// vLLM v0.11's CpuGpuOffloadingHandler issues every copy of a direction on one CUDA stream
// (d2h_stream / h2d_stream); later versions give each copy its own stream but make it wait for
// the previous copy's end event (vllm/v1/kv_offload/worker/cpu_gpu.py,
// SingleDirectionOffloadingHandler). The two directions are separate streams over a full-duplex
// link: a load never waits for a store.
//
//   HostCopyStream loads(50e9);
//   HostCopy c = loads.Submit(/*now=*/2.0, /*bytes=*/1e9);   // c.start 2.0, c.done 2.02
//
// Pure value type driven by the caller's clock; not thread-safe.
#pragma once

#include <algorithm>

namespace sim {

struct HostCopy {
  double start = 0;  // when its bytes start to move (after the copies submitted before it)
  double done = 0;   // when its last byte has landed
};

class HostCopyStream {
 public:
  explicit HostCopyStream(double bandwidth_bytes_per_s) : bandwidth_(bandwidth_bytes_per_s) {}

  // Queues a copy of `bytes` submitted at `now`.
  HostCopy Submit(double now, double bytes) {
    HostCopy c;
    c.start = std::max(now, free_at_);
    c.done = c.start + (bandwidth_ > 0 ? bytes / bandwidth_ : 0);
    free_at_ = c.done;
    return c;
  }
  // When the last copy submitted so far lands.
  double free_at() const { return free_at_; }
  double bandwidth() const { return bandwidth_; }

 private:
  double bandwidth_;
  double free_at_ = 0;
};

}  // namespace sim
