// Engine priority: kvroute orders each engine's waiting queue by deadline.
//
// vLLM started with `--scheduling-policy priority` serves its waiting queue
// by each request's `priority` (lower first, then arrival) and, when a
// running request needs blocks, preempts the one last in that order
// (vllm/v1/core/sched/request_queue.py, scheduler.py). Under the default
// FCFS policy it refuses any priority other than 0. kvroute knows what the
// engine does not: how much of the prompt the instance already caches.
// On a backend configured `scheduling_policy: priority` every leg carries
//
//   priority = arrival (Unix milliseconds) + the TTFT SLO of the request's
//              class on its prefill instance (router.slo, milliseconds)
//
// so the engine admits by earliest deadline: a WARM turn, whose prefix is
// cached and whose prefill is a step or two, goes ahead of cold HEAVY
// prefills that arrived less than (ttft_heavy_s - ttft_warm_s) before it,
// and is admitted before the cold prefills' new blocks evict its prefix.
// A cold request waits at most that much longer than under FCFS, so none
// starves. A client's own `priority` is kept: the member goes in first and
// JSON readers that keep the last of duplicate keys (Python's, vLLM's) read
// the client's.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "router/router.h"
#include "router/types.h"

namespace kvroute::proxy {

// The deadline above for decision `d`, routed under options `o`, of a
// request that arrived at `arrival_unix_s`.
int64_t DeadlinePriority(const router::Decision& d, const router::Options& o,
                         double arrival_unix_s);

// An insertion into a request body: `text` goes in at byte `at`.
struct BodyInsert {
  size_t at = 0;
  std::string text;
};

// `"priority":N` as the body's first member (with the comma when others
// follow); nullopt when the body is not a JSON object.
std::optional<BodyInsert> PlanPriority(std::string_view body, int64_t priority);

}  // namespace kvroute::proxy
