#include "proxy/worker.h"

#include <random>

#include "proxy/relay.h"

namespace kvroute::proxy {

namespace {

absl::BitGen SeededOrRandom(std::optional<uint64_t> seed) {
  if (!seed) return absl::BitGen();
  std::seed_seq seq{static_cast<uint32_t>(*seed), static_cast<uint32_t>(*seed >> 32)};
  return absl::BitGen(seq);
}

}  // namespace

Worker::Worker(std::vector<router::BackendSpec> backends, const UpstreamOptions& options,
               std::optional<uint64_t> random_seed)
    : ioc(1),
      guard(net::make_work_guard(ioc)),
      waiting(backends.size()),
      pool(ioc, std::move(backends), options),
      random(SeededOrRandom(random_seed)) {}

void Worker::Sync(const std::vector<router::BackendSpec>& backends) {
  pool.SetBackends(backends);
  if (waiting.size() < backends.size()) waiting.resize(backends.size());
}

void Worker::EjectWaiting(int backend) {
  if (static_cast<size_t>(backend) >= waiting.size()) return;  // slot not synced yet: none wait
  // Ejecting a leg may take it out of the set: walk a copy.
  std::vector<LegState*> legs(waiting[backend].begin(), waiting[backend].end());
  for (LegState* leg : legs) leg->Eject();
}

}  // namespace kvroute::proxy
