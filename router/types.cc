#include "router/types.h"

namespace kvroute::router {

std::string_view ToString(DecisionMode m) {
  switch (m) {
    case DecisionMode::kColocated:
      return "COLOCATED";
    case DecisionMode::kOffload:
      return "OFFLOAD";
  }
  return "UNKNOWN";
}

std::string_view ToString(BackendRole r) {
  switch (r) {
    case BackendRole::kBoth:
      return "both";
    case BackendRole::kPrefill:
      return "prefill";
    case BackendRole::kDecode:
      return "decode";
  }
  return "unknown";
}

}  // namespace kvroute::router
