// The table of routing policies: every `mode` kvroute accepts, in one place.
// Each row gives the user-facing name, a one-line description for --help,
// the check of the options and backend list the policy needs, and its
// constructor. The router builds its policy from the row, the config loader
// validates `mode` and the backends with it, and kvroute --help lists it.
//
//   absl::Status st = router::ValidatePolicy(options, backends);  // at start-up
//   absl::StatusOr<std::unique_ptr<Policy>> p = router::MakePolicy(options, backends);
//
// Adding a policy: its class in router/policies/ (one .h/.cc), one row in
// policy_registry.cc, and the .cc in router/CMakeLists.txt.
//
// An unknown name, or options and backends a policy cannot work with, is
// InvalidArgument at start-up, never a request-time surprise; the message
// opens with the key at fault ("mode: ...", "backends: ...",
// "offload_gate: ..."). Thread-safe (the table is immutable).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "router/policy.h"
#include "router/router.h"

namespace kvroute::router {

struct PolicyEntry {
  std::string_view name;         // the `mode` value that selects it
  std::string_view description;  // one line, for --help
  // OK when the policy can work with `options` and `backends`; nullptr when
  // it works with any non-empty fleet.
  absl::Status (*validate)(const Options& options, const std::vector<BackendSpec>& backends);
  // Called only after `validate` returned OK.
  std::unique_ptr<Policy> (*make)(const Options& options);
  // The policy keeps a session on its instance (session affinity): the
  // residency gate (residency_gate.h) holds its sessions' turns back.
  bool homes_sessions = false;
};

// Every row, in the order --help lists them.
absl::Span<const PolicyEntry> Policies();

// The row named `name`, nullptr when there is none.
const PolicyEntry* FindPolicy(std::string_view name);

// Every name in Policies(), for tests and error messages.
const std::vector<std::string>& PolicyNames();

// "mode: unknown mode 'x' (expected one of ...)" unless `name` has a row.
absl::Status CheckPolicyName(std::string_view name);

// CheckPolicyName(options.mode), then the row's own check.
absl::Status ValidatePolicy(const Options& options, const std::vector<BackendSpec>& backends);

// ValidatePolicy, then the row's constructor.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const Options& options,
                                                   const std::vector<BackendSpec>& backends);

// One "\n  name  description" line per row, for --help.
std::string PolicyHelp();

}  // namespace kvroute::router
