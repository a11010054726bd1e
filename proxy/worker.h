// proxy::Worker: one thread of the proxy. It runs its own io_context and
// owns what its connections share without locks: the upstream connection
// pool, spare read buffers and body strings, and the legs waiting for a
// response header per backend (cut short when that backend is ejected).
//
//   Worker w(router.Backends(), config.upstream);
//   std::thread t([&] { w.ioc.run(); });
//   net::post(w.ioc, [&] { w.Sync(*router.Backends()); });  // after a reload
//
// Owned by the Server; a connection lives on one worker for its whole life.
// Thread-safety: everything but `ioc` (post to it) is touched only on the
// worker's own thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "proxy/buffer_stash.h"
#include "proxy/http_common.h"
#include "proxy/upstream.h"
#include "router/router.h"

namespace kvroute::proxy {

struct LegState;  // relay.h

struct Worker {
  // `random_seed` seeds the worker's random source (tests); without one it
  // is seeded from the operating system.
  Worker(std::vector<router::BackendSpec> backends, const UpstreamOptions& options,
         std::optional<uint64_t> random_seed = std::nullopt);

  // Spare read and relay buffers (each up to the client read size, 64 KiB)
  // and request body strings (each up to 1 MiB) of this worker's sessions,
  // at most 2 and 4 MiB in all. Declared first: coroutine frames destroyed
  // with `ioc` still give buffers back.
  BufferStash<beast::flat_buffer> read_buffers{128, 64 * 1024, 2 << 20};
  BufferStash<std::string> bodies{64, 1 << 20, 4 << 20};
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> guard;
  // Legs of this worker waiting for a response header, per backend: when the
  // backend is ejected they are cut short and retried elsewhere. A deque,
  // so growing keeps references.
  std::deque<absl::flat_hash_set<LegState*>> waiting;
  UpstreamPool pool;
  // Request ids, retry jitter and bootstrap rooms of this worker's requests.
  absl::BitGen random;

  // Follows the router's backend slots after a reload.
  void Sync(const std::vector<router::BackendSpec>& backends);
  // Makes sure slot `backend`, which the router may have added since, is known.
  void Ensure(router::Router& router, int backend) {
    if (backend >= 0 && static_cast<size_t>(backend) >= pool.size()) Sync(*router.Backends());
  }
  // Cuts short every leg of this worker waiting on `backend`'s response
  // header (the backend was ejected); they retry elsewhere.
  void EjectWaiting(int backend);
};

}  // namespace kvroute::proxy
