// Shared by the files of sim::Instance, one per role: instance.cc (life cycle: listener,
// engine loop, sessions), instance_routes.cc (the HTTP dispatch table and the small
// endpoints), completion_endpoint.cc (the completion endpoints: validation, P/D legs, full and
// streamed answers), instance_ops.cc (faults, /v1/models, /metrics) and agent_endpoints.cc.
// Private to sim/.
#pragma once

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/instance.h"

namespace sim {

// A request in flight, shared between its session coroutine and the engine loop (same strand).
struct Instance::Pending {
  explicit Pending(const boost::asio::any_io_executor& ex) : notify(ex) {}
  boost::asio::steady_timer notify;
  std::deque<TokenEvent> events;
  bool done = false;
  bool aborted = false;  // instance stopping or killed
  RequestInfo info;
  // Decode leg: where its KV comes from, released once pulled.
  std::optional<KvHandle> kv_source;
  bool kv_released = false;
  // Mooncake/SGLang decode leg waiting for its prefill leg.
  bool pair_done = false;
  bool pair_abandoned = false;
  // Prefill leg: keys under which its held KV is published.
  std::vector<std::string> publish_keys;
  std::string hold_id;

  void Notify() { notify.cancel(); }
  void ReleaseSource() {
    if (kv_source && !kv_released) {
      kv_released = true;
      kv_source->holder->ReleaseHeldKv(kv_source->hold_id);
    }
  }
};

namespace internal {

// Every co_await of an instance file is error-code based: failures are values, not exceptions.
inline constexpr auto kNoThrow = boost::asio::as_tuple(boost::asio::use_awaitable);

// The simulator's logger ("sim", or a clone of the default one).
inline std::shared_ptr<spdlog::logger> Log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("sim");
    return l ? l : spdlog::default_logger()->clone("sim");
  }();
  return logger;
}

inline int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A request target without its query string.
inline std::string_view TargetPath(std::string_view target) {
  const size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

}  // namespace internal
}  // namespace sim
