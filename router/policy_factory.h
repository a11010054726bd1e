// Builds a routing policy from its name (Options::policy): round_robin,
// least_loaded, baseline, v1, v2, pd_sep. An unknown name, or knobs a policy
// cannot work with, is InvalidArgument here, at start-up, never at request
// time. Thread-safe (no state).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "router/policy.h"
#include "router/router.h"

namespace kvroute::router {

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const Options& options,
                                                   const std::vector<BackendSpec>& backends);

// Every name MakePolicy() accepts, for --help and config errors.
const std::vector<std::string>& PolicyNames();

}  // namespace kvroute::router
