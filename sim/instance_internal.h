// Helpers shared by the files of sim::Instance (instance.cc, instance_ops.cc).
// Private to sim/.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <memory>

namespace sim::internal {

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

}  // namespace sim::internal
