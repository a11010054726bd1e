// ResponseHomes: which backend holds each stored OpenAI Responses response.
//
// vLLM keeps a stored response, and the conversation that produced it, in the
// memory of the server that produced it; a request naming it as
// `previous_response_id`, and GET /v1/responses/{id}, must reach that server
// (any other answers 404). The proxy learns the pairs from the responses it
// relays (ResponseObserver::response_id()) and routes those requests by them.
//
//   ResponseHomes homes(/*capacity=*/100000);
//   homes.Learn("resp_1f3a...", "gpu3");
//   if (std::optional<std::string> b = homes.Find(previous_response_id)) ...
//
// Bounded: past `capacity` entries the oldest learned is forgotten (a request
// naming it is then routed like any other and gets the engine's 404, as after
// an engine restart). Thread-safe (one mutex, held for a hash lookup; no I/O).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace kvroute::proxy {

class ResponseHomes {
 public:
  explicit ResponseHomes(size_t capacity) : capacity_(capacity) {}
  ResponseHomes(const ResponseHomes&) = delete;
  ResponseHomes& operator=(const ResponseHomes&) = delete;

  // `backend` is the backend's configured name (stable across reloads).
  void Learn(std::string_view response_id, std::string_view backend);
  std::optional<std::string> Find(std::string_view response_id) const;
  size_t size() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> home_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // learned, oldest first
};

}  // namespace kvroute::proxy
